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

:class:`Sessions` holds what the scheduler needs for this and nothing else:
each session's queue of chunks that arrived while it ran, how many sessions
wait for input, and the in-flight outputs a stopped session must discard
(vLLM 0.33.0). The decisions -- where a resumed session queues, what it
keeps -- are :class:`~kvframe.core.scheduler.Scheduler`'s
(``add_input`` and the stop handling of ``update_from_output``), following
the fidelity target (switch S ``sessions_resume_from_frontier``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import attrs

__all__ = ["InputChunk", "Sessions"]


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
    """The scheduler's bookkeeping of its streaming-input sessions."""

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
