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

The scheduler holds one :class:`FreeRule`, chosen once when it is built
(:meth:`AsyncScheduler <kvframe.core.async_scheduler.AsyncScheduler>` picks
:class:`DeferredFrees` under switch T22 with a connector): every other scheduler
gets :class:`ImmediateFrees`, which frees at once and lets any victim be
preempted, as 0.19.1 always does -- so the per-step code calls the rule and never
asks whether the switch is on.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.domain.request import Request

__all__ = ["DeferredFrees", "FreeRule", "ImmediateFrees"]


class FreeRule(Protocol):
    """When a finished or preempted request's blocks go back to the pool."""

    def free(self, request: Request) -> None:
        """Free a preempted request's blocks (now, or once no step in flight writes them)."""
        ...

    def free_finished(self, request: Request) -> None:
        """Free a finished request's blocks, as :meth:`free`; the request leaves for good."""
        ...

    def can_free(self, request_id: str) -> bool:
        """Whether preempting the request frees its blocks now."""
        ...

    def after_schedule(self, num_scheduled_tokens: dict[str, int], total: int) -> None:
        """A step was scheduled (asynchronous scheduling calls this)."""
        ...

    def after_output(self, total: int) -> None:
        """A step's output is being applied (asynchronous scheduling calls this)."""
        ...


class ImmediateFrees:
    """The default :class:`FreeRule`: blocks go back to the pool at once.

    ``free`` and ``free_finished`` are the manager's own bound ``free``, so the
    default costs no call of its own on the per-request paths.
    """

    __slots__ = ("free", "free_finished")

    def __init__(self, kv_cache_manager: KVCacheManager) -> None:
        self.free = kv_cache_manager.free
        self.free_finished = kv_cache_manager.free

    def can_free(self, request_id: str) -> bool:
        """Always: nothing in flight can still write a request's blocks."""
        return True

    def after_schedule(self, num_scheduled_tokens: dict[str, int], total: int) -> None:
        """Nothing to number."""

    def after_output(self, total: int) -> None:
        """Nothing waits for a step."""


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

    def free_finished(self, request: Request) -> None:
        """A finished request's blocks: :meth:`free`, then drop its fence."""
        self.free(request)
        self._last_sched.pop(request.request_id, None)

    def forget(self, request_ids: Iterable[str]) -> None:
        """Drop the fences of requests that left the scheduler."""
        last = self._last_sched
        for request_id in request_ids:
            last.pop(request_id, None)
