"""One replica of a fleet: an :class:`~kvframe.engine.Engine` driven one loop iteration at a time.

A replica is exactly the single engine -- its own scheduler, KV cache, tier and
policies -- with two things swapped in:

* its arrivals come from an :class:`Inbox` (the requests the router sent it, in
  routing order, which is arrival order) instead of the workload's
  :class:`~kvframe.engine.arrivals.ArrivalQueue`; a finished agentic turn is
  reported to the fleet's one global queue, which releases the job's next turn
  for routing;
* its metrics collector (:class:`FinishTap`) also notes which requests finished
  and when, so the fleet can tell the router.

:attr:`Replica.next_time` is when the replica's next loop iteration starts:
its clock while it has work, else its next routed arrival (``inf``: idle).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from kvframe.contract.routing import ReplicaLoad
from kvframe.engine.metrics import MetricsCollector

if TYPE_CHECKING:
    from kvframe.engine import Engine
    from kvframe.engine.arrivals import ArrivalQueue
    from kvframe.engine.batch_queue import BatchQueueDriver
    from kvframe.engine.driver import SyncDriver
    from kvframe.engine.step import EngineStep
    from kvframe.workloads.spec import RequestSpec

__all__ = ["FinishTap", "Inbox", "Replica"]

_NEVER = math.inf


class FinishTap(MetricsCollector):
    """A replica's metrics collector that also keeps ``(request id, time)`` of every request
    that produced its first token, and of every request finished (or ignored), since the
    fleet last took them."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[tuple[str, float]] = []
        self.first_tokens: list[tuple[str, float]] = []
        self._prefilling: set[str] = set()
        """Requests seen arriving that have no first token yet (a preempted request's
        later first tokens are not news to the router)."""

    def mark_kv_events(self, block_pool: Any) -> None:
        """Note, at every step's end, how many KV events ``block_pool`` has queued since
        the fleet last took them (:attr:`kv_marks`), so the events of a run of plain
        decode steps are stamped with their own step's end, as step by step.

        Why: a router reading KV events used to turn decode runs off (every event had
        to carry its step's end), and the replicas then took every step the long way:
        most of a ``dynamo-kv`` fleet's CPU time (``benchmarks/fleet_scale.py``).
        Only for the synchronous loop, whose ``on_step`` comes after the step's
        scheduling and before the next step's.
        """
        self.kv_marks: list[tuple[float, int]] = []
        """``(step end, events queued by then)``, one entry per step that queued some."""
        self._pool = block_pool
        self._queued = 0
        self.on_step = self._on_step_marking  # type: ignore[method-assign]

    def _on_step_marking(self, now: float, duration: float, **kwargs: int) -> None:
        queued = len(self._pool.kv_event_queue)
        if queued != self._queued:
            self._queued = queued
            self.kv_marks.append((now + duration, queued))
        MetricsCollector.on_step(self, now, duration, **kwargs)

    def take_kv_marks(self) -> list[tuple[float, int]]:
        """The marks since the last call (the fleet took the pool's events with them)."""
        marks, self.kv_marks = self.kv_marks, []
        self._queued = 0
        return marks

    def on_arrival(self, request_id: str, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        self._prefilling.add(request_id)
        super().on_arrival(request_id, *args, **kwargs)  # type: ignore[arg-type]

    def on_first_token(self, request_id: str, now: float) -> None:
        if request_id in self._prefilling:
            self._prefilling.discard(request_id)
            self.first_tokens.append((request_id, now))
        super().on_first_token(request_id, now)

    def on_finished(self, request_id: str, now: float, **kwargs: object) -> None:  # type: ignore[override]
        self._prefilling.discard(request_id)
        self.finished.append((request_id, now))
        super().on_finished(request_id, now, **kwargs)  # type: ignore[arg-type]


class Inbox:
    """The arrivals of one replica: what the router sent it, not yet arrived.

    It stands where the single engine's :class:`ArrivalQueue` stands and has its
    interface (``next_time``, ``pop_due``, ``turn_finished``, ``exhausted``,
    ``num_pending``, ``num_held``). Routing happens in arrival order, so a deque
    keeps the routed requests in order.
    """

    __slots__ = ("_global", "_routed", "next_time")

    def __init__(self, global_queue: ArrivalQueue) -> None:
        self._global = global_queue
        self._routed: deque[tuple[float, RequestSpec]] = deque()
        self.next_time = _NEVER
        """Arrival time of the next routed request (``inf`` when none)."""

    def push(self, arrival: float, spec: RequestSpec) -> None:
        self._routed.append((arrival, spec))
        if arrival < self.next_time:
            self.next_time = arrival

    def pop_due(self, now: float) -> list[tuple[float, RequestSpec]]:
        routed = self._routed
        due = []
        while routed and routed[0][0] <= now:
            due.append(routed.popleft())
        self.next_time = routed[0][0] if routed else _NEVER
        return due

    def turn_finished(self, job_id: str, now: float) -> float | None:
        """A turn of ``job_id`` finished here: the global queue releases the job's next turn."""
        return self._global.turn_finished(job_id, now)

    @property
    def exhausted(self) -> bool:
        """Nothing routed here is pending and the whole fleet has no arrival left."""
        return self.next_time == _NEVER and self._global.exhausted

    @property
    def num_pending(self) -> int:
        return len(self._routed)

    @property
    def num_held(self) -> int:
        """Held agentic turns are the fleet's (its global queue), never a replica's."""
        return 0


class Replica:
    """An engine, its step pipeline and its loop driver, as the fleet sees them."""

    __slots__ = (
        "advance",
        "driver",
        "engine",
        "inbox",
        "index",
        "next_report",
        "next_time",
        "step",
        "tap",
    )

    def __init__(self, index: int, engine: Engine, inbox: Inbox, num_total: int) -> None:
        self.index = index
        self.engine = engine
        self.inbox = inbox
        tap = engine.collector
        assert isinstance(tap, FinishTap)
        self.tap = tap
        self.step: EngineStep = engine.prepare(inbox, num_total)  # type: ignore[arg-type]
        self.step.in_fleet = True
        self.driver: SyncDriver | BatchQueueDriver = engine.driver(self.step)
        self.advance = self.driver.advance
        self.next_time = _NEVER
        """When the replica's next loop iteration starts (``inf``: idle, nothing routed)."""
        self.next_report = 0.0
        """The time of the replica's next load report."""

    def update_next_time(self) -> float:
        """Recompute :attr:`next_time` after an iteration or a routed arrival."""
        if self.driver.has_work():
            self.next_time = self.step.now
        else:
            self.next_time = max(self.step.now, self.inbox.next_time)
        return self.next_time

    def routed(self, arrival: float) -> None:
        """A request arriving at ``arrival`` was routed here: if the last iteration moved
        the clock over an idle gap that holds the arrival, the clock goes back to it (the
        single engine would have woken at the arrival instead)."""
        slept_from = self.driver.slept_from
        step = self.step
        if slept_from is not None and step.now > arrival:
            step.now = max(slept_from, arrival)

    def published_at(self) -> float:
        """When the last iteration's effects were published: the end of its last step."""
        slept_from = self.driver.slept_from
        return self.step.now if slept_from is None else slept_from

    def load(self, time: float) -> ReplicaLoad:
        """The replica's load report at ``time`` (after the step that ended then)."""
        scheduler = self.step.scheduler
        kv = scheduler.kv_cache_manager
        usable = scheduler.config.num_gpu_blocks - 1
        used = usable - kv.num_free_blocks
        return ReplicaLoad(
            replica=self.index,
            time=time,
            num_running=len(scheduler.running),
            num_waiting=len(scheduler.waiting) + len(scheduler.skipped_waiting),
            kv_usage=kv.usage,
            num_active_blocks=used,
        )
