"""GPU prefix-cache hit rate on a real trace, as a function of the KV pool size.

    .venv/bin/python benchmarks/prefix_reuse.py [--trace PATH] [--num-requests 2000]
        [--block-size 16] [--pools 1024,4096,16384,65536,262144] [--policy module:Class]

Replays the first requests of a Mooncake trace (default: the conversation
trace) through :class:`kvframe.core.kv_cache_manager.KVCacheManager`, one
request at a time: prefix lookup, allocate the whole prompt, free. Prompts
come from :func:`kvframe.workloads.mooncake_tokens.expand_hash_ids`, so equal
512-token hash ids give equal tokens. Each request is expanded and hashed once
and replayed into one manager per pool size. A prompt larger than the pool is
refused (counted as a miss). The last row is the hit rate of an unbounded
cache, computed from the hash ids alone (no eviction, same last-token rule):
the replay with the largest pool must approach it from below.

``--policy`` evicts through an :class:`kvframe.EvictionPolicy` class (e.g.
``kvframe_arc:ARCPolicy`` from an installed plugin) instead of vLLM's LRU.

This measures cache *capacity* only: requests never overlap in time, so
there is no contention between running requests (the scheduler's
benchmarks cover that).
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import time
from pathlib import Path

from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request
from kvframe.workloads.mooncake_tokens import expand_hash_ids

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "kvframe" / "data" / "mooncake" / "conversation.jsonl.gz"  # bundled copy


def unbounded_hit_tokens(records: list[dict], block_size: int, block_tokens: int = 512) -> int:
    """Hit tokens of an infinite cache, from the hash ids alone.

    Block ``b``'s content (and chained hash) is fixed by the ids up to the one
    covering it, so ``(ids[: b * block_size // block_tokens + 1], b)``
    identifies it.
    """
    seen: set[tuple[tuple[int, ...], int]] = set()
    total = 0
    for record in records:
        ids, length = tuple(record["hash_ids"]), record["input_length"]
        hit = 0
        while (
            hit < (length - 1) // block_size
            and (ids[: hit * block_size // block_tokens + 1], hit) in seen
        ):
            hit += 1
        total += hit * block_size
        seen.update(
            (ids[: b * block_size // block_tokens + 1], b) for b in range(length // block_size)
        )
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help="Mooncake .jsonl or .jsonl.gz")
    parser.add_argument("--num-requests", type=int, default=2000, help="0 = the whole trace")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument(
        "--pools", default="1024,4096,16384,65536,262144", help="pool sizes, blocks"
    )
    parser.add_argument("--policy", help="module:Class of an EvictionPolicy (default: vLLM's LRU)")
    args = parser.parse_args()
    policy_cls = None
    if args.policy:
        module_name, _, class_name = args.policy.partition(":")
        policy_cls = getattr(importlib.import_module(module_name), class_name)

    pools = [int(p) for p in args.pools.split(",")]
    block_size = args.block_size
    hasher = make_block_hasher(block_size)
    managers = [
        KVCacheManager(
            n,
            block_size,
            max_model_len=1 << 30,
            eviction_policy=policy_cls(n) if policy_cls is not None else None,
        )
        for n in pools
    ]
    hits = [0] * len(pools)
    refused = [0] * len(pools)
    queries = 0
    records = []
    start = time.perf_counter()
    opener = gzip.open if args.trace.suffix == ".gz" else open
    with opener(args.trace, "rt", encoding="utf-8") as lines:
        for i, line in enumerate(lines):
            if args.num_requests and i >= args.num_requests:
                break
            record = json.loads(line)
            records.append({"hash_ids": record["hash_ids"], "input_length": record["input_length"]})
            tokens = expand_hash_ids(record["hash_ids"], record["input_length"])
            request = Request(f"m{i}", tokens, record["output_length"], block_hasher=hasher)
            queries += request.num_tokens
            for k, manager in enumerate(managers):
                blocks, num_hit = manager.get_computed_blocks(request)
                new = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, blocks)
                if new is None:
                    refused[k] += 1
                    continue
                hits[k] += num_hit
                manager.free(request)
    elapsed = time.perf_counter() - start
    bound = unbounded_hit_tokens(records, block_size)

    print(
        f"trace {args.trace.name}: {len(records)} requests, {queries:,} prompt tokens, "
        f"block size {block_size}, eviction {args.policy or 'vLLM LRU'} ({elapsed:.1f} s)\n"
    )
    print(f"{'pool blocks':>12}{'pool tokens':>14}{'hit rate':>10}{'refused':>9}")
    for n, h, r in zip(pools, hits, refused, strict=True):
        print(f"{n:>12,}{n * block_size:>14,}{h / queries:>10.2%}{r:>9}")
    print(f"{'unbounded':>12}{'':>14}{bound / queries:>10.2%}{0:>9}")


if __name__ == "__main__":
    main()
