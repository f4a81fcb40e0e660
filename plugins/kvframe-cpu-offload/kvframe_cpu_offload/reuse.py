"""The ``threshold`` reuse filter: store a block only once it has been looked up N times.

vLLM 0.19's ``FilterReusedOffloadingManager`` (``vllm/v1/kv_offload/reuse_manager.py``)
as a :class:`kvframe.ReuseFilter`. The host's
:class:`kvframe.offload.slots.manager.FilteredOffloadManager` does the wrapping, so
the filter sees exactly what vLLM's decorator sees:

* every hash passed to ``lookup`` is one *sighting*, hit or miss, including the
  hashes after the first miss (the connector looks up a request's blocks from
  the first one the GPU does not hold to its last full block, every time it
  asks about the request);
* a hash passes ``filter_store`` once its count has reached ``store_threshold``;
  asking does not refresh it.

The counter is an LRU-bounded table of ``max_tracker_size`` entries: a sighting
moves the hash to the recent end, and a new hash arriving when the table is
full pushes out the least recently sighted one (whose count is then lost).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import kvframe
from kvframe import BlockHash

__all__ = ["ThresholdReuseFilter"]


class ThresholdReuseFilter(kvframe.ReuseFilter):
    """Store a block only after ``store_threshold`` lookups have seen it."""

    name = "threshold"
    description = "Store a block only after N lookups saw it (vLLM's reuse filter)."

    def __init__(self, *, store_threshold: int = 2, max_tracker_size: int = 64_000) -> None:
        """
        :param store_threshold: sightings needed before a hash may be stored. 0 and
            1 disable the filter (everything passes, nothing is counted), as in
            vLLM, where values below 2 leave the manager unwrapped.
        :param max_tracker_size: hashes the sighting counter remembers.
        """
        if store_threshold < 0:
            raise ValueError(f"store_threshold must be >= 0, not {store_threshold}")
        if max_tracker_size < 1:
            raise ValueError(f"max_tracker_size must be >= 1, not {max_tracker_size}")
        self.store_threshold = store_threshold
        self.max_tracker_size = max_tracker_size
        self.enabled = store_threshold >= 2
        self.counts: OrderedDict[BlockHash, int] = OrderedDict()
        """Sightings per hash; front = least recently sighted."""

    @classmethod
    def in_manager_form(
        cls, *, store_threshold: int = 2, max_tracker_size: int = 64_000
    ) -> kvframe.InManagerReuseFilter:
        """vLLM 0.33.0's form of this filter (:attr:`kvframe.ReuseFilter.in_manager_form`),
        for a tier under the 0.33 fidelity target: ``(store_threshold, max_tracker_size)``
        for the manager that counts store offers itself (``CPUOffloadingManager``),
        checked as the constructor checks."""
        cls(store_threshold=store_threshold, max_tracker_size=max_tracker_size)
        return kvframe.InManagerReuseFilter(store_threshold, max_tracker_size)

    def on_lookup(self, block_hashes: Sequence[BlockHash]) -> None:
        if not self.enabled:
            return
        counts = self.counts
        for block_hash in block_hashes:
            if block_hash in counts:
                counts.move_to_end(block_hash)
                counts[block_hash] += 1
            else:
                if len(counts) >= self.max_tracker_size:
                    counts.popitem(last=False)
                counts[block_hash] = 1

    def filter_store(self, block_hashes: Sequence[BlockHash]) -> list[BlockHash]:
        if not self.enabled:
            return list(block_hashes)
        get = self.counts.get
        threshold = self.store_threshold
        return [h for h in block_hashes if get(h, 0) >= threshold]
