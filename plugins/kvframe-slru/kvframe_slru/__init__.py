"""Segmented LRU (SLRU): a probationary and a protected LRU segment.

Proposal: SLRU for vLLM's CPU offload tier (vLLM issue #38984, open), as
SGLang merged it for its radix cache (sgl-project/sglang PR #18843: blocks hit
at least twice are protected from scan traffic). Semantics after Karedla,
Love and Wherry, "Caching strategies to improve disk system performance"
(IEEE Computer, 1994):

* ``insert`` puts a new block at the most-recent end of *probation*.
* ``touch(keys)``: a held key in probation moves to the most-recent end of
  *protected* (it was used again); one in protected moves to its most-recent
  end. When protected holds more than ``protected_size`` blocks (``capacity
  * protected_fraction``, at least 1), its least recent block is demoted to the
  most-recent end of probation. Keys are taken last to first, so the first key
  ends the most recent. Unknown keys are ignored.
* ``evict(n, protected)``: the least recent idle (``ref_cnt == 0``),
  unprotected blocks of probation first, then of the protected segment; all
  ``n`` or ``None`` with nothing changed.
* ``on_hit(key)`` (the GPU tier's prefix hit): the key leaves; whether it was
  in the protected segment is remembered (at most ``capacity`` keys) and the
  next ``insert`` of that key puts it back there. With the default (a
  ``remove``) every block would re-enter probation at release and be promoted
  by the tier's touch after a hit, so a block hit once would equal a block
  hit a hundred times.
* ``remove(key)``: forgotten.

Why it resists scans: one-use blocks never leave probation, so a burst of
them evicts only each other while the protected segment keeps what was
reused.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Set
from itertools import chain

import kvframe
from kvframe import EvictableBlock

__all__ = ["SLRUPolicy"]


class SLRUPolicy(kvframe.EvictionPolicy):
    """Probation for new blocks, a protected segment for reused ones; evict probation first."""

    name = "slru"
    description = "Segmented LRU: reused blocks are protected from scans."

    def __init__(self, capacity: int, *, protected_fraction: float = 0.8) -> None:
        if not 0.0 < protected_fraction < 1.0:
            raise ValueError(
                f"protected_fraction must be between 0 and 1 (exclusive), not {protected_fraction}"
            )
        super().__init__(capacity)
        self.protected_fraction = protected_fraction
        self.protected_size = max(1, int(capacity * protected_fraction))
        self.probation: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        """Front = least recent; new blocks enter at the back."""
        self.protected: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        """Blocks used again since they entered; front = least recent."""
        self._were_protected: OrderedDict[Hashable, None] = OrderedDict()
        """Keys a GPU prefix hit took from the protected segment (oldest first)."""

    def __len__(self) -> int:
        return len(self.probation) + len(self.protected)

    def get(self, key: Hashable) -> EvictableBlock | None:
        block = self.probation.get(key)
        return block if block is not None else self.protected.get(key)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        if key in self._were_protected:
            del self._were_protected[key]
            self.protected[key] = block
            self._demote()
        else:
            self.probation[key] = block

    def remove(self, key: Hashable) -> None:
        if self.probation.pop(key, None) is None:
            del self.protected[key]

    def on_hit(self, key: Hashable) -> None:
        if self.probation.pop(key, None) is None:
            del self.protected[key]
            remembered = self._were_protected
            remembered[key] = None
            if len(remembered) > self.capacity:
                remembered.popitem(last=False)

    def touch(self, keys: Iterable[Hashable]) -> None:
        probation, protected = self.probation, self.protected
        for key in reversed(list(keys)):
            if key in protected:
                protected.move_to_end(key)
            elif key in probation:
                protected[key] = probation.pop(key)
                self._demote()

    def _demote(self) -> None:
        protected = self.protected
        while len(protected) > self.protected_size:
            key, block = protected.popitem(last=False)
            self.probation[key] = block

    def evict(
        self, n: int, protected: Set[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        if n == 0:
            return []
        victims: list[tuple[Hashable, EvictableBlock]] = []
        # Choose first, remove after: a refusal leaves both segments as they were.
        for key, block in chain(self.probation.items(), self.protected.items()):
            if block.ref_cnt == 0 and key not in protected:
                victims.append((key, block))
                if len(victims) == n:
                    break
        else:
            return None
        for key, _ in victims:
            if self.probation.pop(key, None) is None:
                del self.protected[key]
        return victims
