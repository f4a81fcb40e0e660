"""Drive kvframe's tier chain and vLLM 0.33.0's ``TieringOffloadingManager`` alike.

A seeded generator plays vLLM 0.33.0's offloading connector over a DRAM tier
with one or two tiers below it: requests over a few shared-prefix families are
announced, look their chunks up key by key (a lookup that misses DRAM and hits
a tier starts a promotion), load their DRAM hits, offer chunks for storing,
complete loads and GPU -> DRAM stores (a successful one cascades to every
tier), end steps (promotions are submitted there, batched per tier and request),
land or fail the tiers' jobs, and finish, in a random interleaving. Every call,
its answer, and every job a tier is handed (its id, direction, keys and DRAM
slots) is logged; two implementations agree if their logs are equal.

The manager under test is vLLM's own on one side and
:class:`kvframe.offload.tiering.TieringOffloadManager` on the other. The tiers
below DRAM are kvframe's :class:`~kvframe.offload.tiering.LedgerTier` and, on
vLLM's side, the same semantics written against vLLM's ``SecondaryTierManager``
over vLLM's own ``CPUOffloadingManager`` as the tier's ledger (vLLM's file-system
tier has no capacity; see ``docs/tiering.md``). Jobs land only when the
generator says so, so both sides see the same completions.

:data:`MUTATIONS` are deliberately wrong chains; ``compare`` must catch each one.
It imports neither side at module level, so the same file runs in kvframe's
venv and in vLLM 0.33.0's reference venv::

    .venv/bin/python tests/offload/tiering_differential_v033.py compare
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VLLM033_PYTHON = Path(
    os.environ.get("KVFRAME_VLLM033_PYTHON", REPO / ".vllm033-reference-venv" / "bin" / "python")
)
TOKENS_PER_CHUNK = 16

SCENARIOS = [
    {
        "policy": policy,
        "primary": primary,
        "tiers": tiers,
        "seed": seed,
    }
    for policy in ("lru", "arc")
    for primary in (6, 20)
    for tiers in (
        [{"name": "disk", "chunks": 12, "policy": "lru", "threshold": 0, "request_level": False}],
        [
            {"name": "disk", "chunks": 10, "policy": "arc", "threshold": 2, "request_level": False},
            {"name": "store", "chunks": 40, "policy": "lru", "threshold": 0, "request_level": True},
        ],
    )
    for seed in (0, 1)
]


def key(i: int) -> bytes:
    """A chunk key: vLLM 0.33.0's ``OffloadKey`` layout (hash + 4-byte group 0)."""
    return i.to_bytes(8, "big") + bytes(4)


def unkey(k: bytes) -> int:
    return int.from_bytes(k[:8], "big")


# -- vLLM's side ----------------------------------------------------------------------------


class _Region:
    """Stands in for ``SharedOffloadRegion``: a memoryview of one row per chunk."""

    def __init__(self, num_chunks: int) -> None:
        import numpy as np

        self._rows = np.zeros((max(num_chunks, 1), 8), dtype=np.uint8)

    def create_kv_memoryview(self) -> memoryview:
        return memoryview(self._rows)

    def cleanup(self) -> None:
        return None


def _vllm_tier_class() -> type:
    from vllm.v1.kv_offload.base import (
        LookupResult,
        OffloadPolicy,
        ReqContext,
        RequestOffloadingContext,
    )
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager

    class VllmLedgerTier(SecondaryTierManager):
        """kvframe's ``LedgerTier`` semantics on vLLM's tier interface and ledger."""

        def __init__(self, spec: dict[str, Any], view: memoryview) -> None:
            super().__init__(None, view, spec["name"])  # type: ignore[arg-type]
            self.ledger = CPUOffloadingManager(
                num_chunks=spec["chunks"],
                cache_policy=spec["policy"],
                store_threshold=spec["threshold"],
                max_tracker_size=40,
            )
            self.request_level = spec["request_level"]
            self.contexts: dict[str, Any] = {}
            self.flights: dict[int, list[Any]] = {}
            self.log: list[Any] = []

        def own(self, ctx: Any) -> Any:
            if ctx.req_id not in self.contexts:
                own = self.contexts[ctx.req_id] = ReqContext(req_id=ctx.req_id)
                # The request's chunk positions, shared (kvframe's tier shares them too).
                own._offload_key_positions = ctx._offload_key_positions
                self.ledger.on_new_request(own)
            return self.contexts[ctx.req_id]

        def on_new_request(self, req_context: Any) -> Any:
            self.own(req_context)
            level = OffloadPolicy.REQUEST_LEVEL if self.request_level else None
            return RequestOffloadingContext(policy=level or OffloadPolicy.CHUNK_LEVEL)

        def lookup(self, key: Any, req_context: Any) -> Any:
            hit = self.ledger.lookup(key, self.own(req_context)) is LookupResult.HIT
            return LookupResult.HIT if hit else LookupResult.MISS

        def submit_store(self, job: Any) -> None:
            self.log.append(["cascade", job.job_id, _ids(job.keys), _ints(job.chunk_ids)])
            out = self.ledger.prepare_store(list(job.keys), self.own(job.req_context))
            if out is not None and out.evicted_keys:
                self.log.append(["removed", _ids(out.evicted_keys)])
            keys = tuple(out.keys_to_store) if out is not None else ()
            self.flights[job.job_id] = [job, keys, out is not None, False, None]

        def submit_load(self, job: Any) -> None:
            self.log.append(["promote", job.job_id, _ids(job.keys), _ints(job.chunk_ids)])
            own = self.own(job.req_context)
            pinned = []
            for k in job.keys:
                if self.ledger.lookup(k, own) is not LookupResult.HIT:
                    break
                pinned.append(k)
            self.ledger.prepare_load(pinned, own)
            partial = len(pinned) < len(job.keys)
            self.flights[job.job_id] = [job, tuple(pinned), True, partial, None]

        def finish(self, job_id: int, success: bool) -> None:
            self.flights[job_id][4] = success

        def pending_job_ids(self) -> list[int]:
            return [i for i, f in self.flights.items() if f[4] is None]

        def get_finished_jobs(self) -> list[Any]:
            done = [f for f in self.flights.values() if f[4] is not None]
            return [self.land(*f) for f in done]

        def land(self, job: Any, keys: Any, ok: bool, partial: bool, forced: bool) -> Any:
            del self.flights[job.job_id]
            own = self.contexts.get(job.req_context.req_id) or ReqContext(job.req_context.req_id)
            ok = ok and forced
            if job.is_promotion:
                self.ledger.complete_load(keys, own)
                if not ok:
                    self.discard(keys)
                if ok and partial:
                    return JobResult(job.job_id, False, successful_keys=keys or None)
                return JobResult(job.job_id, ok)
            self.ledger.complete_store(keys, own, ok)
            if ok and keys:
                self.log.append(["stored", _ids(keys)])
            return JobResult(job.job_id, ok)

        def discard(self, keys: Any) -> None:
            """A failed load's chunks leave the tier (the fs tier's ``mark_miss``)."""
            policy, dropped = self.ledger._policy, []
            for k in keys:
                chunk = policy.get(k)
                if chunk is None or chunk.ref_cnt != 0:
                    continue
                policy.mark_non_evictable(k)
                self.ledger._num_evictable_cache_chunks -= 1
                policy.remove(k)
                self.ledger._free_chunk(chunk)
                dropped.append(k)
            if dropped:
                self.log.append(["removed", _ids(dropped)])

        def has_pending_work(self) -> bool:
            return bool(self.flights)

        def on_request_finished(self, req_context: Any) -> None:
            own = self.contexts.pop(req_context.req_id, None)
            if own is not None:
                self.ledger.on_request_finished(own)

        def drain_jobs(self) -> None:
            return None

    return VllmLedgerTier


def _ids(keys: Any) -> list[int]:
    return [unkey(k) for k in keys]


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


class VllmSide:
    """vLLM 0.33.0's ``TieringOffloadingManager`` over its ``CPUPrimaryTierOffloadingManager``."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext
        from vllm.v1.kv_offload.tiering.manager import (
            CPUPrimaryTierOffloadingManager,
            TieringOffloadingManager,
        )

        self._ReqContext = ReqContext
        self._end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        self._names = {
            LookupResult.MISS: "miss",
            LookupResult.HIT: "hit",
            LookupResult.HIT_PENDING: "pending",
            LookupResult.RETRY: "retry",
        }
        primary = CPUPrimaryTierOffloadingManager(
            scenario["primary"], _Region(scenario["primary"]), cache_policy=scenario["policy"]
        )
        tier_cls = _vllm_tier_class()
        view = primary.get_kv_memoryview()
        self.tiers = [tier_cls(spec, view) for spec in scenario["tiers"]]
        self.manager = TieringOffloadingManager(primary, self.tiers, tier_poll_interval_s=0)

    def context(self, request_id: str, positions: dict[bytes, int]) -> Any:
        ctx = self._ReqContext(req_id=request_id)
        for k, position in positions.items():
            ctx.set_offload_key_position(k, position)
        return ctx

    def lookup(self, k: bytes, ctx: Any) -> str:
        return self._names[self.manager.lookup(k, ctx)]

    def prepare_load(self, keys: list[bytes], ctx: Any) -> list[int]:
        return _ints(self.manager.prepare_load(keys, ctx).block_ids)

    def prepare_store(self, keys: list[bytes], ctx: Any) -> Any:
        out = self.manager.prepare_store(keys, ctx)
        if out is None:
            return None
        return [_ids(out.keys_to_store), _ints(out.store_spec.block_ids), _ids(out.evicted_keys)]

    def schedule_end(self) -> None:
        self.manager.on_schedule_end(self._end)

    def tier_log(self, t: int) -> list[Any]:
        log, self.tiers[t].log = self.tiers[t].log, []
        return log


# -- kvframe's side -------------------------------------------------------------------------


def _policy(name: str, capacity: int) -> Any:
    if name == "lru":
        from kvframe_lru.rank import RankLRUPolicy

        return RankLRUPolicy(capacity)
    from kvframe_arc.request_arc import RequestARCPolicy

    return RequestARCPolicy(capacity)


def _kvframe_tier(spec: dict[str, Any]) -> Any:
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager
    from kvframe.offload.tiering import LedgerTier

    class RecordingTier(LedgerTier):
        """Logs what the chain hands the tier, as the vLLM side's tier does."""

        log: list[Any]

        def submit_store(self, job: Any) -> None:
            self.log.append(["cascade", job.job_id, _ids(job.keys), list(job.slot_ids)])
            super().submit_store(job)
            self._drain_events()

        def submit_load(self, job: Any) -> None:
            self.log.append(["promote", job.job_id, _ids(job.keys), list(job.slot_ids)])
            super().submit_load(job)

        def finished_jobs(self) -> Any:
            results = super().finished_jobs()
            self._drain_events()
            return results

        def _drain_events(self) -> None:
            for kind, keys in self.take_events():
                self.log.append([kind, _ids(keys)])

    ledger = RequestScopedOffloadManager(
        _policy(spec["policy"], spec["chunks"]),
        spec["chunks"],
        store_threshold=spec["threshold"],
        max_tracker_size=40,
    )
    tier = RecordingTier(spec["name"], ledger, request_level=spec["request_level"])
    tier.log = []
    return tier


class KvframeSide:
    """kvframe's ``TieringOffloadManager`` (or a mutation of it) over the 0.33 DRAM ledger."""

    def __init__(self, scenario: dict[str, Any], mutation: str | None = None) -> None:
        from kvframe.contract.request_scoped import RequestAccess
        from kvframe.offload.jobs.manager import RequestScopedOffloadManager
        from kvframe.offload.tiering import TieringOffloadManager

        self._RequestAccess = RequestAccess
        primary = RequestScopedOffloadManager(
            _policy(scenario["policy"], scenario["primary"]), scenario["primary"]
        )
        self.tiers = [_kvframe_tier(spec) for spec in scenario["tiers"]]
        cls = MUTATIONS[mutation](TieringOffloadManager) if mutation else TieringOffloadManager
        self.manager = cls(primary, self.tiers)

    def context(self, request_id: str, positions: dict[bytes, int]) -> Any:
        return self._RequestAccess(request_id, dict(positions))

    def lookup(self, k: bytes, ctx: Any) -> str:
        answer = self.manager.lookup(k, ctx).value
        return {"hit-pending": "pending"}.get(answer, answer)

    def prepare_load(self, keys: list[bytes], ctx: Any) -> list[int]:
        return list(self.manager.prepare_load(keys, ctx))

    def prepare_store(self, keys: list[bytes], ctx: Any) -> Any:
        out = self.manager.prepare_store(keys, ctx)
        if out is None:
            return None
        return [_ids(out.keys_to_store), list(out.slot_ids), _ids(out.evicted_keys)]

    def schedule_end(self) -> None:
        self.manager.on_schedule_end()

    def tier_log(self, t: int) -> list[Any]:
        log, self.tiers[t].log = self.tiers[t].log, []
        return log


# -- mutations ------------------------------------------------------------------------------


def _promote_as_hit(base: type) -> type:
    class M(base):  # type: ignore[misc, valid-type]
        def _initiate_promotion(self, tier_idx: int, key: Any, access: Any) -> bool:
            started = super()._initiate_promotion(tier_idx, key, access)
            self._flush_pending_promotions()  # no batching: one job per chunk, at once
            return started

    return M


def _cascade_to_first_tier_only(base: type) -> type:
    class M(base):  # type: ignore[misc, valid-type]
        def _cascade(self, keys: Any, access: Any, tier_idx: int) -> None:
            if tier_idx == 0:  # "write to the nearest tier; it will demote" -- not vLLM's rule
                super()._cascade(keys, access, tier_idx)

    return M


def _cascade_records_access(base: type) -> type:
    class M(base):  # type: ignore[misc, valid-type]
        def _cascade(self, keys: Any, access: Any, tier_idx: int) -> None:
            from kvframe.offload.tiering.base import TierJob

            slots = self.primary.prepare_load(keys, access)
            job = self._new_job(keys, slots, False, access, tier_idx)
            assert isinstance(job, TierJob)
            self.tiers[tier_idx].submit_store(job)

    return M


def _no_poll_before_store(base: type) -> type:
    class M(base):  # type: ignore[misc, valid-type]
        def _process_finished_jobs(self) -> None:
            import inspect

            if inspect.stack()[1].function == "prepare_store":
                return
            super()._process_finished_jobs()

    return M


def _finalize_early(base: type) -> type:
    class M(base):  # type: ignore[misc, valid-type]
        def on_request_finished(self, access: Any) -> None:
            super().on_request_finished(access)
            state = self._requests.get(access.request_id)
            if state is not None:
                state.pending_primary_stores = 0
                state.pending_cascade_keys.clear()
                self._maybe_finalize(access.request_id)

    return M


def _retry_first(base: type) -> type:
    class M(base):  # type: ignore[misc, valid-type]
        def lookup(self, key: Any, access: Any) -> Any:
            from kvframe.offload.jobs.manager import LookupResult

            answer = super().lookup(key, access)
            # a failed promotion allocation answered as RETRY rather than MISS
            if answer is LookupResult.MISS and any(
                s.promotion_allocation_failures for s in self.stats
            ):
                return LookupResult.RETRY
            return answer

    return M


MUTATIONS: dict[str, Callable[[type], type]] = {
    "promotions-unbatched": _promote_as_hit,
    "cascade-to-first-tier-only": _cascade_to_first_tier_only,
    "cascade-records-access": _cascade_records_access,
    "no-poll-before-store": _no_poll_before_store,
    "finalize-early": _finalize_early,
    "allocation-failure-retries": _retry_first,
}


# -- the generator ----------------------------------------------------------------------------


def _new_request(side: Any, rng: random.Random, live: dict[str, Any], n: int) -> list[Any]:
    rid = f"r{n}"
    families = [[f * 1000 + i for i in range(10)] for f in range(4)]
    family = families[rng.randrange(len(families))]
    ids = family[: rng.randint(0, len(family))] + [
        100_000 + n * 100 + i for i in range(rng.randint(1, 5))
    ]
    keys = [key(i) for i in ids]
    ctx = side.context(rid, {k: (j + 1) * TOKENS_PER_CHUNK for j, k in enumerate(keys)})
    side.manager.on_new_request(ctx)
    live[rid] = {"ctx": ctx, "keys": keys, "cursor": 0, "loads": [], "stores": []}
    return ["new", rid, ids]


def _lookup(side: Any, rng: random.Random, rid: str, req: dict[str, Any]) -> list[Any]:
    answers = []
    for k in req["keys"]:
        answers.append(side.lookup(k, req["ctx"]))
        if answers[-1] == "miss":
            break
    entry: list[Any] = ["lookup", rid, answers]
    req["cursor"] = 0
    hits = next((i for i, a in enumerate(answers) if a != "hit"), len(answers))
    # Load only after a walk that allocated nothing: a promotion may evict a DRAM hit.
    if hits and set(answers) <= {"hit", "miss"} and not req["loads"] and rng.random() < 0.7:
        loaded = req["keys"][:hits]
        entry.append(side.prepare_load(loaded, req["ctx"]))
        req["loads"].append(loaded)
        req["cursor"] = hits
    return entry


def _store(side: Any, rng: random.Random, rid: str, req: dict[str, Any]) -> list[Any] | None:
    start, keys = req["cursor"], req["keys"]
    if start >= len(keys):
        return None
    end = rng.randint(start + 1, len(keys))
    result = side.prepare_store(keys[start:end], req["ctx"])
    if result is not None:
        req["cursor"] = end
        if result[0]:
            req["stores"].append([key(i) for i in result[0]])
    return ["store", rid, _ids(keys[start:end]), result]


def _land_tier_job(side: Any, rng: random.Random) -> list[Any] | None:
    t = rng.randrange(len(side.tiers))
    pending = side.tiers[t].pending_job_ids()
    if not pending:
        return None
    job_id = pending[rng.randrange(len(pending))]
    success = rng.random() < 0.85
    side.tiers[t].finish(job_id, success)
    return ["land", t, job_id, success]


def _finish(side: Any, rid: str, req: dict[str, Any]) -> list[Any]:
    manager, ctx = side.manager, req["ctx"]
    for loaded in req["loads"]:
        manager.complete_load(loaded, ctx)
    for stored in req["stores"]:
        manager.complete_store(stored, ctx, True)
    manager.on_request_finished(ctx)
    return ["finish", rid]


def _request_op(side: Any, rng: random.Random, op: float, rid: str, req: dict[str, Any]) -> Any:
    manager, ctx = side.manager, req["ctx"]
    if op < 0.4:
        return _lookup(side, rng, rid, req)
    if op < 0.6:
        return _store(side, rng, rid, req)
    if op < 0.7 and req["stores"]:
        stored = req["stores"].pop(rng.randrange(len(req["stores"])))
        success = rng.random() < 0.9
        manager.complete_store(stored, ctx, success)
        return ["stored", rid, _ids(stored), success]
    if op < 0.77 and req["loads"]:
        manager.complete_load(req["loads"].pop(), ctx)
        return ["loaded", rid]
    return None


def run(side: Any, scenario: dict[str, Any], num_ops: int = 600) -> list[Any]:
    """Play the connector for ``num_ops`` operations; the log of every call and answer."""
    rng = random.Random(scenario["seed"])
    log: list[Any] = []
    live: dict[str, dict[str, Any]] = {}
    made = 0
    for _ in range(num_ops):
        op = rng.random()
        entry: Any = None
        if op < 0.12 or not live:
            entry = _new_request(side, rng, live, made)
            made += 1
        elif op < 0.72:
            rid = rng.choice(sorted(live))
            entry = _request_op(side, rng, (op - 0.12) / 0.6, rid, live[rid])
        elif op < 0.84:
            entry = _land_tier_job(side, rng)
        elif op < 0.95:
            side.schedule_end()
            entry = ["end", side.manager.has_pending_work()]
        else:
            rid = rng.choice(sorted(live))
            entry = _finish(side, rid, live.pop(rid))
        if entry is not None:
            log.append(entry)
        for t in range(len(side.tiers)):
            log.extend([["tier", t, *e] for e in side.tier_log(t)])
    return log


def run_all(kind: str, mutation: str | None = None) -> list[list[Any]]:
    if kind == "vllm":
        return [run(VllmSide(scenario), scenario) for scenario in SCENARIOS]
    return [run(KvframeSide(scenario, mutation), scenario) for scenario in SCENARIOS]


def vllm_logs() -> list[list[Any]]:
    """vLLM 0.33.0's logs, run in its reference venv."""
    out = subprocess.run(
        [str(VLLM033_PYTHON), __file__, "vllm"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def first_difference(reference: list[list[Any]], mutation: str | None = None) -> str | None:
    """The first scenario and call where kvframe's logs leave ``reference``; None if none."""
    try:
        logs = json.loads(json.dumps(run_all("kvframe", mutation)))
    except (AssertionError, RuntimeError, KeyError) as error:
        return f"kvframe raised {error!r}"  # a chain that breaks its own ledger differs
    for scenario, a, b in zip(SCENARIOS, reference, logs, strict=True):
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
            return f"{scenario}: call {i}: vLLM {a[i : i + 1]}\n  kvframe {b[i : i + 1]}"
    return None


def coverage(logs: list[list[Any]]) -> dict[str, int]:
    """How often the logs reach each decision, so a scenario set that stops reaching one shows."""
    counts: dict[str, int] = {}

    def bump(name: str, n: int = 1) -> None:
        counts[name] = counts.get(name, 0) + n

    for log in logs:
        for entry in log:
            if entry[0] == "tier":
                bump(f"tier {entry[2]}")
            elif entry[0] == "lookup":
                for answer in entry[2]:
                    bump(f"lookup {answer}")
            elif entry[0] == "land":
                bump("tier job " + ("landed" if entry[3] else "failed"))
            elif entry[0] == "store" and entry[3] is None:
                bump("store refused")
    return counts


def compare() -> int:
    """Both sides; 0 on agreement (and every mutation caught), 1 otherwise, 2 without vLLM."""
    if not VLLM033_PYTHON.exists():
        print(f"no vLLM 0.33.0 interpreter at {VLLM033_PYTHON}")
        return 2
    reference = vllm_logs()
    difference = first_difference(reference)
    if difference is not None:
        print(difference)
        return 1
    calls = sum(len(log) for log in reference)
    print(f"all {len(SCENARIOS)} scenarios identical call for call ({calls} calls)")
    print("coverage:", json.dumps(coverage(reference), sort_keys=True))
    missed = [m for m in MUTATIONS if first_difference(reference, m) is None]
    for mutation in MUTATIONS:
        print(f"mutation {mutation}: {'MISSED' if mutation in missed else 'caught'}")
    return 1 if missed else 0


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "compare"
    if mode == "compare":
        raise SystemExit(compare())
    print(json.dumps(run_all(mode)))
