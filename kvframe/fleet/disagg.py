"""A disaggregated fleet: prefill replicas hand each request's KV to decode replicas (issue 48).

``kvframe run TRACE --replicas 8 --disagg 2:6 --router NAME`` runs replicas
``0..P-1`` as *prefill* replicas, ``P..P+D-1`` as *decode* replicas and the
rest (``P + D < replicas``) as ordinary *aggregated* replicas. A request's life:

1. it arrives; the **prefill pool's router** (the prefill and the aggregated
   replicas) picks a replica. On an aggregated replica it runs as in any fleet;
   on a prefill replica it runs with ``do_remote_decode`` and ``max_tokens=1``:
   it finishes by length after its first token and -- the connector's
   ``request_finished`` -- keeps its blocks until the send is done;
2. at that finish the **decode pool's router** picks a decode replica, and the
   request arrives there with ``do_remote_prefill``: the scheduler matches the
   prompt past its own prefix hit, allocates, and the request waits in
   ``WAITING_FOR_REMOTE_KVS`` while the blocks its prefix cache missed move
   over the prefill replica's link (:mod:`kvframe.fleet.transfer`);
3. when the load lands (reported at the end of the decode replica's step) the
   request is admitted, recomputes its last prompt token and decodes; the
   prefill replica frees its blocks at the end of its first step at or after
   the transfer is done.

Each pool has its own router instance, attached with the pool's size and
``FleetInfo.role``, and its own view and signals (replica numbers in a view are
the pool's, ``0..len(pool)-1``): an existing router serves either role
unchanged. Failed loads recompute or fail by ``kv_load_failure_policy``; a
decode leg that goes away before its load starts releases the prefill side.
Nothing here forks the scheduler: the replicas run the connector seam
(:mod:`kvframe.fleet.pd_connector`).
"""

from __future__ import annotations

import copy
import heapq
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.contract.routing import FleetInfo, Router
from kvframe.domain.disagg import AGGREGATED, DECODE, LINKS, PREFILL, DisaggLayout, LinkSpec
from kvframe.domain.request import RequestStatus
from kvframe.engine import Engine, EngineConfig
from kvframe.fleet.metrics import fleet_summary
from kvframe.fleet.pd_connector import Coordinator, PDTier
from kvframe.fleet.replica import FinishTap, Inbox, Replica
from kvframe.fleet.runner import (
    ROLE_FLEETS,
    Fleet,
    FleetResult,
    FleetSettings,
    RoutingError,
    _FleetRun,
)
from kvframe.fleet.signals import SignalBoard, View
from kvframe.fleet.transfer import TransferModel

if TYPE_CHECKING:
    from kvframe.engine.arrivals import ArrivalQueue
    from kvframe.engine.metrics import MetricsSummary
    from kvframe.host.registry import PluginRegistry
    from kvframe.workloads.spec import RequestSpec, Workload

__all__ = ["DisaggFleet", "DisaggLayout", "disagg_table"]


SPLIT_METRICS = (
    "disagg_ttft_queue_seconds",
    "disagg_ttft_prefill_seconds",
    "disagg_ttft_decode_wait_seconds",
    "disagg_ttft_transfer_seconds",
    "disagg_ttft_first_decode_seconds",
)
"""A disaggregated request's TTFT in parts (they add up to it): queueing for its prefill,
the prefill, waiting on the decode replica for its load to start, the transfer, and the
decode replica's step that samples the first token (from the load landing)."""


def transfer_model(config: EngineConfig, block_size: int) -> TransferModel:
    """The transfer model a config's ``disagg_*`` keys describe (bytes from the preset's
    model shape)."""
    link = LINKS[config.disagg_link]
    link = LinkSpec(
        link.name,
        link.bandwidth if config.disagg_bandwidth is None else config.disagg_bandwidth,
        link.latency if config.disagg_latency is None else config.disagg_latency,
    )
    shape = config.preset_object.shape
    layers = shape.num_layers if config.disagg_pipeline else None
    return TransferModel(link, shape.kv_bytes_per_block(block_size), pipeline_layers=layers)


class LegTap(FinishTap):
    """A disaggregated replica's collector: a :class:`FinishTap` that also lets the fleet
    turn a decode leg's record into the client's view of the request, and drop a prefill
    leg's record from the fleet's summary (the replica's own summary keeps both)."""

    def leg(self, request_id: str) -> tuple[Any, ...] | None:
        """``(arrival, first scheduled, first token, finish, status)`` of a leg here."""
        record = self._records.get(request_id)
        if record is None:
            return None
        return (
            record.arrival_time,
            record.first_scheduled_time,
            record.first_token_time,
            record.finish_time,
            record.finish_status,
        )

    def as_client_sees(
        self, request_id: str, arrival: float, first_scheduled: float | None
    ) -> None:
        """The decode leg's record, timed from the request's arrival at the fleet."""
        record = self._records[request_id]
        record.arrival_time = arrival
        record.first_scheduled_time = first_scheduled

    def retire(self, request_id: str) -> None:
        """Drop a handed-off prefill leg (its token is not the client's)."""
        record = self._records.pop(request_id)
        if record.finish_time is not None:
            self.num_finished -= 1
        self.generation_tokens -= record.num_output_tokens


class _Arrivals:
    """The fleet's arrivals (the workload's queue) merged with the handoffs to decode."""

    __slots__ = ("_handoffs", "_queue", "_seq")

    def __init__(self, queue: ArrivalQueue) -> None:
        self._queue = queue
        self._handoffs: list[tuple[float, int, RequestSpec, int]] = []
        self._seq = itertools.count()

    @property
    def next_time(self) -> float:
        handoff = self._handoffs[0][0] if self._handoffs else math.inf
        return min(self._queue.next_time, handoff)

    def hand_off(self, at: float, spec: RequestSpec, source: int) -> None:
        heapq.heappush(self._handoffs, (at, next(self._seq), spec, source))

    def pop_due(self, now: float) -> list[tuple[float, RequestSpec, int | None]]:
        """``(time, spec, source)`` due by ``now``: new requests (``source`` ``None``)
        first, then handoffs from prefill replica ``source``."""
        due: list[tuple[float, RequestSpec, int | None]] = [
            (at, spec, None) for at, spec in self._queue.pop_due(now)
        ]
        handoffs = self._handoffs
        while handoffs and handoffs[0][0] <= now:
            at, _, spec, source = heapq.heappop(handoffs)
            due.append((at, spec, source))
        return due

    def turn_finished(self, job_id: str, now: float) -> float | None:
        return self._queue.turn_finished(job_id, now)

    @property
    def exhausted(self) -> bool:
        return self.next_time == math.inf

    @property
    def has_held(self) -> bool:
        return self._queue.has_held

    @property
    def num_held(self) -> int:
        return self._queue.num_held

    @property
    def num_pending(self) -> int:
        return self._queue.num_pending + len(self._handoffs)


class _PrefillInbox(Inbox):
    """A prefill replica's inbox: a prefill leg's finish releases no agentic turn (the
    decode leg's finish does)."""

    __slots__ = ()

    def turn_finished(self, job_id: str, now: float) -> float | None:
        return None


class _Pool:
    """The replicas one router serves, its view and its signals (pool numbering)."""

    __slots__ = ("board", "local", "members", "role", "router", "view")

    def __init__(
        self,
        role: str,
        members: list[int],
        router: Router,
        label: str,
        info: FleetInfo,
        delay: float,
    ) -> None:
        self.role = role
        self.members = members
        self.local = {index: i for i, index in enumerate(members)}
        self.router = router
        self.view = View(len(members), router_name=label, uses_loads=bool(router.uses_loads))
        self.board = SignalBoard(self.view, router, kv_event_delay=delay)
        router.attach(attrs.evolve(info, num_replicas=len(members), role=role))

    def pick(self, request: Any, label: str) -> int:
        """The fleet index of the replica the pool's router picks for ``request``."""
        choice = self.router.route(request, self.view)
        n = len(self.members)
        if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < n:
            raise RoutingError(
                f"router {label!r} ({self.role} pool) returned {choice!r} for request "
                f"{request.request_id!r}; a replica must be an int in range({n})"
            )
        self.board.sent(choice)
        return self.members[choice]


class DisaggFleet(Fleet):
    """A :class:`~kvframe.fleet.Fleet` whose replicas play prefill, decode or aggregated
    roles (module docstring). Build it with :meth:`Fleet.from_config` and ``disagg``."""

    def __init__(
        self,
        engines: Sequence[Engine],
        router: Router,
        decode_router: Router,
        layout: DisaggLayout,
        coordinator: Coordinator,
        *,
        settings: FleetSettings | None = None,
        router_label: str | None = None,
    ) -> None:
        super().__init__(engines, router, settings=settings, router_label=router_label)
        self.decode_router = decode_router
        self.layout = layout
        self.coordinator = coordinator

    @classmethod
    def build(
        cls,
        configs: Sequence[EngineConfig],
        router: Router,
        label: str | None,
        settings: FleetSettings,
        registry: PluginRegistry,
        **hooks: Any,
    ) -> DisaggFleet:
        """The fleet of ``configs`` with the first config's ``disagg`` layout; ``hooks``:
        the coordinator's test hooks (``fail_load``, ``abort_in_flight``)."""
        first = configs[0]
        layout = DisaggLayout.parse(first.disagg, len(configs))  # type: ignore[arg-type]
        if any(c.offload is not None for c in configs):
            raise ValueError("--disagg with --offload is not modelled yet (one connector each)")
        if any(c.async_scheduling and c.fidelity.held_requests_keep_engine for c in configs):
            # 0.33.0's has_requests counts a held send, so the batch-queue loop steps on at
            # one instant instead of waiting for another replica's transfer.
            raise ValueError(
                "--disagg with --async-scheduling under vLLM 0.33.0 is not modelled yet "
                "(its engine keeps stepping while a send holds blocks: switch "
                "held_requests_keep_engine); use synchronous scheduling or --vllm 0.19.1"
            )
        coordinator = Coordinator(transfer_model(first, first.block_size), **hooks)
        kv_events = bool(router.uses_kv_events)
        engines = []
        for index, (config, role) in enumerate(zip(configs, layout.roles, strict=True)):
            if role == AGGREGATED:
                engine = Engine.from_config(
                    config, registry, kv_events=kv_events, collector=FinishTap()
                )
            else:
                tier = PDTier.for_replica(index, coordinator)
                engine = Engine.from_config(
                    config, registry, kv_events=kv_events, collector=LegTap(), tier=tier
                )
            engines.append(engine)
        decode_router = copy.deepcopy(router)
        return cls(
            engines,
            router,
            decode_router,
            layout,
            coordinator,
            settings=settings,
            router_label=label,
        )

    def _new_run(self, arrivals: ArrivalQueue, num_total: int) -> _FleetRun:
        return _DisaggRun(self, arrivals, num_total)

    def _result(
        self,
        workload: Workload | Sequence[RequestSpec],
        run: _FleetRun,
        wall: float,
        partial: bool,
        error: str | None,
    ) -> FleetResult:
        from kvframe.workloads.spec import Workload

        assert isinstance(run, _DisaggRun)
        replicas = tuple(r.engine.summarize(workload, r.step, wall, partial) for r in run.replicas)
        skipped = workload.num_skipped_lines if isinstance(workload, Workload) else 0
        raw = [r.engine.run_counters(r.step, skipped if r.index == 0 else 0) for r in run.replicas]
        parts = run.client_view()  # after the replicas' own summaries
        summary = fleet_summary(
            [r.tap for r in run.replicas],
            replicas,
            raw,
            run.assigned,
            wall=wall,
            partial=partial,
            fleet={
                "replicas": len(run.replicas),
                "router": self.router_label,
                "kv_event_delay": self.settings.kv_event_delay,
                "load_report_interval": self.settings.load_report_interval,
                "num_requests_not_arrived": run.arrivals.num_pending,
                "disagg": run.describe(),
                **({"error": error} if error is not None else {}),
            },
        )
        summary = _with_split(summary, parts, run)
        return FleetResult(summary, replicas, partial, wall, run.num_total, error)


def _with_split(
    summary: MetricsSummary, parts: Mapping[str, list[float]], run: _DisaggRun
) -> MetricsSummary:
    """The summary with the TTFT parts' distributions and the transfer counters."""
    from kvframe.engine.metrics import Distribution

    distributions = dict(summary.distributions)
    for name in SPLIT_METRICS:
        distributions[name] = Distribution.of(parts.get(name, ()))
    counters = dict(summary.counters)
    counters.update(run.transfer_counters(summary.counters.get("simulated_duration_seconds")))
    return attrs.evolve(summary, counters=counters, distributions=distributions)


class _DisaggRun(_FleetRun):
    """One run of a :class:`DisaggFleet`: two routing pools, handoffs, transfers."""

    def __init__(self, fleet: DisaggFleet, arrivals: ArrivalQueue, num_total: int) -> None:
        self.coordinator = fleet.coordinator
        self.layout = fleet.layout
        self.roles = fleet.layout.roles
        self.label = fleet.router_label
        self.router = fleet.router
        self.arrivals = _Arrivals(arrivals)  # type: ignore[assignment]
        self.num_total = num_total
        self.replicas = [
            Replica(
                i,
                engine,
                (_PrefillInbox if role == PREFILL else Inbox)(self.arrivals),  # type: ignore[arg-type]
                num_total,
            )
            for i, (engine, role) in enumerate(zip(fleet.engines, self.roles, strict=True))
        ]
        routers = (fleet.router, fleet.decode_router)
        self.uses_loads = any(bool(r.uses_loads) for r in routers)
        self.uses_kv_events = any(bool(r.uses_kv_events) for r in routers)
        self.interval = fleet.settings.load_report_interval
        first = fleet.engines[0]
        self.hasher = first.scheduler.block_hasher
        self.stop_token_ids = tuple(first.executor.stop_token_ids)
        if self.uses_kv_events:
            for replica in self.replicas:
                # Each KV event at its own step's end: no runs of decode steps here.
                if replica.driver.takes_decode_runs:
                    replica.driver.decode_runs = False  # type: ignore[union-attr]
        info = FleetInfo(
            num_replicas=len(self.replicas),
            block_size=first.scheduler.block_size,
            seed=first.config.seed,
        )
        prefill_members = [i for i, role in enumerate(self.roles) if role != DECODE]
        decode_members = [i for i, role in enumerate(self.roles) if role == DECODE]
        delay = fleet.settings.kv_event_delay
        self.prefill_pool = _Pool(PREFILL, prefill_members, fleet.router, self.label, info, delay)
        self.decode_pool = _Pool(
            DECODE, decode_members, fleet.decode_router, self.label, info, delay
        )
        self.view = self.prefill_pool.view  # the clock the base loop's log lines read
        self.pool_of = {
            i: (self.decode_pool if role == DECODE else self.prefill_pool)
            for i, role in enumerate(self.roles)
        }
        self.board = _Boards(self.prefill_pool.board, self.decode_pool.board)  # type: ignore[assignment]
        self.assigned: dict[str, int] = {}
        self.prefill_of: dict[str, int] = {}
        self.specs: dict[str, RequestSpec] = {}
        self.heap: list[tuple[float, int]] = []

    # -- routing ---------------------------------------------------------------------

    def _route_due(self, due: float) -> None:
        self.board.deliver(due)
        for arrival, spec, source in self.arrivals.pop_due(due):  # type: ignore[attr-defined]
            request = self._routing_request(spec, arrival)
            if source is None:
                index = self.prefill_pool.pick(request, self.label)
                if self.roles[index] == PREFILL:
                    self.coordinator.params[spec.request_id] = {"do_remote_decode": True}
                    self.specs[spec.request_id] = spec
                    self.prefill_of[spec.request_id] = index
                    spec = attrs.evolve(spec, max_tokens=1)
            else:
                index = self.decode_pool.pick(request, self.label)
                self.coordinator.params[spec.request_id] = {
                    "do_remote_prefill": True,
                    "remote_block_ids": [1],  # NIXL names the producer's blocks; any will do
                    "remote_replica": source,
                }
            self.assigned[spec.request_id] = index
            self._send(index, arrival, spec)

    def _send(self, index: int, arrival: float, spec: RequestSpec) -> None:
        replica = self.replicas[index]
        replica.inbox.push(arrival, spec)
        replica.routed(arrival)
        if replica.update_next_time() != math.inf:
            heapq.heappush(self.heap, (replica.next_time, index))

    # -- after a replica's iteration ---------------------------------------------------

    def _publish(self, replica: Replica) -> None:
        index = replica.index
        pool = self.pool_of[index]
        local = pool.local[index]
        board = pool.board
        tap = replica.tap
        for request_id, first in tap.first_tokens:
            board.first_token(request_id, local, first)
        tap.first_tokens.clear()
        if tap.finished:
            role = self.roles[index]
            for request_id, finish in tap.finished:
                board.finished(request_id, local, finish)
                if role == PREFILL:
                    self._prefill_done(request_id, index, finish)
                elif role == DECODE:
                    self.coordinator.release(request_id, finish)
            tap.finished.clear()
        self._abort_requested()
        self._wake_sources()
        at = replica.published_at()
        if at == math.inf:
            return
        if self.uses_kv_events:
            events = replica.step.scheduler.kv_cache_manager.take_events()
            if events:
                board.kv_events(local, at, events)
        if self.uses_loads and at >= replica.next_report:
            board.load(attrs.evolve(replica.load(at), replica=local))
            replica.next_report = at + self.interval

    def _prefill_done(self, request_id: str, index: int, finish: float) -> None:
        """A prefill leg finished: hand it off if it holds blocks for a decode leg; else the
        request ended here (ignored, aborted), and its job's next turn is released."""
        spec = self.specs.pop(request_id)
        if request_id in self.coordinator.sends:
            handoff = attrs.evolve(spec, arrival_time=max(spec.arrival_time, finish))
            self.arrivals.hand_off(finish, handoff, index)  # type: ignore[attr-defined]
            return
        self.prefill_of.pop(request_id, None)
        if spec.job_id is not None:
            self.arrivals.turn_finished(spec.job_id, finish)

    def _wake_sources(self) -> None:
        """Prefill replicas whose held sends started or were released: step them again
        by the time the transfer may be done."""
        woken = self.coordinator.woken
        if not woken:
            return
        for index, at in woken:
            replica = self.replicas[index]
            if replica.next_time <= at:
                continue
            replica.routed(at)
            if replica.update_next_time() != math.inf:
                heapq.heappush(self.heap, (replica.next_time, index))
        woken.clear()

    def _abort_requested(self) -> None:
        """Aborts a test asked for as a load started (the client went away)."""
        pending = self.coordinator.to_abort
        while pending:
            index, request_id = pending.pop()
            replica = self.replicas[index]
            now = replica.step.now
            for request in replica.step.scheduler.finish_requests(
                request_id, RequestStatus.FINISHED_ABORTED
            ):
                replica.tap.on_finished(
                    request_id, now, num_output_tokens=request.num_output_tokens, status="abort"
                )
                if request.job_id is not None:
                    replica.inbox.turn_finished(request.job_id, now)

    # -- the results -----------------------------------------------------------------

    def client_view(self) -> dict[str, list[float]]:
        """Turn each handed-off request's two legs into one record as the client saw it
        (the decode leg, timed from the fleet arrival); returns the TTFT parts."""
        parts: dict[str, list[float]] = {name: [] for name in SPLIT_METRICS}
        load_times = self.coordinator.load_times
        for request_id, source in self.prefill_of.items():
            if self.assigned[request_id] == source:
                continue  # not handed off yet (a partial run): the prefill leg stands
            prefill_tap = self.replicas[source].tap
            decode_tap = self.replicas[self.assigned[request_id]].tap
            assert isinstance(prefill_tap, LegTap) and isinstance(decode_tap, LegTap)
            prefill = prefill_tap.leg(request_id)
            decode = decode_tap.leg(request_id)
            if prefill is None or decode is None:
                continue  # the decode leg never arrived (a partial run)
            arrival, scheduled, _, handed, _ = prefill
            prefill_tap.retire(request_id)
            decode_tap.as_client_sees(request_id, arrival, scheduled)
            first_token = decode[2]
            if first_token is None or scheduled is None:
                continue
            start, landed = load_times.get(request_id, (handed, handed))
            values = (
                scheduled - arrival,
                handed - scheduled,
                start - handed,
                landed - start,
                first_token - landed,
            )
            for name, value in zip(SPLIT_METRICS, values, strict=True):
                parts[name].append(value)
        return parts

    def describe(self) -> dict[str, Any]:
        """``metadata.fleet.disagg``: the layout and the link."""
        layout = self.layout
        model = self.coordinator.transfers
        return {
            "prefill": layout.num_prefill,
            "decode": layout.num_decode,
            "aggregated": layout.num_replicas - layout.num_prefill - layout.num_decode,
            "roles": list(self.roles),
            "link": model.link.name,
            "bandwidth_bytes_per_s": model.link.bandwidth,
            "latency_s": model.link.latency,
            "bytes_per_block": model.bytes_per_block,
            "pipeline_layers": model.pipeline_layers,
        }

    def transfer_counters(self, duration: float | None) -> dict[str, int | float]:
        """Handoffs, transfers, bytes and the prefill links' utilisation."""
        coordinator = self.coordinator
        model = coordinator.transfers
        stats = model.stats
        span = duration or 0.0
        busy = [stats.busy_seconds.get(i, 0.0) for i, r in enumerate(self.roles) if r == PREFILL]
        usage = [b / span if span > 0 else 0.0 for b in busy]
        return {
            "disagg_requests": len(self.prefill_of),
            "disagg_transfers": stats.num_transfers,
            "disagg_transfer_blocks": stats.num_blocks,
            "disagg_transfer_bytes": stats.bytes,
            "disagg_transfer_exposed_bytes": stats.exposed_bytes,
            "disagg_transfer_busy_seconds": sum(busy),
            "disagg_released_without_transfer": coordinator.num_released_without_transfer,
            "disagg_failed_loads": coordinator.num_failed_loads,
            "disagg_link_utilisation_mean": sum(usage) / len(usage) if usage else 0.0,
            "disagg_link_utilisation_max": max(usage, default=0.0),
        }


class _Boards:
    """Both pools' signal boards, delivered together."""

    __slots__ = ("_boards",)

    def __init__(self, *boards: SignalBoard) -> None:
        self._boards = boards

    def deliver(self, now: float) -> None:
        for board in self._boards:
            board.deliver(now)

    def drain(self) -> None:
        for board in self._boards:
            board.drain()


def disagg_table(summary: MetricsSummary) -> Any | None:
    """The TTFT split and the transfer counters ``kvframe run`` prints after a disaggregated
    fleet's summary (``None``: not one)."""
    fleet = summary.metadata.get("fleet") or {}
    layout = fleet.get("disagg")
    if not layout:
        return None
    from kvframe.console import new_table

    table = new_table(
        "TTFT part",
        "p50",
        "p90",
        "mean",
        title=(
            f"disaggregated: {layout['prefill']}P:{layout['decode']}D"
            f"{'+' + str(layout['aggregated']) + 'A' if layout['aggregated'] else ''}, "
            f"link {layout['link']}"
        ),
        numeric_from=1,
    )
    for name in SPLIT_METRICS:
        dist = summary.distributions.get(name)
        label = name.removeprefix("disagg_ttft_").removesuffix("_seconds").replace("_", " ")
        if dist is None:
            table.add_row(label, "-", "-", "-")
        else:
            table.add_row(label, f"{dist.p50:.4f}", f"{dist.p90:.4f}", f"{dist.mean:.4f}")
    return table


ROLE_FLEETS["disagg"] = DisaggFleet.build
