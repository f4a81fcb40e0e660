"""kvframe: try KV-cache scheduling, eviction and offload policies on vLLM V1's semantics.

``import kvframe`` is deliberately light: it imports pluggy, attrs and the plugin
base classes, never torch, and it does not scan entry points (that happens when
a :class:`kvframe.plugins.PluginRegistry` is first built).
"""

from __future__ import annotations

from kvframe.bases import (
    EvictionPolicy,
    OffloadSpec,
    ReuseFilter,
    SchedulingPolicy,
    Tracer,
)
from kvframe.hookspecs import hookimpl, hookspec

__version__ = "0.1.0"

__all__ = [
    "EvictionPolicy",
    "OffloadSpec",
    "ReuseFilter",
    "SchedulingPolicy",
    "Tracer",
    "__version__",
    "hookimpl",
    "hookspec",
]
