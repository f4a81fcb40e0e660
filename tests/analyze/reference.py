"""Generated prefix-cache traces and the plain reference models the analysis is checked against."""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence

from hypothesis import strategies as st

from kvframe.analyze.trace import BlockTrace

BLOCK_SIZE = 4


def make_trace(chains: Sequence[Sequence[int]], tails: Sequence[int]) -> BlockTrace:
    """A trace of the given block chains; ``tails[r]`` extra tokens after request ``r``'s
    full blocks (0 makes the last block ineligible: the last-token rule)."""
    blocks = tuple(array("q", chain) for chain in chains)
    num_tokens = array("q", (len(c) * BLOCK_SIZE + t for c, t in zip(chains, tails, strict=True)))
    num_tokens = array("q", (max(1, n) for n in num_tokens))
    eligible = array(
        "q", (min(len(c), (n - 1) // BLOCK_SIZE) for c, n in zip(chains, num_tokens, strict=True))
    )
    return BlockTrace(
        block_size=BLOCK_SIZE,
        blocks=blocks,
        num_tokens=num_tokens,
        eligible=eligible,
        arrival=array("d", (float(r) for r in range(len(chains)))),
        groups=tuple(None for _ in chains),
        num_distinct=len({b for c in chains for b in c}),
        name="generated",
    )


@st.composite
def traces(draw: st.DrawFn, max_requests: int = 30, max_blocks: int = 8) -> BlockTrace:
    """Requests that share prefixes as a real trace does: each continues a prefix of an
    earlier request (a conversation turn, a shared system prompt) with fresh blocks."""
    n = draw(st.integers(1, max_requests))
    chains: list[list[int]] = []
    tails: list[int] = []
    next_id = 0
    for _ in range(n):
        if chains and draw(st.booleans()):
            base = draw(st.sampled_from(chains))
            shared = draw(st.integers(0, len(base)))
            chain = list(base[:shared])
        else:
            chain = []
        extra = draw(st.integers(0 if chain else 1, max_blocks))
        chain += range(next_id, next_id + extra)
        next_id += extra
        chains.append(chain)
        tails.append(draw(st.integers(0, BLOCK_SIZE - 1)))
    return make_trace(chains, tails)


def reference_lru_hit_tokens(trace: BlockTrace, capacity: int) -> int:
    """LRU prefix cache, the obvious way: look up the prefix, then put the request's
    first ``capacity`` blocks on top (block 0 most recent) and drop the oldest."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for chain, cap in zip(trace.blocks, trace.eligible, strict=True):
        h = 0
        while h < cap and chain[h] in cache:
            h += 1
        hits += h
        for key in reversed(chain[:capacity]):
            cache[key] = None
            cache.move_to_end(key)
        while len(cache) > capacity:
            cache.popitem(last=False)
    return hits * trace.block_size


def brute_force_optimal_hit_tokens(trace: BlockTrace, capacity: int) -> int:
    """The best any cache can do, by trying every choice of contents after every request.

    Exponential: for traces of a handful of distinct blocks only."""
    states: dict[frozenset[int], int] = {frozenset(): 0}
    for chain, cap in zip(trace.blocks, trace.eligible, strict=True):
        following: dict[frozenset[int], int] = {}
        for held, hits in states.items():
            h = 0
            while h < cap and chain[h] in held:
                h += 1
            pool = sorted(held | set(chain))
            for keep in _subsets(pool, capacity):
                if following.get(keep, -1) < hits + h:
                    following[keep] = hits + h
        states = following
    return max(states.values()) * trace.block_size


def _subsets(pool: list[int], size: int) -> list[frozenset[int]]:
    from itertools import combinations

    out = []
    for k in range(min(size, len(pool)) + 1):
        out.extend(frozenset(c) for c in combinations(pool, k))
    return out
