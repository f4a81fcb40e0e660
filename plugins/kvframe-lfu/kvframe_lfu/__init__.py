"""Least-frequently-used eviction with dynamic aging (LFU-DA).

Proposal: frequency-aware eviction of vLLM's GPU prefix cache (vLLM issue
#23641, PR #27539, closed unmerged; that proposal also weighs recompute cost,
which this policy does not). Aging after LFU-DA (Arlitt, Cherkasova, Dilley,
Friedrich and Jin, "Evaluating content management techniques for Web proxy
caches", 2000), so that content used often long ago does not stay forever.

Semantics, per held key: a use count ``c`` and a priority ``K = L + c``, where
``L`` (the cache's age) is the priority of the last block evicted (``0`` at the
start, and always with ``aging=False``: plain LFU).

* ``insert(key, block)``: ``c = 1`` -- or the count the key had when a prefix
  hit took it (:meth:`on_hit`), so that reuse on the GPU tier accumulates.
  ``K = L + c``.
* ``touch(keys)``: each distinct held key counts one use (``c += 1``) and gets
  ``K = L + c`` with the current age. Unknown keys are ignored. Among equal
  priorities the key touched or inserted longest ago goes first; within one
  touch the first key counts as the most recent.
* ``evict(n, protected)``: the ``n`` idle (``ref_cnt == 0``), unprotected
  blocks with the smallest ``(K, age of last use)``, removed only if ``n``
  exist (else ``None`` and nothing changes); ``L`` becomes the largest ``K``
  among them. Victims leave no history.
* ``on_hit(key)`` (the GPU tier's prefix hit): the key leaves the policy with
  its count remembered, for at most ``capacity`` such keys (oldest dropped), and
  ``insert`` restores it. Without this the GPU tier's hit was a ``remove``, the
  count restarted at every ``insert``, and LFU ordered exactly as LRU.
* ``remove(key)``: forgotten.

A heap of ``(K, sequence, key)`` with lazy deletion orders the blocks: ``touch``
and ``insert`` push, stale entries are skipped and the heap is rebuilt when
they outnumber the live ones, so memory stays a multiple of ``capacity``.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Set

import kvframe
from kvframe import EvictableBlock

__all__ = ["LFUPolicy"]


class _Entry:
    """A held block, its use count, and its heap entry's ``(priority, sequence)``."""

    __slots__ = ("block", "count", "priority", "seq")

    def __init__(self, block: EvictableBlock, count: int, priority: int, seq: int) -> None:
        self.block = block
        self.count = count
        self.priority = priority
        self.seq = seq


class LFUPolicy(kvframe.EvictionPolicy):
    """Evict the least frequently used idle block; the age ``L`` lets old favourites go."""

    name = "lfu"
    description = "Least frequently used first, with dynamic aging (LFU-DA)."

    def __init__(self, capacity: int, *, aging: bool = True) -> None:
        super().__init__(capacity)
        self.aging = aging
        self.entries: dict[Hashable, _Entry] = {}
        self.age = 0
        """``L``: the priority of the last block evicted (stays 0 without aging)."""
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0
        self._hit_counts: OrderedDict[Hashable, int] = OrderedDict()
        """Counts of keys a GPU prefix hit took, oldest first, at most ``capacity``."""

    def __len__(self) -> int:
        return len(self.entries)

    def _push(self, key: Hashable, entry: _Entry) -> None:
        self._seq += 1
        entry.priority = self.age + entry.count
        entry.seq = self._seq
        heapq.heappush(self._heap, (entry.priority, self._seq, key))
        if len(self._heap) > 2 * len(self.entries) + 64:
            # Drop the stale entries: memory stays a multiple of what is held.
            self._heap = [(e.priority, e.seq, k) for k, e in self.entries.items()]
            heapq.heapify(self._heap)

    def get(self, key: Hashable) -> EvictableBlock | None:
        entry = self.entries.get(key)
        return None if entry is None else entry.block

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        count = self._hit_counts.pop(key, 1)
        entry = _Entry(block, count, 0, 0)
        self.entries[key] = entry
        self._push(key, entry)

    def remove(self, key: Hashable) -> None:
        del self.entries[key]

    def on_hit(self, key: Hashable) -> None:
        entry = self.entries.pop(key)
        counts = self._hit_counts
        counts[key] = entry.count
        counts.move_to_end(key)
        if len(counts) > self.capacity:
            counts.popitem(last=False)

    def touch(self, keys: Iterable[Hashable]) -> None:
        entries = self.entries
        held = [key for key in dict.fromkeys(keys) if key in entries]
        for key in reversed(held):  # the first key ends the most recent
            entry = entries[key]
            entry.count += 1
            self._push(key, entry)

    def evict(
        self, n: int, protected: Set[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        if n == 0:
            return []
        entries = self.entries
        heap = self._heap
        victims: list[tuple[Hashable, EvictableBlock]] = []
        passed: list[tuple[int, int, Hashable]] = []
        top = 0
        # Choose first, remove after: pop in order, keep what may not go.
        while heap and len(victims) < n:
            item = heapq.heappop(heap)
            priority, seq, key = item
            entry = entries.get(key)
            if entry is None or entry.seq != seq:
                continue  # stale: the key was touched, removed or evicted since
            passed.append(item)
            if entry.block.ref_cnt == 0 and key not in protected:
                victims.append((key, entry.block))
                top = priority
        if len(victims) < n:
            for item in passed:
                heapq.heappush(heap, item)
            return None
        for key, _ in victims:
            del entries[key]
        for item in passed:
            if item[2] in entries:  # passed over (in use or protected): back in place
                heapq.heappush(heap, item)
        if self.aging:
            self.age = max(self.age, top)
        return victims
