"""The reuse profile: how far apart (in blocks and in seconds) a trace reuses blocks.

From the stack distances of :mod:`kvframe.analyze.stack`: a lookup's stack
distance is the LRU cache size it needs to hit, and the seconds since the
block's previous use say how long a cache must keep it. Per-request and
per-job breakdowns show whether reuse is spread or concentrated.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import attrs

from kvframe.analyze.stack import StackProfile
from kvframe.analyze.trace import BlockTrace

__all__ = ["GAP_EDGES", "QUANTILES", "ReuseProfile", "reuse_profile"]

QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.99)
"""The quantiles the profile reports (nearest rank, ties to the upper value)."""

GAP_EDGES = (1.0, 10.0, 60.0, 300.0, 900.0, 1800.0, 3600.0)
"""Upper edges (seconds) of the reuse-time histogram's buckets; the last bucket is open."""


@attrs.frozen(slots=True)
class ReuseProfile:
    """Histograms of eligible lookups (those that may hit) and per-request shares."""

    cold_lookups: int
    """Eligible lookups of a block never seen before: misses in any cache."""
    reused_lookups: int
    """Eligible lookups of a block seen before: hits in an unlimited cache."""
    distance_histogram: tuple[tuple[int, int], ...]
    """``(upper edge, count)``: lookups whose stack distance (blocks) is below the edge
    and at least the previous one; edges are powers of two."""
    gap_histogram: tuple[tuple[float | None, int], ...]
    """``(upper edge in seconds or None for the open bucket, count)``."""
    distance_quantiles: tuple[int, ...]
    """Stack distance (blocks) at :data:`QUANTILES` of the reused lookups: the LRU
    size that serves that share of what an unlimited cache serves."""
    gap_quantiles: tuple[float, ...]
    """Seconds since the previous use at :data:`QUANTILES` of the reused lookups."""
    request_hit_shares: tuple[int, ...]
    """Requests by their own unlimited-cache hit rate: ten buckets of 10% (the last
    includes 100%)."""
    requests_without_hit: int
    jobs: int
    """Distinct job (conversation) ids in the trace; 0 when it has none."""
    job_hit_rate_quartiles: tuple[float, ...]
    """Quartiles (min, 25%, median, 75%, max) of per-job unlimited-cache hit rates."""


def reuse_profile(trace: BlockTrace, stack: StackProfile) -> ReuseProfile:
    distances = stack.distances
    hist: list[tuple[int, int]] = []
    if distances:
        edge, lo = 1, 0
        while lo < len(distances):
            hi = bisect_left(distances, edge, lo)
            hist.append((edge, hi - lo))
            lo = hi
            edge *= 2
    gaps = sorted(stack.gaps)
    gap_hist: list[tuple[float | None, int]] = []
    lo = 0
    for edge in GAP_EDGES:
        hi = bisect_left(gaps, edge, lo)
        gap_hist.append((edge, hi - lo))
        lo = hi
    gap_hist.append((None, len(gaps) - lo))
    shares = [0] * 10
    without = 0
    bs = trace.block_size
    job_hits: dict[str, int] = defaultdict(int)
    job_tokens: dict[str, int] = defaultdict(int)
    for r, hit_blocks in enumerate(stack.request_hit_blocks):
        tokens = trace.num_tokens[r]
        share = hit_blocks * bs / tokens if tokens else 0.0
        shares[min(9, int(share * 10))] += 1
        if not hit_blocks:
            without += 1
        job = trace.groups[r]
        if job is not None:
            job_hits[job] += hit_blocks * bs
            job_tokens[job] += tokens
    quartiles: tuple[float, ...] = ()
    if job_tokens:
        rates = sorted(job_hits[j] / job_tokens[j] for j in job_tokens)
        last = len(rates) - 1
        quartiles = tuple(rates[int(q * last + 0.5)] for q in (0, 0.25, 0.5, 0.75, 1))
    return ReuseProfile(
        distance_quantiles=_quantiles(distances),
        gap_quantiles=_quantiles(gaps),
        cold_lookups=stack.cold,
        reused_lookups=len(distances),
        distance_histogram=tuple(hist),
        gap_histogram=tuple(gap_hist),
        request_hit_shares=tuple(shares),
        requests_without_hit=without,
        jobs=len(job_tokens),
        job_hit_rate_quartiles=quartiles,
    )


def _quantiles(ordered: Sequence[Any]) -> tuple[Any, ...]:
    if not ordered:
        return ()
    last = len(ordered) - 1
    return tuple(ordered[int(q * last + 0.5)] for q in QUANTILES)
