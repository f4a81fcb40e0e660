"""vLLM's scheduler interface with kvframe's scheduler and KV-cache core behind it.

vLLM 0.19.1 and 0.33.0 build their scheduler from ``SchedulerConfig.scheduler_cls``
(``--scheduler-cls kvframe_vllm.scheduler.KvframeScheduler``); where the two
releases' interfaces differ, :mod:`kvframe_vllm.compat` answers, and kvframe's
core follows the decision rules of the release it runs in.
:class:`KvframeScheduler` implements vLLM's ``SchedulerInterface`` by running
kvframe's own :class:`~kvframe.core.scheduler.Scheduler` -- the one the
differential harness proves makes vLLM's decisions -- with a kvframe scheduling
policy chosen by config string in ``VllmConfig.additional_config``::

    --additional-config '{"kvframe_scheduler": "continuum:max_ttl=10"}'

Why kvframe's core behind vLLM's interface, rather than a subclass of vLLM's
``Scheduler`` with hooks at its policy points: vLLM's ``schedule()`` decides
the preemption victim and frees finished requests inline, so a subclass could
only swap the waiting queue. A policy that picks its own victims or keeps a
finished request's blocks (Continuum's pinning) needs the places the Continuum
fork edited in twelve spots; kvframe's core already has them as policy calls.
The price is a translation at the boundary, once per step, in this module:

* **in**: vLLM ``Request`` -> kvframe ``Request`` (prompt, ``max_tokens``,
  ``priority``, ``arrival_time``, ``cache_salt``, EOS and stop token ids, and
  the agentic fields from ``sampling_params.extra_args``: ``kvframe_job_id``,
  ``kvframe_turn``, ``kvframe_last_turn``, ``kvframe_tool`` -- flat keys,
  because that is what an OpenAI-API client can send, as ``vllm_xargs``);
* **out**: kvframe's step decision -> vLLM ``SchedulerOutput``
  (``NewRequestData`` / ``CachedRequestData`` with block ids, scheduled token
  counts, preempted and finished ids), and after the model ran, vLLM
  ``ModelRunnerOutput`` -> kvframe -> ``EngineCoreOutputs``. The vLLM
  ``Request`` objects are kept in step (``num_computed_tokens``, status, output
  tokens, cached-token counts) because vLLM's engine and output processor
  read them.

Asynchronous scheduling (vLLM's default, ``--no-async-scheduling`` to turn it
off) is kvframe's core in its async mode, which makes the decisions of vLLM
0.19.1's ``AsyncScheduler``: output placeholders, the one-step lag, and a
reset with running requests dropping each one's next token.

Features kvframe does not model are refused (:mod:`kvframe_vllm.refusals`;
KV connectors other than the OffloadingConnector, which the bridge drives
through :mod:`kvframe_vllm.tier`, included):
engine-wide ones stop vLLM at start-up naming the flag that turns each off;
a request the bridge cannot serve (structured output, ``min_tokens``, a bad
``kvframe_*`` key, a duplicate id) is finished with
``FINISHED_ERROR`` and the reason -- the engine never dies of a request.
Streaming-input requests (``resumable``) are kvframe's core's sessions
(:mod:`kvframe.core.sessions`), vLLM's request objects kept in step by
:mod:`kvframe_vllm.sessions`.
Pause states, ``reset_prefix_cache`` with running requests, per-step
``SchedulerStats`` with prefix-cache counters and the per-request
``QUEUED``/``SCHEDULED``/``PREEMPTED`` events follow vLLM 0.19.1's
``Scheduler`` (:mod:`kvframe_vllm.stats`); KV-cache events go out through
vLLM's publisher, on vLLM's own block hashes (:mod:`kvframe_vllm.kv_events`).

This module imports vLLM; outside kvframe_vllm nothing in kvframe does.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs
import structlog
from vllm.distributed.kv_events import EventPublisherFactory, KVEventBatch
from vllm.v1.core.sched.interface import PauseState, SchedulerInterface
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
from vllm.v1.metrics.stats import PrefixCacheStats, SchedulerStats
from vllm.v1.request import RequestStatus as VllmStatus

import kvframe
from kvframe.config import ConfigError
from kvframe.core.factory import make_scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import KVConnectorOutput as KvConnectorOutput
from kvframe.core.scheduler_output import ModelRunnerOutput as KvModelRunnerOutput
from kvframe.domain.fidelity import fidelity_for
from kvframe.domain.request import Request as KvRequest
from kvframe.domain.request import RequestStatus as KvStatus
from kvframe_vllm import compat, sessions, tier
from kvframe_vllm.kv_events import KvEventLedger, VllmBlockHashes
from kvframe_vllm.refusals import (
    RefusedRequests,
    UnsupportedByKvframe,
    refuse_config,
    refuse_kv_cache_layout,
    request_refusal,
)
from kvframe_vllm.stats import AdmissionLookups, RequestEvents, scheduler_stats

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

__all__ = ["SCHEDULER_KEY", "KvframeScheduler", "UnsupportedByKvframe"]

log = structlog.get_logger(__name__)

SCHEDULER_KEY = "kvframe_scheduler"
"""The ``additional_config`` key naming the kvframe scheduling policy."""
AGENTIC_KEYS = {
    "kvframe_job_id": "job_id",
    "kvframe_turn": "turn",
    "kvframe_last_turn": "is_last_turn",
    "kvframe_tool": "tool_name",
}
"""``sampling_params.extra_args`` keys carrying a request's job and turn -> kvframe's names."""

_TO_VLLM_STATUS = {status: VllmStatus[status.name] for status in KvStatus}
_TO_KV_STATUS = {VllmStatus[status.name]: status for status in KvStatus}


def _agentic_fields(request_id: str, extra_args: dict[str, Any]) -> dict[str, Any]:
    """The kvframe ``Request`` keywords of an agent turn, from ``extra_args``."""
    given = {k: v for k, v in extra_args.items() if k.startswith("kvframe_")}
    unknown = sorted(set(given) - set(AGENTIC_KEYS))
    if unknown:
        raise ValueError(
            f"request {request_id!r}: unknown extra_args {unknown}; kvframe reads "
            + ", ".join(AGENTIC_KEYS)
        )
    fields = {AGENTIC_KEYS[k]: v for k, v in given.items()}
    if "job_id" in fields:
        fields["job_id"] = str(fields["job_id"])
    if "turn" in fields:
        fields["turn"] = int(fields["turn"])
    if "is_last_turn" in fields:
        last = fields["is_last_turn"]
        if isinstance(last, str):
            if last.lower() not in ("true", "false", "1", "0"):
                raise ValueError(
                    f"request {request_id!r}: kvframe_last_turn must be true/false/1/0, "
                    f"not {last!r}"
                )
            last = last.lower() in ("true", "1")
        fields["is_last_turn"] = bool(last)
    return fields


def _resolve_policy(vllm_config: VllmConfig) -> Any:
    """The kvframe policy: ``kvframe_scheduler`` if given, else vLLM's ``--scheduling-policy``.

    vLLM's ``priority`` maps to kvframe's ``priority`` plugin (the same heap
    order and victim rule), its ``fcfs`` to ``fcfs``; an explicit
    ``kvframe_scheduler`` wins.
    """
    spec = (vllm_config.additional_config or {}).get(SCHEDULER_KEY)
    if spec is None:
        spec = "priority" if str(vllm_config.scheduler_config.policy) == "priority" else "fcfs"
    try:
        return kvframe.get_registry().resolve("scheduling", str(spec)).create()
    except ConfigError as err:
        err.origin = err.origin or f"additional_config[{SCHEDULER_KEY!r}]"
        raise


def _kvframe_config(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> SchedulerConfig:
    sched = vllm_config.scheduler_config
    cache = vllm_config.cache_config
    return SchedulerConfig(
        block_size=kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size,
        num_gpu_blocks=kv_cache_config.num_blocks,
        max_num_batched_tokens=sched.max_num_scheduled_tokens or sched.max_num_batched_tokens,
        max_num_seqs=sched.max_num_seqs,
        max_model_len=vllm_config.model_config.max_model_len,
        long_prefill_token_threshold=sched.long_prefill_token_threshold,
        enable_chunked_prefill=sched.enable_chunked_prefill,
        enable_prefix_caching=bool(cache.enable_prefix_caching),
        reserve_full_sequence=sched.scheduler_reserve_full_isl,
        enable_kv_cache_events=_kv_events_enabled(vllm_config),
        # Every release difference in one Fidelity, resolved once: the release's
        # switches, with C (resumed requests sent as new) from the worker in use.
        fidelity=attrs.evolve(
            fidelity_for(compat.fidelity_target() or "0.19.1"),
            resumed_sent_as_new=compat.uses_v2_model_runner(vllm_config),
        ),
        # vLLM's AsyncScheduler (its default): make_scheduler then builds kvframe's
        # AsyncScheduler, which adds the output placeholders itself and takes each
        # step's tokens one step late.
        async_scheduling=bool(sched.async_scheduling),
    )


def _kv_events_enabled(vllm_config: VllmConfig) -> bool:
    events = vllm_config.kv_events_config
    return events is not None and bool(events.enable_kv_cache_events)


class KvframeScheduler(SchedulerInterface):
    """vLLM's ``SchedulerInterface`` answered by kvframe's scheduler and a kvframe policy."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        kv_cache_config: KVCacheConfig,
        structured_output_manager: Any,
        block_size: int,
        mm_registry: Any = None,
        include_finished_set: bool = False,
        log_stats: bool = False,
        hash_block_size: int | None = None,
    ) -> None:
        """``hash_block_size``: vLLM 0.33's request-hasher block size (0.19.1 passes none)."""
        if hash_block_size is not None and hash_block_size != block_size:
            raise UnsupportedByKvframe(
                f"the kvframe scheduler hashes whole blocks of {block_size} tokens; vLLM "
                f"asked for a hash block size of {hash_block_size}"
            )
        refuse_config(vllm_config)
        refuse_kv_cache_layout(kv_cache_config)
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        self.log_stats = log_stats
        self.requests: dict[str, Request] = {}
        """Unfinished requests, vLLM's objects (kvframe's are in ``core.requests``)."""
        self.connector = None
        """vLLM's KV connector, scheduler half (vLLM's engine reads it): the
        OffloadingConnector when ``kv_transfer_config`` names it, else None."""
        self.tier: tier.VllmConnector | None = None
        """kvframe's view of ``connector`` (:mod:`kvframe_vllm.tier`)."""
        self._build_tier(vllm_config, kv_cache_config)
        self.ec_connector = None
        """vLLM 0.33's engine reads this too (no encoder-cache connector)."""
        self.policy = _resolve_policy(vllm_config)
        self.core = make_scheduler(
            _kvframe_config(vllm_config, kv_cache_config), self.policy, connector=self.tier
        )
        self.use_v2_model_runner = self.core.config.fidelity.resumed_sent_as_new
        """Fidelity switch C: Model Runner V2 takes resumed requests as new ones (see
        ``schedule``)."""
        self.clock: Callable[[], float] = time.time
        """The time handed to kvframe each step (policies' deadlines, TTLs).
        vLLM stamps ``arrival_time`` with ``time.time()``; tests substitute a step clock."""
        self.finished_req_ids_dict: dict[int, set[str]] | None = (
            defaultdict(set) if include_finished_set else None
        )
        self.refused = RefusedRequests()
        self._build_observers(vllm_config, log_stats)
        self._pending: dict[int, Any] = {}
        """id(vLLM SchedulerOutput) -> kvframe's output of the same step."""
        self._prev_step_scheduled: set[str] = set()
        self._drop_next_token: dict[str, int] = {}
        """Async: requests whose next sampled tokens a reset drops, and how many."""
        self._reset_preempted: set[str] = set()
        """Requests a reset preempted since the last step: vLLM 0.33 lists them in the
        next step's ``preempted_req_ids`` (0.19.1 lists only the step's own)."""
        self._hashed_before_free: dict[str, int] = {}
        """Hashed tokens per request before this update (see ``_hashed_tokens``)."""
        self._pause_state = PauseState.UNPAUSED
        self.sessions = sessions.VllmSessions(self)
        """Streaming-input sessions on vLLM's side (:mod:`kvframe_vllm.sessions`)."""

    def _build_tier(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> None:
        """vLLM's OffloadingConnector and kvframe's view of it, when ``kv_transfer_config``
        names one (:func:`kvframe_vllm.refusals.refuse_config` refused any other)."""
        if vllm_config.kv_transfer_config is not None:
            self.connector = tier.build_connector(vllm_config, kv_cache_config)
            self.tier = compat.tier_connector(self.connector, self.requests, self._block_ids)
            if self.log_stats:
                self.tier.prefix_stats = PrefixCacheStats()

    def _build_observers(self, vllm_config: VllmConfig, log_stats: bool) -> None:
        """What reports on the steps: KV-cache events, request events, prefix-cache
        counters and vLLM's MFU metrics."""
        # KV-cache events (--kv-events-config): kvframe's, with vLLM's hashes, as
        # vLLM's batches through vLLM's publisher.
        self.kv_event_publisher = EventPublisherFactory.create(
            vllm_config.kv_events_config, vllm_config.parallel_config.data_parallel_index
        )
        self.kv_events: KvEventLedger | None = (
            KvEventLedger(
                self.core.block_size,
                self.core.kv_cache_manager.block_pool,
                compat.event_fields(self.kv_cache_config),
            )
            if _kv_events_enabled(vllm_config)
            else None
        )
        self.events = RequestEvents(log_stats)
        self.admissions = (
            AdmissionLookups(self.core) if compat.lookups_counted_at_admission() else None
        )
        """vLLM 0.33's prefix-cache counters (one lookup per admission); 0.19.1's are
        kvframe's ``KVCacheManager`` counters."""
        self.perf_metrics: Any = None
        if log_stats and vllm_config.observability_config.enable_mfu_metrics:
            from vllm.v1.metrics.perf import ModelMetrics

            self.perf_metrics = ModelMetrics(vllm_config)

    # -- requests in -------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue a request, or finish it with an error if the bridge cannot serve it.

        A request with the id of a live streaming-input session is its next input
        chunk (the closing one when it is not ``resumable``), as in vLLM.
        """
        reason = self._refusal(request)
        if reason is not None:
            if request.request_id in self.requests:
                # A duplicate id: the one error output the front end gets for this
                # id finishes the live request too, so engine and front end agree.
                self.finish_requests(request.request_id, VllmStatus.FINISHED_ERROR)
            self.refused.refuse(request, reason)
            return
        if request.request_id in self.requests:
            self.sessions.add_input(request)
            return
        params = request.sampling_params
        assert params is not None
        # Prefix caching keys on vLLM's own block hashes of the request.
        hasher = (
            VllmBlockHashes(self.core.block_size, request, self.kv_events)
            if self.core.block_hasher is not None and request._block_hasher is not None
            else None
        )
        kv_request = KvRequest(
            request.request_id,
            request.prompt_token_ids or [],
            request.max_tokens,
            arrival_time=request.arrival_time,
            priority=request.priority,
            cache_salt=request.cache_salt,
            stop_token_ids=sessions.stop_token_ids(params),
            block_hasher=hasher,
            resumable=request.resumable,
            **_agentic_fields(request.request_id, params.extra_args or {}),
        )
        if request.resumable:
            request.streaming_queue = deque()  # vLLM's updates, beside kvframe's chunks
        self.core.add_request(kv_request)
        self.requests[request.request_id] = request
        if self.tier is not None:
            self.tier.on_new_request(request)
        self.events.queued(request)

    def _refusal(self, request: Request) -> str | None:
        """Why ``request`` cannot be served, or ``None``."""
        rid = request.request_id
        if (rid in self.requests or rid in self.core.requests) and not self.sessions.is_session(
            rid
        ):
            # vLLM takes a second request with a live id as streaming input, and
            # asserts (killing the engine) when the first was not streaming.
            return f"request id {rid!r} is already being served; both are finished"
        reason = request_refusal(request)
        if reason is not None:
            return reason
        params = request.sampling_params
        try:
            _agentic_fields(rid, (params.extra_args if params is not None else None) or {})
        except (TypeError, ValueError) as err:
            return str(err)
        return None

    # -- one step ----------------------------------------------------------------

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        """One step. ``throttle_prefills`` (vLLM 0.33, data-parallel prefill balancing)
        is only ever set with ``--prefill-schedule-interval`` > 1, which is refused."""
        timestamp = time.monotonic()
        pause = self._pause_state
        in_flight = self._placeholders() if self.core.async_scheduling else None
        out = self.core.schedule(
            self.clock(),
            # vLLM 0.19.1: PAUSED_ALL schedules with no token budget, and only
            # UNPAUSED admits waiting requests.
            token_budget=0 if pause == PauseState.PAUSED_ALL else None,
            admit_waiting=pause == PauseState.UNPAUSED,
        )
        admitted = [self.requests[data.req_id] for data in out.scheduled_new_reqs]
        resumed = [self.requests[rid] for rid in out.scheduled_cached_reqs.resumed_req_ids]
        self.sessions.scheduled(admitted)
        vllm_out = self._scheduler_output(out, admitted)
        # vLLM's engine and output processor read these off its own requests.
        self._sync_requests()
        if in_flight is not None:
            self._mark_prefill_chunks(out.num_scheduled_tokens, in_flight)
        self._after_step(out, timestamp, [*admitted, *resumed])
        self._pending[id(vllm_out)] = out
        return vllm_out

    def _scheduler_output(self, out: Any, admitted: list[Request]) -> SchedulerOutput:
        """vLLM's ``SchedulerOutput`` of kvframe's step decision ``out``, with the
        connector's metadata when a tier is on."""
        requests = self.requests
        v2 = self.use_v2_model_runner
        new_reqs: list[NewRequestData] = []
        for request, data in zip(admitted, out.scheduled_new_reqs, strict=True):
            request.num_computed_tokens = data.num_computed_tokens
            new_reqs.append(
                NewRequestData.from_request(
                    request, (list(data.block_ids),), request._all_token_ids if v2 else None
                )
            )
        for hit in out.first_admissions:
            compat.record_first_admission(
                requests[hit.req_id], hit.local_hit_tokens, hit.external_hit_tokens
            )
        cached = out.scheduled_cached_reqs
        cached_data = self._cached_request_data(cached, new_reqs)
        vllm_out = SchedulerOutput(
            scheduled_new_reqs=new_reqs,
            scheduled_cached_reqs=cached_data,
            num_scheduled_tokens=dict(out.num_scheduled_tokens),
            total_num_scheduled_tokens=out.total_num_scheduled_tokens,
            scheduled_spec_decode_tokens={},
            scheduled_encoder_inputs={},
            # The cascade-attention hint as the release computes it (0.33: none).
            num_common_prefix_blocks=compat.common_prefix_blocks(
                self.core.kv_cache_manager, self.core.running
            ),
            preempted_req_ids={*self._reset_preempted, *out.preempted_req_ids},
            finished_req_ids=set(out.finished_req_ids),
            free_encoder_mm_hashes=[],
        )
        if self.tier is not None:
            # vLLM's scheduler builds the connector's metadata before it adds the
            # step's tokens to its requests' computed counts: so does the bridge.
            for rid, computed in zip(cached.req_ids, cached.num_computed_tokens, strict=True):
                requests[rid].num_computed_tokens = computed
            vllm_out.kv_connector_metadata = self.tier.build_vllm_meta(vllm_out)
        return vllm_out

    def _after_step(self, out: Any, timestamp: float, admitted: list[Request]) -> None:
        """A step's bookkeeping: request events (``admitted``: new and resumed), what
        the next step compares against, and vLLM 0.33's admission counters."""
        requests = self.requests
        self.events.step(
            timestamp,
            preempted=[requests[rid] for rid in out.preempted_req_ids if rid in requests],
            admitted=admitted,
        )
        self._prev_step_scheduled = set(out.num_scheduled_tokens)
        self._reset_preempted = set()
        if self.admissions is not None:
            self.admissions.step(self.core, len(out.first_admissions), len(out.recomputed_tokens))

    def _sync_requests(self) -> None:
        """Copy kvframe's request state onto vLLM's requests (its engine reads them)."""
        kv_requests = self.core.requests
        for rid, request in self.requests.items():
            kv_request = kv_requests.get(rid)
            if kv_request is None:
                continue
            request.status = _TO_VLLM_STATUS[kv_request.status]
            request.num_computed_tokens = kv_request.num_computed_tokens
            request.num_preemptions = kv_request.num_preemptions
            request.num_output_placeholders = kv_request.num_output_placeholders
            request.num_external_computed_tokens = kv_request.num_external_computed_tokens
            if not compat.INTERFACE_033 and kv_request.num_cached_tokens >= 0:
                request.num_cached_tokens = kv_request.num_cached_tokens

    def _cached_request_data(
        self, cached: Any, new_reqs: list[NewRequestData]
    ) -> CachedRequestData:
        """vLLM's ``CachedRequestData`` of kvframe's; under Model Runner V2 (fidelity
        switch C) a resumed request moves to ``new_reqs`` with its whole token list and
        block table, after the new requests, as vLLM's scheduler sends it."""
        requests = self.requests
        req_ids: list[str] = []
        resumed: set[str] = set()
        new_block_ids: list[tuple[list[int], ...] | None] = []
        num_computed: list[int] = []
        num_output: list[int] = []
        v2 = self.use_v2_model_runner
        for rid, ids, computed, outputs in zip(
            cached.req_ids,
            cached.new_block_ids,
            cached.num_computed_tokens,
            cached.num_output_tokens,
            strict=True,
        ):
            block_ids = None if ids is None else (list(ids),)
            if rid in cached.resumed_req_ids:
                if v2:
                    request = requests[rid]
                    request.num_computed_tokens = computed
                    assert block_ids is not None  # a resumed request gets its whole table
                    new_reqs.append(
                        NewRequestData.from_request(request, block_ids, request._all_token_ids)
                    )
                    continue
                resumed.add(rid)
            req_ids.append(rid)
            new_block_ids.append(block_ids)
            num_computed.append(computed)
            num_output.append(outputs)
        all_token_ids = (
            {}
            if v2
            else {
                rid: list(requests[rid].all_token_ids)
                for rid in req_ids
                if rid not in self._prev_step_scheduled
            }
        )
        return CachedRequestData(
            req_ids=req_ids,
            resumed_req_ids=resumed,
            new_token_ids=[],
            all_token_ids=all_token_ids,
            new_block_ids=new_block_ids,
            num_computed_tokens=num_computed,
            num_output_tokens=num_output,
        )

    def _placeholders(self) -> dict[str, int]:
        """Asynchronous scheduling: the tokens in flight per running request, before a step."""
        return {
            r.request_id: r.num_output_placeholders
            for r in self.core.running
            if r.num_output_placeholders
        }

    def _mark_prefill_chunks(
        self, num_scheduled_tokens: dict[str, int], in_flight: dict[str, int]
    ) -> None:
        """Set vLLM's ``is_prefill_chunk`` on the step's requests as vLLM 0.19.1 does:
        before the step's own placeholder, a request whose computed tokens fall
        short of its tokens plus those in flight samples nothing this step."""
        kv_requests = self.core.requests
        for rid in num_scheduled_tokens:
            kv_request = kv_requests[rid]
            self.requests[rid].is_prefill_chunk = kv_request.num_computed_tokens < (
                kv_request.num_tokens + in_flight.get(rid, 0)
            )

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        """After the model ran: kvframe's core takes the step's tokens, vLLM gets its outputs.

        Phases: the sampled tokens (:meth:`_sampled_tokens`), kvframe's update, one
        output per request (:meth:`_request_output`), the refused requests and KV
        events, then the per-client outputs with finished ids and stats
        (:meth:`_engine_outputs`).
        """
        perf_stats = None
        if self.perf_metrics is not None and self.perf_metrics.is_enabled():
            perf_stats = self.perf_metrics.get_step_perf_stats_per_gpu(scheduler_output)
        kv_out = self._pending.pop(id(scheduler_output))
        self._note_hashed_before_free(scheduler_output)
        sampled = self._sampled_tokens(scheduler_output, model_runner_output)
        finished = {
            r.request_id: r
            for r in self.core.update_from_output(
                kv_out,
                KvModelRunnerOutput(
                    sampled_token_ids=sampled,
                    kv_connector_output=self._worker_transfers(model_runner_output),
                ),
            )
        }
        # Streaming-input sessions that stopped and go on: their turn's finish
        # reason, and vLLM's request brought to the next chunk as vLLM does.
        session_turns = self.sessions.stopped(self.core.session_stops)
        outputs: dict[int, list[EngineCoreOutput]] = defaultdict(list)
        for rid in scheduler_output.num_scheduled_tokens:
            request = self.requests.get(rid)
            if request is None:
                continue  # aborted while the step ran
            new_token_ids, done = sampled.get(rid, []), finished.get(rid)
            output = self._request_output(
                request, model_runner_output, new_token_ids, done, session_turns.get(rid)
            )
            if output is not None:
                outputs[request.client_index].append(output)
        # Requests refused at add_request: finished with an error, as vLLM
        # finishes a request whose KV load failed.
        for client, errors in self.refused.take_outputs().items():
            outputs[client].extend(errors)
            if self.finished_req_ids_dict is not None:
                self.finished_req_ids_dict[client].update(e.request_id for e in errors)
        self._publish_events()
        return self._engine_outputs(outputs, model_runner_output, perf_stats)

    def _publish_events(self) -> None:
        """The step's KV events as one batch, as vLLM's scheduler publishes them:
        the GPU cache's (kvframe's, translated), then the connector's (its tier's)."""
        events = (
            self.kv_events.translate(self.core.kv_cache_manager.take_events())
            if self.kv_events is not None
            else []
        )
        if self.tier is not None:
            events.extend(self.tier.take_events())
        if events:
            self.kv_event_publisher.publish(KVEventBatch(ts=time.time(), events=events))

    def _note_hashed_before_free(self, scheduler_output: SchedulerOutput) -> None:
        """The hashed tokens of each scheduled request whose first output is still to
        come (vLLM 0.33's ``PrefillStats``): a request that finishes with that output
        is freed by kvframe's core before the output is built, and vLLM counts the
        blocks it cached as cache-creation tokens before it frees them."""
        requests = self.requests
        self._hashed_before_free = {
            rid: self._hashed_tokens(rid)
            for rid in scheduler_output.num_scheduled_tokens
            if rid in requests and compat.prefill_stats_pending(requests[rid])
        }

    def _sampled_tokens(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[str, list[int]]:
        """The step's sampled tokens per request, less those discarded (a stopped
        session's, a reset's), appended to vLLM's requests."""
        index = model_runner_output.req_id_to_index
        sampled_lists = model_runner_output.sampled_token_ids
        sampled = {
            rid: list(sampled_lists[index[rid]])
            for rid in scheduler_output.num_scheduled_tokens
            if rid in index and sampled_lists and sampled_lists[index[rid]]
        }
        # vLLM 0.33: a stopped session's outputs in flight are discarded.
        self.core.sessions.drop_stale(sampled)
        if self._drop_next_token:
            drop = self._drop_next_token
            for rid in drop.keys() & sampled.keys():
                del sampled[rid]
                if drop[rid] > 1:
                    drop[rid] -= 1
                else:
                    del drop[rid]
        # vLLM's requests first: appending hashes their filled blocks, which
        # kvframe's requests then take (VllmBlockHashes).
        for rid, new_token_ids in sampled.items():
            request = self.requests.get(rid)
            if request is not None:
                request.append_output_token_ids(new_token_ids)
        return sampled

    def _request_output(
        self,
        request: Request,
        model_runner_output: ModelRunnerOutput,
        new_token_ids: list[int],
        done: KvRequest | None,
        finish_reason: Any,
    ) -> EngineCoreOutput | None:
        """One scheduled request's output (``None`` if it has neither tokens nor a finish);
        ``done``: kvframe's request if it finished this step, which then leaves the bridge."""
        rid = request.request_id
        if done is not None:
            finish_reason = self._finished(request, done)
        if not new_token_ids and finish_reason is None:
            return None
        logprobs = model_runner_output.logprobs
        new_logprobs = None
        if request.sampling_params.logprobs is not None and logprobs and new_token_ids:
            index = model_runner_output.req_id_to_index[rid]
            new_logprobs = logprobs.slice_request(index, len(new_token_ids))
        prompt_logprobs = model_runner_output.prompt_logprobs_dict or {}
        return EngineCoreOutput(
            request_id=rid,
            new_token_ids=new_token_ids,
            finish_reason=finish_reason,
            new_logprobs=new_logprobs,
            new_prompt_logprobs_tensors=prompt_logprobs.get(rid),
            stop_reason=request.stop_reason,
            events=request.take_events(),
            trace_headers=request.trace_headers,
            kv_transfer_params=self._kv_transfer_params(rid),
            **compat.cached_tokens_output(request, self._hashed_tokens),
        )

    def _finished(self, request: Request, done: KvRequest) -> Any:
        """vLLM's request finished as kvframe's ``done`` did; it leaves the bridge.
        Returns vLLM's finish reason."""
        rid = request.request_id
        request.status = _TO_VLLM_STATUS[done.status]
        # vLLM names the stop token, except for EOS (check_stop).
        eos = request.sampling_params.eos_token_id
        stop_reason = done.stop_reason
        request.stop_reason = None if stop_reason == eos else stop_reason
        finish_reason = request.get_finished_reason()
        del self.requests[rid]
        self.sessions.forget(rid)
        self._drop_next_token.pop(rid, None)
        if self.kv_events is not None:
            self.kv_events.released(done)
        if self.finished_req_ids_dict is not None:
            self.finished_req_ids_dict[request.client_index].add(rid)
        return finish_reason

    def _engine_outputs(
        self,
        outputs: dict[int, list[EngineCoreOutput]],
        model_runner_output: ModelRunnerOutput,
        perf_stats: Any,
    ) -> dict[int, EngineCoreOutputs]:
        """The step's ``EngineCoreOutputs`` per client, with finished ids and stats."""
        engine_outputs = {
            client: EngineCoreOutputs(outputs=outs) for client, outs in outputs.items()
        }
        if self.finished_req_ids_dict:
            for client, ids in self.finished_req_ids_dict.items():
                if client in engine_outputs:
                    engine_outputs[client].finished_requests = ids
                else:
                    engine_outputs[client] = EngineCoreOutputs(finished_requests=ids)
            self.finished_req_ids_dict.clear()
        report = model_runner_output.kv_connector_output
        stats = self.make_stats(
            kv_connector_stats=None
            if self.tier is None
            else self.tier.step_stats(report.kv_connector_stats if report else None),
            cudagraph_stats=model_runner_output.cudagraph_stats,
            perf_stats=perf_stats,
        )
        if stats is not None:
            # vLLM returns stats every step, to one front end, even with no outputs.
            eco = next(iter(engine_outputs.values()), None)
            if eco is None:
                engine_outputs[0] = eco = EngineCoreOutputs()
            eco.scheduler_stats = stats
        return engine_outputs

    def _worker_transfers(self, model_runner_output: ModelRunnerOutput) -> Any:
        """The worker's finished transfers for kvframe's core; vLLM's report goes to
        vLLM's connector unchanged (through :class:`kvframe_vllm.tier.VllmConnector`)."""
        report = model_runner_output.kv_connector_output
        if self.tier is None or report is None:
            return None
        if report.invalid_block_ids:
            raise UnsupportedByKvframe(
                f"the KV connector failed to load blocks {sorted(report.invalid_block_ids)}; "
                "the kvframe scheduler does not model KV-load failures"
            )
        self.tier.set_worker_output(report)
        return KvConnectorOutput(
            finished_sending=set(report.finished_sending or ()),
            finished_recving=set(report.finished_recving or ()),
        )

    # -- requests out --------------------------------------------------------------

    def finish_requests(
        self, request_ids: str | Iterable[str] | None, finished_status: VllmStatus
    ) -> list[tuple[str, int]]:
        if isinstance(request_ids, str):
            request_ids = (request_ids,)
        ids = list(self.requests) if request_ids is None else list(request_ids)
        # A status kvframe has no name for (FINISHED_ERROR, ...) is an abort to it:
        # the blocks are freed and nothing is retained.
        kv_status = _TO_KV_STATUS.get(finished_status, KvStatus.FINISHED_ABORTED)
        done = self.core.finish_requests(ids, kv_status)
        result = []
        for kv_request in done:
            request = self.requests.pop(kv_request.request_id, None)
            if request is None:
                continue
            self._drop_next_token.pop(request.request_id, None)
            self.sessions.forget(request.request_id)
            if self.kv_events is not None:
                self.kv_events.released(kv_request)
            request.status = finished_status
            result.append(request)
            if self.finished_req_ids_dict is not None:
                self.finished_req_ids_dict[request.client_index].add(request.request_id)
        return compat.finish_result(result)

    def has_request(self, request_id: str) -> bool:
        return request_id in self.requests

    def get_kv_cache_usage(self) -> float:
        return self.core.kv_cache_manager.usage

    def _hashed_tokens(self, request_id: str) -> int:
        """Tokens of the request's blocks findable in the prefix cache (vLLM 0.33's
        ``estimate_cached_tokens``; a request's hashed blocks are a prefix of its table).
        A request kvframe's core freed in this update (one that finished with its
        first output) counts the blocks it held before (vLLM reads them before it
        frees the request)."""
        if request_id not in self.core.requests:
            return self._hashed_before_free.get(request_id, 0)
        blocks = self.core.kv_cache_manager.get_blocks(request_id)
        hashed = sum(1 for block in blocks if block.block_hash is not None)
        return hashed * self.core.config.block_size

    def _block_ids(self, request_id: str) -> list[int]:
        """A request's block table in kvframe's core (vLLM 0.33's connector block view)."""
        return self.core.kv_cache_manager.get_block_ids(request_id)

    def _kv_transfer_params(self, request_id: str) -> dict[str, Any] | None:
        if self.tier is None:
            return None
        return self.tier.kv_transfer_params.pop(request_id, None)

    def get_kv_connector(self) -> Any:
        return self.connector

    def get_num_unfinished_requests(self) -> int:
        # Paused, only what may still run counts as unfinished; sessions waiting
        # for input never do.
        if self._pause_state == PauseState.PAUSED_ALL:
            return 0
        if self._pause_state == PauseState.PAUSED_NEW:
            return len(self.core.running)
        return self.core.get_num_unfinished_requests()

    def has_finished_requests(self) -> bool:
        return bool(self.core.finished_req_ids) or self.refused.has_pending

    def get_request_counts(self) -> tuple[int, int]:
        return self.core.get_request_counts()

    # -- the rest of the interface ---------------------------------------------------

    def get_grammar_bitmask(self, scheduler_output: SchedulerOutput) -> None:
        return None  # structured output is refused per request

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        return None  # speculative decoding is refused at start-up

    def update_draft_token_ids_in_output(
        self, draft_token_ids: Any, scheduler_output: SchedulerOutput
    ) -> None:
        return None

    @property
    def pause_state(self) -> PauseState:
        return self._pause_state

    def set_pause_state(self, pause_state: PauseState) -> None:
        self._pause_state = pause_state

    def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        """vLLM 0.19.1's reset: optionally preempt every running request first.

        With ``reset_running_requests`` (pause and sleep clear the cache this
        way) every running request is preempted, last first, so that all blocks
        are free and the reset cannot fail; they are resumed from the waiting
        queue in their old order and recompute their KV.
        """
        if reset_running_requests:
            if self.core.async_scheduling:
                self._discard_in_flight_tokens()
            preempted = self.core.preempt_all_running()
            self._sync_requests()
            self.events.preempted(self.requests[r.request_id] for r in preempted)
            if compat.reset_preemptions_reported():
                self._reset_preempted.update(r.request_id for r in preempted)
            # Resumed in the same step they were preempted: send them whole.
            self._prev_step_scheduled.clear()
        reset = self.core.reset_prefix_cache()
        if reset_running_requests and not reset:
            raise RuntimeError(
                "kvframe could not reset the prefix cache with every running request "
                "preempted: a streaming-input session waiting for input, or a retained "
                "request, holds blocks (vLLM raises here too)"
            )
        if reset_connector:
            if self.connector is not None:
                # vLLM's reset_connector_cache: the connector's own reset (the tier's
                # cache), asked whatever the local reset gave; only False fails it.
                if self.connector.reset_cache() is False:
                    return False
                assert self.tier is not None
                self.tier.cache_reset()
                return reset
            # With no connector vLLM 0.19.1 warns and reports failure; 0.33 treats
            # it as a no-op success (its pause and sleep always ask for it).
            if compat.reset_without_connector_succeeds():
                return reset
            log.warning("kvframe_vllm.reset_connector_without_connector")
            return False
        return reset

    def _discard_in_flight_tokens(self) -> None:
        """Asynchronous scheduling: the running requests about to be preempted by a
        reset drop tokens they sample next, as vLLM does (the tokens in flight
        were computed from the KV the reset frees).

        vLLM 0.19.1 (``discard_latest_async_tokens``) flags every running request
        and drops its next sampled token: one whose step in flight was a partial
        prefill chunk (no token) drops the first token it samples after
        resuming. vLLM 0.33 (``drop_stale_output``) drops exactly the tokens in
        flight (``num_stale_output_tokens``, its output placeholders): a request
        with none in flight drops nothing. The bridge drops them from the
        runner's output before vLLM's request or kvframe's core sees them: vLLM's
        request takes the tokens first, so dropping them in the core alone would
        leave vLLM's request with the token.
        """
        for request in self.core.running:
            count = compat.stale_tokens_dropped(request.num_output_placeholders)
            if count:
                self._drop_next_token[request.request_id] = count

    def reset_encoder_cache(self) -> None:
        return None  # no encoder inputs (multimodal models are refused)

    def make_stats(
        self,
        spec_decoding_stats: Any = None,
        kv_connector_stats: Any = None,
        cudagraph_stats: Any = None,
        perf_stats: Any = None,
    ) -> SchedulerStats | None:
        if not self.log_stats:
            return None
        connector = self.tier
        return scheduler_stats(
            self.core,
            admissions=self.admissions,
            deferred=self.sessions.num_deferred,
            cudagraph_stats=cudagraph_stats,
            perf_stats=perf_stats,
            connector_prefix=None if connector is None else connector.take_prefix_stats(),
            connector_stats=None
            if connector is None
            else connector.stats_payload(kv_connector_stats),
        )

    def shutdown(self) -> None:
        self.kv_event_publisher.shutdown()
