"""Continuum scheduling for kvframe (arXiv 2511.02230).

Agents interleave LLM calls with tool calls. Freeing a turn's KV when it
finishes makes the next turn prefill its whole context again and queue again
behind newer work. Continuum pins the finished turn's KV on the GPU for a
time-to-live chosen from the tool's duration distribution, and orders waiting
work by program (job) rather than by request. See ``docs/continuum.md``.

Select it with ``--scheduler continuum`` (options: ``continuum:ttl=fixed``,
``continuum:min_samples=50,max_ttl=10``, ...).
"""

from __future__ import annotations

from kvframe_continuum.policy import ContinuumPolicy, ContinuumStats, TTLDecision
from kvframe_continuum.queue import ContinuumQueue
from kvframe_continuum.ttl import (
    DurationHistory,
    DurationWindow,
    SlidingMean,
    TurnCorrelation,
    choose_ttl,
)

__all__ = [
    "ContinuumPolicy",
    "ContinuumQueue",
    "ContinuumStats",
    "DurationHistory",
    "DurationWindow",
    "SlidingMean",
    "TTLDecision",
    "TurnCorrelation",
    "choose_ttl",
]
