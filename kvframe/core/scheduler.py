"""The scheduler: vLLM V1's step decisions, with the policy choices delegated.

Each call to :meth:`Scheduler.schedule` is one engine step and reads top to
bottom:

1. release retentions whose deadline passed, then tell the policy the step began;
2. :meth:`~Scheduler._schedule_running` — RUNNING requests first, in list order,
   each given ``num_tokens_with_spec - num_computed_tokens`` tokens capped by
   the chunking threshold, the remaining budget and ``max_model_len``; when
   blocks run out the policy names a victim, which is preempted by recompute;
3. :meth:`~kvframe.core.admission.AdmissionPhase.schedule_waiting` — only if
   nothing was preempted: admit
   waiting requests (from the queue the policy picks, those its ``may_admit``
   allows) up to ``max_num_seqs`` while budget and blocks last, with
   prefix-cache hits from the GPU cache and then from the connector's tier;
4. :meth:`~Scheduler._make_output` — new requests with full data, running and
   resumed ones with only what changed;
5. advance ``num_computed_tokens`` by what was scheduled (vLLM does this after
   building the output so the output carries the pre-step counts).

:meth:`Scheduler.update_from_output` then appends sampled tokens, rolls back
rejected draft tokens, applies the stop conditions and frees — or, when the
policy asks, retains — finished requests.

The waiting phase lives in :mod:`kvframe.core.admission`, finishing, retention
and transfer holds in :mod:`kvframe.core.finishing`; asynchronous scheduling is
:class:`~kvframe.core.async_scheduler.AsyncScheduler`, and
:func:`~kvframe.core.factory.make_scheduler` builds the one a config asks for.
A difference between vLLM releases is a boolean for a one-line rule (switches
A, B, E) and otherwise an object chosen when the scheduler is built (see
``docs/scheduler.md``).

The policy is called directly (never through pluggy): it is the object the
plugin registry built. The same decisions as vLLM 0.19 for the same inputs are
checked step by step by ``tools/differential``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from kvframe.core.admission import AdmissionPhase, load_hit_rule, queue_rule
from kvframe.core.compiled import resolve_core
from kvframe.core.decode_run import DecodeRun
from kvframe.core.deferred_frees import FreeRule, ImmediateFrees
from kvframe.core.finishing import FinishingPhase
from kvframe.core.hashing import make_block_hasher
from kvframe.core.inflight import load_reservation
from kvframe.core.kv_cache_coordinator import (
    CountedInflightTokens,
    HybridKVCacheManager,
    InflightTokens,
)
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.core.load_failures import LoadFailures
from kvframe.core.policy_seams import PolicyContractError, allows_decode_runs, may_admit_of
from kvframe.core.retention import RetentionTable
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import (
    CachedRequestData,
    ModelRunnerOutput,
    NewRequestData,
    SchedulerOutput,
)
from kvframe.core.scheduler_stats import SchedulerStats
from kvframe.core.scheduler_view import SchedulerView
from kvframe.core.sessions import InputChunk, sessions_for
from kvframe.core.step import StepPlan
from kvframe.domain.queues import RequestQueue
from kvframe.domain.request import Request, RequestStatus

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy, SchedulingPolicy
    from kvframe.contract.views import TierView
    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.connector import SchedulerConnector
    from kvframe.domain.costs import CostModel
    from kvframe.domain.tokens import BlockHash

__all__ = ["PolicyContractError", "Scheduler", "SchedulerConfig", "SchedulerStats"]

_PREEMPTED = RequestStatus.PREEMPTED
_RUNNING = RequestStatus.RUNNING
_WAITING_FOR_REMOTE_KVS = RequestStatus.WAITING_FOR_REMOTE_KVS
_WAITING_FOR_INPUT = RequestStatus.WAITING_FOR_STREAMING_REQ
_block_id = attrgetter("block_id")


_T = TypeVar("_T")

# mypyc compiles this module (kvframe.hot_modules); interpreted classes subclass
# the scheduler (AsyncScheduler), which a compiled class allows only when it says so.
try:
    from mypy_extensions import mypyc_attr
except ImportError:  # no mypy here, so nothing is compiled: the decorator does nothing

    def mypyc_attr(*_args: Any, **_kwargs: Any) -> Callable[[_T], _T]:  # type: ignore[no-redef, misc]
        return lambda cls: cls


@mypyc_attr(allow_interpreted_subclasses=True)
class Scheduler(AdmissionPhase, FinishingPhase):
    """One token budget per step, shared by prefill and decode, over a paged KV cache.

    The waiting phase of a step is :class:`~kvframe.core.admission.AdmissionPhase`;
    what happens to a finished request's blocks is
    :class:`~kvframe.core.finishing.FinishingPhase`.
    This class decides as vLLM's synchronous ``Scheduler``; asynchronous scheduling
    is :class:`~kvframe.core.async_scheduler.AsyncScheduler`, and
    :func:`~kvframe.core.factory.make_scheduler` picks the one a config asks for.
    """

    async_scheduling: ClassVar[bool] = False
    """Whether this scheduler decides as vLLM's ``AsyncScheduler`` (the engine runs its
    batch queue for one, and the vLLM bridge drops tokens in flight on a reset)."""

    def __init__(
        self,
        config: SchedulerConfig,
        policy: SchedulingPolicy,
        *,
        connector: SchedulerConnector | None = None,
        eviction_policy: EvictionPolicy | None = None,
        cost_model: CostModel | None = None,
    ) -> None:
        if config.async_scheduling is not self.async_scheduling:
            raise ValueError(_wrong_class(config, type(self)))
        self.config = config
        self.cost_model = cost_model
        self.policy = policy
        self.connector = connector
        self.block_size = config.block_size
        self.max_model_len = config.max_model_len
        self.max_num_running_reqs = config.max_num_seqs
        self.num_lookahead_tokens = config.num_lookahead_tokens
        self.block_hasher = _block_hasher(config, connector)
        self.kv_cache_manager = _kv_cache_manager(config, eviction_policy, connector)
        self._choose_rules(config, policy, connector)
        self._init_state(policy)
        self._load_failures = LoadFailures(self.kv_cache_manager, config, self.stats)
        """Async loads that reported invalid blocks (:mod:`kvframe.core.load_failures`)."""
        # The read-only tier view policies see (SchedulerContext.offload): only
        # kvframe's OffloadingConnector offers one; other connectors give None.
        make_view = getattr(connector, "tier_view", None)
        self.tier_view: TierView | None = make_view() if make_view is not None else None
        # A decode run reads the one-group tables; KV-cache groups step one at a time.
        self._decode_runs_allowed = allows_decode_runs(policy) and not config.is_hybrid
        # The admission decision point: None unless the policy overrides it, so
        # a policy that does not pays one branch per waiting request looked at.
        self._may_admit = may_admit_of(policy)
        policy.attach(SchedulerView(self))

    # ------------------------------------------------------------------
    # Requests in and out
    def _choose_rules(
        self,
        config: SchedulerConfig,
        policy: SchedulingPolicy,
        connector: SchedulerConnector | None,
    ) -> None:
        """Read the fidelity target once (:mod:`kvframe.domain.fidelity`): one-line rules
        as booleans, the rules with state or several seams as objects."""
        fidelity = config.fidelity
        self._threshold_needs_company = fidelity.threshold_needs_company  # A
        self._self_preemption_continues = fidelity.self_preemption_continues  # B
        self._victim_cursor_by_position = fidelity.victim_cursor_by_position  # E
        self._held_keep_engine = fidelity.held_requests_keep_engine
        # T20: which waiting queue is looked at, where a request set aside waits;
        # T21: what an admission that starts an async load records (admission.py).
        self._queue_rule = queue_rule(policy, fidelity)
        self._load_hit = load_hit_rule(fidelity)
        # T16: the in-flight prefills an async load must leave room for
        # (kvframe.core.inflight; a rule that reserves nothing for 0.19.1).
        self._inflight = load_reservation(self.kv_cache_manager, config)
        # When blocks go back to the pool (kvframe.core.deferred_frees): at once;
        # the AsyncScheduler may defer them (switch T22).
        self._frees: FreeRule = self._free_rule(config, connector)
        self.sessions = sessions_for(fidelity)
        """Streaming-input sessions (:mod:`kvframe.core.sessions`; switch S)."""

    def _init_state(self, policy: SchedulingPolicy) -> None:
        """The queues, tables and counters a new scheduler starts with."""
        self.requests: dict[str, Request] = {}
        self.waiting: RequestQueue = policy.create_queue()
        self.skipped_waiting: RequestQueue = policy.create_queue()
        self.running: list[Request] = []
        self.finished_req_ids: set[str] = set()
        self.session_stops: dict[str, RequestStatus] = {}
        """The sessions that stopped in the last ``update_from_output`` and go on
        (resumed with a queued chunk, or waiting for input), with the status their
        stop had: a host reports it as the finish reason of that turn."""
        self.retained = RetentionTable()
        self.stats = SchedulerStats()
        # Finished requests whose blocks wait for an outbound store to land, and
        # aborted requests whose blocks wait for an inbound load to land.
        self._awaiting_store: dict[str, Request] = {}
        self._awaiting_load: dict[str, Request] = {}
        self._finished_recving: set[str] = set()
        # Tokens a preempted request had computed, to count recomputation.
        self._computed_before_preemption: dict[str, int] = {}
        # Requests whose prefix lookup of the current admission was already
        # counted (an async load is admitted twice: when the load starts and
        # when it is promoted). Cleared when the request enters RUNNING.
        self._lookup_recorded: set[str] = set()
        self._now = 0.0

    def _free_rule(self, config: SchedulerConfig, connector: SchedulerConnector | None) -> FreeRule:
        """When blocks go back to the pool: at once (nothing in flight can write them)."""
        return ImmediateFrees(self.kv_cache_manager)

    # ------------------------------------------------------------------

    @property
    def now(self) -> float:
        """Virtual time of the current step (set by ``schedule(now=...)``)."""
        return self._now

    def add_request(self, request: Request) -> None:
        """Queue a new request (WAITING, or skipped-waiting if it is blocked)."""
        request_id = request.request_id
        if request_id in self.requests:
            raise ValueError(f"duplicate request id {request_id!r}: it is already in the scheduler")
        if request_id in self.retained:
            self._release_retention(request_id)
        if request.block_hasher is None and self.block_hasher is not None:
            request.set_block_hasher(self.block_hasher)
        self.policy.on_arrival(request)
        if request.resumable:
            self.sessions.queues[request_id] = deque()
        if request.status == _WAITING_FOR_REMOTE_KVS:
            self.skipped_waiting.add_request(request)
        else:
            self.waiting.add_request(request)
        self.requests[request_id] = request

    def add_input(self, request_id: str, chunk: InputChunk | None) -> None:
        """The next input chunk of session ``request_id``; ``None`` closes the session.

        vLLM's ``add_request`` for an id it already serves: a session waiting for
        input resumes with the chunk at once, in its place in the queue (or, for
        ``None``, is finished as aborted); a session still running queues the
        chunk, taken when it next stops. Raises ``ValueError`` for an id that is
        not a live streaming-input session (vLLM asserts: "duplicate request id").
        """
        request = self.requests.get(request_id)
        queue = self.sessions.queues.get(request_id)
        if request is None or queue is None:
            raise ValueError(
                f"request id {request_id!r}: input for a request that is not a live "
                "streaming-input session (duplicate request id)"
            )
        if request.status != _WAITING_FOR_INPUT:
            queue.append(chunk)
        elif chunk is not None:
            self.sessions.resume(request, chunk)
        else:
            self.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)

    def get_request_counts(self) -> tuple[int, int]:
        """``(num_running, num_waiting)`` with skipped-waiting counted as waiting."""
        return len(self.running), len(self.waiting) + len(self.skipped_waiting)

    def get_num_unfinished_requests(self) -> int:
        """Requests with work to do: sessions waiting for input are not counted."""
        return len(self.requests) - self.sessions.num_waiting_for_input

    def has_unfinished_requests(self) -> bool:
        return self.get_num_unfinished_requests() > 0

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones the next output must still report
        (vLLM's ``has_requests``: the batch queue schedules while this holds); under
        vLLM 0.33.0 also finished ones whose blocks a transfer still holds."""
        return (
            self.get_num_unfinished_requests() > 0
            or bool(self.finished_req_ids)
            # Switch held_requests_keep_engine (vLLM 0.33.0): blocks a transfer holds.
            or (self._held_keep_engine and bool(self._awaiting_store or self._awaiting_load))
        )

    # ------------------------------------------------------------------
    # One step
    # ------------------------------------------------------------------

    def schedule(
        self,
        now: float | None = None,
        *,
        token_budget: int | None = None,
        admit_waiting: bool = True,
    ) -> SchedulerOutput:
        """Decide one step: which requests run with how many tokens.

        ``token_budget`` (default: the whole per-step budget) and
        ``admit_waiting=False`` are vLLM's pause states, which a host such as
        the vLLM bridge passes through: vLLM 0.19.1's ``PAUSED_ALL`` schedules
        with a budget of 0 (nothing runs, nothing is admitted), ``PAUSED_NEW``
        keeps scheduling running requests but admits no waiting one.
        """
        step = self.begin_step(now, token_budget)
        self._schedule_running(step)
        if not step.preempted and admit_waiting:
            self.schedule_waiting(step)
        return self.finish_step(step)

    def begin_step(self, now: float | None, token_budget: int | None = None) -> StepPlan:
        """Start a step: the clock, the step count, expired retentions, the policy's
        step start. Returns an empty plan with ``token_budget`` (default: the whole
        per-step budget; a decode run passes what its decodes leave)."""
        if now is not None:
            self._now = now
        self.stats.num_steps += 1
        self._expire_retentions()
        self.policy.on_step_start(self._now)
        if token_budget is None:
            token_budget = self.config.max_num_batched_tokens
        threshold = self.config.long_prefill_token_threshold
        if (
            threshold
            and self._threshold_needs_company
            and len(self.running) + len(self.waiting) + len(self.skipped_waiting) <= 1
        ):
            # vLLM >= 0.31: a lone request starves nobody, so it is not capped.
            threshold = 0
        return StepPlan(token_budget, threshold)

    def finish_step(self, step: StepPlan) -> SchedulerOutput:
        """The decided step as an output; then advance the scheduled requests."""
        output = self._make_output(step)
        if self.connector is not None:
            output.kv_connector_metadata = self.connector.build_connector_meta(output)
        self._advance_after_schedule(output)
        return output

    def start_decode_run(self, token_id: int) -> DecodeRun | None:
        """A :class:`~kvframe.core.decode_run.DecodeRun` from the current state, or ``None``.

        ``token_id`` is the token the executor samples for every request (the
        run must know in advance whether it stops one). ``None`` when the
        conditions of :mod:`kvframe.core.decode_run` do not hold, or when the
        very next step already finishes a request.
        """
        running = self.running
        if (
            not running
            or not self._decode_runs_allowed
            or self.connector is not None
            or self.retained
            or self.sessions
            or self.skipped_waiting
            or len(running) > self.config.max_num_batched_tokens
        ):
            return None
        finish_step = DecodeRun.finish_step(running, token_id, self.max_model_len)
        if finish_step < 2:
            return None
        return DecodeRun(self, token_id, finish_step)

    def _schedule_running(self, step: StepPlan) -> None:
        """Give RUNNING requests their tokens, preempting through the policy when blocks run out.

        A request that is simply decoding -- one new token, no drafts, and a
        token count below its :attr:`KVCacheManager.decode_limits` entry --
        takes a short path: ``allocate_slots`` would give it no block and cache
        nothing, so it is not called. Every other request takes the general
        path, whose decisions the short one reproduces exactly.
        """
        running = self.running
        decode_limits = self.kv_cache_manager.decode_limits
        num_scheduled_tokens = step.num_scheduled_tokens
        scheduled_running = step.scheduled_running
        new_block_ids = step.new_block_ids

        req_index = 0
        while req_index < len(running) and step.token_budget > 0:
            request = running[req_index]
            computed = request.num_computed_tokens
            if (
                computed == request.num_tokens - 1
                and computed <= decode_limits.get(request.request_id, -1)
                and not request.spec_token_ids
                and not request.num_output_placeholders
            ):
                request_id = request.request_id
                scheduled_running.append(request)
                new_block_ids[request_id] = None
                num_scheduled_tokens[request_id] = 1
                step.token_budget -= 1
                req_index += 1
                continue
            next_index = self._schedule_general(step, request, req_index)
            if next_index is None:
                break
            req_index = next_index

    def _schedule_general(self, step: StepPlan, request: Request, req_index: int) -> int | None:
        """The running loop's general path for ``running[req_index]``: a prefill chunk,
        a block boundary, drafts, and every request under asynchronous scheduling.
        Returns the index of the next request to look at, ``None`` to end the loop."""
        placeholders = request.num_output_placeholders
        if placeholders and (
            request.num_computed_tokens + 2 - placeholders
            >= request.num_prompt_tokens + request.max_tokens
        ):
            # Asynchronous scheduling: the token in flight is its last one
            # (max_tokens), so no further step is scheduled for it (vLLM's
            # AsyncScheduler skips it the same way).
            return req_index + 1
        num_new_tokens = self._running_tokens(request, step)
        if num_new_tokens <= 0:
            # Nothing to compute now (e.g. at max_model_len with drafts); vLLM
            # moves on rather than blocking the requests behind it.
            return req_index + 1
        new_blocks, req_index = self._allocate_running(step, request, num_new_tokens, req_index)
        if new_blocks is None:
            # The request itself was preempted. vLLM 0.19.1: nothing more fits
            # this step. vLLM 0.33 (switch B): the requests after it (higher
            # priority under a priority policy) may fit in the blocks it freed; it
            # left `running`, so req_index already points at the next one. (Not
            # preempted: T22 found no victim it could free now; the loop ends.)
            if self._self_preemption_continues and request.status == _PREEMPTED:
                return req_index
            return None
        self._schedule_running_request(step, request, new_blocks, num_new_tokens)
        return req_index + 1

    def _running_tokens(self, request: Request, step: StepPlan) -> int:
        """Tokens a running request off the decode short path computes this step: what
        it has not computed (drafts and placeholders included), cut to the long-prefill
        threshold, the budget left and ``max_model_len``."""
        num_new_tokens = (
            request.num_tokens_with_spec
            + request.num_output_placeholders
            - request.num_computed_tokens
        )
        threshold = step.long_prefill_token_threshold
        if 0 < threshold < num_new_tokens:
            num_new_tokens = threshold
        return min(
            num_new_tokens,
            step.token_budget,
            self.max_model_len - 1 - request.num_computed_tokens,
        )

    def _allocate_running(
        self, step: StepPlan, request: Request, num_new_tokens: int, req_index: int
    ) -> tuple[Sequence[KVCacheBlock] | None, int]:
        """Slots for a running request, preempting through the policy until they fit or
        the request itself is preempted (``None``); also the index of the request in
        ``running`` after the preemptions."""
        num_scheduled_tokens = step.num_scheduled_tokens
        while True:
            new_blocks = self.kv_cache_manager.allocate_slots(
                request, num_new_tokens, num_lookahead_tokens=self.num_lookahead_tokens
            )
            if new_blocks is not None:
                return new_blocks, req_index
            if self.retained and self._reclaim_retained(request, num_new_tokens, stalled=False):
                continue
            victim = self._choose_victim()
            if not self._frees.can_free(victim.request_id):
                # T22: a step in flight may still write the victim's blocks, so
                # preempting it frees nothing now: the request is not scheduled
                # and the running loop ends (vLLM 0.33.0's ``break``).
                return None, req_index
            victim_index = self._remove_running(victim)
            victim_id = victim.request_id
            if victim_id in num_scheduled_tokens:
                # Already scheduled this step: give its budget and blocks back.
                step.scheduled_running.remove(victim)
                step.token_budget += num_scheduled_tokens.pop(victim_id)
                step.new_block_ids.pop(victim_id)
                step.spec_decode_tokens.pop(victim_id, None)
                # Its blocks were cached for tokens it will not compute now.
                self.kv_cache_manager.preempted_mid_step(victim)
                req_index -= 1
            elif victim_index < req_index and self._victim_cursor_by_position:
                # Switch E: an earlier victim that was not scheduled (skipped)
                # moves the cursor back too (vLLM >= 0.28); 0.19.1 did not, and
                # skipped the request after this one for the step.
                req_index -= 1
            self._preempt(victim)
            step.preempted.append(victim)
            if victim is request:
                return None, req_index

    def _schedule_running_request(
        self,
        step: StepPlan,
        request: Request,
        new_blocks: Sequence[KVCacheBlock],
        num_new_tokens: int,
    ) -> None:
        """Put a running request with its new blocks into the step, drafts included."""
        request_id = request.request_id
        step.scheduled_running.append(request)
        step.new_block_ids[request_id] = list(map(_block_id, new_blocks)) or None
        step.num_scheduled_tokens[request_id] = num_new_tokens
        step.token_budget -= num_new_tokens
        if request.spec_token_ids:
            num_spec = (
                num_new_tokens
                + request.num_computed_tokens
                - request.num_tokens
                - request.num_output_placeholders
            )
            if num_spec > 0:
                step.spec_decode_tokens[request_id] = request.spec_token_ids[:num_spec]
            # Fresh drafts arrive with the next model output.
            request.spec_token_ids = []

    def _make_output(self, step: StepPlan) -> SchedulerOutput:
        new_block_ids = step.new_block_ids
        new_reqs = [
            NewRequestData(
                req_id=r.request_id,
                prompt_token_ids=r.prompt_token_ids,
                block_ids=new_block_ids[r.request_id] or [],
                num_computed_tokens=r.num_computed_tokens,
            )
            for r in step.scheduled_new
        ]
        # Parallel lists built whole (one comprehension per field): a running
        # request costs a few C-level appends, not a Python loop body.
        resumed = step.scheduled_resumed
        requests = step.scheduled_running + resumed if resumed else step.scheduled_running
        req_ids = [r.request_id for r in requests]
        cached = CachedRequestData(
            req_ids=req_ids,
            resumed_req_ids={r.request_id for r in resumed},
            new_block_ids=[new_block_ids[request_id] for request_id in req_ids],
            num_computed_tokens=[r.num_computed_tokens for r in requests],
            num_output_tokens=[r.num_output_tokens + r.num_output_placeholders for r in requests],
        )
        return SchedulerOutput(
            scheduled_new_reqs=new_reqs,
            scheduled_cached_reqs=cached,
            num_scheduled_tokens=step.num_scheduled_tokens,
            total_num_scheduled_tokens=sum(step.num_scheduled_tokens.values()),
            scheduled_spec_decode_tokens=step.spec_decode_tokens,
            preempted_req_ids={r.request_id for r in step.preempted},
            finished_req_ids=self.finished_req_ids,
            first_admissions=step.first_admissions,
            recomputed_tokens=step.recomputed_tokens,
        )

    def _advance_after_schedule(self, output: SchedulerOutput) -> None:
        """Scheduled tokens count as computed; after the output is built, so that it
        carries the counts the worker starts from."""
        requests = self.requests
        for request_id, num_tokens in output.num_scheduled_tokens.items():
            requests[request_id].num_computed_tokens += num_tokens
        self._inflight.after_schedule(output.num_scheduled_tokens)
        # A new set: the output keeps the old one.
        self.finished_req_ids = set()

    # ------------------------------------------------------------------
    # Model output
    # ------------------------------------------------------------------

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> list[Request]:
        """Apply a step's sampled tokens; return the requests that finished in it."""
        sampled = model_output.sampled_token_ids
        if self.sessions.stale_outputs:
            sampled = dict(sampled)
            self.sessions.drop_stale(sampled)
        if self.session_stops:
            self.session_stops = {}
        # vLLM's is_prefill_chunk, as the step was scheduled (before the sampled
        # tokens move num_tokens): only drafting steps pay.
        prefill_chunks = (
            self._prefill_chunks(model_output) if model_output.draft_token_ids else None
        )
        kv_output = model_output.kv_connector_output
        # vLLM handles a failed load before the sampled tokens, fails the requests
        # (policy "fail") after them, and then applies the finished transfers.
        to_fail = (
            self._load_failures.handle(
                kv_output.invalid_block_ids, self.skipped_waiting, self.running
            )
            if kv_output is not None and kv_output.invalid_block_ids
            else None
        )
        finished, stopped_running, stopped_waiting = self._apply_sampled(scheduler_output, sampled)
        if finished:
            finished = self._remove_finished(finished, stopped_running, stopped_waiting)
        if to_fail:
            finished += self.finish_requests(to_fail, RequestStatus.FINISHED_ERROR)
        if kv_output is not None:
            self._update_from_kv_transfers(kv_output)
        if prefill_chunks is not None:
            self._take_drafts(model_output, prefill_chunks)
        return finished

    def _apply_sampled(
        self, scheduler_output: SchedulerOutput, sampled: Mapping[str, list[int]]
    ) -> tuple[list[Request], set[Request], set[Request]]:
        """Append each scheduled request's sampled tokens and check its stop conditions:
        the requests that stopped, and of those the ones that were running and the
        ones that were not (a request preempted while its step ran)."""
        # The one-token decode case is inline on purpose: this loop runs per scheduled
        # request per step (4.1 million times on the whole Mooncake trace), and a call
        # there costs ~35 ns each (~0.15 s of the trace's ~17 s,
        # benchmarks/whole_trace.py). Everything off that case is a method.
        spec_tokens = scheduler_output.scheduled_spec_decode_tokens
        requests = self.requests
        max_model_len = self.max_model_len
        finished: list[Request] = []
        stopped_running: set[Request] = set()
        stopped_waiting: set[Request] = set()
        for request_id in scheduler_output.num_scheduled_tokens:
            request = requests.get(request_id)
            if request is None or request.is_finished():
                continue  # aborted while the step ran
            generated = sampled.get(request_id)
            if not generated:
                continue  # a partial prefill chunk samples nothing
            drafts = spec_tokens.get(request_id) if spec_tokens else None
            if not drafts and len(generated) == 1:
                # One token, no drafts (every decode step): _append_and_check_stop inline.
                token_id = generated[0]
                request.append_output_token_ids(token_id)
                if token_id in request.stop_token_ids:
                    stop_status = RequestStatus.FINISHED_STOPPED
                    request.stop_reason = token_id
                elif (
                    request.num_tokens >= max_model_len
                    or request.num_output_tokens >= request.max_tokens
                ):
                    stop_status = RequestStatus.FINISHED_LENGTH_CAPPED
                else:
                    continue
                if request.status == _RUNNING:
                    stopped_running.add(request)
                else:
                    stopped_waiting.add(request)
                request.status = stop_status
                finished.append(request)
                continue
            status_before = request.status
            if self._apply_generated(request, generated, drafts):
                finished.append(request)
                if status_before == _RUNNING:
                    stopped_running.add(request)
                else:
                    stopped_waiting.add(request)
        return finished, stopped_running, stopped_waiting

    def _apply_generated(
        self, request: Request, generated: list[int], drafts: list[int] | None
    ) -> bool:
        """Several tokens or drafts verified: roll back the rejected drafts' computed
        tokens and placeholders, then append; whether the request stopped."""
        if drafts:
            num_rejected = len(drafts) - (len(generated) - 1)
            if request.num_computed_tokens > 0:
                request.num_computed_tokens -= num_rejected
            if request.num_output_placeholders > 0:
                request.num_output_placeholders -= num_rejected
        return self._append_and_check_stop(request, generated)

    def _prefill_chunks(self, model_output: ModelRunnerOutput) -> set[str]:
        """The drafting requests whose step was a partial prefill chunk."""
        requests = self.requests
        chunks: set[str] = set()
        for request_id in model_output.draft_token_ids or ():
            request = requests.get(request_id)
            if request is not None and request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            ):
                chunks.add(request_id)
        return chunks

    def _remove_finished(
        self,
        finished: list[Request],
        stopped_running: set[Request],
        stopped_waiting: set[Request],
    ) -> list[Request]:
        """Take the step's stopped requests out of the queues, then free or retain them;
        a streaming-input session goes on instead (:meth:`Sessions.stop
        <kvframe.core.sessions.Sessions.stop>`). Returns
        the requests that finished."""
        if stopped_running:
            self.running = [r for r in self.running if r not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
        done = finished
        if self.sessions:
            stop = self.sessions.stop
            waiting, skipped, stops = self.waiting, self.skipped_waiting, self.session_stops
            done = [r for r in finished if not (r.resumable and stop(r, waiting, skipped, stops))]
        for request in done:
            self._on_finished(request, allow_retention=True)
        return done

    def _take_drafts(self, model_output: ModelRunnerOutput, prefill_chunks: set[str]) -> None:
        """The draft tokens proposed for next step; a partial prefill's are dropped, as vLLM
        does."""
        requests = self.requests
        draft_token_ids = model_output.draft_token_ids
        if draft_token_ids is None:  # the caller checks; for the type checker (mypyc)
            return
        for request_id, drafts in draft_token_ids.items():
            request = requests.get(request_id)
            if request is None or request.is_finished():
                continue
            request.spec_token_ids = [] if request_id in prefill_chunks else list(drafts)

    def _append_and_check_stop(self, request: Request, generated: list[int]) -> bool:
        """Append tokens one by one; stop at the first that ends the request."""
        max_model_len = self.max_model_len
        stop_token_ids = request.stop_token_ids
        for token_id in generated:
            request.append_output_token_ids(token_id)
            if token_id in stop_token_ids:
                request.status = RequestStatus.FINISHED_STOPPED
                request.stop_reason = token_id
                return True
            if (
                request.num_tokens >= max_model_len
                or request.num_output_tokens >= request.max_tokens
            ):
                request.status = RequestStatus.FINISHED_LENGTH_CAPPED
                return True
        return False

    # ------------------------------------------------------------------
    # Preemption
    # ------------------------------------------------------------------

    def _choose_victim(self) -> Request:
        victim = self.policy.choose_victim(self.running)
        if victim.status != _RUNNING:
            raise PolicyContractError(
                f"scheduling policy {self.policy.name!r}: choose_victim returned request "
                f"{victim.request_id!r} in status {victim.status.name}, not a running request"
            )
        return victim

    def _remove_running(self, victim: Request) -> int:
        running = self.running
        if running and running[-1] is victim:
            running.pop()
            return len(running)
        for index, request in enumerate(running):
            if request is victim:
                del running[index]
                return index
        raise PolicyContractError(
            f"scheduling policy {self.policy.name!r}: choose_victim returned request "
            f"{victim.request_id!r}, which is not in the running list"
        )

    def _preempt(self, request: Request) -> None:
        """Preempt by recompute: free every block and queue the request at the head."""
        self._frees.free(request)
        self._inflight.discard(request.request_id)
        self._computed_before_preemption[request.request_id] = request.num_computed_tokens
        request.status = _PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        # Asynchronous scheduling: the token in flight arrives later as a stale
        # output (appended, nothing cached); vLLM 0.33 resets the count here, 0.19.1
        # when the token arrives -- no decision reads it in between.
        request.num_output_placeholders = 0
        request.num_preemptions += 1
        self.stats.num_preemptions += 1
        self.waiting.prepend_request(request)

    # ------------------------------------------------------------------
    # Introspection
    # ------------------------------------------------------------------

    @property
    def num_retained_blocks(self) -> int:
        """Blocks held by retained requests (shared blocks counted once per holder)."""
        blocks = self.kv_cache_manager.get_blocks
        return sum(len(blocks(request_id)) for request_id in self.retained)

    def reset_prefix_cache(self) -> bool:
        return self.kv_cache_manager.reset_prefix_cache()

    def preempt_all_running(self) -> list[Request]:
        """Preempt every running request, last first (vLLM's order), and return them.

        The first half of vLLM 0.19.1's ``reset_prefix_cache(reset_running_requests=True)``
        (pause and sleep for weight updates): popping from the end of ``running``
        and prepending each to ``waiting`` puts them back in their running order,
        so they are re-admitted first-in first-out. Each is preempted by
        recompute as in a step (blocks freed, ``num_preemptions`` counted).
        """
        preempted = []
        while self.running:
            request = self.running.pop()
            self._preempt(request)
            preempted.append(request)
        return preempted


def _wrong_class(config: SchedulerConfig, cls: type) -> str:
    """The error for a scheduler class that does not match ``config.async_scheduling``."""
    right = "AsyncScheduler" if config.async_scheduling else "Scheduler"
    return (
        f"SchedulerConfig(async_scheduling={config.async_scheduling}) is scheduled by "
        f"{right}, not {cls.__name__}: build it with "
        "kvframe.core.factory.make_scheduler(config, policy, ...)"
    )


def _block_hasher(
    config: SchedulerConfig, connector: SchedulerConnector | None
) -> Callable[[Request], list[BlockHash]] | None:
    """The block hasher of a scheduler's requests, or ``None`` when nothing looks blocks
    up by hash (neither the GPU prefix cache nor an offload tier behind a connector)."""
    if not (config.enable_prefix_caching or connector is not None):
        return None
    return make_block_hasher(
        config.block_size,
        config.hash_seed,
        # The core setting covers the hasher too: python forces Python, and
        # otherwise the compiled hasher runs where it is built.
        core="python" if resolve_core(config.core) == "python" else "auto",
    )


def _kv_cache_manager(
    config: SchedulerConfig,
    eviction_policy: EvictionPolicy | None,
    connector: SchedulerConnector | None = None,
) -> KVCacheManager:
    """The GPU KV cache a scheduler with ``config`` manages: the one-group manager, or
    for several KV-cache groups the hybrid one (chosen once, here)."""
    if config.is_hybrid:
        return _hybrid_kv_cache_manager(config, eviction_policy, connector)
    return KVCacheManager(
        num_gpu_blocks=config.num_gpu_blocks,
        block_size=config.block_size,
        max_model_len=config.max_model_len,
        enable_caching=config.enable_prefix_caching,
        enable_kv_cache_events=config.enable_kv_cache_events,
        eviction_policy=eviction_policy,
        use_eagle=config.use_eagle,
        decode_lookahead=config.num_lookahead_tokens,
        uncached_freed_first=config.fidelity.uncached_freed_first,
        rollback_uncomputed_blocks=config.rollback_uncomputed_blocks,
        core=config.core,
    )


def _hybrid_kv_cache_manager(
    config: SchedulerConfig,
    eviction_policy: EvictionPolicy | None,
    connector: SchedulerConnector | None,
) -> KVCacheManager:
    """The manager of several KV-cache groups, refusing what it does not model."""
    if connector is not None:
        raise ValueError(
            "a connector (offload tier, P/D) with several KV-cache groups is not modelled "
            "yet (kv_cache_config is hybrid)"
        )
    assert config.kv_cache_config is not None
    fidelity = config.fidelity
    in_flight = config.max_num_batched_tokens * (2 if config.async_scheduling else 1)
    counted = fidelity.groups_skip_processed_only and config.async_scheduling
    manager = HybridKVCacheManager(
        config.kv_cache_config,
        config.block_size,
        config.max_model_len,
        enable_caching=config.enable_prefix_caching,
        enable_kv_cache_events=config.enable_kv_cache_events,
        use_eagle=config.use_eagle,
        uncached_freed_first=fidelity.uncached_freed_first,
        admission_cap_in_flight=in_flight if fidelity.groups_admission_cap else None,  # G1
        inflight_tokens=CountedInflightTokens() if counted else InflightTokens(),  # G2
        mamba_caching_needs_align=fidelity.groups_mamba_caching_needs_align,  # G3
        eviction_policy=eviction_policy,
        core=config.core,
    )
    return manager  # type: ignore[return-value]  # the same methods, per group
