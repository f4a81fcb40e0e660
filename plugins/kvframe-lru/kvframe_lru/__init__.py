"""Least-recently-used eviction, as vLLM 0.19's ``LRUCachePolicy`` does it.

One ``OrderedDict`` is both the key → block map and the recency order: the
front is the least recently used block, the back the most recent. That makes
``get``, ``insert``, ``remove`` and a touch of one key O(1), and ``evict`` walks
from the front, skipping only the blocks it may not take (protected, or
``ref_cnt != 0``), so its cost is the number of blocks returned plus the number
skipped.

Semantics pinned to vLLM (``vllm/v1/kv_offload/cpu/policies/lru.py``):

* ``insert`` puts a block at the most-recent end, whatever its ``ref_cnt``;
  a block being written (``ref_cnt == -1``) is ordered like any other.
* ``touch(keys)`` moves the keys to the most-recent end in *reverse* order, so
  that the first key ends up the most recent of them (a request's first block
  is the one every continuation of that prefix needs). Unknown keys are ignored.
* ``evict(n, protected)`` chooses the ``n`` least recent blocks that are neither
  protected nor in use, and only then removes them: if fewer than ``n`` exist it
  returns ``None`` and nothing has changed. ``n == 0`` returns ``[]``.
* ``capacity`` is accepted for a uniform constructor but not used: the tier,
  not the policy, decides when to evict.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Sequence, Set

import kvframe
from kvframe.bases import EvictableBlock

__all__ = ["LRUPolicy"]


class LRUPolicy(kvframe.EvictionPolicy):
    """Evict the least recently used idle block (vLLM's default offload policy)."""

    name = "lru"
    description = "Least recently used first (vLLM 0.19's LRUCachePolicy)."

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.blocks: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        """Front = least recently used: the eviction order."""
        self._touched: Sequence[Hashable] | None = None
        """The keys of the last touch while nothing has changed the order since.

        Touching the same keys again then changes nothing (they already are
        the most recent blocks, in the touch's order), so it is skipped. A
        waiting request is looked up, and so touched, on every step it waits:
        in the Mooncake runs more than half the touched keys were such
        repeats. ``ref_cnt`` plays no part in a touch, so the tier changing
        it does not matter."""

    def __len__(self) -> int:
        return len(self.blocks)

    def get(self, key: Hashable) -> EvictableBlock | None:
        return self.blocks.get(key)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        self.blocks[key] = block
        self._touched = None

    def remove(self, key: Hashable) -> None:
        del self.blocks[key]
        self._touched = None

    def touch(self, keys: Iterable[Hashable]) -> None:
        if type(keys) is list:
            if keys == self._touched:
                return
            keys = keys.copy()  # the caller may change its list afterwards
        elif type(keys) is not tuple:
            keys = list(keys)
        blocks = self.blocks
        if len(keys) == 1:
            # The GPU prefix cache touches one block at a time.
            if keys[0] in blocks:
                blocks.move_to_end(keys[0])
        else:
            # Reverse so the first key ends last, i.e. most recent of the
            # batch. The loop runs in C (a zero-length deque drains the
            # iterator): the connector touches every full block of a request
            # on each lookup and after each store, most of them absent, and a
            # Python loop over them was a third of a tier run's policy time.
            moves = map(blocks.move_to_end, filter(blocks.__contains__, reversed(keys)))
            deque(moves, maxlen=0)
        self._touched = keys

    def evict(
        self, n: int, protected: Set[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        if n == 0:
            return []
        victims: list[tuple[Hashable, EvictableBlock]] = []
        # Choose first, remove after: an eviction that cannot be completed must
        # leave the order untouched (the caller then refuses the whole store).
        for key, block in self.blocks.items():
            if block.ref_cnt == 0 and key not in protected:
                victims.append((key, block))
                if len(victims) == n:
                    break
        else:
            return None
        blocks = self.blocks
        for key, _ in victims:
            del blocks[key]
        self._touched = None
        return victims
