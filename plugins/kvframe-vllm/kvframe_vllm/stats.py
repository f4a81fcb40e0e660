"""vLLM's scheduler metrics (0.19.1 and 0.33.0), from kvframe's core.

vLLM's metrics (Prometheus, the log line) read two things off its scheduler:

* ``SchedulerStats`` on every step's ``EngineCoreOutputs`` -- running and
  waiting counts, KV usage, and the prefix-cache counters since the last step
  (preempted requests apart). vLLM 0.19.1 counts one lookup per
  ``get_computed_blocks`` call; kvframe's ``KVCacheManager`` keeps the same
  counters with the same rule, so :func:`scheduler_stats` only copies them into
  vLLM's types. vLLM 0.33 counts one per admission (:class:`AdmissionLookups`);
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

from kvframe_vllm.compat import stats_fields

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from kvframe.core.scheduler import Scheduler

__all__ = ["AdmissionLookups", "RequestEvents", "scheduler_stats"]


class AdmissionLookups:
    """vLLM 0.33's prefix-cache counters: one lookup per admission.

    vLLM 0.19.1 counts every ``get_computed_blocks`` call, so a waiting request
    that cannot get blocks is counted again each step it tries (kvframe's
    ``KVCacheManager`` counters, the same rule). vLLM 0.33 counts a lookup only
    when the request is admitted ("so unscheduled lookups are not counted"):
    a first admission, or a re-admission after a preemption (counted apart).
    kvframe's core keeps exactly those admissions -- ``first_admissions`` and
    ``recomputed_tokens`` of each step, the running totals of queries and hits
    in ``core.stats`` -- so :meth:`step` adds each step's share, and
    :meth:`drain` hands them out as vLLM's ``make_stats`` does.
    """

    __slots__ = ("_pending", "_seen")

    def __init__(self, core: Scheduler) -> None:
        self._seen = self._totals(core)
        self._pending = [0, 0, 0, 0, 0, 0]

    @staticmethod
    def _totals(core: Scheduler) -> tuple[int, int, int, int]:
        s = core.stats
        return (
            s.prefix_cache_queries,
            s.prefix_cache_hits,
            s.preempted_prefix_cache_queries,
            s.preempted_prefix_cache_hits,
        )

    def step(self, core: Scheduler, first_admissions: int, readmissions: int) -> None:
        """Add one scheduled step's admissions (kvframe's step output counts them)."""
        totals = self._totals(core)
        queries, hits, pre_queries, pre_hits = (
            now - before for now, before in zip(totals, self._seen, strict=True)
        )
        self._seen = totals
        if not core.kv_cache_manager.enable_caching:
            return  # vLLM looks nothing up, so counts nothing
        pending = self._pending
        pending[0] += first_admissions
        pending[1] += queries
        pending[2] += hits
        pending[3] += readmissions
        pending[4] += pre_queries
        pending[5] += pre_hits

    def drain(self) -> list[int]:
        """requests, queries, hits, then the preempted ones, since the last drain."""
        pending, self._pending = self._pending, [0, 0, 0, 0, 0, 0]
        return pending


def scheduler_stats(
    core: Scheduler,
    *,
    admissions: AdmissionLookups | None = None,
    cudagraph_stats: Any = None,
    perf_stats: Any = None,
    deferred: int = 0,
    connector_prefix: PrefixCacheStats | None = None,
    connector_stats: Any = None,
) -> SchedulerStats:
    """vLLM's ``SchedulerStats`` for this step; drains the prefix-cache counters.

    ``admissions``: count lookups at admission (vLLM 0.33), else per lookup (0.19.1).
    ``deferred``: vLLM 0.33's skipped-waiting count (streaming-input sessions that
    waited for input since their last admission), reported apart from the waiting
    count; 0.19.1 has none. ``connector_prefix`` and ``connector_stats``: the KV
    connector's prefix-cache counters and stats payload (:mod:`kvframe_vllm.tier`).
    """
    kv = core.kv_cache_manager.make_prefix_cache_stats()
    counts = (
        admissions.drain()
        if admissions is not None
        else [
            kv.requests,
            kv.queries,
            kv.hits,
            kv.preempted_requests,
            kv.preempted_queries,
            kv.preempted_hits,
        ]
    )
    prefix = PrefixCacheStats(
        reset=kv.reset,
        requests=counts[0],
        queries=counts[1],
        hits=counts[2],
        preempted_requests=counts[3],
        preempted_queries=counts[4],
        preempted_hits=counts[5],
    )
    running, waiting = core.get_request_counts()
    return SchedulerStats(
        num_running_reqs=running,
        num_waiting_reqs=waiting - deferred,
        kv_cache_usage=core.kv_cache_manager.usage,
        **stats_fields(deferred),
        prefix_cache_stats=prefix,
        connector_prefix_cache_stats=connector_prefix,
        kv_connector_stats=connector_stats,
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
