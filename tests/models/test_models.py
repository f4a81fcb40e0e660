"""Model shapes from config.json: layer kinds, parameters, errors, groups, the cost model."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from kvframe.domain.costs import (
    CostModel,
    chunked_prefill_pairs,
    num_gpu_blocks_for,
    prefill_pairs,
    sliding_prefill_pairs,
)
from kvframe.domain.fidelity import fidelity_for
from kvframe.domain.kv_cache_spec import FullAttentionSpec, MambaSpec, SlidingWindowSpec
from kvframe.executors.model_presets import model_preset, model_presets
from kvframe.executors.presets import LLAMA_3_1_8B, PRESETS
from kvframe.models import LayerKind, ModelConfigError, architecture_from_config, load_model
from kvframe.models.catalog import MODEL_NAMES, MODELS_DIR
from kvframe.models.kv_groups import KVGroupOptions, hybrid_manager_enabled, kv_cache_config_for

GiB = 1024**3

# The model cards' published parameter counts (total, and active where stated).
CARD_PARAMS = {
    "gpt-oss-20b": (20.9e9, None),
    "gpt-oss-120b": (116.8e9, None),
    "llama-4-scout": (109e9, 17e9),
    "qwen3-next-80b-a3b": (80e9, None),
    "llama-3.1-8b": (8.03e9, None),
}


def _config(name: str) -> dict:
    return json.loads((MODELS_DIR / MODEL_NAMES[name]).read_text())


@pytest.mark.parametrize("name", sorted(CARD_PARAMS))
def test_parameter_counts_match_the_model_cards(name: str) -> None:
    model = load_model(name)
    total, active = CARD_PARAMS[name]
    # Scout's 109B counts its vision tower too, which kvframe leaves out.
    assert abs(model.total_params - total) / total < (0.02 if name == "llama-4-scout" else 0.01)
    if active is not None:
        assert abs(model.active_params - active) / active < 0.02
    assert model.active_params <= model.total_params


def test_llama_preset_shape_is_the_config_jsons() -> None:
    """The bundled Llama-3.1-8B config.json reads into the preset's own numbers."""
    model = load_model("llama-3.1-8b")
    shape = LLAMA_3_1_8B
    assert model.total_params == shape.num_params
    assert model.kv_bytes_per_token == shape.kv_bytes_per_token
    assert model.weight_bytes == shape.weight_bytes


def test_layer_kinds_of_the_presets() -> None:
    assert load_model("gpt-oss-120b").layer_kinds[:2] == (LayerKind.SLIDING, LayerKind.FULL)
    gemma = load_model("gemma-3-27b")
    assert gemma.kind_counts == {LayerKind.SLIDING: 52, LayerKind.FULL: 10}
    assert gemma.layer_kinds[5] == LayerKind.FULL
    scout = load_model("llama-4-scout")
    assert scout.kind_counts == {LayerKind.CHUNKED: 36, LayerKind.FULL: 12}
    assert scout.layer_kinds[3] == LayerKind.FULL
    qwen = load_model("qwen3-next-80b-a3b")
    assert qwen.kind_counts == {LayerKind.STATE: 36, LayerKind.FULL: 12}
    assert qwen.mamba_state_bytes == 3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 2


def test_mxfp4_experts_shrink_gpt_oss_weights() -> None:
    model = load_model("gpt-oss-120b")
    assert model.weight_bytes < 0.3 * model.total_params * 2
    assert model.weight_bytes / GiB < 71  # "fits on a single 80GB GPU"


def test_a_users_config_json(tmp_path: Path) -> None:
    config = _config("gpt-oss-20b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = load_model(str(path))
    assert model.layer_kinds == load_model("gpt-oss-20b").layer_kinds
    assert model.source == str(path)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"num_hidden_layers": "36"}, "num_hidden_layers"),
        ({"layer_types": ["sliding_attention"]}, "layer_types"),
        ({"layer_types": ["weird_attention"] * 36}, "layer_types"),
        ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
        ({"torch_dtype": "int3"}, "torch_dtype"),
    ],
)
def test_bad_fields_are_named_with_the_file(change: dict, field: str) -> None:
    config = {**_config("gpt-oss-120b"), **change}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(ModelConfigError) as error:
        architecture_from_config(config, source="my/config.json")
    assert error.value.field == field
    assert "my/config.json" in str(error.value) and field in str(error.value)


def test_unreadable_files_and_unknown_names(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ModelConfigError, match="not JSON"):
        load_model(str(bad))
    with pytest.raises(ModelConfigError, match="did you mean 'gpt-oss-120b'"):
        load_model("gpt-oss-12b")


def test_full_attention_pool_is_num_gpu_blocks_for() -> None:
    """One group, and the pool size kvframe always used for full-attention models."""
    model = load_model("llama-3.1-8b")
    for release in ("0.19.1", "0.33.0"):
        config = kv_cache_config_for(model, 40 * GiB, 16, release)
        assert not config.is_hybrid
        assert config.num_blocks == num_gpu_blocks_for(40 * GiB, 16, LLAMA_3_1_8B)


def test_gpt_oss_groups_and_the_kv_events_switch() -> None:
    model = load_model("gpt-oss-120b")
    config = kv_cache_config_for(model, 40 * GiB, 16, "0.19.1")
    assert [type(g.spec) for g in config.groups] == [SlidingWindowSpec, FullAttentionSpec]
    events = KVGroupOptions(kv_events=True)
    old = kv_cache_config_for(model, 40 * GiB, 16, "0.19.1", events)
    new = kv_cache_config_for(model, 40 * GiB, 16, "0.33.0", events)
    assert not old.is_hybrid and new.is_hybrid  # switch M1
    # One group of 36 full-attention layers: half the blocks of 2 groups of 18.
    assert old.num_blocks == config.num_blocks // 2


def test_mamba_hybrid_block_and_padding() -> None:
    model = load_model("qwen3-next-80b-a3b")
    config = kv_cache_config_for(model, 40 * GiB, 16, "0.19.1")
    mamba = [g.spec for g in config.groups if isinstance(g.spec, MambaSpec)]
    attention = [g.spec for g in config.groups if isinstance(g.spec, FullAttentionSpec)]
    assert attention[0].block_size % 16 == 0
    assert attention[0].page_size_bytes >= model.mamba_state_bytes
    assert mamba[0].page_size_bytes == attention[0].page_size_bytes
    # Block size 64: 0.33.0 aligns to the block size (M3), 0.19.1 to 16.
    layouts = {
        release: kv_cache_config_for(model, 40 * GiB, 64, release).groups[-1].spec.block_size
        for release in ("0.19.1", "0.33.0")
    }
    assert layouts["0.33.0"] % 64 == 0


def test_chunked_local_turns_the_hybrid_manager_off() -> None:
    model = load_model("llama-4-scout")
    for release in ("0.19.1", "0.33.0"):
        enabled, why = hybrid_manager_enabled(model, fidelity_for(release), KVGroupOptions())
        assert not enabled and "chunked" in why
    allowed = KVGroupOptions(allow_chunked_local_hybrid=True)
    assert kv_cache_config_for(model, 40 * GiB, 16, "0.33.0", allowed).is_hybrid


def test_windowed_pairs_agree_with_counting() -> None:
    for cached in (0, 5, 130, 1000):
        for new in (1, 7, 300):
            positions = range(cached, cached + new)

            def count(keys, positions=positions):
                return sum(keys(p) for p in positions)

            assert sliding_prefill_pairs(new, cached, 128) == count(lambda p: min(p + 1, 128))
            assert chunked_prefill_pairs(new, cached, 64) == count(lambda p: p % 64 + 1)
            assert prefill_pairs(new, cached) == count(lambda p: p + 1)


def test_existing_presets_keep_their_coefficients() -> None:
    """A shape without per-kind layers derives the cost model it always did: no
    windowed term, no state term, and its compute priced by all its parameters."""
    for preset in PRESETS.values():
        assert not preset.cost_model.is_hybrid
        assert preset.shape.compute_params == preset.shape.num_params


def test_moe_compute_by_active_weights_by_total() -> None:
    gpt = model_preset("gpt-oss-120b")
    dense = attrs.evolve(gpt.shape, active_params=None)
    from kvframe.executors.presets import derive_cost_model

    dense_cost = derive_cost_model(dense, gpt.gpu)
    ratio = dense_cost.per_prefill_token_s / gpt.cost_model.per_prefill_token_s
    assert ratio == pytest.approx(gpt.shape.num_params / gpt.shape.active_params)
    assert dense_cost.weight_read_s == gpt.cost_model.weight_read_s


def test_sliding_layers_read_at_most_their_window() -> None:
    cost = model_preset("gemma-3-27b").cost_model
    ((kind, window, read_s, _),) = cost.windowed
    assert kind == "sliding_window" and window == 1024
    near = cost.hybrid_attention([(2048, 0)])[1]
    far = cost.hybrid_attention([(200_000, 0)])[1]
    assert near == far == pytest.approx(read_s * 1024)
    short = cost.hybrid_attention([(100, 0)])[1]
    assert short == pytest.approx(read_s * 100)


def test_mamba_state_costs_the_same_at_any_context() -> None:
    cost = model_preset("qwen3-next-80b-a3b").cost_model
    assert cost.per_state_seq_s > 0 and not cost.windowed
    assert cost.hybrid_attention([(10, 0)]) == cost.hybrid_attention([(100_000, 0)])


def test_hybrid_step_time_adds_inside_the_attention_max() -> None:
    cost = model_preset("gpt-oss-20b").cost_model
    plain = cost.step_time(0, 4, 40_000)
    pair_s, read_s = cost.hybrid_attention([(10_000, 0)] * 4)
    assert cost.hybrid_step_time((0, 4, 40_000, 0, 0), pair_s, read_s) == (
        pytest.approx(plain + read_s)
    )


def test_model_presets_are_listed_and_fit() -> None:
    presets = model_presets()
    assert set(presets) == {
        "gpt-oss-20b-h100",
        "gpt-oss-120b-h100",
        "gemma-3-27b-h100",
        "llama-4-scout-4xh100",
        "qwen3-next-80b-a3b-2xh200",
    }
    for preset in presets.values():
        assert preset.kv_memory_bytes > GiB


def test_a_model_on_another_presets_hardware() -> None:
    preset = model_preset("gpt-oss-120b", PRESETS["llama3.1-8b-h200"])
    assert preset.gpu is PRESETS["llama3.1-8b-h200"].gpu
    assert preset.kv_memory_bytes > model_preset("gpt-oss-120b").kv_memory_bytes
    assert isinstance(preset.cost_model, CostModel)
