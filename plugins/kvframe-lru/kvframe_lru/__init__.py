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

Idle tracking (:meth:`kvframe.EvictionPolicy.track_idle`): with a tier that
reports blocks becoming idle, a second ``OrderedDict`` holds the idle blocks in
the same order, and ``evict`` walks that instead of every block. In a busy
offload tier most blocks are being written, so this turns a walk of the whole
tier into one of about ``n`` blocks; the victims are the same.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Sequence, Set
from itertools import compress, filterfalse
from operator import attrgetter, not_
from typing import TYPE_CHECKING

import kvframe
from kvframe import EvictableBlock, TouchWalkCache

if TYPE_CHECKING:
    from kvframe import RequestScopedPolicy

__all__ = ["LRUPolicy"]

_ref_cnt = attrgetter("ref_cnt")


class LRUPolicy(kvframe.EvictionPolicy):
    """Evict the least recently used idle block (vLLM's default offload policy)."""

    name = "lru"
    description = "Least recently used first (vLLM 0.19's LRUCachePolicy)."

    @classmethod
    def request_scoped_form(cls, capacity: int, **options: object) -> RequestScopedPolicy:
        """vLLM 0.33.0's form of this policy (:class:`kvframe_lru.rank.RankLRUPolicy`),
        for a tier under the 0.33 fidelity target (it takes no options)."""
        if options:
            raise ValueError(f"vLLM 0.33.0's lru takes no options, not {sorted(options)}")
        from kvframe_lru.rank import RankLRUPolicy

        return RankLRUPolicy(capacity)

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
        self._walks = TouchWalkCache(capacity)
        """The held keys of recently touched lists: a waiting request's blocks are
        touched on every step it waits, most of them not in the tier."""
        self._tracking = False
        """Whether the tier reports blocks becoming idle (:meth:`track_idle`)."""
        self._idle: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        """With tracking, and unless ``_stale``: a subsequence of ``blocks`` (same
        order) holding every idle block, and perhaps blocks a load has pinned
        since (``evict`` checks ``ref_cnt`` anyway). Every order change of
        ``blocks`` is mirrored here, so walking it finds the victims the walk
        of ``blocks`` finds."""
        self._stale = False
        """A block became idle that ``_idle`` lacks: rebuild it before the next walk.

        A block becoming idle has to enter ``_idle`` at its place in the
        order, which only a walk of ``blocks`` finds; one rebuild (in C) per
        batch of such blocks (a request's blocks, when it finishes) replaces
        a walk of every block on every ``evict``."""
        self._unindexed: set[Hashable] = set()
        """The blocks reported idle that ``_idle`` lacks (until the rebuild).

        The rebuild keeps the blocks of ``_idle`` and these, in the order of
        ``blocks``: every idle block is one or the other (the tier reports
        every block it makes idle), so it tests keys against a set instead of
        reading every block's ``ref_cnt`` (2.4x faster for 4,096 blocks)."""
        self._rebuild_all = False
        """The first rebuild reads every ``ref_cnt``: blocks held before
        tracking started were never reported."""

    def track_idle(self) -> bool:
        self._tracking = True
        self._stale = self._rebuild_all = True
        return True

    def on_idle(self, keys: Iterable[Hashable]) -> None:
        if not self._rebuild_all:
            unindexed = self._unindexed
            unindexed.update(filterfalse(self._idle.__contains__, keys))
            if unindexed:
                self._stale = True

    def _rebuild_idle(self) -> None:
        blocks = self.blocks
        if self._rebuild_all:
            flags = map(not_, map(_ref_cnt, blocks.values()))
            self._idle = OrderedDict(compress(blocks.items(), flags))
            self._rebuild_all = False
        else:
            members = set(self._idle)
            members |= self._unindexed
            keys = list(filter(members.__contains__, blocks))
            self._idle = OrderedDict(zip(keys, map(blocks.__getitem__, keys), strict=True))
        self._unindexed.clear()
        self._stale = False

    def __len__(self) -> int:
        return len(self.blocks)

    def get(self, key: Hashable) -> EvictableBlock | None:
        return self.blocks.get(key)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        self.blocks[key] = block
        self._touched = None
        self._walks.inserted(key)
        if self._tracking and block.ref_cnt == 0:
            self._idle[key] = block

    def remove(self, key: Hashable) -> None:
        del self.blocks[key]
        self._touched = None
        if self._idle:
            self._idle.pop(key, None)
        if self._unindexed:
            self._unindexed.discard(key)

    def touch(self, keys: Iterable[Hashable]) -> None:
        if type(keys) is list:
            if keys == self._touched:
                return
            keys = keys.copy()  # the caller may change its list afterwards
        elif type(keys) is not tuple:
            keys = list(keys)
        blocks = self.blocks
        idle = self._idle
        if len(keys) == 1:
            # The GPU prefix cache touches one block at a time.
            if keys[0] in blocks:
                blocks.move_to_end(keys[0])
                if keys[0] in idle:
                    idle.move_to_end(keys[0])
        else:
            # Reverse so the first key ends last, i.e. most recent of the
            # batch. The loop runs in C (a zero-length deque drains the
            # iterator): the connector touches every full block of a request
            # on each lookup and after each store, most of them absent, and a
            # Python loop over them was a third of a tier run's policy time.
            # The held keys of a list touched before come from the cache.
            held = self._walks.walk(keys, blocks.__contains__)  # type: ignore[arg-type]
            deque(map(blocks.move_to_end, held), maxlen=0)
            if idle:
                # The same moves on the idle index keep it in the same order.
                deque(map(idle.move_to_end, filter(idle.__contains__, held)), maxlen=0)
        self._touched = keys

    def evict(
        self, n: int, protected: Set[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        if n == 0:
            return []
        if self._tracking:
            if self._stale:
                self._rebuild_idle()
            # Every idle block is in the index, in the same order: walking it
            # finds the same victims as walking ``blocks``.
            candidates = self._idle
        else:
            candidates = self.blocks
        victims: list[tuple[Hashable, EvictableBlock]] = []
        # Choose first, remove after: an eviction that cannot be completed must
        # leave the order untouched (the caller then refuses the whole store).
        for key, block in candidates.items():
            if block.ref_cnt == 0 and key not in protected:
                victims.append((key, block))
                if len(victims) == n:
                    break
        else:
            return None
        blocks = self.blocks
        for key, _ in victims:
            del blocks[key]
        if self._tracking:
            idle = self._idle
            for key, _ in victims:
                del idle[key]
        self._touched = None
        return victims
