"""The scheduler-side counters of a tier's connector, shared by both releases' connectors
(:mod:`kvframe.offload.slots.connector`, :mod:`kvframe.offload.jobs.connector`)."""

from __future__ import annotations

import attrs

__all__ = ["OffloadStats"]


@attrs.define(slots=True)
class OffloadStats:
    """Scheduler-side counters of the tier (the worker counts bytes and time)."""

    num_lookups: int = 0
    num_load_requests: int = 0
    num_loaded_blocks: int = 0
    """Offloaded blocks pinned for loads."""
    num_stored_blocks: int = 0
    """Offloaded blocks the manager accepted for storing."""
    num_store_refused: int = 0
    """``prepare_store`` calls that returned ``None`` (nothing evictable)."""
    num_evicted_blocks: int = 0
    num_delayed_for_load: int = 0
    """Lookups answered ``None`` because another request was loading the blocks."""
