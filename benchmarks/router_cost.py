"""What each bundled router costs per arrival, on the Mooncake conversation trace's prompts.

    .venv/bin/python benchmarks/router_cost.py                    # 8 replicas, 3,000 requests
    .venv/bin/python benchmarks/router_cost.py --replicas 64 --limit 1000

Routers run on a fleet's arrival path, once per request, so their cost adds to
the fleet's. This replays the trace's prompts (each Mooncake hash id expanded
to 32 chained 16-token block hashes, as a replica hashes a 512-token chunk)
through each router with no engine: a :class:`kvframe.testing.routing.SyntheticView`
stands in for the fleet, every routed request's blocks are published back as
a ``BlockStored`` event of its replica, and each request finishes 40 arrivals
later. Printed: microseconds per ``route`` call (median of ``--rounds``), and
the ratio to ``round-robin`` in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from typing import Any

from kvframe import BlockStored, FleetInfo, PublishedEvent, RoutingRequest, get_registry
from kvframe.testing.routing import SyntheticView

ROUTERS = ("round-robin", "random", "least-loaded", "prefix-affinity", "cache-aware", "dynamo-kv",
           "dynamo-kv:use_kv_events=false")  # fmt: skip
BLOCKS_PER_HASH_ID = 32


def prompts(trace: str, limit: int) -> list[tuple[int, tuple[bytes, ...]]]:
    """(prompt tokens, chained block hashes) of the first ``limit`` requests."""
    from kvframe.workloads.bundled import find_bundled

    bundled = find_bundled(trace)
    if bundled is None:
        raise SystemExit(f"--trace {trace}: not a bundled workload")
    out = []
    with bundled.open_text() as source:
        for line in source:
            if len(out) == limit:
                break
            rec = json.loads(line)
            hashes, parent = [], b""
            for hash_id in rec["hash_ids"]:
                for j in range(BLOCKS_PER_HASH_ID):
                    parent = hashlib.blake2b(
                        parent + f"{hash_id}:{j}".encode(), digest_size=8
                    ).digest()
                    hashes.append(parent)
            full = rec["input_length"] // 16
            out.append((rec["input_length"], tuple(hashes[:full])))
    return out


def one_round(spec: str, requests: list[tuple[int, tuple[bytes, ...]]], n: int) -> float:
    """Seconds spent inside ``route`` for the whole replay."""
    router: Any = get_registry().resolve("routing", spec).create()
    router.attach(FleetInfo(num_replicas=n, block_size=16, seed=0))
    view = SyntheticView(
        n, kv_events=bool(router.uses_kv_events), loads=bool(getattr(router, "uses_loads", True))
    )
    sent: list[tuple[str, int]] = []
    spent = 0.0
    for i, (tokens, hashes) in enumerate(requests):
        view._now = i * 0.1
        request = RoutingRequest(
            f"r{i}", arrival_time=view._now, num_prompt_tokens=tokens, max_tokens=100,
            hash_prompt=lambda hashes=hashes: hashes,
        )  # fmt: skip
        started = time.perf_counter()
        replica = router.route(request, view)
        spent += time.perf_counter() - started
        view._outstanding[replica] += 1
        view._events.append(PublishedEvent(replica, view._now, BlockStored(hashes, None, 16)))
        sent.append((f"r{i}", replica))
        if len(sent) > 40:
            rid, done = sent.pop(0)
            view._outstanding[done] -= 1
            router.on_first_token(rid, done, view._now)
            router.on_finished(rid, done, view._now)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="mooncake:conversation")
    parser.add_argument("--limit", type=int, default=3000)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    requests = prompts(args.trace, args.limit)
    blocks = statistics.mean(len(h) for _, h in requests)
    print(
        f"{len(requests)} requests ({blocks:.0f} blocks each on average), {args.replicas} replicas"
    )
    base = None
    for spec in ROUTERS:
        per_call = statistics.median(
            one_round(spec, requests, args.replicas) for _ in range(args.rounds)
        ) / len(requests)
        base = base or per_call
        print(f"  {spec:<32}{per_call * 1e6:>9.1f} us/arrival {per_call / base:>8.1f}x round-robin")


if __name__ == "__main__":
    main()
