"""kvframe: try KV-cache scheduling, eviction and offload policies on vLLM V1's semantics.

A plugin author's one import: every name a policy subclasses, reads or returns is
an attribute of ``kvframe`` -- the plugin bases, the views the host passes
(:class:`SchedulerContext`, :class:`TierView`, ...), :class:`Request` and
:class:`RequestStatus`, the request queues, the KV and trace records,
:class:`CostModel`, :func:`hookimpl` -- wherever it lives in the package's floors.

``import kvframe`` is deliberately light: it imports pluggy and the plugin base
classes, never torch, and it does not scan entry points (that happens when a
:class:`PluginRegistry` is first asked). Every other name loads on first access.

A researcher's calls are here too (:mod:`kvframe.api`, pandas imported only when
a table is built): ``kvframe.run(...)`` runs a workload and returns its summary,
requests and steps as DataFrames; ``kvframe.sweep(...)`` and ``kvframe.compare(...)``
return a sweep's or several runs' rows as one DataFrame.
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

from kvframe import hot_modules
from kvframe.contract.bases import (
    EvictionPolicy,
    OffloadSpec,
    ReuseFilter,
    SchedulingPolicy,
    Tracer,
)
from kvframe.contract.hookspecs import hookimpl, hookspec
from kvframe.domain.version import __version__

if TYPE_CHECKING:
    from kvframe.api import Result, run
    from kvframe.config import Bytes, ConfigError, PluginSpec
    from kvframe.contract.offload import (
        ConnectorSemantics,
        OffloadContext,
        OffloadManager,
        TransferHandler,
    )
    from kvframe.contract.prefix_index import ApproxPrefixIndex, KVPrefixIndex
    from kvframe.contract.records import (
        AllBlocksCleared,
        BlockRemoved,
        BlockStored,
        KVEvent,
        PrefixCacheEvent,
        RequestFinished,
        StepDecision,
        StepSnapshot,
    )
    from kvframe.contract.request_scoped import (
        InManagerReuseFilter,
        RequestAccess,
        RequestScopedPolicy,
        RequestScopedSlots,
    )
    from kvframe.contract.routing import (
        FleetInfo,
        FleetView,
        PublishedEvent,
        ReplicaLoad,
        Router,
        RoutingRequest,
    )
    from kvframe.contract.support import TouchWalkCache, claimed_max_evictable
    from kvframe.contract.views import EvictableBlock, Retention, SchedulerContext, TierView
    from kvframe.domain.costs import CostModel, ModelShape, prefill_pairs
    from kvframe.domain.queues import FIFORequestQueue, RequestQueue, SortedRequestQueue
    from kvframe.domain.request import Request, RequestStatus
    from kvframe.domain.tokens import BlockHash, block_hash_bytes, block_hash_hex
    from kvframe.executors.catalog import get_preset
    from kvframe.host.registry import PluginRegistry, get_registry
    from kvframe.offload.slots.manager import SlotOffloadManager

# Before any core module is imported (nothing above imports one): the compiled hot
# modules (mypyc, issue 51) are served from kvframe/_mypyc/ where scripts/build-core
# built them (kvframe.hot_modules).
hot_modules.install()


# Loaded on first access (PEP 562; every name here is in __all__ too) so that
# `import kvframe` pays only for the plugin bases; the host itself only scans entry
# points when first asked.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Result", "run"), "kvframe.api"),
    **dict.fromkeys(("Bytes", "ConfigError", "PluginSpec"), "kvframe.config"),
    **dict.fromkeys(
        ("ConnectorSemantics", "OffloadContext", "OffloadManager", "TransferHandler"),
        "kvframe.contract.offload",
    ),
    **dict.fromkeys(
        (
            "AllBlocksCleared",
            "BlockRemoved",
            "BlockStored",
            "KVEvent",
            "PrefixCacheEvent",
            "RequestFinished",
            "StepDecision",
            "StepSnapshot",
        ),
        "kvframe.contract.records",
    ),
    **dict.fromkeys(("ApproxPrefixIndex", "KVPrefixIndex"), "kvframe.contract.prefix_index"),
    **dict.fromkeys(
        ("InManagerReuseFilter", "RequestAccess", "RequestScopedPolicy", "RequestScopedSlots"),
        "kvframe.contract.request_scoped",
    ),
    **dict.fromkeys(
        ("FleetInfo", "FleetView", "PublishedEvent", "ReplicaLoad", "Router", "RoutingRequest"),
        "kvframe.contract.routing",
    ),
    **dict.fromkeys(("TouchWalkCache", "claimed_max_evictable"), "kvframe.contract.support"),
    **dict.fromkeys(
        ("EvictableBlock", "Retention", "SchedulerContext", "TierView"), "kvframe.contract.views"
    ),
    **dict.fromkeys(("CostModel", "ModelShape", "prefill_pairs"), "kvframe.domain.costs"),
    **dict.fromkeys(
        ("FIFORequestQueue", "RequestQueue", "SortedRequestQueue"), "kvframe.domain.queues"
    ),
    **dict.fromkeys(("Request", "RequestStatus"), "kvframe.domain.request"),
    **dict.fromkeys(("BlockHash", "block_hash_bytes", "block_hash_hex"), "kvframe.domain.tokens"),
    "get_preset": "kvframe.executors.catalog",
    **dict.fromkeys(("PluginRegistry", "get_registry"), "kvframe.host.registry"),
    "SlotOffloadManager": "kvframe.offload.slots.manager",
}


MOVED: dict[str, tuple[str, ...]] = {
    "kvframe.bases": (
        "kvframe.contract.bases",
        "kvframe.contract.views",
        "kvframe.contract.support",
    ),
    "kvframe.events": ("kvframe.contract.records", "kvframe.domain.tokens"),
    "kvframe.hookspecs": ("kvframe.contract.hookspecs",),
    "kvframe.policy_support": ("kvframe.contract.support",),
    "kvframe.request": ("kvframe.domain.request", "kvframe.domain.tokens", "kvframe.domain.queues"),
    "kvframe.request_queues": ("kvframe.domain.queues",),
    "kvframe.plugins": ("kvframe.host.registry", "kvframe.host.tracing"),
    "kvframe.metrics": ("kvframe.engine.metrics",),
    "kvframe.config.kinds": ("kvframe.contract.kinds",),
    "kvframe.offload.contract": ("kvframe.contract.offload",),
    "kvframe.offload.connector": ("kvframe.core.connector",),
    "kvframe.executors.cost_model": ("kvframe.domain.costs",),
    "kvframe.executors.torch.calibrate": ("kvframe.calibrate.torch_timing",),
    "kvframe.executors.torch.replay": ("kvframe.calibrate.replay",),
    # issue 45: the two offload models by release, vLLM 0.19.1's and 0.33.0's.
    "kvframe.offload.offloading_connector": (
        "kvframe.offload.slots.connector",
        "kvframe.offload.stats",
    ),
    "kvframe.offload.manager": ("kvframe.offload.slots.manager", "kvframe.offload.blocks"),
    "kvframe.offload.worker": ("kvframe.offload.slots.worker",),
    "kvframe.offload.job_connector": ("kvframe.offload.jobs.connector",),
    "kvframe.offload.job_worker": ("kvframe.offload.jobs.worker",),
    "kvframe.offload.request_manager": (
        "kvframe.offload.jobs.manager",
        "kvframe.contract.request_scoped",
    ),
}
"""Old module paths that still import, for one release, with a :class:`DeprecationWarning`
naming the new path. An old module whose names now live in several modules imports as a
module that finds each name in those, in order. No file stays behind at an old path, so
each folder holds only what lives on its floor."""


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module's old name from its new home(s)."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        homes = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {' and '.join(homes)}; import from there (a plugin "
            "author's names are all on `import kvframe`): the old path goes away in the "
            "next release",
            DeprecationWarning,
            stacklevel=_importer_stacklevel(),
        )
        # Always a module of its own: the import machinery stamps the old name's
        # spec on whatever module this returns, which must not be the new one.
        return _merged_module(spec.name, homes)

    def exec_module(self, module: types.ModuleType) -> None:
        """The new modules are already executed."""


def _merged_module(name: str, homes: tuple[str, ...]) -> types.ModuleType:
    """A module whose attributes are looked up in ``homes``, first one first (the same
    objects: ``kvframe.bases.EvictionPolicy is kvframe.EvictionPolicy``)."""
    modules = [importlib.import_module(home) for home in homes]
    merged = types.ModuleType(name, f"Moved: see {', '.join(homes)}.")
    exported: list[str] = []
    for module in modules:
        exported.extend(n for n in getattr(module, "__all__", ()) if n not in exported)
    merged.__all__ = exported  # type: ignore[attr-defined]

    def find(attribute: str) -> object:
        for module in modules:
            if hasattr(module, attribute):
                return getattr(module, attribute)
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}")

    merged.__getattr__ = find  # type: ignore[method-assign]
    return merged


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


# `kvframe.sweep(...)` and `kvframe.compare(...)` (kvframe.api) share their names with
# the subpackages kvframe.sweep and kvframe.compare, which the import system binds on
# this package whenever either is imported (`from kvframe.sweep import ...`). So the
# names stay the subpackages -- every `kvframe.sweep.spec` keeps working -- and the
# subpackages are made callable: calling one calls kvframe.api's function. The package
# root stands outside the floors, so this is the one place that may tie them together.
_CALLABLE_SUBPACKAGES = frozenset(("compare", "sweep"))


class _CallableSubpackage(types.ModuleType):
    """A subpackage that, called, runs :mod:`kvframe.api`'s function of the same name."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self.__name__.rpartition(".")[2]
        return getattr(importlib.import_module("kvframe.api"), name)(*args, **kwargs)


class _Package(types.ModuleType):
    """``kvframe`` itself: binding ``compare`` or ``sweep`` makes the subpackage callable."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name in _CALLABLE_SUBPACKAGES
            and isinstance(value, types.ModuleType)
            and value.__name__ == f"{__name__}.{name}"
            and type(value) is types.ModuleType
        ):
            value.__class__ = _CallableSubpackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
for _name in _CALLABLE_SUBPACKAGES:  # imported before this ran (a reload)
    if f"{__name__}.{_name}" in sys.modules:
        setattr(sys.modules[__name__], _name, sys.modules[f"{__name__}.{_name}"])
del _name


def __getattr__(name: str) -> object:
    if name in _CALLABLE_SUBPACKAGES or name == "api":  # kvframe.sweep(...), kvframe.api.X
        return importlib.import_module(f"{__name__}.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvframe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AllBlocksCleared",
    "ApproxPrefixIndex",
    "BlockHash",
    "BlockRemoved",
    "BlockStored",
    "Bytes",
    "ConfigError",
    "ConnectorSemantics",
    "CostModel",
    "EvictableBlock",
    "EvictionPolicy",
    "FIFORequestQueue",
    "FleetInfo",
    "FleetView",
    "InManagerReuseFilter",
    "KVEvent",
    "KVPrefixIndex",
    "ModelShape",
    "OffloadContext",
    "OffloadManager",
    "OffloadSpec",
    "PluginRegistry",
    "PluginSpec",
    "PrefixCacheEvent",
    "PublishedEvent",
    "ReplicaLoad",
    "Request",
    "RequestAccess",
    "RequestFinished",
    "RequestQueue",
    "RequestScopedPolicy",
    "RequestScopedSlots",
    "RequestStatus",
    "Result",
    "Retention",
    "ReuseFilter",
    "Router",
    "RoutingRequest",
    "SchedulerContext",
    "SchedulingPolicy",
    "SlotOffloadManager",
    "SortedRequestQueue",
    "StepDecision",
    "StepSnapshot",
    "TierView",
    "TouchWalkCache",
    "Tracer",
    "TransferHandler",
    "__version__",
    "block_hash_bytes",
    "block_hash_hex",
    "claimed_max_evictable",
    "compare",
    "get_preset",
    "get_registry",
    "hookimpl",
    "hookspec",
    "prefill_pairs",
    "run",
    "sweep",
]
