"""KV-cache specs: page sizes as vLLM 0.19.1 / 0.33.0 compute them, and bad specs refused."""

from __future__ import annotations

import pytest

from kvframe.domain.kv_cache_spec import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)


def test_attention_page_holds_k_and_v() -> None:
    # gpt-oss-20b: 8 KV heads of 64, bf16, 16-token blocks -> 2 x 16 x 8 x 64 x 2 B.
    spec = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=64, sliding_window=128)
    assert spec.page_size_bytes == 32_768
    assert spec.kind == "sliding_window"


def test_mla_page_has_no_separate_v() -> None:
    spec = MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576)
    assert spec.page_size_bytes == 64 * 576 * 2
    assert spec.kind == "full_attention"


def test_padding_replaces_the_real_size_and_never_shrinks_it() -> None:
    padded = MambaSpec(block_size=16, state_bytes=1000, page_size_padded=4096)
    assert padded.page_size_bytes == 4096
    too_small = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=64, page_size_padded=8)
    with pytest.raises(ValueError, match="smaller than the real page size"):
        _ = too_small.page_size_bytes


def test_config_knows_whether_it_is_hybrid() -> None:
    full = KVCacheGroupSpec(
        layer_names=["layers.1"],
        spec=FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=64),
    )
    window = KVCacheGroupSpec(
        layer_names=("layers.0", "layers.2"),
        spec=SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=64, sliding_window=128),
    )
    assert not KVCacheConfig(num_blocks=10, groups=[full]).is_hybrid
    config = KVCacheConfig(num_blocks=10, groups=[window, full])
    assert config.is_hybrid and config.num_layers == 3


@pytest.mark.parametrize("field", ["block_size", "num_kv_heads", "head_size"])
def test_non_positive_sizes_are_refused_by_name(field: str) -> None:
    values = {"block_size": 16, "num_kv_heads": 8, "head_size": 64, field: 0}
    with pytest.raises(ValueError, match=field):
        FullAttentionSpec(**values)


def test_empty_groups_and_configs_are_refused() -> None:
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=64)
    with pytest.raises(ValueError, match="at least one layer"):
        KVCacheGroupSpec(layer_names=(), spec=spec)
    with pytest.raises(ValueError, match="at least one group"):
        KVCacheConfig(num_blocks=4, groups=())
