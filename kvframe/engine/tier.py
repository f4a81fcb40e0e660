"""The offload tier an engine runs with: a connector, its worker and a transfer handler.

:class:`OffloadTier` is the :class:`~kvframe.contract.offload.Tier` both of the
host's tier builders return -- :func:`kvframe.engine.build.build_offload` for
vLLM 0.19.1's ``OffloadingConnector`` and
:func:`kvframe.engine.job_tier.build_job_tier` for 0.33.0's job connector --
and :data:`~kvframe.contract.offload.NO_TIER` is the one a run without a tier
gets. The engine's loops ask it whether transfers are in flight, whether stores
wait for the next step, and when the next transfer lands; the summary asks it
for its counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from kvframe.executors.torch.executor import RealBytesTransferHandler
    from kvframe.offload.jobs.connector import JobOffloadingConnector
    from kvframe.offload.jobs.worker import JobOffloadWorker
    from kvframe.offload.slots.connector import OffloadingConnector
    from kvframe.offload.slots.worker import OffloadWorker, SimTransferHandler
    from kvframe.offload.tiering import TieringOffloadManager

__all__ = ["OffloadTier"]


@attrs.frozen(slots=True)
class OffloadTier:
    """A built tier: the scheduler's connector, the executor's worker and its handler.

    The two releases' connectors and workers answer the same questions
    (``busy``, ``stats``, ``has_deferred_stores``), so one class serves both.
    """

    connector: OffloadingConnector | JobOffloadingConnector
    worker: OffloadWorker | JobOffloadWorker
    handler: SimTransferHandler | RealBytesTransferHandler
    """The sim's handler, or the torch executor's, which moves real bytes and keeps
    the sim's time (:class:`~kvframe.executors.torch.executor.RealBytesTransferHandler`)."""

    moves_blocks = True

    @property
    def busy(self) -> bool:
        return self.connector.busy or self.worker.busy

    @property
    def has_deferred_stores(self) -> bool:
        return self.worker.has_deferred_stores

    def next_completion(self) -> float:
        """When the earliest transfer lands: the GPU <-> DRAM handler's, or a tier's below."""
        soonest = self.handler.next_completion()
        chain = self.chain
        if chain is not None:
            soonest = min(soonest, *(tier.next_landing() for tier in chain.tiers))
        return soonest

    @property
    def chain(self) -> TieringOffloadManager | None:
        """The tiers below DRAM, when the DRAM ledger has any (vLLM 0.33 only)."""
        from kvframe.offload.tiering.manager import TieringOffloadManager

        manager = getattr(self.connector, "manager", None)
        return manager if isinstance(manager, TieringOffloadManager) else None

    def counters(self, hit_tokens: int, preempted_hit_tokens: int = 0) -> dict[str, int | float]:
        """Bytes, transfers and time from the handler; blocks from the connector.

        ``offload_hit_tokens`` is every prompt token the tier supplied: to new
        requests (``_new``) and to preempted ones re-admitted (``_preempted``), so
        that it accounts for what ``offload_bytes_loaded`` moved (issue 50).
        """
        handler = self.handler
        stats = self.connector.stats
        return {
            "offload_hit_tokens": hit_tokens + preempted_hit_tokens,
            "offload_hit_tokens_new": hit_tokens,
            "offload_hit_tokens_preempted": preempted_hit_tokens,
            "offload_bytes_stored": handler.bytes_stored,
            "offload_bytes_loaded": handler.bytes_loaded,
            "offload_num_stores": handler.num_stores,
            "offload_num_loads": handler.num_loads,
            "offload_transfer_time_s": handler.transfer_time_s,
            "offload_stored_blocks": stats.num_stored_blocks,
            "offload_loaded_blocks": stats.num_loaded_blocks,
            "offload_evicted_blocks": stats.num_evicted_blocks,
            "offload_store_refused": stats.num_store_refused,
            **self._tier_counters(),
        }

    def _tier_counters(self) -> dict[str, int | float]:
        """Per tier below DRAM: ``tier_<name>_<counter>`` (none without tiers below)."""
        chain = self.chain
        if chain is None:
            return {}
        out: dict[str, int | float] = {}
        for tier, stats in zip(chain.tiers, chain.stats, strict=True):
            prefix = f"tier_{tier.name}_"
            for field in attrs.fields(type(stats)):
                if field.name != "name":
                    out[prefix + field.name] = getattr(stats, field.name)
            # This replica's copies only: a shared link's total would count once per replica.
            out[prefix + "link_queued_s"] = getattr(tier, "queued_s", 0.0)
        return out
