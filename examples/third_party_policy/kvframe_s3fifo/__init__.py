"""S3-FIFO eviction as a kvframe plugin: one class, one entry point.

S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction",
SOSP 2023) keeps three FIFO queues:

* ``small`` — probation for new blocks (about 10% of the capacity). Most blocks
  are used once and never again; they leave from here quickly ("quick
  demotion") without disturbing the blocks that matter.
* ``main`` — blocks that proved themselves. Eviction walks it like a clock:
  a block used since it was last passed is moved to the back with one use
  spent; an unused one is evicted.
* ``ghost`` — keys (no blocks) recently evicted from ``small``. A ghost
  that is inserted again was evicted too early, so it goes straight to
  ``main``.

Each block counts its uses (``touch``), capped at ``max_freq``. Mapped onto
kvframe's five operations:

* ``insert`` puts a new key in ``small`` (or in ``main`` if it is a ghost);
* ``touch`` counts a use of each key it holds; unknown keys are ignored;
* ``evict(n, protected)`` first checks that ``n`` blocks can go (idle, i.e.
  ``ref_cnt == 0``, and not protected) and returns ``None`` without changing
  anything if not. Otherwise it runs S3-FIFO's eviction ``n`` times, stepping
  over blocks it may not take. That check first is what makes it all-or-nothing:
  S3-FIFO moves blocks between queues while it searches.

Under ``--vllm 0.33`` an offload tier is vLLM 0.33.0's, which drives its policy
per request: ``request_scoped_form`` offers S3-FIFO in that shape
(:mod:`kvframe_s3fifo.request_scoped`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Set
from typing import TYPE_CHECKING

import kvframe
from kvframe import EvictableBlock

if TYPE_CHECKING:
    from kvframe_s3fifo.request_scoped import RequestScopedS3FIFO

__all__ = ["S3FIFOPolicy"]

Victim = tuple[Hashable, EvictableBlock]


class _Entry:
    """A held block and the uses counted since it entered (or was last passed in) its queue."""

    __slots__ = ("block", "freq")

    def __init__(self, block: EvictableBlock) -> None:
        self.block = block
        self.freq = 0


class S3FIFOPolicy(kvframe.EvictionPolicy):
    """Small probationary FIFO, main FIFO with reinsertion, ghost FIFO of evicted keys."""

    name = "s3fifo"
    description = "S3-FIFO: quick demotion of one-use blocks through a small probationary queue."

    def __init__(
        self,
        capacity: int,
        *,
        small_fraction: float = 0.1,
        max_freq: int = 3,
        promote_after: int = 1,
    ) -> None:
        """
        :param capacity: blocks in the tier (supplied by kvframe).
        :param small_fraction: share of the capacity the probationary queue aims for.
        :param max_freq: cap on the uses a block counts (the paper uses 3).
        :param promote_after: uses a block needs while in ``small`` to move to ``main``.
        """
        if not 0.0 < small_fraction < 1.0:
            raise ValueError(f"small_fraction must be between 0 and 1, not {small_fraction}")
        if max_freq < 1:
            raise ValueError(f"max_freq must be >= 1, not {max_freq}")
        if not 1 <= promote_after <= max_freq:
            raise ValueError(f"promote_after must be between 1 and max_freq, not {promote_after}")
        super().__init__(capacity)
        self.small_fraction = small_fraction
        self.max_freq = max_freq
        self.promote_after = promote_after
        self.small_target = max(1, int(capacity * small_fraction))
        self.ghost_limit = max(1, capacity - self.small_target)
        # Front = oldest in every queue.
        self.small: OrderedDict[Hashable, _Entry] = OrderedDict()
        self.main: OrderedDict[Hashable, _Entry] = OrderedDict()
        self.ghost: OrderedDict[Hashable, None] = OrderedDict()

    @classmethod
    def request_scoped_form(
        cls,
        capacity: int,
        *,
        small_fraction: float = 0.1,
        max_freq: int = 3,
        promote_after: int = 1,
    ) -> RequestScopedS3FIFO:
        """vLLM 0.33.0's form of this policy, for an offload tier under ``--vllm 0.33``
        (:attr:`kvframe.EvictionPolicy.request_scoped_form`), with the same options."""
        from kvframe_s3fifo.request_scoped import RequestScopedS3FIFO

        return RequestScopedS3FIFO(
            capacity,
            small_fraction=small_fraction,
            max_freq=max_freq,
            promote_after=promote_after,
        )

    def __len__(self) -> int:
        return len(self.small) + len(self.main)

    def _entry(self, key: Hashable) -> _Entry | None:
        entry = self.small.get(key)
        return entry if entry is not None else self.main.get(key)

    # -- the five operations ------------------------------------------------

    def get(self, key: Hashable) -> EvictableBlock | None:
        entry = self._entry(key)
        return entry.block if entry is not None else None

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        if key in self.ghost:
            del self.ghost[key]
            self.main[key] = _Entry(block)
        else:
            self.small[key] = _Entry(block)

    def remove(self, key: Hashable) -> None:
        if self.small.pop(key, None) is None:
            self.main.pop(key, None)

    def touch(self, keys: Iterable[Hashable]) -> None:
        cap = self.max_freq
        for key in keys:
            entry = self._entry(key)
            if entry is not None and entry.freq < cap:
                entry.freq += 1

    def evict(self, n: int, protected: Set[Hashable]) -> list[Victim] | None:
        if n <= 0:
            return []
        if not self._can_evict(n, protected):
            return None
        return [self._evict_one(protected) for _ in range(n)]

    # -- eviction -------------------------------------------------------------

    def _can_evict(self, n: int, protected: Set[Hashable]) -> bool:
        """At least ``n`` held blocks are idle and unprotected (stops counting at ``n``)."""
        found = 0
        for queue in (self.small, self.main):
            for key, entry in queue.items():
                if entry.block.ref_cnt == 0 and key not in protected:
                    found += 1
                    if found >= n:
                        return True
        return False

    def _evict_one(self, protected: Set[Hashable]) -> Victim:
        """One victim: from ``small`` while it is over its target, else from ``main``.

        Either queue may come up empty-handed: ``small`` when it promotes every
        idle block it passes, ``main`` when nothing in it is idle. A second round
        always succeeds: after one pass over ``small`` every idle block is
        either evicted or in ``main``, whose clock then finds one.
        """
        small_first = len(self.small) >= self.small_target
        for _ in range(2):
            if small_first:
                victim = self._evict_small(protected) or self._evict_main(protected)
            else:
                victim = self._evict_main(protected) or self._evict_small(protected)
            if victim is not None:
                return victim
        raise RuntimeError("S3-FIFO found no victim although _can_evict found idle blocks")

    def _evict_small(self, protected: Set[Hashable]) -> Victim | None:
        """Oldest first: promote a block used enough, evict (and remember) one that was not.

        Walks ``small`` once without copying it: the blocks to promote and the
        victim are found first, then moved (promoted blocks enter ``main`` in
        the order they were passed).
        """
        small = self.small
        promoted: list[Hashable] = []
        victim: Hashable | None = None
        found = False
        for key, entry in small.items():
            if entry.block.ref_cnt != 0 or key in protected:
                continue  # cannot go now; keeps its place
            if entry.freq >= self.promote_after:
                promoted.append(key)
                continue
            victim, found = key, True
            break
        for key in promoted:
            entry = small.pop(key)
            entry.freq = 0
            self.main[key] = entry
        if not found:
            return None
        entry = small.pop(victim)
        self.ghost[victim] = None
        if len(self.ghost) > self.ghost_limit:
            self.ghost.popitem(last=False)
        return victim, entry.block

    def _evict_main(self, protected: Set[Hashable]) -> Victim | None:
        """A clock over ``main``: spend one use and move to the back, or evict if unused."""
        main = self.main
        # Each evictable block is passed at most max_freq times before its count is 0.
        for _ in range((self.max_freq + 1) * len(main)):
            key, entry = next(iter(main.items()))
            main.move_to_end(key)
            if entry.block.ref_cnt != 0 or key in protected:
                continue
            if entry.freq > 0:
                entry.freq -= 1
                continue
            del main[key]
            return key, entry.block
        return None
