"""The extension points: which base class, hook, flag and words each kind of plugin has."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from kvframe.contract.bases import (
    EvictionPolicy,
    OffloadSpec,
    PluginBase,
    ReuseFilter,
    SchedulingPolicy,
    Tracer,
)
from kvframe.contract.routing import Router

__all__ = ["KINDS", "KIND_ALIASES", "Kind", "get_kind", "kind_of"]


@attrs.frozen(slots=True)
class Kind:
    """One extension point: its base class, registration hook and user-facing words."""

    name: str
    """The key used everywhere in code: ``"eviction"``, ``"reuse_filter"``, ..."""
    base: type[PluginBase]
    hook: str
    """The registration hook (in :mod:`kvframe.contract.hookspecs`) offering this kind."""
    label: str
    """Singular noun for messages: ``"eviction policy"``."""
    plural: str
    flag: str
    """The command-line flag that selects it."""
    multiple: bool = False
    """Whether several may be selected at once (tracers)."""


KINDS: Mapping[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "scheduling",
            SchedulingPolicy,
            "kvframe_scheduling_policies",
            "scheduling policy",
            "scheduling policies",
            "--scheduler",
        ),
        Kind(
            "eviction",
            EvictionPolicy,
            "kvframe_eviction_policies",
            "eviction policy",
            "eviction policies",
            "--eviction",
        ),
        Kind(
            "offload",
            OffloadSpec,
            "kvframe_offload_specs",
            "offload spec",
            "offload specs",
            "--offload",
        ),
        Kind(
            "reuse_filter",
            ReuseFilter,
            "kvframe_reuse_filters",
            "reuse filter",
            "reuse filters",
            "--reuse-filter",
        ),
        Kind("tracer", Tracer, "kvframe_tracers", "tracer", "tracers", "--tracer", multiple=True),
        Kind("routing", Router, "kvframe_routers", "router", "routers", "--router"),
    )
}
"""Every extension point, in the order listings show them."""

KIND_ALIASES: Mapping[str, str] = {
    "scheduler": "scheduling",
    "reuse-filter": "reuse_filter",
    "tracers": "tracer",
    "router": "routing",
}
"""Other spellings users write, e.g. ``scheduler = "fcfs"`` in ``kvframe.toml``."""


def get_kind(kind: str) -> Kind:
    """Look up an extension point by name or alias (``"scheduler"`` → scheduling)."""
    found = KINDS.get(KIND_ALIASES.get(kind, kind))
    if found is None:
        raise ValueError(f"unknown plugin kind {kind!r}; kinds are {', '.join(KINDS)}")
    return found


def kind_of(cls: type) -> Kind | None:
    """The extension point a class belongs to, from the base it subclasses."""
    for kind in KINDS.values():
        if isinstance(cls, type) and issubclass(cls, kind.base):
            return kind
    return None
