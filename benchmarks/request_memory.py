"""Memory per waiting request: what a queued request costs, by prompt representation.

    .venv/bin/python benchmarks/request_memory.py                 # first 300 conversation requests
    .venv/bin/python benchmarks/request_memory.py --limit 1000 --trace mooncake:synthetic

Builds the requests the engine would queue for the first ``--limit`` requests
of a trace, with the scheduler's block hasher attached, and measures with
``tracemalloc`` the bytes still allocated while all of them are alive (the
trace's specs are loaded before measuring, so only the requests count). Rows:

* ``lazy, queued`` -- what the engine holds for a waiting request:
  ``Request(PromptTokens(spec.prompt))``, a view over the trace's recipe (a
  Mooncake prompt is its hash ids); its block hashes are computed when it is
  first looked up (at the head of the queue), so a queued request has none;
* ``lazy, looked up`` -- the same request once its block hashes exist (at the
  head of the queue, and while it runs): 16-byte hashes, one per block;
* ``eager`` -- the prompt as a list of ints, ``all_token_ids`` a copy of it,
  hashes computed (the representation before lazy prompts).

Prints bytes per request and per prompt token for each.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from kvframe.core.hashing import make_block_hasher
from kvframe.domain.request import Request
from kvframe.workloads import load_workload
from kvframe.workloads.spec import PromptTokens


def _measure(specs: list, lazy: bool, looked_up: bool, block_size: int) -> int:
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
    if looked_up:
        for request in requests:
            assert len(request.block_hashes) == request.num_tokens // block_size
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
    print(f"{'representation':<20}{'bytes/request':>15}{'bytes/prompt token':>20}")
    rows = (("lazy, queued", True, False), ("lazy, looked up", True, True), ("eager", False, True))
    for name, lazy, looked_up in rows:
        used = _measure(specs, lazy, looked_up, args.block_size)
        print(f"{name:<20}{used / len(specs):>15,.0f}{used / tokens:>20.2f}")


if __name__ == "__main__":
    main()
