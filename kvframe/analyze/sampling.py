"""SHARDS-style spatial sampling of a prefix-cache trace.

SHARDS (Waldspurger et al., FAST'15) keeps the accesses of the keys whose
hash falls under a threshold and simulates a cache scaled by the same rate:
a sample at rate ``R`` of a cache of ``C`` blocks behaves like the full trace
in a cache of ``C / R``. Sampling single blocks would cut chains apart (a
block kept without its parent could never hit), so whole requests are kept
or dropped, by the hash of one block of their chain -- the chain node at
:func:`sample_depth`. Two requests sharing that node share everything before
it, so every prefix a kept request can hit is kept with it.

Why not the chain root (depth 0): a trace whose requests all start with the
same system prompt has one root (the Mooncake conversation trace: all 12,031
requests start with hash id 0), and a sample of it is all or nothing. The
depth is the shallowest whose nodes are diverse enough (at least a tenth as
many distinct nodes as requests); the shared stem above it is kept by every
sampled request, a small bias the measured error includes.

The keys are interned block ids (first-seen order), mixed by SplitMix64 so the
decision is a pseudo-random but deterministic function of the block's
content: the same trace gives the same sample in every run.
"""

from __future__ import annotations

from kvframe.analyze.trace import BlockTrace

__all__ = ["sample_depth", "sample_trace", "scaled_capacity"]

_MASK = (1 << 64) - 1
_SCALE = 1 << 24


def _mix(x: int) -> int:
    """SplitMix64's finaliser: a well-spread 64-bit hash of an int."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def sample_depth(trace: BlockTrace, max_depth: int = 8) -> int:
    """The shallowest chain depth with at least ``len(trace) / 10`` distinct nodes."""
    want = max(1, len(trace) // 10)
    best, best_count = 0, -1
    for depth in range(max_depth + 1):
        count = len({chain[min(depth, len(chain) - 1)] for chain in trace.blocks if chain})
        if count >= want:
            return depth
        if count > best_count:
            best, best_count = depth, count
    return best


def sample_trace(trace: BlockTrace, rate: float, *, depth: int | None = None) -> BlockTrace:
    """The requests whose node at ``depth`` hashes under ``rate`` (all of them at 1)."""
    if not 0 < rate <= 1:
        raise ValueError(f"sample rate must be in (0, 1], got {rate}")
    if rate == 1:
        return trace
    if depth is None:
        depth = sample_depth(trace)
    threshold = int(rate * _SCALE)
    keep = []
    for r, chain in enumerate(trace.blocks):
        key = chain[min(depth, len(chain) - 1)] if chain else -1 - r
        if _mix(key) % _SCALE < threshold:
            keep.append(r)
    return trace.subset(keep)


def scaled_capacity(capacity: int, rate: float) -> int:
    """The sampled cache's size: ``capacity * rate`` blocks, at least one."""
    return max(1, round(capacity * rate))
