"""Streaming-input sessions: a request whose prompt arrives in chunks.

vLLM (0.19.1 and 0.33.0) serves *streaming input*: a client opens a request
marked ``resumable`` and sends more prompt later under the same id. The
request runs on what it has; when it stops (a stop token, ``max_tokens``) it
does not finish but waits for its next chunk, keeping its KV blocks, and
resumes with the chunk appended to what it had -- its prompt and the output
tokens it keeps (the last sampled token is dropped: its KV was never
computed) -- without a prefix-cache lookup: its own blocks are its prefix.
A final, empty chunk (vLLM's non-resumable request with the same id) closes
the session: at once if it waits for input, else when it next stops.

:class:`Sessions` holds what the scheduler needs for this -- each session's
queue of chunks that arrived while it ran, how many sessions wait for input,
the in-flight outputs a stopped session must discard (vLLM 0.33.0) -- and the
decisions: where a stopped session waits, what a resumed one keeps. The
release difference (switch S ``sessions_resume_from_frontier``) is the class
the scheduler builds, once (:func:`sessions_for`): :class:`Sessions` follows
vLLM 0.19.1, :class:`FrontierSessions` 0.33.0, so no step asks which.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from kvframe.domain.request import RequestStatus

if TYPE_CHECKING:
    from kvframe.domain.fidelity import Fidelity
    from kvframe.domain.queues import RequestQueue
    from kvframe.domain.request import Request

__all__ = ["FrontierSessions", "InputChunk", "Sessions", "sessions_for"]

_WAITING = RequestStatus.WAITING
_WAITING_FOR_INPUT = RequestStatus.WAITING_FOR_STREAMING_REQ


@attrs.frozen(slots=True)
class InputChunk:
    """One streamed input chunk (vLLM's ``StreamingUpdate``, multimodal parts aside)."""

    prompt_token_ids: Sequence[int]
    """The new tokens, appended to what the session keeps."""
    max_tokens: int
    """Output tokens allowed for this chunk (vLLM 0.33.0 takes it; 0.19.1 keeps the
    first chunk's)."""
    arrival_time: float
    """The chunk's arrival: the session's arrival time from now on (queue order)."""


@attrs.define(slots=True)
class Sessions:
    """The scheduler's streaming-input sessions, under vLLM 0.19.1's rules.

    A session that stops keeps the work in flight; it resumes with the output
    tokens up to ``num_computed_tokens`` and the first chunk's ``max_tokens``,
    at the back of the waiting queue when its next chunk was queued; a session
    waiting for input holds no sequence slot.
    """

    queues: dict[str, deque[InputChunk | None]] = attrs.field(factory=dict)
    """Each live session's chunks that arrived while it was not waiting for input,
    oldest first; ``None`` is the closing chunk."""
    num_waiting_for_input: int = 0
    """Sessions stopped with no chunk queued (vLLM's
    ``num_waiting_for_streaming_input``): not counted as unfinished work."""
    stale_outputs: dict[str, int] = attrs.field(factory=dict)
    """Asynchronous scheduling, vLLM 0.33.0: sampled outputs still in flight when a
    session stopped, discarded when they arrive (the step that produced them ran
    on tokens the session no longer has)."""

    def __bool__(self) -> bool:
        return bool(self.queues)

    def drop_stale(self, sampled: dict[str, list[int]]) -> None:
        """Remove the stale outputs from a step's ``sampled`` tokens, counting them down."""
        stale = self.stale_outputs
        for request_id in stale.keys() & sampled.keys():
            del sampled[request_id]
            if stale[request_id] > 1:
                stale[request_id] -= 1
            else:
                del stale[request_id]

    def forget(self, request_id: str) -> None:
        """The session finished (closed, aborted, or stopped for good)."""
        self.queues.pop(request_id, None)
        self.stale_outputs.pop(request_id, None)

    def slots_held(self) -> int:
        """Sequence slots (``max_num_seqs``) held by sessions waiting for input."""
        return 0

    def stop(
        self,
        request: Request,
        waiting: RequestQueue,
        skipped_waiting: RequestQueue,
        stops: dict[str, RequestStatus],
    ) -> bool:
        """Session ``request`` stopped: whether it goes on (``False``: the closing
        chunk was queued, it finishes as any request).

        It keeps its blocks and takes its next queued chunk at once, or waits for
        input in ``skipped_waiting`` (vLLM's ``_handle_stopped_request``); a
        session that goes on is recorded in ``stops`` with its stop status.
        """
        request_id = request.request_id
        queue = self.queues[request_id]
        self._drop_in_flight(request)
        if queue and queue[0] is None:
            self.forget(request_id)
            return False
        stops[request_id] = request.status
        if queue:
            self.resume(request, queue.popleft())  # type: ignore[arg-type]
            self._requeue(request, waiting, skipped_waiting)
        else:
            request.status = _WAITING_FOR_INPUT
            self.num_waiting_for_input += 1
            skipped_waiting.add_request(request)
        return True

    def resume(self, request: Request, chunk: InputChunk) -> None:
        """Append ``chunk`` to a stopped session, which waits for admission again.

        It keeps its blocks and ``num_computed_tokens``: admission gives it no
        prefix lookup and sends it as a new request with its whole block table.
        """
        request.restart_with_prompt(self._kept_tokens(request, chunk), chunk.prompt_token_ids)
        request.arrival_time = chunk.arrival_time
        if request.status == _WAITING_FOR_INPUT:
            self.num_waiting_for_input -= 1
        request.status = _WAITING

    def _drop_in_flight(self, request: Request) -> None:
        """0.19.1 keeps the work in flight of a stopped session."""

    def _kept_tokens(self, request: Request, chunk: InputChunk) -> int:
        """0.19.1: the tokens up to ``num_computed_tokens`` (in a synchronous step,
        every token but the last sampled one)."""
        return min(request.num_computed_tokens, request.num_tokens)

    def _requeue(
        self, request: Request, waiting: RequestQueue, skipped_waiting: RequestQueue
    ) -> None:
        """0.19.1: a session resumed from its queued chunk rejoins the waiting queue."""
        waiting.add_request(request)


@attrs.define(slots=True)
class FrontierSessions(Sessions):
    """Switch S, vLLM 0.33.0's rules (see ``sessions_resume_from_frontier`` in
    :mod:`kvframe.domain.fidelity`): a stopped session drops the work in flight
    and resumes from the tokens it knows, every output token but the last sampled
    one, with the new chunk's ``max_tokens``; waiting for input, it holds a slot."""

    def slots_held(self) -> int:
        return self.num_waiting_for_input

    def _drop_in_flight(self, request: Request) -> None:
        """Its computed tokens fall back to the known ones; the outputs in flight are
        discarded when they arrive (:meth:`drop_stale`)."""
        placeholders = request.num_output_placeholders
        request.num_computed_tokens -= placeholders
        if placeholders:
            self.stale_outputs[request.request_id] = placeholders
        request.num_output_placeholders = 0
        request.spec_token_ids = []

    def _kept_tokens(self, request: Request, chunk: InputChunk) -> int:
        keep = request.num_tokens - 1
        if keep < request.num_computed_tokens:
            raise RuntimeError(
                f"session {request.request_id!r}: {request.num_computed_tokens} tokens "
                f"computed of the {keep} it keeps"
            )
        request.max_tokens = chunk.max_tokens
        return keep

    def _requeue(
        self, request: Request, waiting: RequestQueue, skipped_waiting: RequestQueue
    ) -> None:
        """It holds blocks, so it joins the queue of those that do."""
        skipped_waiting.add_request(request)


def sessions_for(fidelity: Fidelity) -> Sessions:
    """The sessions of a scheduler following ``fidelity`` (switch S), chosen once."""
    return FrontierSessions() if fidelity.sessions_resume_from_frontier else Sessions()
