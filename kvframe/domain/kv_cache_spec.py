"""KV-cache specs and groups: what each layer keeps, and how layers share blocks.

vLLM V1 describes a model's KV cache in two steps, and kvframe keeps its words so
that a reader of either code base finds the other's names:

1. every attention or state layer has a *KV-cache spec* (vLLM's
   ``kv_cache_interface.py``): full attention, sliding-window attention, chunked
   local attention, Mamba state; MLA is full attention with one latent "head" and
   no separate V;
2. layers with the same spec form a *KV-cache group* (``KVCacheGroupSpec``); all
   groups draw their blocks from one block pool of ``num_blocks`` pages
   (``KVCacheConfig``). A model whose layers are all full attention has one group
   (vLLM's ``UnitaryKVCacheCoordinator``); a hybrid model has several
   (``HybridKVCacheCoordinator``), and each group gets its own block table.

These records are pure data on the lowest floor: the core reads them to build its
coordinator and per-group managers, the model shapes (executors) build them from a
Hugging Face ``config.json``, and neither imports the other. How the specs become
groups and how many blocks the pool holds is release-specific (vLLM's
``get_kv_cache_config*``) and lives above this module.

Page sizes follow vLLM 0.19.1 and 0.33.0 (``AttentionSpec.page_size_bytes``):
``2 x block_size x num_kv_heads x head_size x dtype_bytes`` (K and V), MLA without
the factor 2, a Mamba page the bytes of one request's state; ``page_size_padded``
replaces the real size where vLLM pads pages to one unified size.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

__all__ = [
    "AttentionSpec",
    "ChunkedLocalAttentionSpec",
    "FullAttentionSpec",
    "KVCacheConfig",
    "KVCacheGroupSpec",
    "KVCacheSpec",
    "MLAAttentionSpec",
    "MambaSpec",
    "SlidingWindowSpec",
]


def _positive(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if not (isinstance(value, int) and value > 0):
        raise ValueError(f"{attribute.name} must be an integer > 0, got {value!r}")


def _positive_or_none(instance: Any, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None:
        _positive(instance, attribute, value)


@attrs.frozen(slots=True, kw_only=True)
class KVCacheSpec:
    """What one layer keeps per block of ``block_size`` tokens.

    ``kind`` is the name vLLM 0.33.0 puts on a KV event (``kv_cache_spec_kind``);
    subclasses set it.
    """

    kind: ClassVar[str] = "abstract"

    block_size: int = attrs.field(validator=_positive)
    page_size_padded: int | None = attrs.field(default=None, validator=_positive_or_none)
    """vLLM pads a group's page to the largest page of a hybrid model; None: no padding."""

    @property
    def real_page_size_bytes(self) -> int:
        """Bytes one block of this layer holds before any padding."""
        raise NotImplementedError

    @property
    def page_size_bytes(self) -> int:
        """Bytes one block of this layer occupies in the pool (padded where vLLM pads)."""
        real = self.real_page_size_bytes
        if self.page_size_padded is None:
            return real
        if self.page_size_padded < real:
            raise ValueError(
                f"page_size_padded {self.page_size_padded} is smaller than the real page "
                f"size {real} of {type(self).__name__}"
            )
        return self.page_size_padded


@attrs.frozen(slots=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    """An attention layer: K and V of ``num_kv_heads`` heads of ``head_size`` each."""

    num_kv_heads: int = attrs.field(validator=_positive)
    head_size: int = attrs.field(validator=_positive)
    dtype_bytes: int = attrs.field(default=2, validator=_positive)
    """Bytes per KV element (2 for bf16/fp16, 1 for an fp8 KV cache)."""

    @property
    def real_page_size_bytes(self) -> int:
        return 2 * self.block_size * self.num_kv_heads * self.head_size * self.dtype_bytes


@attrs.frozen(slots=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """Full (global) attention: every token of the context is read, every block kept."""

    kind: ClassVar[str] = "full_attention"


@attrs.frozen(slots=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    """Multi-head latent attention (DeepSeek): one latent vector per token, no separate V.

    ``head_size`` is the latent width (``kv_lora_rank + qk_rope_head_dim``) and
    ``num_kv_heads`` is 1; the page holds no factor 2.
    """

    @property
    def real_page_size_bytes(self) -> int:
        return self.block_size * self.num_kv_heads * self.head_size * self.dtype_bytes


@attrs.frozen(slots=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    """Sliding-window attention: a token attends to the last ``sliding_window`` tokens.

    Blocks wholly before the window are no longer needed by a running request; vLLM
    frees them while it runs (``remove_skipped_blocks``) and a prefix hit needs only
    the window's blocks.
    """

    kind: ClassVar[str] = "sliding_window"

    sliding_window: int = attrs.field(validator=_positive)


@attrs.frozen(slots=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    """Chunked local attention (Llama 4): a token attends within its own chunk only."""

    kind: ClassVar[str] = "chunked_local_attention"

    attention_chunk_size: int = attrs.field(validator=_positive)


@attrs.frozen(slots=True, kw_only=True)
class MambaSpec(KVCacheSpec):
    """A Mamba / linear-attention layer: constant state per request, not per token.

    ``state_bytes`` is the sum over the layer's state tensors (conv and SSM state) of
    their element count times element size, vLLM's ``MambaSpec.page_size_bytes``
    before padding. ``mamba_cache_mode`` is the release's prefix-caching mode for
    Mamba state ("none", "all", "align").
    """

    kind: ClassVar[str] = "mamba"

    state_bytes: int = attrs.field(validator=_positive)
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "none"

    @property
    def real_page_size_bytes(self) -> int:
        return self.state_bytes


@attrs.frozen(slots=True, kw_only=True)
class KVCacheGroupSpec:
    """Layers that share one spec and therefore one block table per request."""

    layer_names: tuple[str, ...] = attrs.field(converter=tuple)
    spec: KVCacheSpec

    def __attrs_post_init__(self) -> None:
        if not self.layer_names:
            raise ValueError(f"a KV-cache group needs at least one layer ({self.spec!r})")


@attrs.frozen(slots=True, kw_only=True)
class KVCacheConfig:
    """The block pool's size and the groups that draw from it (vLLM's ``KVCacheConfig``).

    One block id names one page in every layer of the group that owns it; a block
    belongs to one group at a time, and all groups share the free queue.
    """

    num_blocks: int = attrs.field(validator=_positive)
    groups: tuple[KVCacheGroupSpec, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a KV-cache config needs at least one group")

    @property
    def is_hybrid(self) -> bool:
        """Several groups (vLLM's ``HybridKVCacheCoordinator``) rather than one."""
        return len(self.groups) > 1

    @property
    def num_layers(self) -> int:
        return sum(len(group.layer_names) for group in self.groups)
