"""Prefix-cache analysis of a trace: the ceiling, hit-rate curves and the optimal bound.

``kvframe analyze TRACE`` in Python::

    from kvframe.analyze import analyze
    result = analyze("mooncake:conversation", policies=["lru", "arc"])
    result.ceiling, result.curve("lru").hit_rates

A floor of its own: it reads workloads, hashes blocks as the core does and
builds eviction policies through the plugin registry; it never imports the
engine or the CLI. See ``docs/analyze.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvframe.analyze.analysis import (
    OPTIMAL,
    Analysis,
    Curve,
    analyze_trace,
    default_policy_specs,
    size_grid,
)
from kvframe.analyze.replay import PolicyContractError, replay_policy
from kvframe.analyze.trace import BlockTrace, auto_block_size, build_block_trace

if TYPE_CHECKING:
    from kvframe.host.registry import PluginRegistry

__all__ = [
    "OPTIMAL",
    "Analysis",
    "BlockTrace",
    "Curve",
    "PolicyContractError",
    "analyze",
    "analyze_trace",
    "auto_block_size",
    "build_block_trace",
    "default_policy_specs",
    "replay_policy",
    "size_grid",
]


def analyze(
    workload: str,
    *,
    policies: Sequence[str] | None = None,
    block_size: int | None = None,
    sizes: Sequence[int] | None = None,
    sample_rate: float | str = "auto",
    limit: int | None = None,
    metric: str = "tokens",
    partial_blocks: bool = False,
    registry: PluginRegistry | None = None,
    progress: Callable[[str], None] | None = None,
    lru_exact: bool = False,
) -> Analysis:
    """Read ``workload`` (a file or a bundled name) and analyse it.

    ``policies`` default to every installed eviction policy and its variants
    (:func:`default_policy_specs`); ``block_size`` to the trace's own
    (:func:`auto_block_size`). When the replayed policies are sampled, ``lru`` is
    sampled with them (comparable curves) unless ``lru_exact``.
    """
    from kvframe.workloads import load_workload

    loaded = load_workload(workload, limit=limit)
    if block_size is None:
        block_size = auto_block_size(loaded)
    if policies is None:
        if registry is None:
            from kvframe.host.registry import get_registry

            registry = get_registry()
        policies = default_policy_specs(registry)
    trace = build_block_trace(
        loaded.requests,
        block_size,
        name=str(workload),
        metric=metric,
        partial_blocks=partial_blocks,
    )
    return analyze_trace(
        trace,
        policies=policies,
        registry=registry,
        sizes=sizes,
        sample_rate=sample_rate,
        metric=metric,
        progress=progress,
        lru_exact=lru_exact,
    )
