"""A fleet whose replicas run in parallel processes, where the router's view allows it.

:meth:`Fleet.run <kvframe.fleet.Fleet.run>` interleaves the replicas on one clock
because a router may read what they publish (KV events, load reports, finishes).
A router that reads none of it -- ``uses_kv_events``, ``uses_loads`` and
``uses_finishes`` all false: ``round-robin``, ``random``, ``prefix-affinity`` --
chooses from the requests in arrival order and its seed alone. Then
:func:`run_parallel`:

1. routes every request in the parent, in arrival order, with the same
   :class:`~kvframe.RoutingRequest` (block hashes included) the fleet would pass
   and a view that refuses every read of replica state;
2. runs each replica in a forked child process, alone on its routed requests (its
   :class:`~kvframe.fleet.replica.Inbox` filled up front), exactly as the
   interleaved fleet drives it; ``processes`` children at a time;
3. merges the children's collectors, summaries and counters as :meth:`Fleet.run`
   does.

A replica of the interleaved fleet sees its requests arrive at the steps a single
engine would, whatever the other replicas do; so each child's replica takes the
same steps, and the result -- ``requests.csv``, ``metrics.json`` but the wall
clock -- is the single-process run's (``tests/fleet/test_parallel.py`` compares
them). Refused, with the reason (:func:`parallel_problem`): a router that reads
replica state; closed-loop agentic turns (a turn arrives when the previous one
finishes on some replica, so arrival order itself depends on the replicas); an
offload tier (it drains once the *fleet's* arrivals are over, which a replica
alone cannot see). Parallel runs need the ``fork`` start method (Linux, macOS with
it); a run interrupted in parallel keeps no partial result.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from kvframe.contract.routing import FleetInfo, ReplicaLoad, Router
from kvframe.engine import EngineStalled
from kvframe.engine.arrivals import ArrivalQueue
from kvframe.fleet.metrics import fleet_summary
from kvframe.fleet.replica import FinishTap, Inbox, Replica
from kvframe.fleet.runner import Fleet, FleetResult, RoutingError, routing_request
from kvframe.log import get_logger
from kvframe.workloads.spec import Workload

if TYPE_CHECKING:
    from kvframe.engine.metrics import MetricsSummary
    from kvframe.workloads.spec import RequestSpec

__all__ = ["parallel_problem", "run_parallel"]

log = get_logger(__name__)


def parallel_problem(fleet: Fleet, specs: Sequence[RequestSpec]) -> str | None:
    """Why ``fleet`` cannot run ``specs`` in parallel processes, or ``None`` if it can."""
    router = fleet.router
    label = fleet.router_label
    flags = [
        flag for flag in ("uses_kv_events", "uses_loads", "uses_finishes") if getattr(router, flag)
    ]
    if flags:
        return (
            f"router {label!r} reads replica state ({', '.join(flags)} set), so its choices "
            "depend on how the replicas run and the fleet interleaves them in one process; "
            "routers that read none (round-robin, random, prefix-affinity) can run in parallel"
        )
    if ArrivalQueue(specs).has_held:
        return (
            "the workload has closed-loop agentic turns (a turn arrives when its job's "
            "previous turn finishes, on whichever replica ran it), so the arrival order "
            "depends on the replicas: they run interleaved in one process"
        )
    tiered = [i for i, engine in enumerate(fleet.engines) if engine.config.offload is not None]
    if tiered:
        return (
            f"replica {tiered[0]} has an offload tier (--offload), which drains once the "
            "fleet's arrivals are over -- a replica run alone cannot see that: the "
            "replicas run interleaved in one process"
        )
    if "fork" not in multiprocessing.get_all_start_methods():
        return "parallel replicas need the 'fork' start method, which this platform lacks"
    return None


class _NoStateView:
    """The view a router that reads no replica state is routed with: its clock, the
    replica count, and an error for every read of what the replicas publish."""

    __slots__ = ("_label", "now", "num_replicas")

    def __init__(self, num_replicas: int, label: str) -> None:
        self.now = 0.0
        self.num_replicas = num_replicas
        self._label = label

    def _refuse(self, what: str, flag: str) -> RuntimeError:
        return RuntimeError(
            f"router {self._label!r} read view.{what}() but declares {flag} = False, and its "
            f"replicas run in parallel processes: set {flag} = True on the router class"
        )

    def loads(self) -> Sequence[ReplicaLoad]:
        raise self._refuse("loads", "uses_loads")

    def take_kv_events(self) -> Sequence[Any]:
        raise self._refuse("take_kv_events", "uses_kv_events")

    def take_kv_event_batches(self) -> Sequence[Any]:
        raise self._refuse("take_kv_event_batches", "uses_kv_events")

    def num_outstanding(self, replica: int) -> int:
        raise self._refuse("num_outstanding", "uses_finishes")


def _route_all(fleet: Fleet, specs: Sequence[RequestSpec]) -> list[tuple[float, RequestSpec, int]]:
    """``(arrival, spec, replica)`` of every request in routing order, as :meth:`Fleet.run`
    routes them with a router that reads no replica state."""
    router: Router = fleet.router
    engines = fleet.engines
    n = len(engines)
    first = engines[0]
    hasher = first.scheduler.block_hasher
    stop = tuple(first.executor.stop_token_ids)
    router.attach(
        FleetInfo(num_replicas=n, block_size=first.scheduler.block_size, seed=first.config.seed)
    )
    view = _NoStateView(n, fleet.router_label)
    choices: list[tuple[float, RequestSpec, int]] = []
    arrivals = ArrivalQueue(specs)
    while (due := arrivals.next_time) != math.inf:
        view.now = due
        for arrival, spec in arrivals.pop_due(due):
            choice = router.route(routing_request(spec, arrival, hasher, stop), view)
            if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < n:
                raise RoutingError(
                    f"router {fleet.router_label!r} returned {choice!r} for request "
                    f"{spec.request_id!r} (arrival {arrival:.6f} s); a replica must be an int "
                    f"in range({n})"
                )
            choices.append((arrival, spec, choice))
    return choices


_JOB: dict[str, Any] = {}
"""What the forked children read: the fleet, the workload, each replica's requests."""


def _run_replica(index: int) -> tuple[FinishTap, MetricsSummary, dict[str, int | float], str]:
    """In a child: replica ``index`` alone on its routed requests, driven as the fleet
    drives it. Returns its collector, summary, counters and a stall message ('' if none)."""
    fleet: Fleet = _JOB["fleet"]
    engine = fleet.engines[index]
    inbox = Inbox(ArrivalQueue(()))  # the fleet's arrivals: all routed already
    for arrival, spec in _JOB["routed"][index]:
        inbox.push(arrival, spec)
    replica = Replica(index, engine, inbox, _JOB["num_total"])
    tap = replica.tap
    started = time.perf_counter()
    while replica.update_next_time() != math.inf:
        replica.advance()
        tap.first_tokens.clear()
        tap.finished.clear()
    stalled = ""
    if replica.step.scheduler.requests:
        stalled = f"replica {index}: {len(replica.step.scheduler.requests)} requests"
    wall = time.perf_counter() - started
    summary = engine.summarize(_JOB["workload"], replica.step, wall, False)
    counters = engine.run_counters(replica.step, _JOB["skipped"] if index == 0 else 0)
    return tap, summary, counters, stalled


def run_parallel(
    fleet: Fleet,
    workload: Workload | Sequence[RequestSpec],
    *,
    processes: int | None = None,
    limit: int | None = None,
) -> FleetResult:
    """Run ``fleet`` over ``workload`` with its replicas in up to ``processes`` forked
    processes (default: one per replica, at most the CPU count; 1: one replica after
    another in this process, as fast as the interleaved loop); the result equals
    :meth:`Fleet.run`'s but for the wall clock (module docstring).

    :raises ValueError: the fleet cannot run in parallel (:func:`parallel_problem`), or
        ``processes`` / ``limit`` below 1.
    :raises RoutingError: the router chose a replica out of range (no replica ran; its
        ``result`` is ``None``).
    :raises ~kvframe.engine.EngineStalled: requests that can never be scheduled.
    """
    if fleet._ran:
        raise RuntimeError("a Fleet runs once; build a new one for another run")
    specs = workload.requests if isinstance(workload, Workload) else workload
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        specs = specs[:limit]
    n = len(fleet.engines)
    if processes is None:
        processes = min(n, os.cpu_count() or 1)
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"--processes must be an integer >= 1, got {processes!r}")
    problem = parallel_problem(fleet, specs)
    if problem is not None:
        raise ValueError(f"cannot run the replicas in parallel: {problem}")
    fleet._ran = True
    started = time.perf_counter()
    log.info("fleet_started", requests=len(specs), replicas=n, router=fleet.router_label,
             processes=processes)  # fmt: skip
    routed: list[list[tuple[float, RequestSpec]]] = [[] for _ in range(n)]
    assigned: dict[str, int] = {}
    for arrival, spec, choice in _route_all(fleet, specs):
        routed[choice].append((arrival, spec))
        assigned[spec.request_id] = choice
    outputs = _fork_replicas(fleet, workload, routed, len(specs), processes)
    wall = time.perf_counter() - started
    stuck = [out[3] for out in outputs if out[3]]
    summary = _merged(fleet, workload, outputs, assigned, wall)
    result = FleetResult(summary, tuple(out[1] for out in outputs), False, wall, len(specs))
    if stuck:
        stall = EngineStalled(
            "fleet stalled: 0 agentic turns held, requests that can never be scheduled "
            f"({', '.join(stuck)})"
        )
        stall.result = result
        raise stall
    return result


def _fork_replicas(
    fleet: Fleet,
    workload: Workload | Sequence[RequestSpec],
    routed: list[list[tuple[float, RequestSpec]]],
    num_total: int,
    processes: int,
) -> list[tuple[FinishTap, MetricsSummary, dict[str, int | float], str]]:
    """Each replica's outputs, in replica order, from forked children."""
    skipped = workload.num_skipped_lines if isinstance(workload, Workload) else 0
    _JOB.update(fleet=fleet, workload=workload, routed=routed, num_total=num_total, skipped=skipped)
    try:
        if processes == 1:  # one after another, in this process
            return [_run_replica(index) for index in range(len(routed))]
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
            return list(pool.map(_run_replica, range(len(routed))))
    finally:
        _JOB.clear()


def _merged(
    fleet: Fleet,
    workload: Workload | Sequence[RequestSpec],
    outputs: list[tuple[FinishTap, MetricsSummary, dict[str, int | float], str]],
    assigned: dict[str, int],
    wall: float,
) -> MetricsSummary:
    """The fleet's summary from the children's outputs, as :meth:`Fleet.run` builds it."""
    settings = fleet.settings
    return fleet_summary(
        [out[0] for out in outputs],
        [out[1] for out in outputs],
        [out[2] for out in outputs],
        assigned,
        wall=wall,
        partial=False,
        fleet={
            "replicas": len(outputs),
            "router": fleet.router_label,
            "kv_event_delay": settings.kv_event_delay,
            "load_report_interval": settings.load_report_interval,
            "num_requests_not_arrived": 0,
        },
    )
