"""The fleet: N engine replicas behind a router, on one virtual clock.

:meth:`Fleet.run` is a discrete-event loop over the replicas' next loop
iterations and the workload's arrivals:

* the next event is the earliest of the next arrival (one global
  :class:`~kvframe.engine.arrivals.ArrivalQueue`: open-loop requests and the
  agentic turns it releases when a job's previous turn finishes, on whichever
  replica ran it) and the earliest replica's next step start;
* an arrival at or before that step start is routed first: the signals due by
  the arrival are delivered (finishes, load reports, KV events after their
  delay), the router picks a replica from the view, the request goes into that
  replica's inbox. A replica thus sees a request arrive at the same step as
  the single engine would, and a fleet of one replica is step-identical to the
  single engine;
* otherwise the earliest replica (ties: the lowest index) runs one iteration
  of its loop. A run of plain decode steps inside it stops at the next arrival
  (and at the replica's next load report, when the router reads loads, and at
  the other replicas' next step while agentic turns are held, since one of
  them may release a turn); an idle replica waits for its next routed arrival.

Nothing of an engine is reachable from the router's view
(:mod:`kvframe.fleet.signals`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.contract.routing import FleetInfo, Router, RoutingRequest
from kvframe.domain.request import Request
from kvframe.engine import Engine, EngineConfig, EngineStalled
from kvframe.engine.arrivals import ArrivalQueue
from kvframe.fleet.metrics import fleet_summary
from kvframe.fleet.replica import FinishTap, Inbox, Replica
from kvframe.fleet.signals import SignalBoard, View
from kvframe.log import get_logger
from kvframe.offload.tiering.shared import sharing
from kvframe.workloads.spec import PromptTokens, Workload

if TYPE_CHECKING:
    from kvframe.config import PluginSpec
    from kvframe.engine.metrics import MetricsSummary
    from kvframe.host.registry import PluginRegistry
    from kvframe.workloads.spec import RequestSpec

__all__ = ["Fleet", "FleetResult", "FleetSettings", "RoutingError"]

log = get_logger(__name__)


@attrs.frozen(slots=True)
class FleetSettings:
    """How the fleet publishes signals to its router (``--kv-event-delay``,
    ``--load-report-interval``), in virtual seconds."""

    kv_event_delay: float = attrs.field(default=0.0)
    load_report_interval: float = attrs.field(default=0.0)

    def __attrs_post_init__(self) -> None:
        for name in ("kv_event_delay", "load_report_interval"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} must be a finite number of seconds >= 0, got {value!r}")


@attrs.frozen(slots=True)
class FleetResult:
    """What :meth:`Fleet.run` returns: the fleet's summary and each replica's.

    ``summary`` holds every request of the fleet (``metadata.fleet`` says how the
    requests spread over the replicas); ``replicas[i]`` is replica ``i``'s own,
    as a single engine run would report it.
    """

    summary: MetricsSummary
    replicas: tuple[MetricsSummary, ...]
    partial: bool
    wall_clock_seconds: float
    num_requests_total: int
    error: str | None = None
    """Why the run stopped early (a routing error), or ``None``."""


class RoutingError(RuntimeError):
    """The router chose a replica that does not exist; ``result`` holds what ran so far."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.result: FleetResult | None = None


ROLE_FLEETS: dict[str, Callable[..., Fleet]] = {}
"""Builders of fleets whose replicas play roles, by config key: ``disagg``
(:mod:`kvframe.fleet.disagg`, which registers itself when :mod:`kvframe.fleet` is
imported)."""


def _marked_stalled(result: FleetResult, stall: EngineStalled) -> FleetResult:
    """``result`` with ``metadata.stalled`` saying why the fleet stopped (as a single
    engine's stalled run carries it), so the CLI writes it as partial results."""
    metadata = {**result.summary.metadata, "stalled": str(stall)}
    return attrs.evolve(result, summary=attrs.evolve(result.summary, metadata=metadata))


class Fleet:
    """N replicas (each an :class:`~kvframe.engine.Engine`) behind one :class:`~kvframe.Router`.

    Build it with :meth:`from_config`; a fleet runs one workload once.
    """

    def __init__(
        self,
        engines: Sequence[Engine],
        router: Router,
        *,
        settings: FleetSettings | None = None,
        router_label: str | None = None,
    ) -> None:
        if not engines:
            raise ValueError("a fleet needs at least one replica")
        block_sizes = {engine.scheduler.block_size for engine in engines}
        if len(block_sizes) > 1:
            raise ValueError(
                f"a fleet's replicas must share one block size (the router's block hashes "
                f"name blocks of one size); got {sorted(block_sizes)}"
            )
        self.engines = tuple(engines)
        self.router = router
        self.settings = settings if settings is not None else FleetSettings()
        self.router_label = router_label or router.name or type(router).__name__
        self._ran = False

    @classmethod
    def from_config(
        cls,
        config: EngineConfig | Sequence[EngineConfig],
        router: Router | PluginSpec | str | None = None,
        *,
        replicas: int | None = None,
        settings: FleetSettings | None = None,
        registry: PluginRegistry | None = None,
    ) -> Fleet:
        """Build ``replicas`` engines from ``config`` (or one per config of a sequence: a
        heterogeneous fleet) and the router (an instance, or a spec the registry resolves
        as ``--router`` does). Left out, ``replicas``, ``router`` and ``settings`` come from
        the (first) config's fleet fields.

        :raises ConfigError: for an unknown plugin or a bad option.
        :raises ValueError: for a bad replica count or a fleet the fleet cannot run.
        """
        if registry is None:
            from kvframe.host.registry import get_registry

            registry = get_registry()
        configs = _replica_configs(config, replicas)
        first = configs[0]
        if settings is None:
            settings = FleetSettings(first.kv_event_delay, first.load_report_interval)
        if router is None:
            if first.router is None:
                raise ValueError("a fleet needs a router (--router NAME)")
            router = first.router
        label = None
        if not isinstance(router, Router):
            label = router if isinstance(router, str) else (router.source or str(router))
            router = registry.create("routing", router)
        if first.disagg is not None:
            # kvframe.fleet.disagg registers itself (importing it here would be a cycle).
            return ROLE_FLEETS["disagg"](configs, router, label, settings, registry)
        kv_events = bool(router.uses_kv_events)
        # One scope for the replicas: a `shared=true` tier below DRAM is one store
        # for all of them (kvframe.offload.tiering.shared).
        with sharing():
            engines = [
                Engine.from_config(c, registry, kv_events=kv_events, collector=FinishTap())
                for c in configs
            ]
        return cls(engines, router, settings=settings, router_label=label)

    # ------------------------------------------------------------------
    # The run
    # ------------------------------------------------------------------

    def run(
        self,
        workload: Workload | Sequence[RequestSpec],
        *,
        limit: int | None = None,
        progress: Callable[[Fleet], Any] | None = None,
    ) -> FleetResult:
        """Replay ``workload`` over the fleet until every request has finished.

        :param progress: called after every replica iteration with the fleet; it should
            throttle itself. ``KeyboardInterrupt`` (from it or Ctrl-C) stops the run
            cleanly with a partial result.
        :raises RoutingError: the router chose a replica out of range (its ``result``
            holds the partial result).
        :raises ~kvframe.engine.EngineStalled: when requests can never be scheduled; its
            ``result`` is the partial :class:`FleetResult` up to the stall
            (``metadata.stalled`` says why), as :meth:`Engine.run` does.
        """
        if self._ran:
            raise RuntimeError("a Fleet runs once; build a new one for another run")
        self._ran = True
        specs = workload.requests if isinstance(workload, Workload) else workload
        if limit is not None:
            if limit < 1:
                raise ValueError(f"limit must be >= 1, got {limit}")
            specs = specs[:limit]
        run = self._new_run(ArrivalQueue(specs), len(specs))
        started = time.perf_counter()
        partial = False
        error: RoutingError | None = None
        log.info(
            "fleet_started",
            requests=len(specs),
            replicas=len(self.engines),
            router=self.router_label,
        )
        stalled: EngineStalled | None = None
        try:
            run.loop(progress)
        except KeyboardInterrupt:
            partial = True
            log.warning("fleet_interrupted", now=run.view.now)
        except RoutingError as err:
            partial = True
            error = err
        except EngineStalled as err:  # kept like an interrupt, as a single engine keeps it
            partial = True
            stalled = err
            log.warning("fleet_stalled", now=run.view.now)
        wall = time.perf_counter() - started
        result = self._result(workload, run, wall, partial, None if error is None else str(error))
        if stalled is not None:
            stalled.result = _marked_stalled(result, stalled)
            raise stalled
        if error is not None:
            error.result = result
            raise error
        return result

    def _new_run(self, arrivals: ArrivalQueue, num_total: int) -> _FleetRun:
        """The state of one run (a disaggregated fleet runs its own)."""
        return _FleetRun(self, arrivals, num_total)

    def _result(
        self,
        workload: Workload | Sequence[RequestSpec],
        run: _FleetRun,
        wall: float,
        partial: bool,
        error: str | None,
    ) -> FleetResult:
        replicas = tuple(r.engine.summarize(workload, r.step, wall, partial) for r in run.replicas)
        known = workload if isinstance(workload, Workload) else None
        skipped = 0 if known is None else known.num_skipped_lines
        summary = fleet_summary(
            [r.tap for r in run.replicas],
            replicas,
            [r.engine.run_counters(r.step, skipped if r.index == 0 else 0) for r in run.replicas],
            run.assigned,
            wall=wall,
            partial=partial,
            fleet={
                "replicas": len(run.replicas),
                "router": self.router_label,
                "kv_event_delay": self.settings.kv_event_delay,
                "load_report_interval": self.settings.load_report_interval,
                "num_requests_not_arrived": run.arrivals.num_pending,
                **({"error": error} if error is not None else {}),
            },
        )
        return FleetResult(summary, replicas, partial, wall, run.num_total, error)


def _replica_configs(
    config: EngineConfig | Sequence[EngineConfig], replicas: int | None
) -> list[EngineConfig]:
    if isinstance(config, EngineConfig):
        if replicas is None:
            replicas = config.replicas
        count = 1 if replicas is None else replicas
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"--replicas must be an integer >= 1, got {replicas!r}")
        configs = [config] * count
    else:
        configs = list(config)
        if not configs or (replicas is not None and replicas != len(configs)):
            raise ValueError(f"{len(configs)} replica configs for {replicas} replicas")
    for c in configs:
        if c.tracers:
            raise ValueError("tracers are not supported in a fleet yet (--tracer with --replicas)")
        if c.executor != "sim":
            raise ValueError(f"a fleet runs the sim executor only, got --executor {c.executor!r}")
    return configs


class _FleetRun:
    """The state of one :meth:`Fleet.run`: replicas, the global arrivals, the signals."""

    def __init__(self, fleet: Fleet, arrivals: ArrivalQueue, num_total: int) -> None:
        router = fleet.router
        self.router = router
        self.label = fleet.router_label
        self.arrivals = arrivals
        self.num_total = num_total
        self.replicas = [
            Replica(i, engine, Inbox(arrivals), num_total) for i, engine in enumerate(fleet.engines)
        ]
        n = len(self.replicas)
        self.uses_loads = bool(router.uses_loads)
        self.uses_kv_events = bool(router.uses_kv_events)
        self.interval = fleet.settings.load_report_interval
        self.view = View(
            n,
            router_name=self.label,
            uses_loads=self.uses_loads,
            uses_finishes=bool(router.uses_finishes),
        )
        self.board = SignalBoard(self.view, router, kv_event_delay=fleet.settings.kv_event_delay)
        self.assigned: dict[str, int] = {}
        first = fleet.engines[0]
        self.hasher = first.scheduler.block_hasher
        self.stop_token_ids = tuple(first.executor.stop_token_ids)
        self.marks_kv_events = [False] * len(self.replicas)
        if self.uses_kv_events:
            for replica in self.replicas:
                # Every KV event is stamped with its own step's end: the synchronous loop's
                # decode runs mark each step's events (FinishTap.mark_kv_events); the
                # batch queue takes no decode runs.
                if replica.driver.takes_decode_runs:
                    pool = replica.step.scheduler.kv_cache_manager.block_pool
                    replica.tap.mark_kv_events(pool)
                    self.marks_kv_events[replica.index] = True
        router.attach(
            FleetInfo(num_replicas=n, block_size=first.scheduler.block_size, seed=first.config.seed)
        )
        # (next step start, replica index): stale entries are skipped on pop.
        self.heap: list[tuple[float, int]] = []

    # -- the event loop ----------------------------------------------------------

    def loop(self, progress: Callable[[Fleet], Any] | None) -> None:
        """Route arrivals and step replicas in virtual-time order (module docstring)."""
        arrivals = self.arrivals
        replicas = self.replicas
        heap = self.heap
        while True:
            while heap and heap[0][0] != replicas[heap[0][1]].next_time:
                heapq.heappop(heap)  # stale
            t = heap[0][0] if heap else math.inf
            due = arrivals.next_time
            if due <= t:
                if due == math.inf:
                    if self._wake_drained():
                        continue
                    break
                self._route_due(due)
                continue
            _, index = heapq.heappop(heap)
            replica = replicas[index]
            replica.step.horizon = self._horizon(replica, due)
            replica.advance()
            self._publish(replica)
            if replica.update_next_time() != math.inf:
                heapq.heappush(heap, (replica.next_time, index))
            if progress is not None:
                progress(self)  # type: ignore[arg-type]
        self.board.drain()
        self._check_stalled()

    def _horizon(self, replica: Replica, due: float) -> float:
        """The time at which a run of plain decode steps in ``replica`` must stop."""
        horizon = due
        if self.arrivals.has_held:
            # A finish elsewhere may release a turn: no replica runs ahead of the others.
            heap = self.heap
            while heap and heap[0][0] != self.replicas[heap[0][1]].next_time:
                heapq.heappop(heap)
            if heap and heap[0][0] < horizon:
                horizon = heap[0][0]
        if self.uses_loads and replica.next_report < horizon:
            horizon = replica.next_report
        return horizon

    def _wake_drained(self) -> bool:
        """No arrival is left and every replica waits: replicas whose tier still stores
        step again (the batch queue drains them once the fleet's arrivals are over)."""
        woke = False
        for replica in self.replicas:
            if replica.update_next_time() != math.inf:
                heapq.heappush(self.heap, (replica.next_time, replica.index))
                woke = True
        return woke

    def _check_stalled(self) -> None:
        stuck = [r for r in self.replicas if r.step.scheduler.requests]
        if self.arrivals.num_held or stuck:
            where = ", ".join(
                f"replica {r.index}: {len(r.step.scheduler.requests)} requests" for r in stuck
            )
            raise EngineStalled(
                f"fleet stalled: {self.arrivals.num_held} agentic turns held, "
                f"requests that can never be scheduled ({where or 'none'})"
            )

    # -- publication after a replica's iteration --------------------------------

    def _publish(self, replica: Replica) -> None:
        tap = replica.tap
        board = self.board
        if tap.first_tokens:
            for request_id, first in tap.first_tokens:
                board.first_token(request_id, replica.index, first)
            tap.first_tokens.clear()
        if tap.finished:
            index = replica.index
            for request_id, finish in tap.finished:
                board.finished(request_id, index, finish)
            tap.finished.clear()
        at = replica.published_at()
        if at == math.inf:
            return
        if self.uses_kv_events:
            events = replica.step.scheduler.kv_cache_manager.take_events()
            if self.marks_kv_events[replica.index]:
                self._publish_marked(replica, events, at)
            elif events:
                board.kv_events(replica.index, at, events)
        if self.uses_loads and at >= replica.next_report:
            board.load(replica.load(at))
            replica.next_report = at + self.interval

    def _publish_marked(self, replica: Replica, events: list[Any], at: float) -> None:
        """``events`` of one iteration (a decode run's many steps), each step's stamped
        with that step's end; any after the last mark with ``at``."""
        start = 0
        for end, count in replica.tap.take_kv_marks():
            if count > start:
                self.board.kv_events(replica.index, end, events[start:count])
                start = count
        if start < len(events):
            self.board.kv_events(replica.index, at, events[start:])

    # -- routing -------------------------------------------------------------------

    def _route_due(self, due: float) -> None:
        """Route every arrival at ``due`` (the earliest), with the signals due by then."""
        self.board.deliver(due)
        view = self.view
        route = self.router.route
        n = len(self.replicas)
        for arrival, spec in self.arrivals.pop_due(due):
            request = self._routing_request(spec, arrival)
            choice = route(request, view)
            if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < n:
                raise RoutingError(
                    f"router {self.label!r} returned {choice!r} for request "
                    f"{spec.request_id!r} (arrival {arrival:.6f} s); a replica must be an int "
                    f"in range({n})"
                )
            self.assigned[spec.request_id] = choice
            self.board.sent(choice)
            replica = self.replicas[choice]
            replica.inbox.push(arrival, spec)
            replica.routed(arrival)
            if replica.update_next_time() != math.inf:
                heapq.heappush(self.heap, (replica.next_time, choice))

    def _routing_request(self, spec: RequestSpec, arrival: float) -> RoutingRequest:
        return routing_request(spec, arrival, self.hasher, self.stop_token_ids)


def routing_request(
    spec: RequestSpec, arrival: float, hasher: Any, stop: tuple[int, ...]
) -> RoutingRequest:
    """The request as a fleet hands it to its router: block hashes computed only if the
    router asks for them (``hash_prompt``), with the replicas' own hasher."""

    def hash_prompt() -> list[Any]:
        if hasher is None:
            return []
        request = Request(
            spec.request_id,
            PromptTokens(spec.prompt),
            spec.max_tokens,
            arrival_time=arrival,
            cache_salt=spec.cache_salt,
            stop_token_ids=stop,
            block_hasher=hasher,
        )
        return list(request.block_hashes)

    return RoutingRequest(
        spec.request_id,
        arrival_time=arrival,
        num_prompt_tokens=spec.num_prompt_tokens,
        max_tokens=spec.max_tokens,
        priority=spec.priority,
        job_id=spec.job_id,
        turn=spec.turn or 0,
        hash_prompt=hash_prompt,
    )
