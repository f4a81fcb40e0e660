"""A model's layers and parameters, as far as the KV cache and the cost model care.

:class:`ModelArchitecture` is what a Hugging Face ``config.json`` says about a
decoder once read (:mod:`kvframe.models.hf_config` builds it): the kind of every
layer (full attention, sliding-window attention, chunked local attention, MLA,
or Mamba / linear-attention state), the shapes that size each kind's KV cache,
and two parameter counts -- *total* (every weight is in GPU memory) and *active*
(the weights one token's forward pass multiplies: a mixture-of-experts model
runs only ``num_experts_per_tok`` of its experts per token).

From it come the per-layer KV-cache specs vLLM would build
(:meth:`ModelArchitecture.layer_specs`, in the shared vocabulary of
:mod:`kvframe.domain.kv_cache_spec`) and the cost model's view
(:meth:`ModelArchitecture.model_shape`). Layer names follow vLLM's
(``model.layers.N.self_attn.attn``, ``model.layers.N.linear_attn``) so that the
groups kvframe computes read like vLLM's.
"""

from __future__ import annotations

import math
from collections import Counter

import attrs

from kvframe.domain.costs import AttentionLayers, ModelShape
from kvframe.domain.kv_cache_spec import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

__all__ = ["LayerKind", "ModelArchitecture"]


class LayerKind:
    """The kinds of layer a model shape knows (strings, as ``layer_types`` spells them)."""

    FULL = "full_attention"
    SLIDING = "sliding_attention"
    CHUNKED = "chunked_attention"
    MLA = "mla"
    STATE = "state"
    """Mamba / linear-attention: a constant state per request, no per-token KV."""

    ALL = (FULL, SLIDING, CHUNKED, MLA, STATE)
    ATTENTION = (FULL, SLIDING, CHUNKED, MLA)


def _positive(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if not (isinstance(value, int) and value > 0):
        raise ValueError(f"{attribute.name} must be an integer > 0, got {value!r}")


@attrs.frozen(slots=True, kw_only=True)
class ModelArchitecture:
    """One decoder's layers and parameters (see the module docstring)."""

    name: str
    model_type: str
    hidden_size: int = attrs.field(validator=_positive)
    num_attention_heads: int = attrs.field(validator=_positive)
    num_kv_heads: int = attrs.field(validator=_positive)
    head_dim: int = attrs.field(validator=_positive)
    layer_kinds: tuple[str, ...] = attrs.field(converter=tuple)
    total_params: int = attrs.field(validator=_positive)
    """Every parameter: what weight memory holds."""
    active_params: int = attrs.field(validator=_positive)
    """Parameters one token multiplies (the selected experts only): what compute costs.
    Both embedding matrices are counted, as :func:`kvframe.executors.presets.llama_num_params`
    counts them for the Llama presets."""
    weight_bytes: float = attrs.field()
    """Bytes of all weights (2 per bf16 parameter; MXFP4 experts 4.25 bits)."""
    kv_dtype_bytes: int = 2
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    mla_latent_dim: int | None = None
    """MLA: ``kv_lora_rank + qk_rope_head_dim``, the cached latent per token and layer."""
    mamba_state_shapes: tuple[tuple[int, ...], ...] = attrs.field(default=(), converter=tuple)
    mamba_state_dtype_bytes: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    mamba_type: str = "mamba2"
    mamba_chunk_size: int | None = None
    """The Mamba kernel's chunk (``mamba_chunk_size`` / ``chunk_size``; vLLM's default 2048)."""
    supports_mamba_prefix_caching: bool = False
    """vLLM 0.19.1's ``SupportsMambaPrefixCaching``: prefix caching on selects mode "all"."""
    max_position_embeddings: int | None = None
    source: str = ""
    """Where the config came from (a file or a preset's name), for error messages."""

    def __attrs_post_init__(self) -> None:
        unknown = sorted(set(self.layer_kinds) - set(LayerKind.ALL))
        if unknown:
            raise ValueError(f"{self.name}: unknown layer kinds {unknown}")
        if not self.layer_kinds:
            raise ValueError(f"{self.name}: a model needs at least one layer")
        needs = {
            LayerKind.SLIDING: ("sliding_window", self.sliding_window),
            LayerKind.CHUNKED: ("attention_chunk_size", self.attention_chunk_size),
            LayerKind.MLA: ("mla_latent_dim", self.mla_latent_dim),
            LayerKind.STATE: ("mamba_state_shapes", self.mamba_state_shapes or None),
        }
        for kind, (field, value) in needs.items():
            if kind in self.layer_kinds and value is None:
                raise ValueError(f"{self.name}: {kind} layers need {field}")
        if len(self.mamba_state_shapes) != len(self.mamba_state_dtype_bytes):
            raise ValueError(f"{self.name}: one dtype per Mamba state shape")

    # -- layers ------------------------------------------------------------------

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    def layer_name(self, index: int) -> str:
        """vLLM's name for layer ``index``'s attention or state module."""
        if self.layer_kinds[index] == LayerKind.STATE:
            return f"model.layers.{index}.linear_attn"
        return f"model.layers.{index}.self_attn.attn"

    @property
    def kind_counts(self) -> dict[str, int]:
        return dict(Counter(self.layer_kinds))

    @property
    def is_hybrid(self) -> bool:
        """More than one kind of layer: vLLM's hybrid KV-cache manager applies."""
        return len(set(self.layer_kinds)) > 1

    @property
    def mamba_state_bytes(self) -> int:
        """One request's state in one Mamba / linear-attention layer (vLLM's Mamba page)."""
        return sum(
            math.prod(shape) * size
            for shape, size in zip(
                self.mamba_state_shapes, self.mamba_state_dtype_bytes, strict=True
            )
        )

    def attention_bytes_per_token(self, kind: str) -> int:
        """K and V (MLA: the latent) of one token in one layer of ``kind``."""
        if kind == LayerKind.MLA:
            assert self.mla_latent_dim is not None
            return self.mla_latent_dim * self.kv_dtype_bytes
        return 2 * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token adds over all attention layers (windowed ones included,
        which drop it again once it leaves their window; Mamba layers add none)."""
        return sum(
            self.attention_bytes_per_token(kind)
            for kind in self.layer_kinds
            if kind != LayerKind.STATE
        )

    def layer_spec(
        self,
        index: int,
        block_size: int,
        *,
        mamba_block_size: int | None = None,
        mamba_page_size_padded: int | None = None,
        mamba_cache_mode: str = "none",
    ) -> KVCacheSpec:
        """Layer ``index``'s KV-cache spec for ``block_size``-token blocks, as vLLM's
        attention and Mamba layers build theirs (``get_kv_cache_spec``)."""
        kind = self.layer_kinds[index]
        common = {"block_size": block_size, "dtype_bytes": self.kv_dtype_bytes}
        heads = {"num_kv_heads": self.num_kv_heads, "head_size": self.head_dim}
        if kind == LayerKind.FULL:
            return FullAttentionSpec(**common, **heads)
        if kind == LayerKind.SLIDING:
            assert self.sliding_window is not None
            return SlidingWindowSpec(**common, **heads, sliding_window=self.sliding_window)
        if kind == LayerKind.CHUNKED:
            assert self.attention_chunk_size is not None
            return ChunkedLocalAttentionSpec(
                **common, **heads, attention_chunk_size=self.attention_chunk_size
            )
        if kind == LayerKind.MLA:
            assert self.mla_latent_dim is not None
            return MLAAttentionSpec(**common, num_kv_heads=1, head_size=self.mla_latent_dim)
        return MambaSpec(
            block_size=mamba_block_size or block_size,
            state_bytes=self.mamba_state_bytes,
            page_size_padded=mamba_page_size_padded,
            mamba_type=self.mamba_type,
            mamba_cache_mode=mamba_cache_mode,
        )

    def layer_specs(
        self,
        block_size: int,
        *,
        mamba_block_size: int | None = None,
        mamba_page_size_padded: int | None = None,
        mamba_cache_mode: str = "none",
    ) -> dict[str, KVCacheSpec]:
        """Every layer's spec by vLLM's layer name, in layer order (the order vLLM's
        model runner reports them in, which decides the order of the groups)."""
        return {
            self.layer_name(i): self.layer_spec(
                i,
                block_size,
                mamba_block_size=mamba_block_size,
                mamba_page_size_padded=mamba_page_size_padded,
                mamba_cache_mode=mamba_cache_mode,
            )
            for i in range(self.num_layers)
        }

    # -- the cost model's view ---------------------------------------------------

    def attention_layers(self) -> tuple[AttentionLayers, ...]:
        """The layers by kind, for the cost model: what each kind reads per step."""
        counts = self.kind_counts
        query_width = self.num_attention_heads * self.head_dim
        groups = []
        for kind in LayerKind.ALL:
            count = counts.get(kind, 0)
            if not count:
                continue
            if kind == LayerKind.STATE:
                groups.append(
                    AttentionLayers(
                        kind="state",
                        num_layers=count,
                        kv_bytes_per_token=0,
                        query_width=0,
                        state_bytes=count * self.mamba_state_bytes,
                    )
                )
                continue
            span = {LayerKind.SLIDING: self.sliding_window, LayerKind.CHUNKED: None}.get(kind)
            cost_kind = {LayerKind.SLIDING: "sliding_window", LayerKind.CHUNKED: "chunked_local"}
            groups.append(
                AttentionLayers(
                    kind=cost_kind.get(kind, "full"),
                    num_layers=count,
                    kv_bytes_per_token=count * self.attention_bytes_per_token(kind),
                    query_width=query_width,
                    span=self.attention_chunk_size if kind == LayerKind.CHUNKED else span,
                )
            )
        return tuple(groups)

    def model_shape(self) -> ModelShape:
        """The cost model's :class:`~kvframe.domain.costs.ModelShape` of this model.

        ``num_layers`` counts every layer (all-reduces happen in each);
        ``num_kv_heads`` / ``head_dim`` are the attention layers'; the per-kind
        :attr:`~kvframe.domain.costs.ModelShape.layers` carry what each kind reads,
        and ``weight_dtype_bytes`` is the average bytes per weight, so that
        ``weight_bytes`` is this model's (MXFP4 experts included).
        """
        return ModelShape(
            name=self.name,
            num_layers=self.num_layers,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            dtype_bytes=self.kv_dtype_bytes,
            num_params=self.total_params,
            active_params=self.active_params,
            weight_dtype_bytes=self.weight_bytes / self.total_params,
            hidden_size=self.hidden_size,
            layers=self.attention_layers(),
        )
