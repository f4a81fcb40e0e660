"""KV-cache groups and the block pool's size, as vLLM 0.19.1 and 0.33.0 compute them.

A port of vLLM's ``get_kv_cache_config*`` (0.19.1: ``vllm/v1/core/kv_cache_utils.py``;
0.33.0: ``vllm/v1/core/kv_cache_planning.py``) and of the two steps before it that
decide what it is given:

1. **Is the hybrid manager on?** (``VllmConfig.__post_init__``) Both releases turn
   it off for chunked local attention (Llama 4) unless
   ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` is set; 0.19.1 also for KV
   events (switch M1) and for any KV connector (M2). Off, sliding-window and
   chunked layers are promoted to full attention (``unify_hybrid_kv_cache_specs``):
   every token's KV is kept in every layer, one group.
2. **Mamba hybrids' block size** (0.19.1: ``HybridAttentionMambaModelConfig``;
   0.33.0: ``Platform._align_hybrid_block_size``): the attention block grows until
   its page holds one Mamba state, and the Mamba page is padded to it (M3, M4).
3. **Grouping** (``get_kv_cache_groups``): one group when every layer has the same
   spec; one group of per-layer specs when all are of one type; otherwise pages are
   unified (smaller pages get more tokens per block), layers with the same spec are
   split into groups of ``group_size`` layers -- the smallest count of any kind,
   or the largest when it is under 1.5x the smallest -- the last one padded, layer
   ``i`` of a kind going to group ``i mod num_groups``.
4. **Pool size** (``get_kv_cache_config_from_groups``): one block is one page in
   ``group_size`` layers, so ``num_blocks = memory // (page x group_size)``
   (``num_gpu_blocks_override`` replaces it). 0.33.0 divides by the widest group's
   summed pages, the same number for the layer-outer layouts of FlashAttention and
   FlashInfer; its block-outermost packing (``_get_packed_kv_cache_groups``, for
   backends that declare ``BLHNC``) is not ported and is refused by name.

``tests/models/test_kv_groups_vllm.py`` runs vLLM's own functions of both releases on
every preset and on random hybrid layer mixes and compares groups, page sizes and
``num_blocks`` with this module's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from kvframe.domain.fidelity import Fidelity, fidelity_for
from kvframe.domain.kv_cache_spec import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from kvframe.models.architecture import LayerKind, ModelArchitecture

__all__ = [
    "KVGroupOptions",
    "MambaLayout",
    "hybrid_manager_enabled",
    "kv_cache_config_for",
    "kv_cache_groups",
    "mamba_layout",
    "num_blocks_for",
]

KERNEL_BLOCK_SIZE = 16
"""FlashAttention's kernel block alignment (``MultipleOf(16)``); MLA backends need 64
(0.19.1) or 128 (0.33.0's TRTLLM / FlashInfer alignment)."""


@attrs.frozen(slots=True, kw_only=True)
class KVGroupOptions:
    """The serving settings that change a model's groups (vLLM's flags in brackets)."""

    enable_prefix_caching: bool = True
    """(``--enable-prefix-caching``) selects the Mamba cache mode."""
    hybrid_manager: bool | None = None
    """(``--disable-hybrid-kv-cache-manager``, negated) ``None``: the release decides."""
    kv_events: bool = False
    """(``--kv-events-config``) KV events published (M1)."""
    kv_connector: bool = False
    """(``--kv-transfer-config``) a KV connector in use (M2)."""
    connector_supports_hma: bool = False
    """Whether that connector implements ``SupportsHMA`` (0.33.0 reads it)."""
    allow_chunked_local_hybrid: bool = False
    """(``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1``)."""
    max_model_len: int | None = None
    """The Mamba block without prefix caching; ``None``: ``max_position_embeddings``."""
    num_gpu_blocks_override: int | None = None
    tensor_parallel_size: int = 1
    """Each GPU holds ``num_kv_heads / tp`` heads (at least one) and ``1 / tp`` of a
    Mamba state; ``kv_memory`` is over all GPUs."""


def hybrid_manager_enabled(
    model: ModelArchitecture, fidelity: Fidelity, options: KVGroupOptions
) -> tuple[bool, str]:
    """Whether vLLM runs ``model`` with its hybrid KV-cache manager, and why not."""
    reasons = []
    chunked = model.attention_chunk_size is not None and LayerKind.CHUNKED in model.layer_kinds
    if chunked and not options.allow_chunked_local_hybrid:
        reasons.append("chunked local attention (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_... unset)")
    if options.kv_events and not fidelity.hybrid_kept_with_kv_events:
        reasons.append(f"KV events (vLLM {fidelity.vllm}, switch M1)")
    keeps = fidelity.hybrid_kept_with_hma_connector and options.connector_supports_hma
    if options.hybrid_manager is None and options.kv_connector and not keeps:
        reasons.append(f"a KV connector (vLLM {fidelity.vllm}, switch M2)")
    if options.hybrid_manager is False:
        return False, "--disable-hybrid-kv-cache-manager"
    if options.hybrid_manager is True and reasons:
        raise ValueError(
            "the hybrid KV-cache manager was asked for but vLLM "
            f"{fidelity.vllm} turns it off here: {'; '.join(reasons)}"
        )
    return not reasons, "; ".join(reasons)


# -- Mamba hybrids: the attention block that holds a Mamba state -------------------


@attrs.frozen(slots=True, kw_only=True)
class MambaLayout:
    """The block sizes and Mamba page a Mamba hybrid runs with."""

    block_size: int
    """The attention layers' block (grown to hold a Mamba state)."""
    mamba_block_size: int
    mamba_page_size_padded: int | None
    mamba_cache_mode: str


def mamba_cache_mode(model: ModelArchitecture, fidelity: Fidelity, prefix_caching: bool) -> str:
    """vLLM's ``mamba_cache_mode`` for ``model`` (``MambaModelConfig``; switch M4)."""
    if not prefix_caching:
        return "none"
    if model.supports_mamba_prefix_caching and not fidelity.mamba_prefix_cache_align_only:
        return "all"
    return "align"


def mamba_layout(
    model: ModelArchitecture, block_size: int, fidelity: Fidelity, options: KVGroupOptions
) -> MambaLayout:
    """The attention block size and Mamba page of a Mamba hybrid (switch M3), from one
    GPU's share of ``model`` (:func:`kv_cache_config_for` passes it)."""
    mode = mamba_cache_mode(model, fidelity, options.enable_prefix_caching)
    mla = LayerKind.MLA in model.layer_kinds
    attn_1_token = model.attention_bytes_per_token(LayerKind.MLA if mla else LayerKind.FULL)
    mamba_page = model.mamba_state_bytes
    if fidelity.mamba_block_aligned_to_block_size:
        align = max(KERNEL_BLOCK_SIZE, block_size)
        if mla:
            align = max(align, 128)
        attn_block = align * math.ceil(mamba_page / (align * attn_1_token))
        attn_block = KERNEL_BLOCK_SIZE * math.ceil(attn_block / KERNEL_BLOCK_SIZE)
    elif mode == "all":
        align = 64 if mla else KERNEL_BLOCK_SIZE
        chunk = math.lcm(model.mamba_chunk_size or 2048, align)
        attn_block = chunk * math.ceil(math.ceil(mamba_page / attn_1_token) / chunk)
    else:
        align = 64 if mla else KERNEL_BLOCK_SIZE
        attn_block = align * math.ceil(mamba_page / (align * attn_1_token))
    final_block = max(block_size, attn_block)
    if mode == "all":
        mamba_block = attn_block
    elif mode == "align":
        mamba_block = final_block
    else:
        mamba_block = options.max_model_len or model.max_position_embeddings or final_block
    attn_page = final_block * attn_1_token
    padded = None if attn_page == mamba_page else attn_page
    return MambaLayout(
        block_size=final_block,
        mamba_block_size=mamba_block,
        mamba_page_size_padded=padded,
        mamba_cache_mode=mode,
    )


# -- grouping ------------------------------------------------------------------------


def _promote(spec: KVCacheSpec) -> KVCacheSpec:
    """A sliding-window or chunked layer as full attention (the hybrid manager off)."""
    if isinstance(spec, SlidingWindowSpec | ChunkedLocalAttentionSpec):
        return FullAttentionSpec(
            block_size=spec.block_size,
            num_kv_heads=spec.num_kv_heads,
            head_size=spec.head_size,
            dtype_bytes=spec.dtype_bytes,
            page_size_padded=spec.page_size_padded,
        )
    return spec


def unify_hybrid_specs(specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """vLLM's ``unify_hybrid_kv_cache_specs``: with full attention present, windowed
    layers become full attention; anything still of several types is refused."""
    specs = dict(specs)
    if is_uniform_type(specs):
        return specs
    if any(type(s) in (FullAttentionSpec, MLAAttentionSpec) for s in specs.values()):
        specs = {name: _promote(spec) for name, spec in specs.items()}
    if not is_uniform_type(specs):
        kinds = sorted({type(spec).__name__ for spec in specs.values()})
        raise ValueError(
            "the hybrid KV-cache manager is off but the layers cannot be made one type "
            f"({', '.join(kinds)}): vLLM refuses this model so (a Mamba hybrid needs it on)"
        )
    return specs


def is_uniform_type(specs: Mapping[str, KVCacheSpec]) -> bool:
    """vLLM's ``UniformTypeKVCacheSpecs.is_uniform_type``: one block size, and one kind
    needing the same token slots (full attention; one window; one chunk; Mamba)."""
    values = list(specs.values())
    if len({spec.block_size for spec in values}) > 1:
        return False
    first = values[0]
    if isinstance(first, FullAttentionSpec):
        return all(isinstance(spec, FullAttentionSpec) for spec in values)
    if isinstance(first, SlidingWindowSpec):
        return all(
            isinstance(s, SlidingWindowSpec) and s.sliding_window == first.sliding_window
            for s in values
        )
    if isinstance(first, ChunkedLocalAttentionSpec):
        return all(
            isinstance(s, ChunkedLocalAttentionSpec)
            and s.attention_chunk_size == first.attention_chunk_size
            for s in values
        )
    return all(isinstance(spec, type(first)) for spec in values)


def unify_page_sizes(specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """vLLM's ``unify_kv_cache_spec_page_size``: a layer with a smaller page gets
    ``max_page / page`` times its tokens per block; a page that does not divide the
    largest is refused."""
    pages = {spec.page_size_bytes for spec in specs.values()}
    if len(pages) <= 1:
        return dict(specs)
    largest = max(pages)
    unified = {}
    for name, spec in specs.items():
        page = spec.page_size_bytes
        if page != largest:
            if largest % page:
                raise ValueError(
                    f"layer {name}'s page of {page} bytes does not divide the largest page "
                    f"({largest} bytes): vLLM cannot unify the page sizes of this model"
                )
            spec = attrs.evolve(spec, block_size=spec.block_size * (largest // page))
        unified[name] = spec
    return unified


def _group_uniform_page_size(specs: Mapping[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """vLLM's ``_get_kv_cache_groups_uniform_page_size`` (module docstring, step 3)."""
    same_type: dict[KVCacheSpec, list[str]] = {}
    for name, spec in specs.items():
        same_type.setdefault(spec, []).append(name)
    sizes = [len(layers) for layers in same_type.values()]
    group_size = min(sizes)
    if max(sizes) < min(sizes) * 1.5:
        group_size = max(sizes)
    groups = []
    for spec, layers in same_type.items():
        num_groups = -(-len(layers) // group_size)
        for i in range(num_groups):
            groups.append(KVCacheGroupSpec(layer_names=layers[i::num_groups], spec=spec))
    return groups


def kv_cache_groups(specs: Mapping[str, KVCacheSpec], *, hybrid: bool) -> list[KVCacheGroupSpec]:
    """vLLM's ``get_kv_cache_groups`` for the per-layer ``specs`` (layer order).

    A group of one type with per-layer pages (vLLM's ``UniformTypeKVCacheSpecs``)
    carries its first layer's spec, as ``generate_scheduler_kv_cache_config``
    hands it to the scheduler.
    """
    if not specs:
        raise ValueError("a model without KV-cache layers has no KV-cache groups")
    if not hybrid:
        specs = unify_hybrid_specs(specs)
    values = list(specs.values())
    if all(spec == values[0] for spec in values) or is_uniform_type(specs):
        return [KVCacheGroupSpec(layer_names=tuple(specs), spec=values[0])]
    return _group_uniform_page_size(unify_page_sizes(specs))


def _bytes_per_block(groups: list[KVCacheGroupSpec], specs: Mapping[str, KVCacheSpec]) -> int:
    """One block over every layer that shares it: the widest group's pages."""
    return max(sum(specs[name].page_size_bytes for name in g.layer_names) for g in groups)


def num_blocks_for(
    groups: list[KVCacheGroupSpec],
    specs: Mapping[str, KVCacheSpec],
    kv_memory: int,
    override: int | None = None,
) -> int:
    """``get_kv_cache_config_from_groups``'s ``num_blocks`` (the null block included)."""
    if override is not None:
        return override
    return max(int(kv_memory) // _bytes_per_block(groups, specs), 0)


def _group_specs(groups: list[KVCacheGroupSpec]) -> dict[str, KVCacheSpec]:
    return {name: group.spec for group in groups for name in group.layer_names}


def kv_cache_config_for(
    model: ModelArchitecture,
    kv_memory: int,
    block_size: int,
    vllm: str | Fidelity,
    options: KVGroupOptions = KVGroupOptions(),
) -> KVCacheConfig:
    """The KV-cache groups and pool size vLLM ``vllm`` gives ``model`` with
    ``kv_memory`` bytes for KV cache (over all GPUs) and ``block_size``-token blocks.

    The one function the engine calls. For a model whose layers are all full
    attention it is one group of ``kv_memory // (block_size x kv_bytes_per_token)``
    blocks, :func:`~kvframe.domain.costs.num_gpu_blocks_for`'s number.

    :raises ValueError: where vLLM would refuse the model (pages that cannot be
        unified, a Mamba hybrid without the hybrid manager, memory for no block).
    """
    fidelity = fidelity_for(vllm)
    tp = options.tensor_parallel_size
    hybrid, _ = hybrid_manager_enabled(model, fidelity, options)
    per_gpu = model
    if tp > 1:
        per_gpu = attrs.evolve(
            model,
            num_kv_heads=max(1, model.num_kv_heads // tp),
            mamba_state_shapes=((max(1, model.mamba_state_bytes // tp),),)
            if model.mamba_state_shapes
            else (),
            mamba_state_dtype_bytes=(1,) if model.mamba_state_shapes else (),
        )
    layout = None
    if LayerKind.STATE in model.layer_kinds and set(model.layer_kinds) != {LayerKind.STATE}:
        layout = mamba_layout(per_gpu, block_size, fidelity, options)
        block_size = layout.block_size
    specs = per_gpu.layer_specs(
        block_size,
        mamba_block_size=layout.mamba_block_size if layout else None,
        mamba_page_size_padded=layout.mamba_page_size_padded if layout else None,
        mamba_cache_mode=layout.mamba_cache_mode if layout else "none",
    )
    groups = kv_cache_groups(specs, hybrid=hybrid)
    layer_specs = specs if len(groups) == 1 else _group_specs(groups)
    if len(groups) == 1 and not hybrid:
        layer_specs = unify_hybrid_specs(specs)
    num_blocks = num_blocks_for(
        groups, layer_specs, int(kv_memory) // tp, options.num_gpu_blocks_override
    )
    if num_blocks < 1:
        raise ValueError(
            f"{model.name}: {int(kv_memory)} bytes of KV memory hold no block of "
            f"{_bytes_per_block(groups, layer_specs)} bytes"
        )
    return KVCacheConfig(num_blocks=num_blocks, groups=tuple(groups))
