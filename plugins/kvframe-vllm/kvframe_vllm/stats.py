"""vLLM 0.19.1's scheduler metrics, from kvframe's core.

vLLM's metrics (Prometheus, the log line) read two things off its scheduler:

* ``SchedulerStats`` on every step's ``EngineCoreOutputs`` -- running and
  waiting counts, KV usage, and the prefix-cache counters since the last step
  (one lookup counted per ``get_computed_blocks`` call, preempted requests
  apart). kvframe's ``KVCacheManager`` keeps the same counters with the same
  rule, so :func:`scheduler_stats` only copies them into vLLM's types;
* the per-request ``QUEUED`` / ``SCHEDULED`` / ``PREEMPTED`` events (queue
  time, the preemption counter), which :class:`RequestEvents` records on vLLM's
  ``Request`` objects at the points vLLM's scheduler does.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from vllm.v1.engine import EngineCoreEventType
from vllm.v1.metrics.stats import PrefixCacheStats, SchedulerStats

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from kvframe.core.scheduler import Scheduler

__all__ = ["RequestEvents", "scheduler_stats"]


def scheduler_stats(
    core: Scheduler,
    *,
    cudagraph_stats: Any = None,
    perf_stats: Any = None,
) -> SchedulerStats:
    """vLLM's ``SchedulerStats`` for this step; drains the prefix-cache counters."""
    kv = core.kv_cache_manager.make_prefix_cache_stats()
    prefix = PrefixCacheStats(
        reset=kv.reset,
        requests=kv.requests,
        queries=kv.queries,
        hits=kv.hits,
        preempted_requests=kv.preempted_requests,
        preempted_queries=kv.preempted_queries,
        preempted_hits=kv.preempted_hits,
    )
    running, waiting = core.get_request_counts()
    return SchedulerStats(
        num_running_reqs=running,
        num_waiting_reqs=waiting,
        kv_cache_usage=core.kv_cache_manager.usage,
        encoder_cache_usage=0.0,
        prefix_cache_stats=prefix,
        cudagraph_stats=cudagraph_stats,
        perf_stats=perf_stats,
    )


class RequestEvents:
    """Records vLLM's per-request engine events when stats are on (vLLM's ``log_stats``)."""

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def queued(self, request: Request) -> None:
        if self.enabled:
            request.record_event(EngineCoreEventType.QUEUED)

    def step(
        self,
        timestamp: float,
        preempted: Iterable[Request],
        admitted: Iterable[Request],
    ) -> None:
        """A step's events, in vLLM's order: preemptions (running pass) then admissions."""
        if not self.enabled:
            return
        for request in preempted:
            request.record_event(EngineCoreEventType.PREEMPTED, timestamp)
        for request in admitted:
            request.record_event(EngineCoreEventType.SCHEDULED, timestamp)

    def preempted(self, requests: Iterable[Request]) -> None:
        """Preemptions outside a step (``reset_prefix_cache`` with running requests)."""
        if self.enabled:
            timestamp = time.monotonic()
            for request in requests:
                request.record_event(EngineCoreEventType.PREEMPTED, timestamp)
