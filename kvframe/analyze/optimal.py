"""The optimal bound: Belady's MIN on prefix chains, knowing the whole future.

After each request the cache keeps, of the blocks it held and the request's
blocks, the ``C`` whose next *counting* use comes soonest (a use that can
hit: within a later request's eligible blocks). Ties go to the shallower
block (a prompt deeper than 65,535 blocks shares the tie-break of its
65,535th), and blocks never used again go first.

Why this respects prefix chains without a special rule: a later request that
can hit a block can also hit its whole prefix, so a block's next counting use
is never before its parent's. Keeping the soonest-needed blocks (ties to the
parent) therefore keeps a prefix-closed set: only chain tails are ever
evicted ("Belady on chain tails").

Why it bounds every policy: each counting use is one block hit or miss, a
cache may keep any ``C`` of the blocks it held or just computed, and the
exchange argument of Belady's MIN applies unchanged -- swapping a kept block
for one needed sooner never loses a hit. Skipping a store (an offload tier's
refusal) is one of the choices it dominates. The tests check the bound
against every installed policy on hypothesis-generated traces and on the
bundled ones. At unlimited size it keeps everything: the ceiling.
"""

from __future__ import annotations

import heapq
from array import array

from kvframe.analyze.trace import BlockTrace

__all__ = ["NextUse", "next_uses", "optimal_hit_tokens"]

_NEVER = 1 << 62
_DEPTH_BITS = 16
_DEPTH_MAX = (1 << _DEPTH_BITS) - 1

NextUse = tuple[array, ...]
"""Per request, per block: the index of the next request that can hit it (or never)."""


def next_uses(trace: BlockTrace) -> NextUse:
    """One backward pass: each lookup's next counting use."""
    upcoming: dict[int, int] = {}
    out: list[array] = [array("q")] * len(trace.blocks)
    eligible = trace.eligible
    for r in range(len(trace.blocks) - 1, -1, -1):
        chain = trace.blocks[r]
        get = upcoming.get
        out[r] = array("q", [get(key, _NEVER) for key in chain])
        for key in chain[: eligible[r]]:
            upcoming[key] = r
    return tuple(out)


def optimal_hit_tokens(trace: BlockTrace, capacity: int, nxt: NextUse | None = None) -> int:
    """Prompt tokens an optimal cache of ``capacity`` blocks serves (MIN on chains)."""
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1 block, got {capacity}")
    if nxt is None:
        nxt = next_uses(trace)
    held: dict[int, int] = {}
    """Cached block -> its priority, ``next use << 16 | depth`` (the heap's live entries)."""
    heap: list[tuple[int, int]] = []
    """(-priority, block): the top is the block needed last, the deepest first.
    Entries whose priority is no longer the block's are stale and skipped."""
    push = heapq.heappush
    pop = heapq.heappop
    eligible = trace.eligible
    hits = 0
    limit = 4 * capacity + 1024
    for r, chain in enumerate(trace.blocks):
        cap = eligible[r]
        h = 0
        while h < cap and chain[h] in held:
            h += 1
        hits += h
        uses = nxt[r]
        for depth, key in enumerate(chain):
            use = uses[depth]
            if use == _NEVER:
                # Never hit again: dropping it now is what MIN does first anyway.
                held.pop(key, None)
                continue
            priority = use << _DEPTH_BITS | min(depth, _DEPTH_MAX)
            held[key] = priority
            push(heap, (-priority, key))
        while len(held) > capacity:
            neg, key = pop(heap)
            if held.get(key) == -neg:
                del held[key]
        if len(heap) > limit:
            # Drop the stale entries: the heap stays O(capacity + request).
            heap = [(-priority, key) for key, priority in held.items()]
            heapq.heapify(heap)
    return hits * trace.block_size
