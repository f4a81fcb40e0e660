"""SIEVE: one FIFO queue, a visited bit per block, and a hand that sweeps it.

Semantics after Zhang, Yang, Yue, Vigfusson and Rashmi, "SIEVE is Simpler than
LRU: an Efficient Turn-Key Eviction Algorithm for Web Caches" (NSDI 2024):

* ``insert`` puts a block at the head (newest end) with its bit clear.
* ``touch(keys)`` sets the bit of each held key; nothing moves ("lazy
  promotion"). Unknown keys are ignored.
* ``evict(n, protected)``: the hand starts where the last eviction left it (at
  first, the tail: the oldest block) and moves toward the head, wrapping to the
  tail. A block with its bit set has it cleared and is passed over; a block
  with its bit clear is evicted, and the hand stays at the next block. Blocks
  it may not take (``ref_cnt != 0``, protected, or taken by a GPU prefix hit)
  are passed over with their bit unchanged. All or nothing: two sweeps meet
  every block it may take (the first clears the bits); finding fewer than
  ``n``, it sets the bits it cleared again, leaves the hand, and returns
  ``None``.
* ``on_hit(key)`` (the GPU tier's prefix hit): the block keeps its place in
  the queue, marked as taken (``get`` answers ``None``, ``evict`` passes over
  it), and the next ``insert`` of that key puts the new block there, not at
  the head. That is SIEVE's own treatment of a hit -- the block does not move
  -- where the default (a ``remove``) would re-insert it at the head like an
  LRU. At most ``capacity`` taken places are kept (the oldest goes).
* ``remove(key)``: unlinked.

The queue is a doubly-linked list of nodes with a key -> node dict, so every
operation is O(1) except ``evict``, which costs the blocks the hand passes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Set

import kvframe
from kvframe import EvictableBlock

__all__ = ["SIEVEPolicy"]


class _Node:
    """One queue position: ``newer`` is toward the head, ``older`` toward the tail."""

    __slots__ = ("block", "key", "newer", "older", "taken", "visited")

    def __init__(self, key: Hashable, block: EvictableBlock) -> None:
        self.key = key
        self.block = block
        self.visited = False
        self.taken = False
        self.newer: _Node | None = None
        self.older: _Node | None = None


class SIEVEPolicy(kvframe.EvictionPolicy):
    """A FIFO with visited bits; the hand evicts the first unvisited block it meets."""

    name = "sieve"
    description = "SIEVE: FIFO with visited bits and a sweeping hand (NSDI 2024)."

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.nodes: dict[Hashable, _Node] = {}
        """Every position in the queue: held blocks and places a GPU hit took."""
        self.head: _Node | None = None
        """The newest position."""
        self.tail: _Node | None = None
        """The oldest position."""
        self.hand: _Node | None = None
        """Where the next eviction starts; ``None``: at the tail."""
        self._taken: OrderedDict[Hashable, None] = OrderedDict()
        """Keys whose place a GPU prefix hit took, oldest first."""

    def __len__(self) -> int:
        return len(self.nodes) - len(self._taken)

    # -- the list ---------------------------------------------------------------

    def _push_head(self, node: _Node) -> None:
        node.older = self.head
        node.newer = None
        if self.head is not None:
            self.head.newer = node
        self.head = node
        if self.tail is None:
            self.tail = node

    def _unlink(self, node: _Node) -> None:
        if self.hand is node:
            self.hand = node.newer
        if node.newer is not None:
            node.newer.older = node.older
        else:
            self.head = node.older
        if node.older is not None:
            node.older.newer = node.newer
        else:
            self.tail = node.newer
        node.newer = node.older = None
        del self.nodes[node.key]

    # -- the five operations --------------------------------------------------

    def get(self, key: Hashable) -> EvictableBlock | None:
        node = self.nodes.get(key)
        return None if node is None or node.taken else node.block

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        node = self.nodes.get(key)
        if node is not None:  # back from a GPU prefix hit: its old place
            del self._taken[key]
            node.taken = False
            node.block = block
            return
        node = _Node(key, block)
        self.nodes[key] = node
        self._push_head(node)

    def remove(self, key: Hashable) -> None:
        self._unlink(self.nodes[key])

    def on_hit(self, key: Hashable) -> None:
        node = self.nodes[key]
        node.taken = True
        taken = self._taken
        taken[key] = None
        if len(taken) > self.capacity:
            oldest, _ = taken.popitem(last=False)
            self._unlink(self.nodes[oldest])

    def touch(self, keys: Iterable[Hashable]) -> None:
        nodes = self.nodes
        for key in keys:
            node = nodes.get(key)
            if node is not None and not node.taken:
                node.visited = True

    def evict(
        self, n: int, protected: Set[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        if n == 0:
            return []
        victims: list[_Node] = []
        chosen: set[int] = set()
        cleared: list[_Node] = []
        node = self.hand if self.hand is not None else self.tail
        # Two sweeps are enough: the first clears every bit it may, the second
        # then meets every block it may take. Fewer found: there are fewer.
        for _ in range(2 * len(self.nodes)):
            if len(victims) == n:
                break
            assert node is not None
            if node.taken or node.block.ref_cnt != 0 or node.key in protected:
                pass
            elif node.visited:
                node.visited = False
                cleared.append(node)
            elif id(node) not in chosen:
                victims.append(node)
                chosen.add(id(node))
            node = node.newer if node.newer is not None else self.tail
        if len(victims) < n:
            for passed in cleared:  # all or nothing: the bits come back, the hand stays
                passed.visited = True
            return None
        # The hand rests after the last victim (_unlink steps it past victims).
        self.hand = node
        result = [(victim.key, victim.block) for victim in victims]
        for victim in victims:
            self._unlink(victim)
        return result
