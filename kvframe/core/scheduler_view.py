"""What a scheduling policy sees of the scheduler: a read-mostly view.

A policy receives one in ``attach`` (the :class:`kvframe.SchedulerContext`
protocol): the clock, the queues, the free blocks, a prefix-cache probe, the
retained requests and the tier's view, and one action, :meth:`SchedulerView.release`
of a retention. It holds the scheduler but hands out only these, so a policy
cannot reach the scheduler's state through it by accident.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvframe.contract.views import TierView
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.core.retention import Retention, RetentionTable
    from kvframe.domain.costs import CostModel
    from kvframe.domain.queues import RequestQueue
    from kvframe.domain.request import Request

__all__ = ["SchedulerView"]


class _Viewed(Protocol):
    """What the view reads of the scheduler (a protocol: this module does not import it)."""

    @property
    def now(self) -> float: ...

    block_size: int
    cost_model: CostModel | None
    kv_cache_manager: KVCacheManager
    running: list[Request]
    waiting: RequestQueue
    skipped_waiting: RequestQueue
    retained: RetentionTable
    tier_view: TierView | None

    def _release_retention(self, request_id: str) -> None: ...


class SchedulerView:
    """The read-mostly view of the scheduler a policy receives in ``attach``
    (:class:`kvframe.SchedulerContext`)."""

    __slots__ = ("_scheduler",)

    def __init__(self, scheduler: _Viewed) -> None:
        self._scheduler = scheduler

    @property
    def now(self) -> float:
        return self._scheduler.now

    @property
    def block_size(self) -> int:
        return self._scheduler.block_size

    @property
    def cost_model(self) -> CostModel | None:
        return self._scheduler.cost_model

    @property
    def num_free_blocks(self) -> int:
        return self._scheduler.kv_cache_manager.num_free_blocks

    def num_cached_tokens(self, request: Request) -> int:
        manager = self._scheduler.kv_cache_manager
        if not manager.enable_caching or request.skip_reading_prefix_cache:
            return 0
        block_size = manager.block_size
        max_blocks = (request.num_tokens - 1) // block_size
        hits = len(manager.block_pool.get_cached_prefix(request.block_hashes, max_blocks))
        if manager.use_eagle and hits:
            hits -= 1  # as get_computed_blocks does
        return hits * block_size

    @property
    def running(self) -> Sequence[Request]:
        return self._scheduler.running

    @property
    def waiting(self) -> RequestQueue:
        return self._scheduler.waiting

    @property
    def skipped_waiting(self) -> RequestQueue:
        return self._scheduler.skipped_waiting

    @property
    def retained(self) -> Mapping[str, Retention]:
        return MappingProxyType(self._scheduler.retained._by_id)

    @property
    def offload(self) -> TierView | None:
        return self._scheduler.tier_view

    def release(self, request_id: str) -> None:
        if request_id not in self._scheduler.retained:
            raise KeyError(f"request {request_id!r} is not retained")
        self._scheduler._release_retention(request_id)
