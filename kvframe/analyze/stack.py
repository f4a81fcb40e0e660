"""The exact LRU hit-rate curve in one pass: stack distances of a prefix cache.

Model ("cache only"): requests are served one at a time in arrival order. A
request looks up its prompt's blocks; its hit is the longest cached prefix,
capped at its eligible blocks (:attr:`BlockTrace.eligible`). Then every one
of its blocks is cached, ordered as vLLM frees them: the tail block least
recent, block 0 most recent (``touch`` puts the first key last).

Why LRU's curve needs only one pass. With that order, a block is always at
least as recent as every block that extends it (a request that uses a block
uses its whole prefix, and puts the prefix above it). So an LRU cache of
``C`` blocks holds exactly the ``C`` most recent blocks, that set is closed
under prefixes (nothing is ever cached without its parent), and block ``i``
of a request hits at size ``C`` if and only if fewer than ``C`` distinct
blocks were used more recently than it when the request arrives: its *stack
distance* ``d``. One pass computes every ``d`` and each size's hit count is
the number of eligible lookups with ``d < C`` -- Mattson's inclusion property.

How ``d`` is computed. The blocks are replayed as one sequence, each request
tail first, and a Fenwick tree over access times marks each block's latest
access: the marks after a block's previous access count the distinct blocks
used since. Replaying tail first counts the request's own later blocks
(``k - 1 - i`` of them, all new above block ``i`` in this request and never
used without it since), which are subtracted. ``O(log N)`` per lookup.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

import attrs

from kvframe.analyze.trace import BlockTrace

__all__ = ["StackProfile", "stack_profile"]


@attrs.frozen(slots=True)
class StackProfile:
    """Every eligible lookup's LRU stack distance, and what the reuse profile needs."""

    block_size: int
    total_tokens: int
    distances: array
    """Sorted stack distances (blocks) of the eligible lookups of a block seen before."""
    gaps: array
    """Seconds since the block's previous use, for the same lookups (unsorted)."""
    cold: int
    """Eligible lookups of a block never seen before (misses at every size)."""
    request_hit_blocks: array
    """Per request: its hit blocks in an unlimited cache."""

    def hit_tokens(self, capacity: int | None) -> int:
        """Prompt tokens served from an LRU cache of ``capacity`` blocks (``None``: unlimited)."""
        hits = len(self.distances) if capacity is None else bisect_left(self.distances, capacity)
        return hits * self.block_size

    def hit_rate(self, capacity: int | None) -> float:
        return self.hit_tokens(capacity) / self.total_tokens if self.total_tokens else 0.0


def stack_profile(trace: BlockTrace) -> StackProfile:
    """One pass over the trace: see the module docstring."""
    size = trace.total_accesses
    tree = [0] * (size + 1)
    last: dict[int, int] = {}
    when = array("d", bytes(8 * (size + 1)))
    distances: list[int] = []
    gaps = array("d")
    request_hits = array("q")
    cold = 0
    t = 0
    distinct = 0
    eligible = trace.eligible
    arrival = trace.arrival
    for r, chain in enumerate(trace.blocks):
        k = len(chain)
        cap = eligible[r]
        now = arrival[r]
        hits = 0
        for i in range(k - 1, -1, -1):
            key = chain[i]
            t += 1
            p = last.get(key)
            if p is None:
                distinct += 1
                if i < cap:
                    cold += 1
            else:
                # Marks after p: all marks (one per distinct block) minus those up to p.
                s = 0
                j = p
                while j:
                    s += tree[j]
                    j &= j - 1
                j = p
                while j <= size:
                    tree[j] -= 1
                    j += j & -j
                if i < cap:
                    distances.append(distinct - s - (k - 1 - i))
                    gaps.append(now - when[p])
                    hits += 1
            j = t
            while j <= size:
                tree[j] += 1
                j += j & -j
            last[key] = t
            when[t] = now
        request_hits.append(hits)
    distances.sort()
    return StackProfile(
        block_size=trace.block_size,
        total_tokens=trace.total_tokens,
        distances=array("q", distances),
        gaps=gaps,
        cold=cold,
        request_hit_blocks=request_hits,
    )
