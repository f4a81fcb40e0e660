"""vLLM's CPU offload tier with a kvframe eviction policy and reuse filter.

vLLM 0.19.1's OffloadingConnector builds its tier from an ``OffloadingSpec``
that it loads by name (``spec_name``) from a module (``spec_module_path``) in
``kv_connector_extra_config``. :class:`KvframeOffloadingSpec` is vLLM's own
``CPUOffloadingSpec`` -- the same slots, sizing, transfer handlers and
``CPUOffloadingManager`` -- with two differences:

* the manager's cache policy is a kvframe eviction plugin chosen by config
  string (``"kvframe_eviction": "arc:variant=paper"``). kvframe's
  :class:`~kvframe.EvictionPolicy` has exactly the five operations of vLLM's
  ``CachePolicy`` (get, insert, remove, touch, evict with a protected set,
  all-or-nothing) and reads only ``ref_cnt`` of the blocks it holds, so the
  plugin object *is* the manager's policy: no per-call adapter sits on the hot
  path;
* a kvframe reuse filter (``"kvframe_reuse_filter": "threshold:store_threshold=2"``)
  may wrap the manager the way vLLM's ``FilterReusedOffloadingManager`` does:
  every looked-up hash is shown to the filter, and only the hashes it lets
  through are offered to ``prepare_store``.

Both config strings are resolved when vLLM builds the spec -- at engine start,
in the scheduler process -- so an unknown name or a bad option stops vLLM
with kvframe's message (text, caret, what is installed, did-you-mean) before
any request is served.

This module imports vLLM; nothing else in kvframe does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from vllm.v1.kv_offload.abstract import OffloadingManager
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

import kvframe
from kvframe.config import ConfigError

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.kv_offload.abstract import LoadStoreSpec, PrepareStoreOutput

__all__ = ["KvframeOffloadingSpec", "ReuseFilteredManager"]

EVICTION_KEY = "kvframe_eviction"
REUSE_FILTER_KEY = "kvframe_reuse_filter"
OFFLOAD_KEY = "kvframe_offload"
"""A kvframe tier plugin: only checked, and refused (the tier here is vLLM's CPU tier)."""


class KvframeOffloadingSpec(CPUOffloadingSpec):
    """vLLM's CPU tier whose eviction policy and reuse filter are kvframe plugins."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> None:
        super().__init__(vllm_config, kv_cache_config)
        extra = self.extra_config
        for theirs, ours in (
            ("eviction_policy", EVICTION_KEY),
            ("store_threshold", REUSE_FILTER_KEY),
        ):
            if theirs in extra:
                raise ConfigError(
                    f"kv_connector_extra_config sets vLLM's {theirs!r}, which "
                    f"{type(self).__name__} does not use",
                    hints=[f"choose the kvframe plugin with {ours!r} instead"],
                )
        unknown = sorted(
            key
            for key in extra
            if key.startswith("kvframe_") and key not in (EVICTION_KEY, REUSE_FILTER_KEY)
        )
        if OFFLOAD_KEY in unknown:
            _refuse_tier(extra[OFFLOAD_KEY])
        if unknown:
            raise ConfigError(
                f"kv_connector_extra_config: unknown key(s) {unknown} for {type(self).__name__}",
                hints=[f"it reads {EVICTION_KEY!r} and {REUSE_FILTER_KEY!r}"],
            )
        self.kvframe_eviction = _resolve("eviction", EVICTION_KEY, extra.get(EVICTION_KEY, "lru"))
        spec = extra.get(REUSE_FILTER_KEY)
        self.kvframe_reuse_filter = (
            _resolve("reuse_filter", REUSE_FILTER_KEY, spec) if spec else None
        )
        # Build both once now, so that a constructor that rejects an option
        # value fails here, at start-up, not at the first offloaded block.
        _create(self.kvframe_eviction, EVICTION_KEY, self.num_blocks)
        if self.kvframe_reuse_filter is not None:
            _create(self.kvframe_reuse_filter, REUSE_FILTER_KEY)

    def get_manager(self) -> OffloadingManager:
        if self._manager is None:
            assert len(self.gpu_block_size) == 1
            kv_events = self.vllm_config.kv_events_config
            manager = CPUOffloadingManager(
                block_size=self.gpu_block_size[0] * self.block_size_factor,
                num_blocks=self.num_blocks,
                enable_events=kv_events is not None and kv_events.enable_kv_cache_events,
            )
            if not hasattr(manager, "_policy"):
                raise RuntimeError(
                    "this vLLM's CPUOffloadingManager keeps no '_policy'; kvframe-vllm "
                    "supports vLLM 0.19.1"
                )
            manager._policy = self.kvframe_eviction.create(self.num_blocks)
            self._manager = manager
            if self.kvframe_reuse_filter is not None:
                self._manager = ReuseFilteredManager(manager, self.kvframe_reuse_filter.create())
        return self._manager


def _refuse_tier(spec: object) -> None:
    """A kvframe tier plugin named in the extra config: never run here, refused with why.

    This spec always runs vLLM's own CPU tier. A tier plugin modelled on another
    connector (``lmcache``) is refused for its connector semantics, any other
    because naming it would change nothing.
    """
    from kvframe_vllm.refusals import UnsupportedByKvframe, refuse_connector_semantics

    resolved = _resolve("offload", OFFLOAD_KEY, spec)
    tier = _create(resolved, OFFLOAD_KEY)
    refuse_connector_semantics(resolved.name, tier.connector_semantics(), _origin(OFFLOAD_KEY))
    raise UnsupportedByKvframe(
        f"{_origin(OFFLOAD_KEY)}: KvframeOffloadingSpec always runs vLLM's own CPU tier, "
        f"so tier plugin {resolved.name!r} would not run; choose the tier's eviction with "
        f"{EVICTION_KEY!r} and its size with 'cpu_bytes_to_use'"
    )


def _origin(key: str) -> str:
    return f"kv_connector_extra_config[{key!r}]"


def _resolve(kind: str, key: str, spec: object) -> Any:
    """Resolve a kvframe config string, the error naming the extra-config key."""
    try:
        return kvframe.get_registry().resolve(kind, str(spec))
    except ConfigError as err:
        err.origin = _origin(key)
        raise


def _create(resolved: Any, key: str, *context: Any) -> Any:
    try:
        return resolved.create(*context)
    except ConfigError as err:
        err.origin = err.origin or _origin(key)
        raise


class ReuseFilteredManager(OffloadingManager):
    """A manager that stores only what a kvframe :class:`~kvframe.ReuseFilter` allows.

    The order of vLLM's ``FilterReusedOffloadingManager``: ``lookup`` shows the
    filter every hash it was given (hit or miss), then asks the backing
    manager; ``prepare_store`` offers only the hashes the filter passes.
    """

    def __init__(self, backing: OffloadingManager, reuse_filter: Any) -> None:
        self._backing = backing
        self.reuse_filter = reuse_filter

    def lookup(self, block_hashes: Iterable[Any]) -> int | None:
        hashes = list(block_hashes)
        self.reuse_filter.on_lookup(hashes)
        return self._backing.lookup(hashes)

    def prepare_store(self, block_hashes: Iterable[Any]) -> PrepareStoreOutput | None:
        return self._backing.prepare_store(self.reuse_filter.filter_store(list(block_hashes)))

    def prepare_load(self, block_hashes: Iterable[Any]) -> LoadStoreSpec:
        return self._backing.prepare_load(block_hashes)

    def touch(self, block_hashes: Iterable[Any]) -> None:
        self._backing.touch(block_hashes)

    def complete_load(self, block_hashes: Iterable[Any]) -> None:
        self._backing.complete_load(block_hashes)

    def complete_store(self, block_hashes: Iterable[Any], success: bool = True) -> None:
        self._backing.complete_store(block_hashes, success)

    def take_events(self) -> Iterable[Any]:
        return self._backing.take_events()
