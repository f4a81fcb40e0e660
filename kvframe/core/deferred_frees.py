"""Fidelity switch T22: blocks of a request freed while a step in flight may still
write them go back to the pool only once that step's output is applied.

vLLM 0.33.0's ``Scheduler`` sets ``defer_block_free`` when more than one batch can
be in flight (asynchronous scheduling: ``max_concurrent_batches == 2``) and the KV
connector is a consumer (the ``OffloadingConnector``, ``kv_role="kv_both"``): a
load the connector starts into a reallocated block is not ordered against the GPU
step still writing it. It then numbers the steps that schedule tokens
(``sched_step_seq``) and the ones whose output it applied (``processed_step_seq``),
remembers the last step each request was scheduled in (``last_sched_seq``), and

* frees a finished or preempted request's blocks at once only when that step was
  applied; otherwise it pops them and returns them to the pool, tail first as
  ``free`` does, when the output of the step scheduled last by then is applied
  (``_free_request_blocks`` / ``_drain_deferred_frees``);
* in the running loop, stops (``break``) rather than preempt a victim whose blocks
  could not be freed now (``_request_blocks_can_be_freed``).

:class:`DeferredFrees` is that bookkeeping for :class:`~kvframe.core.scheduler.Scheduler`;
0.19.1 has none of it (it frees at once and preempts any victim).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.domain.request import Request

__all__ = ["DeferredFrees"]


class DeferredFrees:
    """Step fences for freeing blocks under asynchronous scheduling with a connector."""

    __slots__ = ("_kv", "_last_sched", "_pending", "processed_seq", "sched_seq")

    def __init__(self, kv_cache_manager: KVCacheManager) -> None:
        self._kv = kv_cache_manager
        self.sched_seq = 0
        """Steps scheduled with tokens (vLLM's ``sched_step_seq``)."""
        self.processed_seq = 0
        """Steps with tokens whose output was applied (``processed_step_seq``)."""
        self._last_sched: dict[str, int] = {}
        """Request id -> the last step with tokens it was scheduled in."""
        self._pending: deque[tuple[int, list[KVCacheBlock], int]] = deque()
        """``(fence, blocks in allocation order, the request's num_tokens)``, FIFO."""

    def after_schedule(self, num_scheduled_tokens: dict[str, int], total: int) -> None:
        """A step was scheduled: number it if it ran tokens, fence its requests."""
        if total <= 0:
            return
        self.sched_seq += 1
        seq = self.sched_seq
        last = self._last_sched
        for request_id in num_scheduled_tokens:
            last[request_id] = seq

    def after_output(self, total: int) -> None:
        """A step's output is being applied: if it ran tokens, release what it fenced."""
        if total <= 0:
            return
        self.processed_seq += 1
        pending = self._pending
        processed = self.processed_seq
        while pending and pending[0][0] <= processed:
            _, blocks, num_tokens = pending.popleft()
            self._kv.free_popped(blocks, num_tokens)

    def can_free(self, request_id: str) -> bool:
        """Whether no step in flight may still write the request's blocks."""
        return self._last_sched.get(request_id, 0) <= self.processed_seq

    def free(self, request: Request) -> None:
        """Free the request's blocks now, or pop them until its last step is applied."""
        if self.can_free(request.request_id):
            self._kv.free(request)
            return
        blocks = self._kv.pop_blocks_for_free(request)
        if blocks:
            self._pending.append((self.sched_seq, blocks, request.num_tokens))

    def forget(self, request_ids: Iterable[str]) -> None:
        """Drop the fences of requests that left the scheduler."""
        last = self._last_sched
        for request_id in request_ids:
            last.pop(request_id, None)
