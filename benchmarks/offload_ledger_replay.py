"""How much of a CPU tier's cost is its ledger alone: the tier's calls replayed without the engine.

    .venv/bin/python benchmarks/offload_ledger_replay.py [--limit 1000] [--rounds 3]
        [--tier cpu:capacity=8GiB --tier cpu:capacity=8GiB,eviction=arc]

Runs the first ``--limit`` requests of the bundled Mooncake conversation trace
through the engine once per ``--tier`` (as ``offload_speed.py`` does), records
every call the connector makes to the tier's ledger (:class:`SlotOffloadManager`:
``lookup``, ``touch``, ``prepare_store``, ``complete_store``, loads), then
replays that call stream ``--rounds`` times on a fresh ledger and eviction
policy, with nothing else running: no scheduler, no connector, no executor.
It prints the CPU seconds of the engine runs without a tier and with it (runs
without recording) and the best replay's CPU seconds.

Why: with identical decisions the connector must make the same ledger calls
as vLLM's (``tools/offload_digest.py`` checks them call for call), so the
replay is a floor under what the tier adds to a run at today's per-call
costs. Compare it with the budget ``0.5 x`` the no-tier run that a
``1.5x`` goal leaves. The replay checks that every round answers exactly
what the engine run was answered. Arguments are copied per call, as the
connector hands the ledger fresh lists (slices).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from typing import Any

from kvframe.engine import Engine, EngineConfig
from kvframe.offload.slots.manager import SlotOffloadManager
from kvframe.workloads import load_workload

TRACE = "mooncake:conversation"
METHODS = ("lookup", "prepare_load", "touch", "complete_load", "prepare_store", "complete_store")


def engine_cpu(limit: int, tier: str | None) -> tuple[float, Engine]:
    """CPU seconds of one engine run (``Engine.run`` only) and the engine."""
    workload = load_workload(TRACE, limit=limit)
    engine = Engine.from_config(EngineConfig(offload=tier))
    started = time.process_time()
    engine.run(workload)
    return time.process_time() - started, engine


def record(limit: int, tier: str) -> tuple[float, list[tuple[str, tuple[Any, ...], Any]], Any]:
    """An engine run with its ledger calls recorded: (CPU s, calls, the ledger)."""
    calls: list[tuple[str, tuple[Any, ...], Any]] = []
    saved = {name: getattr(SlotOffloadManager, name) for name in METHODS}

    def recorder(name: str, method: Any) -> Any:
        def wrapper(self: SlotOffloadManager, *args: Any) -> Any:
            args = tuple(a if isinstance(a, int | bool) else list(a) for a in args)
            result = method(self, *args)
            calls.append((name, args, result))
            return result

        return wrapper

    for name, method in saved.items():
        setattr(SlotOffloadManager, name, recorder(name, method))
    try:
        cpu, engine = engine_cpu(limit, tier)
    finally:
        for name, method in saved.items():
            setattr(SlotOffloadManager, name, method)
    connector = engine.scheduler.connector
    manager = connector.manager  # type: ignore[union-attr]
    return cpu, calls, getattr(manager, "backing", manager)


def replay(calls: list[tuple[str, tuple[Any, ...], Any]], ledger: SlotOffloadManager) -> float:
    """CPU seconds of the call stream on a fresh ledger and policy like ``ledger``'s."""
    policy = ledger.policy
    fresh_policy = type(policy)(policy.capacity, **_options(policy))
    fresh = SlotOffloadManager(
        fresh_policy, ledger.num_blocks, block_size=ledger.block_size, medium=ledger.medium
    )
    bound = [(getattr(fresh, name), args, result) for name, args, result in calls]
    gc.collect()
    started = time.process_time()
    answers = [
        method(*[list(a) if type(a) is list else a for a in args]) for method, args, _ in bound
    ]
    cpu = time.process_time() - started
    if answers != [result for _, _, result in bound]:
        raise SystemExit("the replay answered differently from the engine run")
    return cpu


def _options(policy: Any) -> dict[str, Any]:
    variant = getattr(policy, "variant", None)
    return {"variant": variant} if variant is not None else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tier", action="append", help="an --offload config string (repeatable)")
    args = parser.parse_args()
    tiers = args.tier or ["cpu:capacity=8GiB", "cpu:capacity=8GiB,eviction=arc"]
    load = os.getloadavg()[0]
    base, _ = engine_cpu(args.limit, None)
    print(f"{TRACE} --limit {args.limit}, load average {load:.1f}")
    print(
        f"{'configuration':36} {'engine cpu s':>12} {'ratio':>6} "
        f"{'ledger replay s':>15} {'replay / no tier':>16}"
    )
    print(f"{'no tier':36} {base:12.2f} {1.0:6.2f}")
    for tier in tiers:
        cpu, _ = engine_cpu(args.limit, tier)  # unrecorded: recording costs time itself
        _, calls, ledger = record(args.limit, tier)
        best = min(replay(calls, ledger) for _ in range(args.rounds))
        print(f"{tier:36} {cpu:12.2f} {cpu / base:6.2f} {best:15.2f} {best / base:16.2f}")
        del calls
        gc.collect()


if __name__ == "__main__":
    main()
