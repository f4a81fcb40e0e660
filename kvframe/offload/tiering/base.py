"""What a tier below DRAM is to the tier chain: jobs, their results, the tier's contract.

vLLM 0.33.0's ``vllm/v1/kv_offload/tiering/base.py`` with kvframe's names. A
secondary tier never touches GPU memory: every byte goes through the primary
(DRAM) tier -- a store cascades GPU -> DRAM -> tier, a load promotes tier ->
DRAM -> GPU -- so a tier only ever sees :class:`TierJob` s naming primary
slots, and reports them done through :meth:`SecondaryTier.finished_jobs`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from kvframe.contract.request_scoped import RequestAccess
    from kvframe.offload.jobs.manager import LookupResult

__all__ = ["JobResult", "SecondaryTier", "TierJob", "TierStats"]


@attrs.define(slots=True, eq=False)
class TierJob:
    """One transfer between the primary tier and a secondary one (vLLM's ``TransferJob``).

    ``slot_ids[i]`` is the primary slot ``keys[i]`` is read from (a cascade,
    ``is_promotion=False``) or written into (a promotion).
    """

    job_id: int
    keys: tuple[Hashable, ...]
    slot_ids: tuple[int, ...]
    is_promotion: bool
    access: RequestAccess


@attrs.define(slots=True, frozen=True)
class JobResult:
    """A finished job (vLLM's ``JobResult``).

    ``successful_keys`` matters only for a failed promotion: the keys that did
    land (a subset of the job's); ``None`` means every key shares ``success``.
    """

    job_id: int
    success: bool
    successful_keys: tuple[Hashable, ...] | None = None
    transfer_bytes: int = 0
    transfer_s: float = 0.0


@attrs.define(slots=True)
class TierStats:
    """Counters of one secondary tier, as the chain saw it (vLLM's tiering metrics)."""

    name: str
    chunk_queries: int = 0
    chunk_hits: int = 0
    promotions: int = 0
    """Promotion jobs submitted (tier -> DRAM)."""
    promoted_chunks: int = 0
    promotion_failures: int = 0
    """Promotion jobs that failed in whole or in part (the chunks recompute)."""
    promotion_allocation_failures: int = 0
    """Hits the DRAM tier had no room to promote (answered as misses)."""
    cascades: int = 0
    """Store jobs submitted (DRAM -> tier)."""
    cascaded_chunks: int = 0
    cascade_failures: int = 0
    read_bytes: int = 0
    """Bytes promoted out of the tier."""
    read_s: float = 0.0
    write_bytes: int = 0
    """Bytes cascaded into the tier."""
    write_s: float = 0.0


class SecondaryTier:
    """A tier below DRAM (vLLM 0.33.0's ``SecondaryTierManager``), with do-nothing defaults.

    Every method runs in the scheduler and must not block: ``submit_*`` start a
    transfer, :meth:`finished_jobs` reports it. The chain calls, per request,
    :meth:`on_new_request` first and :meth:`on_request_finished` once no job can
    be submitted for it any more (jobs already submitted may still run).
    """

    name: str = "tier"
    request_level: bool = False
    """vLLM's ``OffloadPolicy.REQUEST_LEVEL``: the tier wants every chunk of a
    request, prefix hits included (the chain cascades resident chunks too)."""

    def on_new_request(self, access: RequestAccess) -> None:
        """A request is first seen; its context is the primary tier's."""

    def lookup(self, key: Hashable, access: RequestAccess) -> LookupResult:
        """``HIT`` (present and readable), ``MISS``, or ``RETRY`` (cannot say yet)."""
        raise NotImplementedError

    def submit_store(self, job: TierJob) -> None:
        """Start copying ``job``'s primary slots into the tier (keys already here are skipped)."""
        raise NotImplementedError

    def submit_load(self, job: TierJob) -> None:
        """Start copying ``job``'s keys into its primary slots."""
        raise NotImplementedError

    def finished_jobs(self) -> Iterable[JobResult]:
        """Jobs finished since the last call."""
        raise NotImplementedError

    def has_pending_work(self) -> bool:
        """Whether the engine must keep stepping for this tier."""
        return False

    def on_request_finished(self, access: RequestAccess) -> None:
        """No more submits for the request: release its bookkeeping."""

    def on_schedule_end(self) -> None:
        """The step's last call."""

    def take_events(self) -> Iterable[tuple[str, tuple[Hashable, ...]]]:
        """``("stored" | "removed", keys)`` since the last call (the tier's KV events)."""
        return ()
