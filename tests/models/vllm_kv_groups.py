"""Runs under a vLLM reference interpreter: vLLM's own KV-cache grouping on given layers.

Usage: ``python vllm_kv_groups.py CASES.json``; prints one JSON line, a list with one
result per case. Each case gives a model's layer kinds and shapes (as kvframe read
them from its config.json), the block size, the KV memory, prefix caching, and
whether the hybrid manager is off. This script builds vLLM's own specs
(``FullAttentionSpec``, ``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``,
``MambaSpec`` with the state shapes of vLLM's ``MambaStateShapeCalculator``), runs
the release's Mamba block-size alignment (0.19.1:
``HybridAttentionMambaModelConfig.verify_and_update_config``; 0.33.0:
``Platform._align_hybrid_block_size``) on a stand-in config, then
``get_kv_cache_groups`` and ``get_kv_cache_config_from_groups``, and reports the
groups (spec type, layers, block size, page size) and ``num_blocks``. Where the
case carries a ``config.json``, transformers' own config class gives the layer
types for comparison.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from types import SimpleNamespace

import torch
import vllm
from vllm.v1 import kv_cache_interface as kvi

V033 = vllm.__version__.startswith("0.33")
DTYPES = {2: torch.bfloat16, 4: torch.float32, 1: torch.float8_e4m3fn}

if V033:
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.kv_cache_layout import KVCacheLayout
else:
    from vllm.v1.core import kv_cache_utils as planning


def mamba_shapes(case):
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    m = case["mamba"]
    shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
        case.get("tp", 1),
        m["num_k_heads"],
        m["num_v_heads"],
        m["head_k_dim"],
        m["head_v_dim"],
        m["conv_kernel"],
        0,
    )
    dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(
        DTYPES[case["dtype_bytes"]], "auto", "auto"
    )
    return tuple(tuple(s) for s in shapes), tuple(dtypes)


def heads(case):
    """KV heads on one GPU: ``ModelConfig.get_num_kv_heads`` (at least one, replicated)."""
    return max(1, case["num_kv_heads"] // case.get("tp", 1))


def stand_in_config(case, shapes, dtypes):
    cache = SimpleNamespace(
        calculate_kv_scales=False,
        mamba_block_size=None,
        cache_dtype="auto",
        mamba_cache_mode="none",
        block_size=case["block_size"],
        mamba_page_size_padded=None,
        enable_prefix_caching=case["enable_prefix_caching"],
        mamba_cache_dtype="auto",
        mamba_ssm_cache_dtype="auto",
        num_gpu_blocks_override=None,
        user_specified_block_size=True,
        kv_cache_dtype_skip_layers=None,
        prefix_cache_retention_interval=None,
        kv_cache_layout="LBNHC",
    )
    model_cls = SimpleNamespace(
        get_mamba_state_shape_from_config=lambda _config: shapes,
        get_mamba_state_dtype_from_config=lambda _config: dtypes,
    )
    model = SimpleNamespace(
        model="stand-in",
        architecture="StandIn",
        dtype=DTYPES[case["dtype_bytes"]],
        use_mla=False,
        get_num_kv_heads=lambda _parallel: heads(case),
        get_head_size=lambda: case["head_dim"],
        get_mamba_chunk_size=lambda: 2048,
        supports_mamba_prefix_caching=False,
        max_model_len=case["max_model_len"],
        is_hybrid=True,
    )
    config = SimpleNamespace(
        cache_config=cache,
        model_config=model,
        parallel_config=SimpleNamespace(tensor_parallel_size=case.get("tp", 1)),
        attention_config=SimpleNamespace(backend=None, hisparse_config=None),
        scheduler_config=SimpleNamespace(
            enable_chunked_prefill=True,
            disable_hybrid_kv_cache_manager=case["disable_hybrid"],
        ),
        speculative_config=None,
    )
    return config, model_cls


def align_mamba(case, config, model_cls):
    """The release's Mamba block-size alignment, on the stand-in config."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig

    ModelRegistry.resolve_model_cls = lambda *_a, **_k: (model_cls, "StandIn")
    if not V033:
        HybridAttentionMambaModelConfig.verify_and_update_config(config)
        return
    import vllm.config.vllm as config_module
    from vllm.model_executor.layers.mamba import abstract
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backend import MultipleOf

    config_module.set_current_vllm_config = lambda _c: nullcontext()
    abstract.get_mamba_prefill_checkpoint_alignment = lambda _c: None
    HybridAttentionMambaModelConfig.verify_and_update_config(config)
    backend = SimpleNamespace(
        customize_spec=lambda spec: spec,
        get_supported_kernel_block_sizes=lambda: [MultipleOf(16)],
    )

    class StandInPlatform(Platform):
        @classmethod
        def _find_non_ssm_backends(cls, _config):
            return [backend]

    StandInPlatform._align_hybrid_block_size(config, backend)


def layer_spec(case, kind, config, shapes, dtypes):
    cache = config.cache_config
    common = dict(
        block_size=cache.block_size,
        num_kv_heads=heads(case),
        head_size=case["head_dim"],
        dtype=DTYPES[case["dtype_bytes"]],
    )
    if kind == "full_attention":
        return kvi.FullAttentionSpec(**common)
    if kind == "sliding_attention":
        return kvi.SlidingWindowSpec(**common, sliding_window=case["sliding_window"])
    if kind == "chunked_attention":
        return kvi.ChunkedLocalAttentionSpec(**common, attention_chunk_size=case["chunk"])
    extra = {}
    if V033:
        from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum

        extra["mamba_type"] = MambaAttentionBackendEnum.GDN_ATTN
    else:
        extra["mamba_type"] = "gdn_attention"
    return kvi.MambaSpec(
        shapes=shapes,
        dtypes=dtypes,
        block_size=cache.mamba_block_size,
        page_size_padded=cache.mamba_page_size_padded,
        mamba_cache_mode=cache.mamba_cache_mode,
        **extra,
    )


def spec_type(spec):
    if isinstance(spec, kvi.UniformTypeKVCacheSpecs):
        spec = next(iter(spec.kv_cache_specs.values()))
    return type(spec).__name__, spec.block_size, spec.page_size_bytes


def layer_types(hf_config):
    """transformers' own reading of the config.json's layers (None where it has none)."""
    if not hf_config:
        return None
    from transformers import AutoConfig

    fields = {k: v for k, v in hf_config.items() if not k.startswith("_")}
    config = AutoConfig.for_model(**fields)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "layer_types", None):
        return list(text.layer_types)
    if getattr(text, "no_rope_layers", None) and getattr(text, "attention_chunk_size", None):
        return ["chunked_attention" if f else "full_attention" for f in text.no_rope_layers]
    return None


def run_case(case):
    shapes = dtypes = None
    if case.get("mamba"):
        shapes, dtypes = mamba_shapes(case)
    config, model_cls = stand_in_config(case, shapes, dtypes)
    if case.get("mamba") and any(k != "state" for k in case["layer_kinds"]):
        align_mamba(case, config, model_cls)
    specs = {}
    for i, kind in enumerate(case["layer_kinds"]):
        name = (
            f"model.layers.{i}.linear_attn"
            if kind == "state"
            else f"model.layers.{i}.self_attn.attn"
        )
        specs[name] = layer_spec(case, kind, config, shapes, dtypes)
    if V033:
        config.cache_config.get_resolved_kv_cache_layout = lambda: KVCacheLayout.LBNHC
    groups = planning.get_kv_cache_groups(config, specs)
    memory = case["kv_memory"] // case.get("tp", 1)  # one worker's
    kv_config = planning.get_kv_cache_config_from_groups(config, groups, memory)
    mamba_page = None
    if shapes is not None:
        mamba_page = kvi.MambaSpec(shapes=shapes, dtypes=dtypes, block_size=1).page_size_bytes
    return {
        "block_size": config.cache_config.block_size,
        "mamba_block_size": config.cache_config.mamba_block_size,
        "mamba_page_size_padded": config.cache_config.mamba_page_size_padded,
        "mamba_cache_mode": config.cache_config.mamba_cache_mode,
        "mamba_state_bytes": mamba_page,
        "groups": [[*spec_type(g.kv_cache_spec), list(g.layer_names)] for g in groups],
        "num_blocks": kv_config.num_blocks,
        "layer_types": layer_types(case.get("hf_config")),
    }


def refused_or_run(case):
    """The case's result, or what vLLM raised where it refuses the model."""
    try:
        return run_case(case)
    except (ValueError, NotImplementedError, AssertionError) as error:
        return {"refused": f"{type(error).__name__}: {error}"}


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    results = [refused_or_run(c) for c in cases]
    print(json.dumps({"vllm": vllm.__version__, "results": results}))


if __name__ == "__main__":
    main()
