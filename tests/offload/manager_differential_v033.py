"""Drive kvframe's 0.33 tier ledger and vLLM 0.33.0's ``CPUOffloadingManager`` alike.

A seeded generator plays vLLM 0.33.0's connector: requests over a few
shared-prefix families are announced (``on_new_request``), look their chunks
up key by key (stopping at a miss; a pending chunk defers the request), load
their hits, offer their chunks for storing (sometimes from chunk 0 again, as
0.33's cursor restarts at every lookup), complete loads and stores (some
stores fail) and finish (``on_request_finished``), in a random interleaving.
Every call and its answer is logged in a neutral form; two implementations
agree if their logs are equal. The generator reacts only to the answers, so
equal logs mean the same decisions call for call -- eviction order included,
which is where 0.33.0's rank-heap LRU and request-scoped ARC differ from 0.19.1.

It imports neither side at module level, so the same file runs in kvframe's
venv (``kvframe``) and in vLLM 0.33.0's reference venv (``vllm``)::

    .venv/bin/python tests/offload/manager_differential_v033.py compare
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VLLM033_PYTHON = Path(
    os.environ.get("KVFRAME_VLLM033_PYTHON", REPO / ".vllm033-reference-venv" / "bin" / "python")
)
TOKENS_PER_CHUNK = 16
MAX_TRACKER_SIZE = 40

SCENARIOS = [
    {"policy": policy, "num_chunks": num_chunks, "store_threshold": threshold, "seed": seed}
    for policy in ("lru", "arc")
    for num_chunks in (8, 48)
    for threshold in (0, 2)
    for seed in (0, 1)
]


def key(i: int) -> bytes:
    """A chunk key: vLLM 0.33.0's ``OffloadKey`` layout (hash + 4-byte group 0)."""
    return i.to_bytes(8, "big") + bytes(4)


def unkey(k: bytes) -> int:
    return int.from_bytes(k[:8], "big")


class VllmSide:
    """vLLM 0.33.0's manager and ``ReqContext``."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        from vllm.v1.kv_offload.base import LookupResult, ReqContext
        from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

        self._ReqContext = ReqContext
        self._names = {
            LookupResult.MISS: "miss",
            LookupResult.HIT: "hit",
            LookupResult.HIT_PENDING: "pending",
        }
        self.manager = CPUOffloadingManager(
            num_chunks=scenario["num_chunks"],
            cache_policy=scenario["policy"],
            store_threshold=scenario["store_threshold"],
            max_tracker_size=MAX_TRACKER_SIZE,
        )

    def context(self, request_id: str, positions: dict[bytes, int]) -> Any:
        ctx = self._ReqContext(req_id=request_id)
        for k, position in positions.items():
            ctx.set_offload_key_position(k, position)
        return ctx

    def lookup(self, k: bytes, ctx: Any) -> str:
        return self._names[self.manager.lookup(k, ctx)]

    def prepare_load(self, keys: list[bytes], ctx: Any) -> list[int]:
        return [int(i) for i in self.manager.prepare_load(keys, ctx).block_ids]

    def prepare_store(self, keys: list[bytes], ctx: Any) -> Any:
        out = self.manager.prepare_store(keys, ctx)
        if out is None:
            return None
        return [
            [unkey(k) for k in out.keys_to_store],
            [int(i) for i in out.store_spec.block_ids],
            [unkey(k) for k in out.evicted_keys],
        ]


class KvframeSide:
    """kvframe's ``RequestScopedOffloadManager`` with the 0.33 policy forms."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        from kvframe.contract.request_scoped import RequestAccess
        from kvframe.offload.jobs.manager import RequestScopedOffloadManager

        if scenario["policy"] == "lru":
            from kvframe_lru.rank import RankLRUPolicy as Policy
        else:
            from kvframe_arc.request_arc import RequestARCPolicy as Policy
        self._RequestAccess = RequestAccess
        self.manager = RequestScopedOffloadManager(
            Policy(scenario["num_chunks"]),
            scenario["num_chunks"],
            store_threshold=scenario["store_threshold"],
            max_tracker_size=MAX_TRACKER_SIZE,
        )

    def context(self, request_id: str, positions: dict[bytes, int]) -> Any:
        return self._RequestAccess(request_id, dict(positions))

    def lookup(self, k: bytes, ctx: Any) -> str:
        return {"miss": "miss", "hit": "hit", "hit-pending": "pending"}[
            self.manager.lookup(k, ctx).value
        ]

    def prepare_load(self, keys: list[bytes], ctx: Any) -> list[int]:
        return list(self.manager.prepare_load(keys, ctx))

    def prepare_store(self, keys: list[bytes], ctx: Any) -> Any:
        out = self.manager.prepare_store(keys, ctx)
        if out is None:
            return None
        return [
            [unkey(k) for k in out.keys_to_store],
            list(out.slot_ids),
            [unkey(k) for k in out.evicted_keys],
        ]


def run(side: Any, scenario: dict[str, Any], num_ops: int = 500) -> list[Any]:
    """Play the connector for ``num_ops`` operations; the log of every call and answer."""
    rng = random.Random(scenario["seed"])
    manager = side.manager
    log: list[Any] = []
    families = [[f * 1000 + i for i in range(12)] for f in range(4)]
    live: dict[str, dict[str, Any]] = {}
    next_request = 0
    for _ in range(num_ops):
        op = rng.random()
        if op < 0.15 or not live:
            rid = f"r{next_request}"
            next_request += 1
            family = families[rng.randrange(len(families))]
            shared = rng.randint(0, len(family))
            ids = family[:shared] + [
                100_000 + next_request * 100 + i for i in range(rng.randint(1, 6))
            ]
            keys = [key(i) for i in ids]
            positions = {k: (n + 1) * TOKENS_PER_CHUNK for n, k in enumerate(keys)}
            ctx = side.context(rid, positions)
            manager.on_new_request(ctx)
            live[rid] = {"ctx": ctx, "keys": keys, "cursor": 0, "loads": [], "stores": []}
            log.append(["new", rid, ids])
            continue
        rid = rng.choice(sorted(live))
        req = live[rid]
        ctx, keys = req["ctx"], req["keys"]
        if op < 0.35:
            # An admission: look up until a miss; a pending chunk defers the request.
            answers = []
            for k in keys:
                answer = side.lookup(k, ctx)
                answers.append(answer)
                if answer == "miss":
                    break
            log.append(["lookup", rid, answers])
            req["cursor"] = 0  # 0.33's store cursor restarts at every lookup
            hits = 0
            for answer in answers:
                if answer != "hit":
                    break
                hits += 1
            if (
                "pending" not in answers[: hits + 1]
                and hits
                and not req["loads"]
                and rng.random() < 0.7
            ):
                loaded = keys[:hits]
                log.append(["load", rid, hits, side.prepare_load(loaded, ctx)])
                req["loads"].append(loaded)
                req["cursor"] = hits
        elif op < 0.6:
            start = req["cursor"]
            if start >= len(keys):
                continue
            end = rng.randint(start + 1, len(keys))
            offered = keys[start:end]
            result = side.prepare_store(offered, ctx)
            log.append(["store", rid, [unkey(k) for k in offered], result])
            if result is not None:
                req["cursor"] = end
                if result[0]:
                    req["stores"].append([key(i) for i in result[0]])
        elif op < 0.75 and req["stores"]:
            stored = req["stores"].pop(rng.randrange(len(req["stores"])))
            success = rng.random() < 0.9
            manager.complete_store(stored, ctx, success)
            log.append(["stored", rid, [unkey(k) for k in stored], success])
        elif op < 0.85 and req["loads"]:
            loaded = req["loads"].pop()
            manager.complete_load(loaded, ctx)
            log.append(["loaded", rid, len(loaded)])
        elif op < 0.95:
            for loaded in req["loads"]:
                manager.complete_load(loaded, ctx)
            for stored in req["stores"]:
                manager.complete_store(stored, ctx, True)
            manager.on_request_finished(ctx)
            log.append(["finish", rid])
            del live[rid]
    return log


def run_all(kind: str) -> list[list[Any]]:
    side_cls = VllmSide if kind == "vllm" else KvframeSide
    return [run(side_cls(scenario), scenario) for scenario in SCENARIOS]


def compare() -> int:
    """Both sides; the index of the first scenario and call that differ, or 0 on agreement."""
    if not VLLM033_PYTHON.exists():
        print(f"no vLLM 0.33.0 interpreter at {VLLM033_PYTHON}")
        return 2
    out = subprocess.run(
        [str(VLLM033_PYTHON), __file__, "vllm"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
    ).stdout
    vllm_logs = json.loads(out.strip().splitlines()[-1])
    kvframe_logs = json.loads(json.dumps(run_all("kvframe")))
    for scenario, a, b in zip(SCENARIOS, vllm_logs, kvframe_logs, strict=True):
        if a != b:
            first = next(
                (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)),
            )
            print(f"{scenario}: call {first}: vLLM {a[first : first + 1]}")
            print(f"{' ' * len(str(scenario))}  kvframe {b[first : first + 1]}")
            return 1
    print(f"all {len(SCENARIOS)} scenarios identical call for call")
    return 0


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "compare"
    if mode == "compare":
        raise SystemExit(compare())
    print(json.dumps(run_all(mode)))
