"""A kvframe eviction plugin as vLLM 0.33's ``CachePolicy``, loaded by vLLM's own factory.

vLLM 0.33.0's CPU tier (``CPUOffloadingManager``) takes its cache policy from
``CachePolicyFactory``: ``eviction_policy`` in ``kv_connector_extra_config``
names it, and when that name is not a built-in one the factory imports it from
``cache_policy_module_path`` (``getattr(module, name)``) and builds it as
``cls(cache_capacity=n)``. This module is such a module path for every kvframe
eviction plugin at once: the name is a kvframe config string behind a
``kvframe:`` prefix::

    "kv_connector_extra_config": {
        "cpu_bytes_to_use": 8589934592,
        "eviction_policy": "kvframe:arc:variant=paper",
        "cache_policy_module_path": "kvframe_vllm.cache_policy"}

The prefix is required because the factory looks names up in its own registry
first: a bare ``"lru"`` or ``"arc"`` would silently select vLLM's built-in
policy, not kvframe's. ``kvframe_vllm.cache_policy_config(...)`` builds the two
keys.

The name resolves, through this module's ``__getattr__``, to a
:class:`KvframeCachePolicy` subclass bound to that config string (one class per
string, cached), so the plugin is constructed exactly as vLLM constructs its
own policies, at engine start: a misspelt name or bad option stops vLLM there
with kvframe's message.

How the calls map. vLLM 0.33's ``CachePolicy`` grew from the five operations
kvframe's :class:`~kvframe.EvictionPolicy` has (get, insert, remove, touch,
evict with a protected set, all-or-nothing) to per-request hooks:
``insert`` and ``touch`` take a ``ReqContext``; ``on_store_miss`` and
``on_request_finished`` default to ``touch`` (vLLM's defaults, kept);
``on_request_access`` and ``mark_evictable`` / ``mark_non_evictable`` are
ordering hints a kvframe policy does not need (it reads ``ref_cnt`` of the
chunks it holds, which vLLM's ``ChunkStatus`` carries); ``clear`` (a prefix
cache reset) builds the plugin afresh, dropping ghost lists and adaptive
state as vLLM's policies do. So a kvframe ``lru`` here orders by kvframe's
rule (recency of store and touch), not by 0.33's request-ranked LRU: this is
the seam for running kvframe's policies in 0.33's tier, not a claim that
kvframe's ``lru`` makes 0.33's ``lru`` decisions (that is kvframe's 0.33 tier
model's job, ``kvframe.offload``).

This module imports vLLM; nothing else in kvframe does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from vllm.v1.kv_offload.cpu.policies.base import CachePolicy

import kvframe
from kvframe.config import ConfigError

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadKey, ReqContext
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

__all__ = ["MODULE_PATH", "PREFIX", "KvframeCachePolicy", "policy_class"]

PREFIX = "kvframe:"
"""What an ``eviction_policy`` name starts with to mean a kvframe config string."""
MODULE_PATH = __name__
"""The ``cache_policy_module_path`` value."""
_ORIGIN = "kv_connector_extra_config['eviction_policy']"


class KvframeCachePolicy(CachePolicy):
    """vLLM 0.33's ``CachePolicy`` answered by a kvframe eviction plugin.

    A subclass binds :attr:`kvframe_spec` (made by :func:`policy_class`); this
    base is abstract in that sense and refuses to be built without one.
    """

    kvframe_spec: ClassVar[str | None] = None
    """The kvframe eviction config string this class builds (``"arc:variant=paper"``)."""
    _resolved: ClassVar[Any] = None

    def __init__(self, cache_capacity: int) -> None:
        super().__init__(cache_capacity)
        if self._resolved is None:
            raise TypeError(
                f"{type(self).__name__} is bound to no kvframe eviction plugin; set "
                f"eviction_policy to '{PREFIX}<config string>' with "
                f"cache_policy_module_path '{MODULE_PATH}'"
            )
        self.kvframe_policy = _create(self._resolved, cache_capacity)

    def get(self, key: OffloadKey) -> ChunkStatus | None:
        return self.kvframe_policy.get(key)

    def insert(self, key: OffloadKey, chunk: ChunkStatus, req_context: ReqContext) -> None:
        self.kvframe_policy.insert(key, chunk)

    def remove(self, key: OffloadKey) -> None:
        self.kvframe_policy.remove(key)

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        self.kvframe_policy.touch(keys)

    def evict(
        self, n: int, protected: set[OffloadKey]
    ) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        return self.kvframe_policy.evict(n, protected)

    def clear(self) -> None:
        self.kvframe_policy = _create(self._resolved, self.cache_capacity)


def _create(resolved: Any, capacity: int) -> Any:
    try:
        return resolved.create(capacity)
    except ConfigError as err:
        err.origin = err.origin or _ORIGIN
        raise


_classes: dict[str, type[KvframeCachePolicy]] = {}


def policy_class(spec: str) -> type[KvframeCachePolicy]:
    """The ``CachePolicy`` class of kvframe eviction config string ``spec`` (cached).

    The string is resolved here, so an unknown plugin or a bad option raises
    kvframe's :class:`~kvframe.config.ConfigError` when vLLM asks its factory
    for the class, before the tier is built.
    """
    cls = _classes.get(spec)
    if cls is None:
        try:
            resolved = kvframe.get_registry().resolve("eviction", spec)
        except ConfigError as err:
            err.origin = _ORIGIN
            raise
        # Build one now, so that a constructor rejecting an option fails here.
        _create(resolved, 1)
        cls = type(
            f"KvframeCachePolicy[{spec}]",
            (KvframeCachePolicy,),
            {"kvframe_spec": spec, "_resolved": resolved, "__module__": __name__},
        )
        _classes[spec] = cls
    return cls


def __getattr__(name: str) -> type[KvframeCachePolicy]:
    """``CachePolicyFactory`` reads the class as ``getattr(module, eviction_policy)``."""
    if name.startswith(PREFIX):
        return policy_class(name[len(PREFIX) :])
    raise AttributeError(
        f"module {__name__!r} has no attribute {name!r}; a kvframe eviction policy is "
        f"named '{PREFIX}<config string>', e.g. '{PREFIX}lru' or '{PREFIX}arc:variant=paper'"
    )
