"""GPU prefix-cache eviction policies on a Mooncake slice: do they adapt, and what do they gain?

    .venv/bin/python benchmarks/gpu_eviction.py [--trace PATH] [--limit 2000]
        [--pools 16384,32768,65536] [--live 8]
        [--policies default,lru,arc:variant=paper,s3fifo]

Replays the first ``--limit`` requests of a Mooncake trace (default: the
conversation trace; only the perf engineer runs whole traces) through one
:class:`~kvframe.core.kv_cache_manager.KVCacheManager` per pool size and
policy, as ``--gpu-eviction`` builds it: prefix lookup, allocate the whole
prompt, and keep the last ``--live`` requests holding their blocks (so some
blocks are in use while others are evicted). A prompt that does not fit is
refused (a miss). Each request is expanded and hashed once. Prints per run:

* the GPU prefix-cache hit rate (hit tokens / prompt tokens), and its
  difference in points against ``lru`` measured in the same run -- the fair
  baseline, since every policy-ordered pool uses uncached free blocks before
  evicting and the default pool does not (``default`` shows that structural
  difference on its own);
* whether the policy adapted: ARC's ``target_t1_size`` (how often it moved,
  its range), S3-FIFO's inserts that came back from its ghost queue;
* the replay's wall time, as a ratio to ``lru``'s.

``s3fifo`` is the third-party example in ``examples/third_party_policy``
(imported from there when it is not installed). ``arc`` (vLLM's variant)
may refuse an eviction with idle blocks held, which the GPU tier cannot
accept; ``arc:variant=paper`` never does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request
from kvframe.workloads.mooncake_tokens import expand_hash_ids

REPO = Path(__file__).resolve().parents[1]
CANDIDATE_TRACES = (
    REPO.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl",
    REPO / "tests" / "core" / "data" / "mooncake_conversation_head300.jsonl",
)


def make_policy(spec: str, capacity: int) -> Any:
    """``default`` (no policy), ``s3fifo`` (the example), or a registered config string."""
    if spec == "default":
        return None
    if spec == "s3fifo":
        sys.path.insert(0, str(REPO / "examples" / "third_party_policy"))
        from kvframe_s3fifo import S3FIFOPolicy

        return S3FIFOPolicy(capacity)
    from kvframe.host.registry import get_registry

    return get_registry().create("eviction", spec, capacity)


class Adaptation:
    """Watches a policy during a replay: ARC's target, S3-FIFO's ghost re-inserts."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.targets: list[float] = []
        self.ghost_inserts = self.inserts = 0
        if policy is not None and hasattr(policy, "ghost"):
            insert = policy.insert

            def counting_insert(key: Any, block: Any) -> None:
                self.ghost_inserts += key in policy.ghost
                self.inserts += 1
                insert(key, block)

            policy.insert = counting_insert

    def sample(self) -> None:
        target = getattr(self.policy, "target_t1_size", None)
        if target is not None and (not self.targets or self.targets[-1] != target):
            self.targets.append(target)

    def describe(self) -> str:
        if hasattr(self.policy, "target_t1_size"):
            moves = max(len(self.targets) - 1, 0)
            low, high = (min(self.targets), max(self.targets)) if self.targets else (0.0, 0.0)
            return f"target moved {moves}x, range {low:.0f}..{high:.0f}"
        if hasattr(self.policy, "ghost"):
            return f"{self.ghost_inserts:,} of {self.inserts:,} inserts came back from ghosts"
        return ""


def replay(
    requests: list[Request], num_blocks: int, spec: str, live: int
) -> tuple[int, int, str, float]:
    """Hit tokens, refused requests, adaptation, wall seconds."""
    policy = make_policy(spec, num_blocks)
    manager = KVCacheManager(num_blocks, 16, max_model_len=1 << 30, eviction_policy=policy)
    watch = Adaptation(policy)
    holding: list[Request] = []
    hits = refused = 0
    started = time.perf_counter()
    for request in requests:
        blocks, num_hit = manager.get_computed_blocks(request)
        new = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, blocks)
        if new is None:
            refused += 1
        else:
            hits += num_hit
            holding.append(request)
        while len(holding) > live or (new is None and holding):
            manager.free(holding.pop(0))
        watch.sample()
    for request in holding:
        manager.free(request)
    return hits, refused, watch.describe(), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_trace = next((p for p in CANDIDATE_TRACES if p.exists()), CANDIDATE_TRACES[-1])
    parser.add_argument("--trace", type=Path, default=default_trace)
    parser.add_argument("--limit", type=int, default=2000, help="at most 2000 on shared machines")
    parser.add_argument("--pools", default="16384,32768,65536", help="pool sizes, blocks of 16")
    parser.add_argument("--live", type=int, default=8, help="requests holding blocks at a time")
    parser.add_argument("--policies", default="default,lru,arc:variant=paper,s3fifo")
    args = parser.parse_args()
    policies = args.policies.split(",")
    if "lru" not in policies:
        policies.insert(0, "lru")
    hasher = make_block_hasher(16)
    requests = []
    with args.trace.open() as lines:
        for i, line in enumerate(lines):
            if i >= args.limit:
                break
            record = json.loads(line)
            tokens = expand_hash_ids(record["hash_ids"], record["input_length"])
            requests.append(Request(f"m{i}", tokens, 1, block_hasher=hasher))
    queries = sum(r.num_tokens for r in requests)
    print(
        f"trace {args.trace.name}: first {len(requests)} requests, {queries:,} prompt tokens, "
        f"{args.live} live at a time\n"
    )
    print(
        f"{'blocks':>7} {'policy':<18}{'hit rate':>9}{'vs lru':>9}{'refused':>8}"
        f"{'time/lru':>9}  adaptation"
    )
    for num_blocks in (int(n) for n in args.pools.split(",")):
        rows = {spec: replay(requests, num_blocks, spec, args.live) for spec in policies}
        base_hits, _, _, base_wall = rows["lru"]
        for spec, (hits, refused, adaptation, wall) in rows.items():
            print(
                f"{num_blocks:>7} {spec:<18}{hits / queries:>9.2%}"
                f"{(hits - base_hits) / queries * 100:>+8.2f}p{refused:>8}"
                f"{wall / base_wall:>9.2f}  {adaptation}"
            )
        print()


if __name__ == "__main__":
    main()
