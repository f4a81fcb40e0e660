"""Memory per waiting request: what a queued request costs, by prompt representation.

    .venv/bin/python benchmarks/request_memory.py                 # first 300 conversation requests
    .venv/bin/python benchmarks/request_memory.py --limit 1000 --trace mooncake:synthetic

Builds the requests the engine would queue for the first ``--limit`` requests
of a trace -- with the scheduler's block hasher attached, so their block hashes
exist as they do while they wait -- and measures with ``tracemalloc`` the bytes
still allocated while all of them are alive (the trace's specs are loaded
before measuring, so only the requests count). Two representations:

* ``lazy`` -- what the engine builds: ``Request(PromptTokens(spec.prompt))``,
  a view over the trace's recipe (a Mooncake prompt is its hash ids);
* ``eager`` -- the prompt as a list of ints, ``all_token_ids`` a copy of it
  (the representation before lazy prompts).

Prints bytes per request and per prompt token for each, and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from kvframe.core.hashing import make_block_hasher
from kvframe.request import Request
from kvframe.workloads import load_workload
from kvframe.workloads.spec import PromptTokens


def _measure(specs: list, lazy: bool, block_size: int) -> int:
    hasher = make_block_hasher(block_size)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    requests = [
        Request(
            spec.request_id,
            PromptTokens(spec.prompt) if lazy else spec.prompt.token_ids(),
            spec.max_tokens,
            block_hasher=hasher,
        )
        for spec in specs
    ]
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del requests
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="mooncake:conversation")
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()
    specs = list(load_workload(args.trace, limit=args.limit).requests)
    tokens = sum(spec.num_prompt_tokens for spec in specs)
    print(
        f"{args.trace}: {len(specs)} requests, {tokens / len(specs):,.0f} prompt tokens "
        f"each on average, block size {args.block_size}"
    )
    print(f"{'representation':<16}{'bytes/request':>15}{'bytes/prompt token':>20}")
    results = {}
    for name, lazy in (("lazy", True), ("eager", False)):
        used = results[name] = _measure(specs, lazy, args.block_size)
        print(f"{name:<16}{used / len(specs):>15,.0f}{used / tokens:>20.1f}")
    print(f"eager / lazy: {results['eager'] / results['lazy']:.1f}x")


if __name__ == "__main__":
    main()
