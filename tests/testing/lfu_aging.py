"""A correct LFU-with-aging eviction policy: the base of the LFU mutants in ``mutants.py``.

Not a bundled plugin: it exists so that the conformance suite's power is
measured on a frequency policy too, whose hidden state (an aging floor that
new blocks start from) shows only in how it places blocks inserted *later*.
That is exactly the state a refused ``evict`` must not change, and the state
the suite's drain order alone did not see (issue 32).

Semantics (LFU with dynamic aging, as in GreedyDual / LFU-DA):

* every held key has a count; ``insert`` gives it ``floor + 1``; ``touch``
  adds 1 to each held key it names (unknown keys are ignored);
* ``evict(n, protected)`` takes the ``n`` idle, unprotected blocks with the
  lowest ``(count, insertion sequence)``; only when it returns them does the
  floor rise to the count of the last victim (so long-lived blocks with old
  high counts age relative to new ones). Fewer than ``n`` candidates: ``None``,
  nothing changed.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Set

import kvframe
from kvframe import EvictableBlock

__all__ = ["LFUAgingPolicy"]


class LFUAgingPolicy(kvframe.EvictionPolicy):
    """Least frequently used first, new blocks starting at an aging floor."""

    name = "lfu-aging"
    description = "LFU with dynamic aging (test-only base of the LFU mutants)."

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.blocks: dict[Hashable, EvictableBlock] = {}
        self.counts: dict[Hashable, int] = {}
        self.seq: dict[Hashable, int] = {}
        """Insertion sequence: breaks ties between equal counts, oldest first."""
        self.floor = 0
        """Count of the last block evicted: where new blocks start (minus one)."""
        self._next = 0

    def __len__(self) -> int:
        return len(self.blocks)

    def get(self, key: Hashable) -> EvictableBlock | None:
        return self.blocks.get(key)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        self.blocks[key] = block
        self.counts[key] = self.floor + 1
        self.seq[key] = self._next
        self._next += 1

    def remove(self, key: Hashable) -> None:
        del self.blocks[key]
        del self.counts[key]
        del self.seq[key]

    def touch(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            if key in self.counts:
                self.counts[key] += 1

    def candidates(self, protected: Set[Hashable]) -> list[tuple[int, int, Hashable]]:
        """Every idle, unprotected block as ``(count, seq, key)``, unordered."""
        return [
            (self.counts[key], self.seq[key], key)
            for key, block in self.blocks.items()
            if block.ref_cnt == 0 and key not in protected
        ]

    def evict(self, n: int, protected: Set[Hashable]) -> list | None:
        if n == 0:
            return []
        chosen = heapq.nsmallest(n, self.candidates(protected))
        if len(chosen) < n:
            return None
        victims = [(key, self.blocks[key]) for _, _, key in chosen]
        self.floor = max(self.floor, chosen[-1][0])
        for key, _ in victims:
            self.remove(key)
        return victims
