"""The Continuum scheduling policy (arXiv 2511.02230) on kvframe's retention seam.

What it decides, and where:

* **Pin on finish** (:meth:`ContinuumPolicy.on_finish`). A non-final turn of a
  job asks the core to retain its KV blocks; the TTL comes from the rule in
  :mod:`kvframe_continuum.ttl`. One pin per job: a new pin (or a final turn, or
  a decision not to pin) releases the job's previous one. The next turn shares
  the previous turns' full blocks, which are ref-counted, so releasing an old
  pin frees only what nobody else holds.
* **Expiry** (:meth:`ContinuumPolicy.on_step_start`). The paper releases pins
  "whose TTL passed and whose job has nothing queued". The core's retention
  expires unconditionally at its deadline, before the policy runs, so the
  policy gives the core a *hard* deadline ``finish + tau + queued_grace`` and
  keeps the *soft* one, ``finish + tau``, itself: at every step start it
  releases pins whose soft deadline passed unless the job has a turn queued.
  Such a pin stays until that turn is admitted, until memory pressure reclaims
  it, or until the hard deadline.
* **Release on admission** (:meth:`ContinuumPolicy._release_admitted`). Once
  the job's next turn is admitted it holds the blocks it shares with the pin;
  the pin would keep only dead tail blocks, so it goes at the next step start
  (or at the next failed allocation, whichever comes first).
* **Queue** (:class:`kvframe_continuum.queue.ContinuumQueue`): preempted, then
  turns of pinned jobs, then the rest, each by the job's first arrival.
* **Preemption** (:meth:`ContinuumPolicy.choose_victim`,
  :meth:`ContinuumPolicy.reclaim_retained`): before a running request is
  preempted, pins that are only a bet (TTL passed, or nothing of the job
  queued) are released, lowest expected saving first; then the last running
  request of a job without a pin is the victim (FCFS's tail among unpinned
  jobs); only when there is none are the remaining pins released (latest job
  first), and only when no pin is left are pinned jobs' turns preempted.
* **Reload cost** (:meth:`ContinuumPolicy.reload_time`): what a hit saves is
  priced from where the blocks would come back from -- the offload tier's load
  time for the part it holds (the scheduler context's read-only tier view),
  a prefill for the rest.

What it learns, and from what:

* tool durations -- from the gap between a turn's finish (the step at which
  the core reported it) and the arrival of the job's next turn
  (:meth:`on_arrival`);
* the queueing delay ``T`` -- from turns that arrive while their job holds no
  pin: the time from their arrival to the step that admits them (the queue
  reports the pop; the next step start confirms the admission);
* ``eta`` -- from the number of turns of each finished job.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import attrs

import kvframe
from kvframe import RequestStatus, get_preset, prefill_pairs
from kvframe_continuum.queue import PINNED, PREEMPTED, UNPINNED, ContinuumQueue, Rank
from kvframe_continuum.ttl import (
    DurationHistory,
    SlidingMean,
    TurnCorrelation,
    choose_ttl,
    choose_ttl_exponential,
    exponential_cdf,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kvframe import CostModel, Request, RequestQueue, Retention, SchedulerContext, TierView

DEFAULT_PRESET = "llama3.1-8b-h100"
"""Cost model for ``reload`` when neither the ``preset`` option nor the engine gives one."""

__all__ = ["ContinuumPolicy", "ContinuumStats", "TTLDecision"]

_RUNNING = RequestStatus.RUNNING
_LOADING = RequestStatus.WAITING_FOR_REMOTE_KVS
_ABORTED = RequestStatus.FINISHED_ABORTED


@attrs.define(slots=True)
class ContinuumStats:
    """What the policy did, for reports and tests."""

    num_pinned: int = 0
    """Non-final turns whose KV was pinned."""
    num_not_pinned: int = 0
    """Non-final turns for which the rule chose ``tau = 0``."""
    released_replaced: int = 0
    """Pins released because the job pinned its next turn."""
    released_admitted: int = 0
    """Pins released because the job's next turn was admitted (it holds the shared blocks)."""
    released_final: int = 0
    """Pins released because the job's final turn finished."""
    released_not_repinned: int = 0
    """Pins released because the job's next turn finished with ``tau = 0``."""
    released_expired: int = 0
    """Pins released at their soft deadline with nothing of the job in flight."""
    released_reclaimed: int = 0
    """Pins released under memory pressure, rather than preempting or delaying a turn."""
    released_for_running: int = 0
    """Of those, pins released so that a running request need not be preempted."""
    released_aborted: int = 0
    """Pins released because the job's waiting turn was aborted."""
    lost_to_core: int = 0
    """Pins the core released by itself (hard deadline, abort of the pinned request)."""
    num_duration_samples: int = 0
    num_delay_samples: int = 0


@attrs.frozen(slots=True)
class TTLDecision:
    """One TTL decision with its inputs (the policy keeps the last one)."""

    request_id: str
    tool: str | None
    ttl: float
    source: str
    """``"tool"``, ``"global"``, ``"exponential"``, ``"cold-start"``, ``"fixed"`` or ``"none"``."""
    queue_delay: float
    eta: float
    reload: float
    hit_probability: float = 1.0
    """``F(ttl)``: the chance, under the model used, that the next turn arrives in time."""

    @property
    def benefit(self) -> float:
        return self.queue_delay * self.eta + self.reload

    @property
    def expected_saving(self) -> float:
        """``F(ttl) * benefit``: what keeping the pin is expected to save, in seconds."""
        return self.hit_probability * self.benefit


@attrs.define(slots=True, eq=False)
class _Pin:
    request_id: str
    job_id: str
    ttl: float
    soft_deadline: float
    hard_deadline: float
    seq: int
    value: float
    """The decision's expected saving (``F(tau) * benefit``): the reclaim order."""


@attrs.define(slots=True, eq=False)
class _Job:
    first_arrival: float
    order: int
    in_flight: Request | None = None
    last_finish: float | None = None
    last_tool: str | None = None
    pin: _Pin | None = None
    num_finished: int = 0


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _check_options(
    *,
    ttl: str,
    fixed_ttl: float,
    min_samples: int,
    duration_window: int,
    delay_window: int,
    job_window: int,
    cold_start: str,
    cold_start_ttl: float,
    cold_eta: float,
    eta: float | None,
    max_ttl: float | None,
    queued_grace: float,
) -> None:
    """:class:`ContinuumPolicy`'s options, checked in the order they are declared.

    :raises ValueError: naming the first bad option and its value.
    """
    _check(
        ttl in ("dynamic", "fixed", "none"),
        f"ttl must be 'dynamic', 'fixed' or 'none', got {ttl!r}",
    )
    _check(fixed_ttl >= 0, f"fixed_ttl must be >= 0, got {fixed_ttl}")
    _check(min_samples >= 1, f"min_samples must be >= 1, got {min_samples}")
    _check(duration_window >= 1, f"duration_window must be >= 1, got {duration_window}")
    _check(delay_window >= 1, f"delay_window must be >= 1, got {delay_window}")
    _check(job_window >= 1, f"job_window must be >= 1, got {job_window}")
    _check(
        cold_start in ("exponential", "empirical"),
        f"cold_start must be 'exponential' or 'empirical', got {cold_start!r}",
    )
    _check(cold_start_ttl >= 0, f"cold_start_ttl must be >= 0, got {cold_start_ttl}")
    _check(0 <= cold_eta <= 1, f"cold_eta must be in [0, 1], got {cold_eta}")
    _check(eta is None or 0 <= eta <= 1, f"eta must be in [0, 1], got {eta}")
    _check(max_ttl is None or max_ttl >= 0, f"max_ttl must be >= 0, got {max_ttl}")
    _check(queued_grace >= 0, f"queued_grace must be >= 0, got {queued_grace}")


class ContinuumPolicy(kvframe.SchedulingPolicy):
    """Pin each agent turn's KV for a tool-aware TTL; serve jobs first-come-first-served.

    Options (``--scheduler continuum:key=value,...``):

    :param ttl: ``"dynamic"`` (the paper's rule), ``"fixed"`` (the preview
        implementation: pin for ``fixed_ttl`` unless the tool's running mean
        duration exceeds it) or ``"none"`` (never pin: program-level FCFS
        alone, the paper's Fig. 16 ablation).
    :param fixed_ttl: seconds, for ``ttl=fixed``.
    :param min_samples: ``K``: a tool's own durations are used once it has this
        many in its window, the global distribution before.
    :param duration_window: observations kept per tool (and globally).
    :param delay_window: queueing-delay samples averaged into ``T``.
    :param job_window: finished jobs ``eta`` is computed over.
    :param cold_start: before ``K`` (``min_samples``) durations were observed
        overall, ``"exponential"`` (the paper's reproductions: durations are
        modelled as exponential with the observed mean) or ``"empirical"`` (the
        empirical CDF of the few observations, as after ``K``).
    :param cold_start_ttl: seconds to pin before any duration was observed.
    :param cold_eta: ``eta`` while it is undefined (too few or too uniform jobs).
    :param eta: a fixed ``eta`` instead of the learned one (``none``: learn it).
    :param max_ttl: no TTL above this many seconds (``none``: no cap).
    :param queued_grace: seconds a pin may outlive its TTL while its job has a
        turn queued (the core releases it then, whatever happens).
    :param preset: the cost-model preset ``reload`` is computed with; by default
        the engine's cost model (from the scheduler context), or the 8B preset
        when the scheduler has none.
    """

    name = "continuum"
    description = "Continuum: pin agent turns' KV for a tool-aware TTL, program-level FCFS."

    def __init__(
        self,
        *,
        ttl: Literal["dynamic", "fixed", "none"] = "dynamic",
        fixed_ttl: float = 2.0,
        min_samples: int = 100,
        duration_window: int = 1000,
        delay_window: int = 100,
        job_window: int = 1000,
        cold_start: Literal["exponential", "empirical"] = "exponential",
        cold_start_ttl: float = 2.0,
        cold_eta: float = 1.0,
        eta: float | None = None,
        max_ttl: float | None = None,
        queued_grace: float = 30.0,
        preset: str | None = None,
    ) -> None:
        _check_options(
            ttl=ttl,
            fixed_ttl=fixed_ttl,
            min_samples=min_samples,
            duration_window=duration_window,
            delay_window=delay_window,
            job_window=job_window,
            cold_start=cold_start,
            cold_start_ttl=cold_start_ttl,
            cold_eta=cold_eta,
            eta=eta,
            max_ttl=max_ttl,
            queued_grace=queued_grace,
        )
        self.ttl_mode = ttl
        self.fixed_ttl = fixed_ttl
        self.cold_start = cold_start
        self.cold_start_ttl = cold_start_ttl
        self.cold_eta = cold_eta
        self.fixed_eta = eta
        self.max_ttl = math.inf if max_ttl is None else max_ttl
        self.queued_grace = queued_grace
        # An explicit preset wins; otherwise the engine's cost model (seen in
        # attach) replaces this default.
        self._preset_given = preset is not None
        self.cost_model: CostModel = get_preset(preset or DEFAULT_PRESET).cost_model

        self.durations = DurationHistory(window=duration_window, min_samples=min_samples)
        self.queue_delay = SlidingMean(delay_window)
        self.turns = TurnCorrelation(job_window)
        self.stats = ContinuumStats()
        self.last_decision: TTLDecision | None = None

        self._init_bookkeeping()

    def _init_bookkeeping(self) -> None:
        """The state the policy keeps between calls: jobs, pins, queues, watched turns."""
        self._context: SchedulerContext | None = None
        self._tier: TierView | None = None
        self._retained: Mapping[str, Retention] = {}
        self._jobs: dict[str, _Job] = {}
        self._job_order = itertools.count()
        self._pin_seq = itertools.count()
        self._queue_seq = itertools.count()
        self._queues: weakref.WeakSet[ContinuumQueue] = weakref.WeakSet()
        # (deadline to look at the pin again, pin seq, job id); see on_step_start.
        self._deadlines: list[tuple[float, int, str]] = []
        # (-job first arrival, -job order, pin seq, job id): latest job on top.
        self._latest_pins: list[tuple[float, int, int, str]] = []
        self._num_pins = 0
        self._rerank_pending: set[str] = set()
        # Queueing-delay measurement: watched turns, and those popped this step.
        self._delay_watch: dict[str, Request] = {}
        self._popped: dict[str, tuple[Request, float]] = {}
        self._removed_jobs: set[str] = set()
        # Turns of pinned jobs popped from a queue: once admitted they hold the
        # pinned blocks they share, and the pin is released (_release_admitted).
        self._admitted: list[Request] = []
        # True from the first select_queue of a step (the admission phase) to
        # the next step start: reclaim_retained then serves an admission, not
        # a running request about to be preempted.
        self._admitting = False

    # ------------------------------------------------------------------ set-up

    def attach(self, context: SchedulerContext) -> None:
        self._context = context
        self._retained = context.retained
        # Read-only view of the offload tier (None without one): reload() prices
        # the blocks the tier holds as a load, not a prefill.
        self._tier = getattr(context, "offload", None)
        if not self._preset_given and context.cost_model is not None:
            self.cost_model = context.cost_model

    def on_abort(self, request: Request) -> None:
        """An aborted turn releases its job's pin: the job will not come back."""
        job_id = request.job_id
        job = self._jobs.get(job_id) if job_id is not None else None
        if job is None:
            return
        if job.in_flight is request:
            job.in_flight = None
        if self._release_pin(job_id, job):
            self.stats.released_aborted += 1

    def set_cost_model(self, cost_model: CostModel) -> None:
        """Use the engine's cost model for ``reload`` (instead of the ``preset`` option)."""
        self.cost_model = cost_model

    @property
    def _now(self) -> float:
        return self._context.now if self._context is not None else 0.0

    # ------------------------------------------------------------------ state

    def job_pin(self, job_id: str) -> str | None:
        """The request id pinned for ``job_id`` (if the core still retains it), else ``None``."""
        job = self._jobs.get(job_id)
        if job is None or job.pin is None:
            return None
        return job.pin.request_id if job.pin.request_id in self._retained else None

    def _is_pinned(self, job_id: str | None) -> bool:
        if job_id is None:
            return False
        job = self._jobs.get(job_id)
        return job is not None and job.pin is not None and job.pin.request_id in self._retained

    def _rank(self, request: Request) -> Rank:
        job_id = request.job_id
        job = self._jobs.get(job_id) if job_id is not None else None
        first = job.first_arrival if job is not None else request.arrival_time
        if request.num_preemptions:
            return (PREEMPTED, first, request.arrival_time)
        if job is not None and job.pin is not None and job.pin.request_id in self._retained:
            return (PINNED, first, request.arrival_time)
        return (UNPINNED, first, request.arrival_time)

    def _rerank(self, job_id: str) -> None:
        for queue in self._queues:
            queue.rerank_job(job_id)

    def _release_pin(self, job_id: str, job: _Job) -> bool:
        """Release the job's pin now; ``True`` if the core still held it."""
        pin = job.pin
        if pin is None:
            return False
        job.pin = None
        self._num_pins -= 1
        held = pin.request_id in self._retained
        if held and self._context is not None:
            self._context.release(pin.request_id)
        elif not held:
            self.stats.lost_to_core += 1
        self._rerank(job_id)
        return held

    def _push_latest(self, job_id: str, job: _Job, seq: int) -> None:
        heap = self._latest_pins
        if len(heap) > 2 * self._num_pins + 64:
            # Entries of released pins are skipped lazily; sweep them out before
            # they outnumber the live ones.
            heap[:] = [
                (-j.first_arrival, -j.order, j.pin.seq, jid)
                for jid, j in self._jobs.items()
                if j.pin is not None and j.pin.seq != seq
            ]
            heapq.heapify(heap)
        heapq.heappush(heap, (-job.first_arrival, -job.order, seq, job_id))

    def _has_turn_in_flight(self, job: _Job) -> bool:
        request = job.in_flight
        return request is not None and not request.is_finished()

    # ------------------------------------------------------------------ queue

    def create_queue(self) -> ContinuumQueue:
        queue = ContinuumQueue(
            self._rank,
            self._is_pinned,
            on_pop=self._on_pop,
            on_remove=self._on_remove,
            seq=self._queue_seq,
        )
        self._queues.add(queue)
        return queue

    def select_queue(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> RequestQueue:
        self._admitting = True
        if not skipped_waiting:
            return waiting
        if not waiting:
            return skipped_waiting
        if isinstance(waiting, ContinuumQueue) and isinstance(skipped_waiting, ContinuumQueue):
            return (
                waiting if waiting.head_rank() <= skipped_waiting.head_rank() else skipped_waiting
            )
        return skipped_waiting

    def _on_pop(self, request: Request) -> None:
        if request.request_id in self._delay_watch:
            self._popped[request.request_id] = (request, self._now)
        elif self._is_pinned(request.job_id):
            self._admitted.append(request)

    def _release_admitted(self) -> bool:
        """Release the pins of jobs whose next turn was admitted; ``True`` if any was held.

        Once admitted, the turn holds (ref-counts) the blocks it shares with the
        pinned one, so the pin keeps only the previous turn's tail (its partial
        block and output tokens), which the new turn recomputes anyway. A turn
        set aside without blocks (the tier could not answer) is not admitted;
        it is seen again at its next pop.
        """
        released = False
        for request in self._admitted:
            job_id = request.job_id
            job = self._jobs.get(job_id) if job_id is not None else None
            if job is None or job.pin is None or job.in_flight is not request:
                continue
            status = request.status
            admitted = status == _RUNNING or (
                status == _LOADING and request.num_computed_tokens > 0
            )
            if admitted and self._release_pin(job_id, job):  # type: ignore[arg-type]
                self.stats.released_admitted += 1
                released = True
        self._admitted.clear()
        return released

    def _on_remove(self, request: Request) -> None:
        self._delay_watch.pop(request.request_id, None)
        if request.job_id is not None:
            self._removed_jobs.add(request.job_id)

    # ------------------------------------------------------------------ preemption

    def choose_victim(self, running: Sequence[Request]) -> Request:
        """The last request in running order whose job holds no pin; else the last one.

        This is FCFS's tail victim restricted to unpinned jobs (the fork's rule):
        the tail was admitted last, so it has computed the fewest tokens of the
        running requests and its preemption recomputes the least. Only if every
        running request belongs to a pinned job -- which :meth:`reclaim_retained`
        lets happen only once no pin is left to release -- is the tail itself
        chosen. (An earlier version took the latest *job* by first arrival; a
        new job's long-running decode then went before a just-admitted turn,
        recomputing more than FCFS would.)
        """
        jobs = self._jobs
        retained = self._retained
        for index in range(len(running) - 1, -1, -1):
            request = running[index]
            job_id = request.job_id
            job = jobs.get(job_id) if job_id is not None else None
            if job is None or job.pin is None or job.pin.request_id not in retained:
                return request
        return running[-1]

    def reclaim_retained(self, num_blocks_needed: int) -> bool:
        """Release pins when an allocation fails, cheapest first.

        1. Pins of jobs whose next turn was just admitted (they keep only dead
           tail blocks).
        2. Before a running request is preempted (the running phase): pins that
           are only a bet -- past their soft deadline, or whose job has nothing
           queued (its tool call is still out) -- lowest expected saving
           ``F(tau) * benefit`` first, latest job first on ties. A preemption
           recomputes the victim's whole context for certain; such a pin saves
           at most its benefit, and only with probability ``F``.
        3. Only if no running request of an unpinned job exists (the core would
           preempt it, or the admission waits for it): every pin, latest job
           first. With nothing running this keeps a full pool of pins from
           stalling the engine.

        Pins whose job has a turn queued within its TTL are a certain hit, so
        admissions wait for them (no step 2 while admitting). Each step stops
        once ``num_blocks_needed`` blocks are free.
        """
        context = self._context
        if context is None:
            return False
        released = self._release_admitted() if self._admitted else False
        if released and context.num_free_blocks >= num_blocks_needed:
            return True
        if not self._admitting and self._release_bets(num_blocks_needed):
            released = True
            if context.num_free_blocks >= num_blocks_needed:
                return True
        for request in context.running:
            if not self._is_pinned(request.job_id):
                return released
        heap = self._latest_pins
        while heap:
            _, _, seq, job_id = heapq.heappop(heap)
            job = self._jobs.get(job_id)
            if job is None or job.pin is None or job.pin.seq != seq:
                continue
            if self._release_pin(job_id, job):
                released = True
                self.stats.released_reclaimed += 1
                if context.num_free_blocks >= num_blocks_needed:
                    break
        return released

    def _release_bets(self, num_blocks_needed: int) -> bool:
        """Step 2 of :meth:`reclaim_retained`; ``True`` if a held pin was released."""
        context = self._context
        assert context is not None
        now = self._now
        retained = self._retained
        candidates: list[tuple[int, float, float, int, str]] = []
        for job_id, job in self._jobs.items():
            pin = job.pin
            if pin is None or pin.request_id not in retained:
                continue
            if pin.soft_deadline <= now:
                candidates.append((0, 0.0, -job.first_arrival, -job.order, job_id))
            elif not self._has_turn_in_flight(job):
                candidates.append((1, pin.value, -job.first_arrival, -job.order, job_id))
        if not candidates:
            return False
        candidates.sort()
        released = False
        for *_, job_id in candidates:
            if self._release_pin(job_id, self._jobs[job_id]):
                released = True
                self.stats.released_reclaimed += 1
                self.stats.released_for_running += 1
                if context.num_free_blocks >= num_blocks_needed:
                    break
        return released

    # ------------------------------------------------------------------ events

    def on_arrival(self, request: Request) -> None:
        job_id = request.job_id
        if job_id is None:
            return
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs[job_id] = _Job(request.arrival_time, next(self._job_order))
        else:
            if job.last_finish is not None:
                gap = request.arrival_time - job.last_finish
                if gap >= 0:  # a closed-loop follow-up (not a turn released early)
                    self.durations.add(job.last_tool, gap)
                    self.stats.num_duration_samples += 1
                job.last_finish = None
            if not self._is_pinned(job_id):
                self._delay_watch[request.request_id] = request
        job.in_flight = request

    def on_finish(self, request: Request) -> float | None:
        if self._delay_watch.pop(request.request_id, None) is not None:
            popped = self._popped.pop(request.request_id, None)
            if popped is not None:  # admitted and finished within one step
                self._add_delay_sample(request, popped[1])
        job_id = request.job_id
        if job_id is None:
            return None
        job = self._jobs.get(job_id)
        if job is None:  # attached mid-run, or the job was forgotten
            job = self._jobs[job_id] = _Job(request.arrival_time, next(self._job_order))
        if job.in_flight is request:
            job.in_flight = None
        job.num_finished += 1
        now = self._now

        if request.is_last_turn:
            if self._release_pin(job_id, job):
                self.stats.released_final += 1
            self.turns.add_job(request.turn + 1 if request.turn is not None else job.num_finished)
            del self._jobs[job_id]
            return None

        job.last_finish = now
        job.last_tool = request.tool_name
        ttl = self._choose_ttl(request)
        if ttl <= 0:
            self.stats.num_not_pinned += 1
            if self._release_pin(job_id, job):
                self.stats.released_not_repinned += 1
            return None
        if self._release_pin(job_id, job):
            self.stats.released_replaced += 1
        seq = next(self._pin_seq)
        soft = now + ttl
        # The core gets the later, hard deadline: expiring at the soft one, it
        # would release the pin before this policy can see that the job's next
        # turn is queued (see on_step_start).
        hard = soft + self.queued_grace
        decision = self.last_decision
        value = decision.expected_saving if decision is not None else 0.0
        job.pin = _Pin(request.request_id, job_id, ttl, soft, hard, seq, value)
        self._num_pins += 1
        heapq.heappush(self._deadlines, (soft, seq, job_id))
        self._push_latest(job_id, job, seq)
        # The core adds the retention after this returns: re-rank at the next step start.
        self._rerank_pending.add(job_id)
        self.stats.num_pinned += 1
        return hard

    def on_step_start(self, now: float) -> None:
        self._admitting = False
        if self._admitted:
            self._release_admitted()
        if self._popped:
            self._record_admissions()
        if self._rerank_pending:
            for job_id in self._rerank_pending:
                self._rerank(job_id)
            self._rerank_pending.clear()
        if self._removed_jobs:
            self._release_aborted()
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, seq, job_id = heapq.heappop(deadlines)
            job = self._jobs.get(job_id)
            pin = job.pin if job is not None else None
            if pin is None or pin.seq != seq:
                continue  # released or replaced since
            if pin.request_id not in self._retained:
                self._release_pin(job_id, job)  # the core let it go: forget and re-rank
                continue
            if self._has_turn_in_flight(job):
                # Paper: expire only if the job has nothing queued. Look again at
                # the hard deadline (where the core releases it anyway).
                if pin.hard_deadline > now:
                    heapq.heappush(deadlines, (pin.hard_deadline, seq, job_id))
                continue
            self._release_pin(job_id, job)
            self.stats.released_expired += 1

    def _record_admissions(self) -> None:
        """Turns popped last step and since admitted: their queueing delay feeds ``T``."""
        watch = self._delay_watch
        for request, popped_at in self._popped.values():
            if request.request_id not in watch:
                continue
            if request.num_cached_tokens >= 0 or request.status == _RUNNING:
                del watch[request.request_id]
                self._add_delay_sample(request, popped_at)
            elif request.is_finished():
                del watch[request.request_id]
            # else: set aside (e.g. an async load); it is popped again later.
        self._popped.clear()

    def _add_delay_sample(self, request: Request, admitted_at: float) -> None:
        self.queue_delay.add(max(0.0, admitted_at - request.arrival_time))
        self.stats.num_delay_samples += 1

    def _release_aborted(self) -> None:
        """A job whose queued turn was aborted keeps no pin (the core sees only the turn)."""
        for job_id in self._removed_jobs:
            job = self._jobs.get(job_id)
            if job is None or job.in_flight is None or job.in_flight.status != _ABORTED:
                continue
            job.in_flight = None
            if self._release_pin(job_id, job):
                self.stats.released_aborted += 1
        self._removed_jobs.clear()

    # ------------------------------------------------------------------ TTL

    def reload_time(self, request: Request) -> float:
        """Seconds to get the request's context back if its blocks are freed now.

        ``load_time(cached) + prefill(rest)``: the tokens the offload tier holds
        (the scheduler context's read-only :class:`~kvframe.contract.views.TierView`,
        ``offload``) are loaded, the rest is prefilled on the cost model. With
        no tier (or a tier that holds nothing of it), the whole context is
        prefilled again.
        """
        num_tokens = request.num_tokens
        tier = self._tier
        cached = min(tier.num_cached_tokens(request), num_tokens) if tier is not None else 0
        rest = num_tokens - cached
        prefill = (
            self.cost_model.step_time(
                rest, 0, 0, num_prefill_seqs=1, num_prefill_pairs=prefill_pairs(rest, cached)
            )
            if rest > 0
            else 0.0
        )
        return (tier.load_time(cached) if cached else 0.0) + prefill

    def _choose_ttl(self, request: Request) -> float:
        tool = request.tool_name
        if self.ttl_mode == "none":
            # Program-level FCFS without pins: the queue order alone.
            self.last_decision = TTLDecision(request.request_id, tool, 0.0, "none", 0.0, 0.0, 0.0)
            return 0.0
        if self.ttl_mode == "fixed":
            mean = self.durations.running_mean(tool)
            ttl = self.fixed_ttl if mean is None or mean <= self.fixed_ttl else 0.0
            ttl = min(ttl, self.max_ttl)
            self.last_decision = TTLDecision(request.request_id, tool, ttl, "fixed", 0.0, 0.0, 0.0)
            return ttl
        history = self.durations
        durations, source = history.distribution(tool)
        delay = self.queue_delay.mean
        eta = self.fixed_eta if self.fixed_eta is not None else self.turns.eta
        if eta is None:
            eta = self.cold_eta
        reload = self.reload_time(request)
        benefit = delay * eta + reload
        observed = history.num_observed
        if not observed:
            ttl = min(self.cold_start_ttl, self.max_ttl)
            source = "cold-start"
            hit = 1.0
        elif self.cold_start == "exponential" and observed < history.min_samples:
            mean = history.mean_observed or 0.0
            ttl = choose_ttl_exponential(mean, benefit, max_ttl=self.max_ttl)
            source = "exponential"
            hit = exponential_cdf(mean, ttl)
        else:
            ttl = choose_ttl(durations, benefit, max_ttl=self.max_ttl)
            hit = bisect.bisect_right(durations, ttl) / len(durations)
        self.last_decision = TTLDecision(
            request.request_id, tool, ttl, source, delay, eta, reload, hit
        )
        return ttl
