"""kvframe: try KV-cache scheduling, eviction and offload policies on vLLM V1's semantics.

``import kvframe`` is deliberately light: it imports pluggy, attrs and the plugin
base classes, never torch, and it does not scan entry points (that happens when
a :class:`kvframe.plugins.PluginRegistry` is first built).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvframe.bases import (
    EvictionPolicy,
    OffloadSpec,
    ReuseFilter,
    SchedulingPolicy,
    Tracer,
)
from kvframe.hookspecs import hookimpl, hookspec

if TYPE_CHECKING:
    from kvframe.config import ConfigError, PluginSpec
    from kvframe.plugins import PluginRegistry, get_registry

__version__ = "0.1.0"

# Loaded on first access (PEP 562) so that `import kvframe` does not pay for the
# plugin host; the host itself only scans entry points when first asked.
_LAZY = {
    "ConfigError": "kvframe.config",
    "PluginSpec": "kvframe.config",
    "PluginRegistry": "kvframe.plugins",
    "get_registry": "kvframe.plugins",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvframe' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ConfigError",
    "EvictionPolicy",
    "OffloadSpec",
    "PluginRegistry",
    "PluginSpec",
    "ReuseFilter",
    "SchedulingPolicy",
    "Tracer",
    "__version__",
    "get_registry",
    "hookimpl",
    "hookspec",
]
