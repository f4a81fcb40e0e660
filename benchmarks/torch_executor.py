"""The torch executor on CPU: throughput, the cost of paging, prefix caching, calibration.

    .venv/bin/python benchmarks/torch_executor.py [--quick] [--device cpu|cuda]

Four measurements, each against a baseline taken in the same run:

1. **Tokens/s**: a 40-request shared-prefix workload through ``kvframe``'s
   engine on ``torch:preset=small`` (4 layers, hidden 256, float32): generated
   and computed tokens per second of forward time and of engine wall time.
2. **Paging cost**: one decode step of ``B`` requests with ``L`` cached tokens
   each, (a) the executor's paged path -- K/V gathered through block tables
   whose blocks are scattered over the pool -- and (b) the same model with
   each request's K/V in one contiguous tensor (sliced, no gather). Medians of
   interleaved repeats; goal: paged <= 1.3x contiguous.
3. **Prefill tokens computed** with and without prefix caching on the same
   shared-prefix workload: the drop should equal the prefix hit ratio.
4. **Calibration round trip**: ``kvframe calibrate --check`` itself (the grid,
   the fit, then the held-out workload on the torch executor and on the sim
   with the fitted cost model: per-step median error, duration and mean TTFT
   errors), once with the extended cost-model form and once with the linear
   one. ``--clock`` is passed through (default ``auto``: CPU time on CPU).

``--device cuda`` runs the same code on a GPU, and ``--model`` replaces
``preset=small`` with any torch executor options (e.g. a 1B shape in bfloat16);
figures from an H200 are in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvframe.calibrate.replay import held_out_workload
from kvframe.engine import Engine, EngineConfig
from kvframe.executors.torch.build import plan_model
from kvframe.executors.torch.model import LlamaModel, StepChunk
from kvframe.executors.torch.options import parse_executor


def quiet_logs() -> None:
    import logging

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def throughput(executor: str, requests: int) -> None:
    specs = held_out_workload(requests, seed=11)
    engine = Engine.from_config(EngineConfig(executor=executor, max_num_batched_tokens=512))
    started = time.perf_counter()
    result = engine.run(specs)
    wall = time.perf_counter() - started
    steps = engine.executor.steps
    forward = sum(s.wall_s for s in steps)
    generated = result.counters["generation_tokens_total"]
    computed = sum(s.prefill + s.decode for s in steps)
    print(f"== 1. throughput ({executor})")
    print(f"  {requests} requests, {len(steps)} steps, {generated} generated tokens")
    print(
        f"  generated tokens/s: {generated / forward:8.1f} of forward time, "
        f"{generated / wall:8.1f} of engine wall time"
    )
    print(f"  computed tokens/s:  {computed / forward:8.1f} of forward time")


def contiguous_decode(model: LlamaModel, token_ids, caches, lengths) -> torch.Tensor:
    """The executor's decode step with each request's K/V in its own contiguous rows.

    ``caches[layer]`` is ``[batch, max_len, 2, kv_heads, hd]``; every request
    has the same ``length`` here, so attention is one unmasked batched call, as
    the executor's one masked call over gathered blocks: the difference is the
    gather through the block tables, which is what this compares.
    """
    config = model.config
    nh, nkv, hd = config.num_heads, config.num_kv_heads, config.head_dim
    q_size, kv_size = nh * hd, nkv * hd
    device = model.embed.device
    batch, length = len(lengths), lengths[0]
    assert all(n == length for n in lengths)
    positions = torch.tensor(lengths, device=device)
    cos, sin = model._rope(positions)
    x = model.embed[torch.tensor(token_ids, device=device) % config.vocab_size]
    for layer, (ln1, w_qkv, w_o, ln2, w_gate_up, w_down) in enumerate(model.layers):
        h = model._rms_norm(x, ln1)
        qkv = h @ w_qkv
        q = model._rotate(qkv[:, :q_size].view(-1, nh, hd), cos, sin)
        k = model._rotate(qkv[:, q_size : q_size + kv_size].view(-1, nkv, hd), cos, sin)
        v = qkv[:, q_size + kv_size :].view(-1, nkv, hd)
        cache = caches[layer]
        cache[:, length, 0] = k
        cache[:, length, 1] = v
        keys = cache[:, : length + 1, 0].transpose(1, 2)  # [batch, kv_heads, context, hd]
        values = cache[:, : length + 1, 1].transpose(1, 2)
        attn = torch.nn.functional.scaled_dot_product_attention(
            q.view(batch, nh, 1, hd), keys, values, enable_gqa=True
        ).view(batch, q_size)
        x = x + attn @ w_o
        h = model._rms_norm(x, ln2)
        gate, up = (h @ w_gate_up).chunk(2, dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ w_down
    return model._rms_norm(x, model.norm) @ model.lm_head.t()


def synchronize(model: LlamaModel) -> None:
    """Wait for the GPU's queued kernels, so a timer reads the work and not its launch."""
    if model.embed.device.type == "cuda":
        torch.cuda.synchronize(model.embed.device)


def paging_cost(executor: str, repeats: int) -> None:
    _, options = parse_executor(executor)
    plan = plan_model(options)
    bs = 16
    print("== 2. decode step, paged vs contiguous KV (same model, same process)")
    print(f"  {'batch':>5} {'context':>7} {'paged ms':>9} {'contig ms':>9} {'ratio':>6}")
    for batch, length in ((1, 256), (8, 256), (32, 256), (8, 1024), (32, 1024)):
        per_request = -(-(length + 1) // bs)
        num_blocks = 1 + batch * per_request
        model = plan.build(num_blocks, bs)
        rng = random.Random(0)
        blocks = list(range(1, num_blocks))
        rng.shuffle(blocks)  # scattered, as a busy pool hands them out
        tables = [blocks[i * per_request : (i + 1) * per_request] for i in range(batch)]
        chunks = [StepChunk([7 + i], length, tables[i], True) for i in range(batch)]
        caches = [
            torch.zeros(
                (batch, length + 1, 2, model.config.num_kv_heads, model.config.head_dim),
                dtype=model.dtype,
                device=model.embed.device,
            )
            for _ in range(model.config.num_layers)
        ]
        tokens, lengths = [7 + i for i in range(batch)], [length] * batch
        paged, contiguous = [], []
        with torch.inference_mode():
            model.forward(chunks)
            contiguous_decode(model, tokens, caches, lengths)
            for _ in range(repeats):
                t = time.perf_counter()
                model.forward(chunks)
                synchronize(model)
                paged.append(time.perf_counter() - t)
                t = time.perf_counter()
                contiguous_decode(model, tokens, caches, lengths)
                synchronize(model)
                contiguous.append(time.perf_counter() - t)
        p, c = statistics.median(paged), statistics.median(contiguous)
        print(f"  {batch:5d} {length:7d} {p * 1e3:9.2f} {c * 1e3:9.2f} {p / c:6.2f}")


def prefix_caching(executor: str, requests: int) -> None:
    specs = held_out_workload(requests, seed=13)
    print("== 3. prefill tokens computed, shared-prefix workload")
    computed = {}
    for caching in (False, True):
        engine = Engine.from_config(
            EngineConfig(
                executor=executor, enable_prefix_caching=caching, max_num_batched_tokens=512
            )
        )
        result = engine.run(specs)
        computed[caching] = sum(s.prefill for s in engine.executor.steps)
        if caching:
            c = result.counters
            hits, queries = c["prefix_cache_hits"], c["prefix_cache_queries"]
    drop = 1 - computed[True] / computed[False]
    print(f"  without prefix caching: {computed[False]} prefill tokens computed")
    print(f"  with prefix caching:    {computed[True]} prefill tokens computed")
    print(f"  drop {drop:.3f}; prefix hit ratio {hits / queries:.3f} ({hits}/{queries} tokens)")


def calibration(executor: str, repeats: int, clock: str) -> None:
    """``kvframe calibrate --check`` itself, once per cost-model form."""
    from kvframe.cli import main as kvframe_main

    print(f"== 4. calibration round trip (kvframe calibrate --check, clock={clock})")
    with tempfile.TemporaryDirectory() as tmp:
        for form in ("extended", "linear"):
            out = Path(tmp) / f"{form}.json"
            argv = ["calibrate", "--executor", executor, "--repeats", str(repeats)]
            argv += ["--clock", clock, "--form", form, "--out", str(out), "--check"]
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                kvframe_main(argv)
            data = json.loads(out.read_text())["calibration"]
            fit, check = data["fit"], data["held_out"]
            print(
                f"  {form} form, clock={data['clock']}: fit on {fit['num_samples']} steps, "
                f"median rel. residual {fit['median_abs_rel_error']:.3f}"
            )
            print(
                f"    held out ({check['num_steps']} steps): per-step median abs error "
                f"{check['step_median_abs_rel_error']:.3f} (goal <= 0.10)"
            )
            print(
                f"    torch replays {check['torch_runs']}, duration spread "
                f"{check['torch_duration_spread']:.3f} (max - min over median)"
            )
            print(
                f"    duration torch {check['torch_duration_s']:.3f}s sim "
                f"{check['sim_duration_s']:.3f}s error {check['duration_rel_error']:.3f} "
                "(goal <= 0.05)"
            )
            print(
                f"    mean TTFT torch {check['torch_mean_ttft_s']:.3f}s sim "
                f"{check['sim_mean_ttft_s']:.3f}s error {check['mean_ttft_rel_error']:.3f} "
                "(goal <= 0.05)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--model",
        default="preset=small",
        help="torch executor options for the model (default preset=small), e.g. "
        "layers=16,hidden=2048,heads=32,kv_heads=8,intermediate=8192,vocab=32000,dtype=bfloat16",
    )
    parser.add_argument("--skip-calibration", action="store_true")
    parser.add_argument("--only-calibration", action="store_true")
    parser.add_argument(
        "--clock", choices=("auto", "cpu", "wall"), default="auto", help="calibration's clock"
    )
    args = parser.parse_args()
    quiet_logs()
    executor = f"torch:{args.model},device={args.device}"
    requests = 16 if args.quick else 40
    repeats = 3 if args.quick else 9
    if args.only_calibration:
        calibration(executor, repeats, args.clock)
        return
    throughput(executor, requests)
    paging_cost(executor, repeats)
    prefix_caching(executor, requests)
    if not args.skip_calibration:
        calibration(executor, repeats, args.clock)


if __name__ == "__main__":
    main()
