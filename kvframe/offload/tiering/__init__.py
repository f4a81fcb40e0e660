"""Tiers below DRAM: vLLM 0.33.0's tiering manager (``vllm/v1/kv_offload/tiering``).

* :mod:`.base` -- a secondary tier's contract, its jobs and their results;
* :mod:`.manager` -- :class:`TieringOffloadManager`, the chain GPU -> DRAM ->
  tiers below, whose decisions are vLLM 0.33.0's ``TieringOffloadingManager``'s
  call for call (``tests/offload/tiering_differential_v033.py``);
* :mod:`.ledger_tier` -- :class:`LedgerTier`, a simulated tier below DRAM (local
  disk, object store, a shared remote store) with capacity, an eviction policy,
  a reuse filter, and a :class:`~.link.Link` for bandwidth and latency;
* :mod:`.link` -- :class:`Link`, a transfer path whose bandwidth every tier on it
  shares, so that concurrent loads and stores queue;
* :mod:`.shared` -- the backing (ledger and link) that the replicas of a fleet
  share for a shared remote store, scoped by :func:`sharing`.

``docs/tiering.md`` says where kvframe departs from vLLM 0.33.0.
"""

from kvframe.offload.tiering.base import JobResult, SecondaryTier, TierJob, TierStats
from kvframe.offload.tiering.ledger_tier import LedgerTier
from kvframe.offload.tiering.link import Link
from kvframe.offload.tiering.manager import TieringOffloadManager
from kvframe.offload.tiering.shared import SharedBacking, sharing

__all__ = [
    "JobResult",
    "LedgerTier",
    "Link",
    "SecondaryTier",
    "SharedBacking",
    "TierJob",
    "TierStats",
    "TieringOffloadManager",
    "sharing",
]
