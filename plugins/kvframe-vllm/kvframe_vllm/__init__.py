"""kvframe policies inside vLLM 0.19.1, through vLLM's own extension seams.

Importing this package imports neither vLLM nor torch: the module vLLM loads
(:mod:`kvframe_vllm.offload`, named by ``spec_module_path``) is the only one
that touches vLLM, so kvframe's own environment (and CI) can install it
without vLLM.
"""

from __future__ import annotations

__all__ = ["SPEC_MODULE_PATH", "SPEC_NAME", "extra_config"]

SPEC_NAME = "KvframeOffloadingSpec"
SPEC_MODULE_PATH = "kvframe_vllm.offload"


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
