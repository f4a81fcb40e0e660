"""Streaming-input requests (vLLM's ``resumable``) in the bridge: vLLM's side of a session.

kvframe's core decides everything about a session (:mod:`kvframe.core.sessions`):
when it waits for input, what it keeps, where it queues, when it is admitted.
vLLM's engine and output processor read vLLM's own ``Request`` objects, so
each of the core's session events is mirrored onto vLLM's request here:

* a chunk (a second ``add_request`` with a live session's id) goes to the core
  (:meth:`~kvframe.core.scheduler.Scheduler.add_input`) and, as vLLM's
  ``StreamingUpdate``, to the request's ``streaming_queue`` -- or, for a
  session waiting for input, is applied at once; the closing chunk (a request
  that is not ``resumable``) finishes a waiting session as aborted;
* a session that stopped and goes on reports its turn's finish reason, and its
  vLLM request takes its next chunk through vLLM's own
  ``Scheduler._update_request_as_session`` (the token rule of the running
  release, the ``QUEUED`` event), after which vLLM's tokens and kvframe's must
  agree -- a difference raises rather than serving a prompt kvframe does not
  model;
* vLLM 0.33.0's ``deferred_waiting`` (the sessions that waited for input since
  their last admission) for its ``SchedulerStats``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
from vllm.v1.request import RequestStatus as VllmStatus
from vllm.v1.request import StreamingUpdate

from kvframe.core.sessions import InputChunk
from kvframe.domain.request import RequestStatus as KvStatus
from kvframe_vllm import compat

if TYPE_CHECKING:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import FinishReason
    from vllm.v1.request import Request

    from kvframe.domain.request import Request as KvRequest
    from kvframe_vllm.scheduler import KvframeScheduler

__all__ = ["VllmSessions", "stop_token_ids"]


def stop_token_ids(params: SamplingParams) -> set[int]:
    """vLLM's ``check_stop`` ids: the stop ids and the EOS id (none when ``ignore_eos``)."""
    stop = set(params.stop_token_ids or ())
    if params.eos_token_id is not None:
        stop.add(params.eos_token_id)
    return stop


def _chunk(update: StreamingUpdate | None) -> InputChunk | None:
    if update is None:
        return None
    return InputChunk(list(update.prompt_token_ids or ()), update.max_tokens, update.arrival_time)


class _SchedulerFields:
    """The fields of vLLM's ``Scheduler`` its ``_update_request_as_session`` reads,
    so the bridge runs vLLM's own code on vLLM's request (the counter it keeps is
    the core's to keep; this one is discarded)."""

    __slots__ = ("hash_block_size", "log_stats", "num_waiting_for_streaming_input")

    def __init__(self, log_stats: bool, hash_block_size: int) -> None:
        self.log_stats = log_stats
        self.hash_block_size = hash_block_size
        self.num_waiting_for_streaming_input = 0


class VllmSessions:
    """vLLM's requests of the bridge's streaming-input sessions, kept with the core's."""

    __slots__ = ("_bridge", "_deferred", "_fields")

    def __init__(self, bridge: KvframeScheduler) -> None:
        self._bridge = bridge
        self._fields = _SchedulerFields(bridge.log_stats, bridge.core.block_size)
        self._deferred: set[str] = set()

    def is_session(self, request_id: str) -> bool:
        """Whether ``request_id`` is a live streaming-input session."""
        return request_id in self._bridge.core.sessions.queues

    @property
    def num_deferred(self) -> int:
        """vLLM 0.33.0's ``len(deferred_waiting)``: sessions that waited for input since
        their last admission (0.19.1 has no such count: 0)."""
        return len(self._deferred)

    def add_input(self, request: Request) -> None:
        """``request`` is the next chunk of the live session with its id."""
        bridge = self._bridge
        rid = request.request_id
        session = bridge.requests[rid]
        update = StreamingUpdate.from_request(request)
        if bridge.core.requests[rid].status != KvStatus.WAITING_FOR_STREAMING_REQ:
            assert session.streaming_queue is not None
            session.streaming_queue.append(update)
            bridge.core.add_input(rid, _chunk(update))
        elif update is not None:
            self._fields.num_waiting_for_streaming_input = 1
            self._update_as_session(session, update)
            bridge.core.add_input(rid, _chunk(update))
            self._check(session, bridge.core.requests[rid], update)
        else:
            bridge.finish_requests(rid, VllmStatus.FINISHED_ABORTED)

    def stopped(self, stops: dict[str, KvStatus]) -> dict[str, FinishReason | None]:
        """The sessions that stopped this step and go on (the core's ``session_stops``):
        each one's finish reason for this turn; vLLM's request follows the core's."""
        bridge = self._bridge
        reasons: dict[str, FinishReason | None] = {}
        for rid, status in stops.items():
            session = bridge.requests[rid]
            kv_request = bridge.core.requests[rid]
            session.status = VllmStatus[status.name]
            stop_reason = kv_request.stop_reason
            eos = session.sampling_params.eos_token_id if session.sampling_params else None
            session.stop_reason = None if stop_reason == eos else stop_reason
            reasons[rid] = session.get_finished_reason()
            # The counts the core stopped it with (vLLM 0.33: the known frontier).
            session.num_computed_tokens = kv_request.num_computed_tokens
            session.num_output_placeholders = kv_request.num_output_placeholders
            if kv_request.status == KvStatus.WAITING:  # resumed with its queued chunk
                assert session.streaming_queue
                update = session.streaming_queue.popleft()
                assert update is not None
                self._fields.num_waiting_for_streaming_input = 0
                self._update_as_session(session, update)
                self._check(session, kv_request, update)
            else:
                session.status = VllmStatus.WAITING_FOR_STREAMING_REQ
                if compat.INTERFACE_033:
                    self._deferred.add(rid)
        return reasons

    def _update_as_session(self, session: Request, update: StreamingUpdate) -> None:
        """vLLM's own ``_update_request_as_session`` on vLLM's request, with its block
        hashes made those of its new tokens where the release leaves a stale one
        (vLLM 0.19.1 keeps ``num_computed_tokens`` tokens and every hash:
        :func:`kvframe_vllm.compat.session_hashes_kept`)."""
        kept = session.num_computed_tokens
        VllmScheduler._update_request_as_session(self._fields, session, update)  # type: ignore[arg-type]
        compat.session_hashes_kept(session, kept, self._fields.hash_block_size)

    def scheduled(self, admitted: list[Request]) -> None:
        """Requests admitted this step leave vLLM 0.33's ``deferred_waiting``."""
        if self._deferred:
            for request in admitted:
                self._deferred.discard(request.request_id)

    def forget(self, request_id: str) -> None:
        """The request finished."""
        self._deferred.discard(request_id)

    def _check(self, session: Request, kv_request: KvRequest, update: StreamingUpdate) -> None:
        """After a chunk: vLLM's request and kvframe's must hold the same tokens."""
        if update.sampling_params is not None:
            kv_request.stop_token_ids = frozenset(stop_token_ids(update.sampling_params))
        theirs: list[Any] = list(session.all_token_ids)
        if (
            theirs != list(kv_request.all_token_ids)
            or session.num_prompt_tokens != kv_request.num_prompt_tokens
            or session.max_tokens != kv_request.max_tokens
        ):
            raise RuntimeError(
                f"streaming-input session {session.request_id!r}: vLLM resumed it with "
                f"{len(theirs)} tokens ({session.num_prompt_tokens} prompt, max_tokens "
                f"{session.max_tokens}), kvframe with {kv_request.num_tokens} "
                f"({kv_request.num_prompt_tokens}, {kv_request.max_tokens})"
            )
