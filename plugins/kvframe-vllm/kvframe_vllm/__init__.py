"""kvframe policies inside vLLM 0.19.1 and 0.33.0, through vLLM's own extension seams.

* :mod:`kvframe_vllm.scheduler` -- ``KvframeScheduler``, vLLM's ``scheduler_cls``:
  kvframe's scheduler with a kvframe scheduling policy (both releases;
  :mod:`kvframe_vllm.compat` holds what differs between them);
* :mod:`kvframe_vllm.offload` -- ``KvframeOffloadingSpec``, loaded by the
  OffloadingConnector through ``spec_module_path``: vLLM's CPU tier with a
  kvframe eviction policy and reuse filter;
* :mod:`kvframe_vllm.cache_policy` -- vLLM 0.33's ``CachePolicyFactory`` seam
  (``cache_policy_module_path``): any kvframe eviction plugin as a CPU-tier
  cache policy, named ``"kvframe:<config string>"``;
* :mod:`kvframe_vllm.preflight` -- vLLM's general plugin: the bridge's
  start-up refusals checked when vLLM builds its config;
* :mod:`kvframe_vllm.refusals`, :mod:`kvframe_vllm.stats` -- what the
  scheduler refuses (and how a refused request is finished), and vLLM's
  metrics from kvframe's core.

Importing this package imports neither vLLM nor torch: only the modules vLLM
itself loads touch vLLM, so kvframe's own environment (and CI) can install the
bridge without vLLM.
"""

from __future__ import annotations

__all__ = [
    "CACHE_POLICY_MODULE_PATH",
    "CACHE_POLICY_PREFIX",
    "SPEC_MODULE_PATH",
    "SPEC_NAME",
    "cache_policy_config",
    "extra_config",
]

SPEC_NAME = "KvframeOffloadingSpec"
SPEC_MODULE_PATH = "kvframe_vllm.offload"
CACHE_POLICY_MODULE_PATH = "kvframe_vllm.cache_policy"
CACHE_POLICY_PREFIX = "kvframe:"


def extra_config(
    *,
    cpu_bytes_to_use: int,
    eviction: str = "lru",
    reuse_filter: str | None = None,
    block_size: int | None = None,
) -> dict[str, object]:
    """The ``kv_connector_extra_config`` that makes vLLM's CPU tier use kvframe plugins.

    :param cpu_bytes_to_use: the tier's DRAM, as vLLM's ``CPUOffloadingSpec`` takes it.
    :param eviction: a kvframe eviction config string (``"arc:variant=paper"``).
    :param reuse_filter: a kvframe reuse-filter config string, or ``None``.
    :param block_size: tokens per offloaded block (vLLM's own key), or ``None``
        for one GPU block.
    """
    config: dict[str, object] = {
        "spec_name": SPEC_NAME,
        "spec_module_path": SPEC_MODULE_PATH,
        "cpu_bytes_to_use": cpu_bytes_to_use,
        "kvframe_eviction": eviction,
    }
    if reuse_filter is not None:
        config["kvframe_reuse_filter"] = reuse_filter
    if block_size is not None:
        config["block_size"] = block_size
    return config


def cache_policy_config(*, cpu_bytes_to_use: int, eviction: str = "lru") -> dict[str, object]:
    """vLLM 0.33's ``kv_connector_extra_config``: its own CPU tier, a kvframe eviction plugin.

    vLLM's ``CachePolicyFactory`` loads the plugin from
    ``cache_policy_module_path`` (:mod:`kvframe_vllm.cache_policy`); the
    ``kvframe:`` prefix keeps vLLM's built-in ``lru`` / ``arc`` from shadowing
    kvframe's plugins of the same name.

    :param cpu_bytes_to_use: the tier's DRAM, as vLLM's ``CPUOffloadingSpec`` takes it.
    :param eviction: a kvframe eviction config string (``"arc:variant=paper"``).
    """
    return {
        "cpu_bytes_to_use": cpu_bytes_to_use,
        "eviction_policy": CACHE_POLICY_PREFIX + eviction,
        "cache_policy_module_path": CACHE_POLICY_MODULE_PATH,
    }
