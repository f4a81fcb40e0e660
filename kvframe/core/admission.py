"""The waiting phase of a scheduler step: admitting waiting requests.

After the running requests have their tokens (:meth:`Scheduler._schedule_running
<kvframe.core.scheduler.Scheduler._schedule_running>`), and only if nothing was
preempted, :meth:`AdmissionPhase.schedule_waiting` admits waiting requests, from
the queue the policy (or the fidelity target) picks, while the token budget,
the sequence slots and the blocks last. Each phase of one admission is a method
of its own: whether the request is ready at all, its prefix lookup (GPU cache,
then the connector's tier), its first chunk, its slots, what a failed
allocation may free, and the admission itself.

:class:`AdmissionPhase` is a base class of the scheduler, not an object beside
it: the phase reads and writes the scheduler's queues and counters on every
step, and a separate object would reach into another's state on each of them.
The class annotations below list what it uses.

The release differences of this phase are objects chosen once, when the
scheduler is built, so no step asks which release it follows:

* switch T20 (:func:`queue_rule`): which queue is looked at, and where a request
  set aside without KV blocks waits (:class:`SkippedWaiting`, :class:`HoldingQueue`,
  :class:`HoldingQueueFirst`);
* switch T16: the blocks an asynchronous load must leave free
  (:mod:`kvframe.core.inflight`);
* switch T21 (:func:`load_hit_rule`): when a request whose prefix loads
  asynchronously learns its cached tokens;
* switch S: the sequence slots streaming-input sessions hold
  (:mod:`kvframe.core.sessions`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvframe.core.policy_seams import PolicyContractError, default_select_queue
from kvframe.core.scheduler_output import PrefixHit
from kvframe.domain.request import RequestStatus

if TYPE_CHECKING:
    from kvframe.contract.bases import SchedulingPolicy
    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.connector import SchedulerConnector
    from kvframe.core.inflight import InflightPrefills, NoReservation
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.core.load_failures import LoadFailures
    from kvframe.core.retention import RetentionTable
    from kvframe.core.scheduler_config import SchedulerConfig
    from kvframe.core.scheduler_stats import SchedulerStats
    from kvframe.core.sessions import Sessions
    from kvframe.core.step import StepPlan
    from kvframe.domain.fidelity import Fidelity
    from kvframe.domain.queues import RequestQueue
    from kvframe.domain.request import Request

__all__ = [
    "AdmissionPhase",
    "HoldingQueue",
    "HoldingQueueFirst",
    "SetAside",
    "SkippedWaiting",
    "load_hit_rule",
    "queue_rule",
]

_WAITING = RequestStatus.WAITING
_PREEMPTED = RequestStatus.PREEMPTED
_RUNNING = RequestStatus.RUNNING
_WAITING_FOR_REMOTE_KVS = RequestStatus.WAITING_FOR_REMOTE_KVS
_WAITING_FOR_INPUT = RequestStatus.WAITING_FOR_STREAMING_REQ

Found = tuple["Sequence[KVCacheBlock]", int, int, bool]
"""A waiting request's prefix hits: ``(local blocks, local tokens, external tokens,
load asynchronously)``."""


class SetAside:
    """The requests one admission pass sets aside, in pass-queues of their own so the
    loop never peeks the same blocked request twice; they rejoin the scheduler's
    queues after the loop (:meth:`rejoin`). A pass-queue is made on first use."""

    __slots__ = ("_policy", "requeued", "retry", "skipped")

    def __init__(self, policy: SchedulingPolicy) -> None:
        self._policy = policy
        self.skipped: RequestQueue | None = None
        """Rejoin skipped-waiting, ahead of older skipped requests."""
        self.requeued: RequestQueue | None = None
        """Switch T20: rejoin the front of the waiting queue (they hold no blocks)."""
        self.retry: tuple[Request, int, int, bool] | None = None
        """The tier's answer for a request retried after a reclaim freed blocks: vLLM
        asks the connector once per request per step, and asking again would touch
        the tier and count the reuse filter's sightings twice."""

    def skip(self, request: Request) -> None:
        """Set ``request`` aside to rejoin skipped-waiting."""
        if self.skipped is None:
            self.skipped = self._policy.create_queue()
        self.skipped.prepend_request(request)

    def requeue(self, request: Request) -> None:
        """Set ``request`` aside to rejoin the front of the waiting queue."""
        if self.requeued is None:
            self.requeued = self._policy.create_queue()
        self.requeued.prepend_request(request)

    def rejoin(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> None:
        """The pass is over: put the requests set aside back."""
        if self.skipped:
            skipped_waiting.prepend_requests(self.skipped)
        if self.requeued:
            waiting.prepend_requests(self.requeued)


class SkippedWaiting:
    """vLLM 0.19.1: the policy picks the waiting or the skipped-waiting queue, and every
    request set aside for the step joins skipped-waiting."""

    __slots__ = ("_policy",)

    def __init__(self, policy: SchedulingPolicy) -> None:
        self._policy = policy

    def select(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> RequestQueue:
        """The queue whose head is looked at next (the policy's ``select_queue``, checked)."""
        queue = self._policy.select_queue(waiting, skipped_waiting)
        if (queue is not waiting and queue is not skipped_waiting) or not queue:
            raise PolicyContractError(
                f"scheduling policy {self._policy.name!r}: select_queue must return the "
                "waiting or the skipped-waiting queue, and a non-empty one"
            )
        return queue

    def set_aside(self, request: Request, aside: SetAside) -> None:
        """``request`` cannot be admitted this step (not ready, or refused)."""
        aside.skip(request)


class HoldingQueue(SkippedWaiting):
    """Switch T20 under a policy with its own ``select_queue``: that choice stands, but a
    request set aside holding no KV blocks goes back to the front of the waiting
    queue (vLLM 0.33.0); skipped-waiting keeps only the requests holding blocks."""

    __slots__ = ()

    def set_aside(self, request: Request, aside: SetAside) -> None:
        if _holds_blocks(request):
            aside.skip(request)
        else:
            aside.requeue(request)


class HoldingQueueFirst(HoldingQueue):
    """Switch T20 under the default queue choice (vLLM's ``fcfs`` and ``priority``): the
    requests holding KV blocks (skipped-waiting, 0.33.0's ``kv_holding_waiting``)
    are always looked at first."""

    __slots__ = ()

    def select(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> RequestQueue:
        return skipped_waiting or waiting


def queue_rule(policy: SchedulingPolicy, fidelity: Fidelity) -> SkippedWaiting:
    """The queue rule of ``fidelity`` for ``policy`` (switch T20), chosen once."""
    if not fidelity.holding_queue_first:
        return SkippedWaiting(policy)
    if default_select_queue(policy):
        return HoldingQueueFirst(policy)
    return HoldingQueue(policy)


def _cached_at_admission(request: Request, num_computed_tokens: int) -> None:
    """Switch T21 (vLLM 0.33.0): an async load reports its admitting lookup's hit."""
    if request.num_cached_tokens < 0:
        request.num_cached_tokens = num_computed_tokens


def _cached_when_running(request: Request, num_computed_tokens: int) -> None:
    """vLLM 0.19.1: the hit is set when the request first runs (:meth:`_admit`)."""


def load_hit_rule(fidelity: Fidelity) -> Callable[[Request, int], None]:
    """What an admission that starts an async load records as cached (switch T21)."""
    return _cached_at_admission if fidelity.cached_tokens_at_admission else _cached_when_running


def _holds_blocks(request: Request) -> bool:
    """Whether a waiting request holds KV blocks (vLLM 0.33.0's ``_holds_kv_blocks``)."""
    return request.num_computed_tokens > 0 or request.status == _WAITING_FOR_REMOTE_KVS


class AdmissionPhase:
    """The waiting phase of :class:`~kvframe.core.scheduler.Scheduler` (see the module)."""

    # What the phase uses of the scheduler (set in Scheduler.__init__).
    config: SchedulerConfig
    policy: SchedulingPolicy
    connector: SchedulerConnector | None
    kv_cache_manager: KVCacheManager
    stats: SchedulerStats
    waiting: RequestQueue
    skipped_waiting: RequestQueue
    running: list[Request]
    retained: RetentionTable
    sessions: Sessions
    max_num_running_reqs: int
    num_lookahead_tokens: int
    _queue_rule: SkippedWaiting
    _inflight: InflightPrefills | NoReservation
    _load_hit: Callable[[Request, int], None]
    _may_admit: Callable[[Request], bool] | None
    _finished_recving: set[str]
    _load_failures: LoadFailures
    _lookup_recorded: set[str]
    _computed_before_preemption: dict[str, int]
    # ... and, from the finishing phase (kvframe.core.finishing):
    _reclaim_retained: Callable[..., bool]
    _transfer_will_unblock: Callable[[RequestQueue | None], bool]
    _release_loaded_waiting: Callable[[Request], bool]

    def schedule_waiting(self, step: StepPlan) -> None:
        """Admit waiting requests while budget, sequence slots and blocks last.

        Per step, and per waiting request it looks at (usually one: the blocked
        head). A request that is not ready -- its load in flight, a session
        waiting for input, one the policy's ``may_admit`` refuses (asked only
        when the policy overrides it, and only for a request holding no blocks
        yet), one whose connector lookup cannot answer yet -- is set aside for
        this step: the requests behind it may go, and it rejoins a queue after
        the loop (:class:`SetAside`, by the queue rule), to be asked again next step.
        """
        aside = SetAside(self.policy)
        rule = self._queue_rule
        # Switch S: sessions waiting for input hold sequence slots (vLLM 0.33.0).
        max_running = self.max_num_running_reqs - self.sessions.slots_held()
        while (self.waiting or self.skipped_waiting) and step.token_budget > 0:
            if len(self.running) >= max_running:
                break
            queue = rule.select(self.waiting, self.skipped_waiting)
            request = queue.peek_request()
            found = None if self._not_ready(request) else self._lookup_prefix(request, aside.retry)
            if found is None:
                # Not ready, or the tier cannot answer yet: ask again next step
                # without blocking the requests behind this one.
                queue.pop_request()
                rule.set_aside(request, aside)
                continue
            if not self._place(step, queue, request, found, aside):
                break
        aside.rejoin(self.waiting, self.skipped_waiting)

    def _not_ready(self, request: Request) -> bool:
        """Whether ``request`` cannot be admitted this step: its load still in flight (a
        landed one is promoted here), a session waiting for its next input chunk, or
        a request the policy's ``may_admit`` refuses."""
        return (
            (request.status == _WAITING_FOR_REMOTE_KVS and not self._promote_loaded(request))
            or request.status == _WAITING_FOR_INPUT
            or (
                self._may_admit is not None
                and request.num_computed_tokens == 0
                and not self._admission_allowed(request)
            )
        )

    def _place(
        self,
        step: StepPlan,
        queue: RequestQueue,
        request: Request,
        found: Found,
        aside: SetAside,
    ) -> bool:
        """Size, allocate and admit ``request`` with its prefix hits ``found``; ``False``
        when admission stops for this step (no budget or blocks for it)."""
        _, num_local_tokens, num_external_tokens, load_kv_async = found
        num_computed_tokens = (
            num_local_tokens + num_external_tokens
            if request.num_computed_tokens == 0
            else request.num_computed_tokens
        )
        num_new_tokens = self._first_chunk(request, num_computed_tokens, load_kv_async, step)
        if num_new_tokens is None:
            return False
        if self._allocate_waiting(request, num_new_tokens, found) is None:
            if not self._freed_for(request, num_new_tokens, step, aside.skipped):
                return False
            if request.num_computed_tokens == 0:
                aside.retry = (request, num_local_tokens, num_external_tokens, load_kv_async)
            return True
        tokens = (num_new_tokens, num_computed_tokens, num_local_tokens, num_external_tokens)
        if not self._admit(step, queue, request, tokens, load_kv_async):
            aside.skip(request)  # blocks are reserved; it waits for its load to land
        return True

    def _admission_allowed(self, request: Request) -> bool:
        """The policy's :meth:`~kvframe.SchedulingPolicy.may_admit`, held to ``True``/``False``."""
        answer = self._may_admit(request)  # type: ignore[misc]
        if answer is True or answer is False:
            return answer
        raise PolicyContractError(
            f"scheduling policy {self.policy.name!r}: may_admit({request.request_id!r}) "
            f"returned {answer!r}; it must return True or False"
        )

    def _first_chunk(
        self, request: Request, num_computed_tokens: int, load_kv_async: bool, step: StepPlan
    ) -> int | None:
        """Tokens a waiting request computes in its first step: none while its prefix
        loads asynchronously, else the rest of its tokens cut to the long-prefill
        threshold and the step's budget; ``None`` when chunked prefill is off and the
        prompt does not fit the budget (admission stops for this step)."""
        if load_kv_async:
            return 0
        # num_tokens, not the prompt length: a resumed request must also
        # recompute the tokens it had generated.
        num_new_tokens = request.num_tokens - num_computed_tokens
        threshold = step.long_prefill_token_threshold
        if 0 < threshold < num_new_tokens:
            num_new_tokens = threshold
        if not self.config.enable_chunked_prefill and num_new_tokens > step.token_budget:
            return None
        return min(num_new_tokens, step.token_budget)

    def _freed_for(
        self,
        request: Request,
        num_new_tokens: int,
        step: StepPlan,
        step_skipped: RequestQueue | None,
    ) -> bool:
        """An allocation for ``request`` failed: whether blocks were freed so that it is
        worth trying again -- retained blocks the policy releases, or, where nothing
        runs, nothing was scheduled and no transfer in flight will free blocks (a
        real deadlock), a landed load of a waiting request released."""
        stalled = not self.running and not step.num_scheduled_tokens
        return bool(
            self.retained and self._reclaim_retained(request, num_new_tokens, stalled=stalled)
        ) or (
            stalled
            and not self._transfer_will_unblock(step_skipped)
            and self._release_loaded_waiting(request)
        )

    def _allocate_waiting(
        self, request: Request, num_new_tokens: int, found: Found
    ) -> Sequence[KVCacheBlock] | None:
        """Slots for a waiting request's first chunk after its prefix hits (``found``,
        from :meth:`_lookup_prefix`); ``None`` when they do not fit, or when
        ``reserve_full_sequence`` holds back a prompt that would not fit whole."""
        new_computed_blocks, num_local_tokens, num_external_tokens, load_kv_async = found
        kv = self.kv_cache_manager
        if self.config.reserve_full_sequence and not kv.can_fit_full_sequence(
            request,
            num_new_computed_tokens=num_local_tokens,
            new_computed_blocks=new_computed_blocks,
            num_external_computed_tokens=num_external_tokens,
        ):
            return None
        return kv.allocate_slots(
            request,
            num_new_tokens,
            num_new_computed_tokens=num_local_tokens,
            new_computed_blocks=new_computed_blocks,
            num_lookahead_tokens=0
            if request.num_computed_tokens == 0
            else self.num_lookahead_tokens,
            num_external_computed_tokens=num_external_tokens,
            delay_cache_blocks=load_kv_async,
            # Switch T16: room for the prefills in flight (0 for 0.19.1).
            reserved_blocks=self._inflight.reserved_blocks() if load_kv_async else 0,
        )

    def _lookup_prefix(
        self, request: Request, retry: tuple[Request, int, int, bool] | None
    ) -> Found | None:
        """A waiting request's prefix hits, or ``None`` when the tier cannot answer yet.

        A request whose async load completed has its tokens computed already; a
        request retried after a reclaim reuses the tier's answer of this step
        (``retry``), as vLLM asks the connector once per request per step.
        """
        if request.num_computed_tokens != 0:
            return (), 0, 0, False
        new_computed_blocks, num_local_tokens = self.kv_cache_manager.get_computed_blocks(request)
        connector = self.connector
        if connector is None:
            return new_computed_blocks, num_local_tokens, 0, False
        if retry is not None and retry[0] is request and retry[1] == num_local_tokens:
            ext_tokens, load_kv_async = retry[2], retry[3]
        else:
            ext_tokens, load_kv_async = connector.get_num_new_matched_tokens(
                request, num_local_tokens
            )
        if ext_tokens is None:
            return None
        request.num_external_computed_tokens = ext_tokens
        return new_computed_blocks, num_local_tokens, ext_tokens, load_kv_async

    def _admit(
        self,
        step: StepPlan,
        queue: RequestQueue,
        request: Request,
        tokens: tuple[int, int, int, int],
        load_kv_async: bool,
    ) -> bool:
        """Admit ``request`` (its blocks allocated) from ``queue``: ``True`` when it runs
        this step, ``False`` when it waits for an asynchronous load of its prefix.

        ``tokens`` is ``(new, computed, local hits, external hits)``. Once per
        admission, not per step: the connector learns the blocks, the first
        admission's (or a re-admission's) prefix hits are recorded.
        """
        num_new_tokens, num_computed_tokens, num_local_tokens, num_external_tokens = tokens
        request_id = request.request_id
        if self.connector is not None:
            self.connector.update_state_after_alloc(
                request, self.kv_cache_manager.get_blocks(request_id), num_external_tokens
            )
        queue.pop_request()
        if request_id not in self._lookup_recorded:
            self._record_lookup(step, request, num_local_tokens, num_external_tokens)
        if load_kv_async:
            self._lookup_recorded.add(request_id)
            request.status = _WAITING_FOR_REMOTE_KVS
            request.num_computed_tokens = num_computed_tokens
            self._load_hit(request, num_computed_tokens)  # switch T21
            self._inflight.add(request)  # switch T16
            return False
        if num_computed_tokens + num_new_tokens < request.num_tokens:
            self._inflight.add(request)  # still prefilling after this chunk
        self._lookup_recorded.discard(request_id)
        self._start_running(step, request, num_new_tokens, num_computed_tokens)
        return True

    def _start_running(
        self, step: StepPlan, request: Request, num_new_tokens: int, num_computed_tokens: int
    ) -> None:
        """An admitted request joins ``running`` and the step (new or resumed)."""
        request_id = request.request_id
        self.running.append(request)
        if request.status == _WAITING:
            step.scheduled_new.append(request)
        elif request.status == _PREEMPTED:
            step.scheduled_resumed.append(request)
        else:
            raise RuntimeError(
                f"request {request_id!r} admitted from a waiting queue in status "
                f"{request.status.name}"
            )
        step.new_block_ids[request_id] = self.kv_cache_manager.get_block_ids(request_id)
        step.num_scheduled_tokens[request_id] = num_new_tokens
        step.token_budget -= num_new_tokens
        request.status = _RUNNING
        request.num_computed_tokens = num_computed_tokens
        if request.num_cached_tokens < 0:
            request.num_cached_tokens = num_computed_tokens

    def _record_lookup(
        self, step: StepPlan, request: Request, local_tokens: int, external_tokens: int
    ) -> None:
        """Once per admission: an async load passes :meth:`_admit` again when it is
        promoted, and a stall-released load when it is looked up again; only the
        first lookup counts."""
        if request.num_cached_tokens < 0:
            self._record_first_admission(step, request, local_tokens, external_tokens)
        elif request.status == _PREEMPTED:
            self._record_readmission(step, request, local_tokens, external_tokens)

    def _promote_loaded(self, request: Request) -> bool:
        """A request waiting for an async load: if the load landed, make it admissible."""
        request_id = request.request_id
        if request_id not in self._finished_recving:
            return False
        self._finished_recving.discard(request_id)
        if not self._load_failures.landed(request):
            # The loaded blocks hold valid KV now: make them findable.
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
            if request.num_computed_tokens == request.num_tokens:
                # A full hit still recomputes the last token to sample from it.
                request.num_computed_tokens = request.num_tokens - 1
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = request.num_computed_tokens
        request.status = _PREEMPTED if request.num_preemptions else _WAITING
        return True

    def _record_first_admission(
        self, step: StepPlan, request: Request, local_tokens: int, external_tokens: int
    ) -> None:
        stats = self.stats
        stats.prefix_cache_queries += request.num_tokens
        stats.prefix_cache_hits += local_tokens
        if self.connector is not None:
            stats.connector_prefix_cache_queries += request.num_tokens - local_tokens
            stats.connector_prefix_cache_hits += external_tokens
        step.first_admissions.append(
            PrefixHit(request.request_id, request.num_prompt_tokens, local_tokens, external_tokens)
        )

    def _record_readmission(
        self, step: StepPlan, request: Request, local_tokens: int, external_tokens: int
    ) -> None:
        stats = self.stats
        hit_tokens = local_tokens + external_tokens
        stats.preempted_prefix_cache_queries += request.num_tokens
        stats.preempted_prefix_cache_hits += hit_tokens
        stats.preempted_external_prefix_cache_hits += external_tokens
        computed_before = self._computed_before_preemption.pop(request.request_id, 0)
        recomputed = max(0, computed_before - hit_tokens)
        stats.num_recomputed_tokens += recomputed
        step.recomputed_tokens[request.request_id] = recomputed
