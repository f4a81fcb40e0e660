"""kvframe: try KV-cache scheduling, eviction and offload policies on vLLM V1's semantics.

``import kvframe`` is deliberately light: it imports pluggy, attrs and the plugin
base classes, never torch, and it does not scan entry points (that happens when
a :class:`kvframe.plugins.PluginRegistry` is first built).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from typing import TYPE_CHECKING, Any

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


MOVED: dict[str, str] = {
    "kvframe.executors.cost_model": "kvframe.domain.costs",
}
"""Old module paths that still import, for one release, as the module at their new
path (with a :class:`DeprecationWarning` naming it). No file stays behind at the old
path, so a package folder holds only what lives on its floor."""


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module's old name as an alias of its new module."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (or from kvframe): "
            "the old path goes away in the next release",
            DeprecationWarning,
            stacklevel=_importer_stacklevel(),
        )
        return importlib.import_module(new)

    def exec_module(self, module: types.ModuleType) -> None:
        """The new module is already executed."""


def _importer_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside the import machinery, so the
    warning names the line that imported the old path."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen importlib")
        or frame.f_code.co_filename == __file__
    ):
        frame = frame.f_back
        level += 1
    return level


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvframe' has no attribute {name!r}")
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
