"""The sim cost model and its presets, on hand-computed cases."""

from __future__ import annotations

import pytest

from kvframe.executors import CostModel, ModelShape, get_preset, num_gpu_blocks_for
from kvframe.executors.catalog import preset_names
from kvframe.executors.presets import (
    H100_SXM,
    LLAMA_3_1_8B,
    LLAMA_3_1_70B,
    PRESETS,
    Efficiency,
    derive_cost_model,
    kv_memory_for,
    llama_num_params,
)

GiB = 1024**3


def simple_model(**overrides: float) -> CostModel:
    values = dict(
        per_step_s=0.010,
        per_prefill_token_s=1e-4,
        per_decode_seq_s=2e-4,
        per_context_token_s=1e-6,
        transfer_bytes_per_s=1e9,
    )
    values.update(overrides)
    return CostModel(**values)


def test_step_time_is_linear_in_the_four_quantities() -> None:
    model = simple_model()
    # 0.010 + 100 * 1e-4 + 10 * 2e-4 + 1000 * 1e-6 = 0.010 + 0.010 + 0.002 + 0.001
    assert model.step_time(100, 10, 1000) == pytest.approx(0.023)
    assert model.step_time(0, 1, 0) == pytest.approx(0.0102)
    assert model.step_time(1, 0, 0) == pytest.approx(0.0101)


def test_a_step_that_schedules_nothing_costs_nothing() -> None:
    assert simple_model().step_time(0, 0, 0) == 0.0
    assert simple_model().step_time(0, 0, 500) == 0.0


def test_transfer_time() -> None:
    model = simple_model(transfer_latency_s=1e-5)
    assert model.transfer_time(0) == 0.0
    assert model.transfer_time(2_000_000) == pytest.approx(1e-5 + 2e-3)


def test_coefficients_are_validated() -> None:
    with pytest.raises(ValueError, match="per_step_s must be a finite number >= 0"):
        simple_model(per_step_s=-1.0)
    with pytest.raises(ValueError, match="transfer_bytes_per_s must be > 0"):
        simple_model(transfer_bytes_per_s=0.0)


def test_kv_bytes_per_token_and_blocks() -> None:
    shape = ModelShape(name="m", num_layers=4, num_kv_heads=2, head_dim=64, num_params=10**6)
    assert shape.kv_bytes_per_token == 4 * 2 * 64 * 2 * 2 == 2048
    assert shape.kv_bytes_per_block(16) == 32768
    assert num_gpu_blocks_for(32768 * 10 + 32767, 16, shape) == 10  # floors
    assert num_gpu_blocks_for(0, 16, shape) == 0
    fp8 = ModelShape(name="m", num_layers=4, num_kv_heads=2, head_dim=64, num_params=1,
                     dtype_bytes=1)  # fmt: skip
    assert fp8.kv_bytes_per_token == 1024


def test_llama_shapes_match_the_model_cards() -> None:
    assert LLAMA_3_1_8B.num_params == 8_030_261_248
    assert LLAMA_3_1_70B.num_params == 70_553_706_496
    assert LLAMA_3_1_8B.kv_bytes_per_token == 131_072  # 128 KiB
    assert LLAMA_3_1_70B.kv_bytes_per_token == 327_680  # 320 KiB
    tied = llama_num_params(vocab_size=10, hidden_size=4, intermediate_size=8, num_layers=1,
                            num_heads=2, num_kv_heads=1, tie_word_embeddings=True)  # fmt: skip
    # embed 40 + q,o 2*16 + k,v 2*4*2 + mlp 3*32 + norms 8 + final norm 4
    assert tied == 40 + 32 + 16 + 96 + 8 + 4


def test_roofline_derivation_single_gpu() -> None:
    eff = Efficiency()
    model = derive_cost_model(LLAMA_3_1_8B, H100_SXM)
    params = 8_030_261_248
    compute = 2 * params / (989.4e12 * 0.5)
    assert model.per_prefill_token_s == pytest.approx(compute)
    assert model.per_prefill_token_s == pytest.approx(32.47e-6, rel=1e-3)
    assert model.per_decode_seq_s == pytest.approx(compute + 10e-6)
    weights = params * 2 / (3.35e12 * 0.8)  # ~6.0 ms to stream 16 GB
    assert model.per_step_s == pytest.approx(weights + eff.step_overhead_s)
    assert model.per_context_token_s == pytest.approx(131_072 / (3.35e12 * 0.8))
    assert model.transfer_bytes_per_s == pytest.approx(64e9 * 0.8)


def test_roofline_derivation_tensor_parallel() -> None:
    model = derive_cost_model(LLAMA_3_1_70B, H100_SXM, tensor_parallel_size=4)
    params = 70_553_706_496
    compute = 2 * params / (4 * 989.4e12 * 0.5)
    # 2 all-reduces x 80 layers x 8192 x 2 bytes, ring factor 2 * 3/4, at 450 GB/s x 0.7
    comm = 2 * 80 * 8192 * 2 * 1.5 / (450e9 * 0.7)
    assert model.per_prefill_token_s == pytest.approx(compute + comm)
    assert model.per_step_s == pytest.approx(
        params * 2 / 4 / (3.35e12 * 0.8) + 1e-3 + 2 * 80 * 8e-6
    )
    assert model.per_context_token_s == pytest.approx(327_680 / (4 * 3.35e12 * 0.8))
    assert model.transfer_bytes_per_s == pytest.approx(4 * 64e9 * 0.8)


def test_kv_memory_budget_like_vllm() -> None:
    memory = kv_memory_for(LLAMA_3_1_8B, H100_SXM)
    assert memory == pytest.approx(0.9 * 79.11 * GiB - 8_030_261_248 * 2 - 2 * GiB)
    preset = get_preset("llama3.1-8b-h100")
    assert preset.num_gpu_blocks(16) == int(memory // (16 * 131_072))
    assert 25_000 < preset.num_gpu_blocks(16) < 30_000  # ~440k tokens of KV
    with pytest.raises(ValueError, match="does not fit"):
        kv_memory_for(LLAMA_3_1_70B, H100_SXM)  # 141 GB of weights on one GPU


def test_presets_are_found_by_name() -> None:
    assert len(PRESETS) >= 2
    preset = get_preset("Llama3.1-70B-4xH100")  # case-insensitive
    assert preset.tensor_parallel_size == 4
    assert preset.cost_model == derive_cost_model(LLAMA_3_1_70B, H100_SXM, tensor_parallel_size=4)
    described = preset.describe()
    assert described["kv_bytes_per_token"] == 327_680
    assert described["sources"]


def test_the_shipped_calibrated_preset_is_a_preset() -> None:
    """``smollm2-135m-cpu`` is ``kvframe calibrate``'s file for SmolLM2 on CPU, shipped as data."""
    preset = get_preset("smollm2-135m-cpu")
    assert preset.name == "smollm2-135m-cpu"
    # SmolLM2-135M in float32: 30 layers x K and V x 3 KV heads x 64 x 4 bytes.
    assert preset.shape.kv_bytes_per_token == 46_080
    assert preset.cost_model.per_prefill_token_s > 0
    assert "smollm2-135m-cpu" in preset_names()


def test_unknown_preset_lists_presets_and_suggests_the_closest() -> None:
    with pytest.raises(ValueError) as info:
        get_preset("llama-8b-h100")
    assert str(info.value) == (
        "unknown cost-model preset 'llama-8b-h100'; did you mean 'llama3.1-8b-h100'? "
        "(available: llama3.1-70b-4xh100, llama3.1-8b-h100, smollm2-135m-cpu)"
    )
    with pytest.raises(ValueError, match=r"^unknown cost-model preset 'gpt2' \(available: "):
        get_preset("gpt2")
