"""The sim cost model and its presets, on hand-computed cases."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.executors import CostModel, ModelShape, get_preset, num_gpu_blocks_for
from kvframe.executors.catalog import preset_names
from kvframe.executors.presets import (
    EFFICIENCY_ADDITIVE,
    H100_SXM,
    H200_SXM,
    LLAMA_3_1_8B,
    LLAMA_3_1_70B,
    PRESETS,
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


def test_additive_derivation_single_gpu_is_the_old_one() -> None:
    """The ``additive`` form with :data:`EFFICIENCY_ADDITIVE`: every result before the
    H200 measurement (``llama3.1-8b-h100-additive`` reproduces them)."""
    eff = EFFICIENCY_ADDITIVE
    model = derive_cost_model(LLAMA_3_1_8B, H100_SXM, efficiency=eff, form="additive")
    params = 8_030_261_248
    compute = 2 * params / (989.4e12 * 0.5)
    assert model.form == "additive"
    assert model.per_prefill_token_s == pytest.approx(compute)
    assert model.per_prefill_token_s == pytest.approx(32.47e-6, rel=1e-3)
    assert model.per_decode_seq_s == pytest.approx(compute + 10e-6)
    weights = params * 2 / (3.35e12 * 0.8)  # ~6.0 ms to stream 16 GB
    assert model.per_step_s == pytest.approx(weights + eff.step_overhead_s)
    assert model.per_context_token_s == pytest.approx(131_072 / (3.35e12 * 0.8))
    assert model.transfer_bytes_per_s == pytest.approx(64e9 * 0.8)
    assert (model.per_prefill_pair_s, model.weight_read_s, model.transfer_per_chunk_s) == (0, 0, 0)
    assert get_preset("llama3.1-8b-h100-additive").cost_model == model


def test_overlap_derivation_single_gpu() -> None:
    model = derive_cost_model(LLAMA_3_1_8B, H200_SXM)
    params = 8_030_261_248
    assert model.form == "overlap"
    assert model.per_prefill_token_s == pytest.approx(2 * params / (989.4e12 * 0.7))
    assert model.weight_read_s == pytest.approx(2 * params / (4.8e12 * 0.85))  # 3.9 ms
    # QK^T and PV: 4 x hidden 4096 x 32 layers FLOPs per query-key pair, at 30% of peak
    assert model.per_prefill_pair_s == pytest.approx(4 * 4096 * 32 / (989.4e12 * 0.3))
    assert model.per_context_token_s == pytest.approx(131_072 / (4.8e12 * 0.85))
    assert (model.per_step_s, model.per_prefill_step_s, model.per_decode_seq_s) == (
        2.5e-3,
        6e-3,
        10e-6,
    )
    assert model.per_prefill_seq_s == 0
    assert model.transfer_bytes_per_s == pytest.approx(64e9 * 0.85)
    assert model.transfer_per_chunk_s == 3e-6
    assert model.transfer_layout == "cross-layer"


def test_overlap_step_time_takes_the_max_of_each_kind() -> None:
    model = CostModel(
        form="overlap",
        per_step_s=1.0,
        per_prefill_step_s=10.0,
        per_prefill_seq_s=1000.0,
        per_decode_seq_s=100.0,
        per_prefill_token_s=0.5,
        weight_read_s=8.0,
        per_prefill_pair_s=0.25,
        per_context_token_s=0.125,
        transfer_bytes_per_s=1.0,
    )
    # decode 4, context 32: 1 + 400 + max(0.5 x 4, 8) + max(0, 0.125 x 32) = 1 + 400 + 8 + 4
    assert model.step_time(0, 4, 32) == 413.0
    # prefill 100 (1 chunk, 400 pairs), context 16: 1 + 10 + 1000 + max(50, 8) + max(100, 2)
    assert model.step_time(100, 0, 16, 1, 400) == 1161.0
    # two chunks: the per-step prefill cost once, the per-chunk one twice
    assert model.step_time(100, 0, 16, 2, 400) == 2161.0
    # mixed: the decode tokens go through the same linear layers as the prefill tokens
    assert model.step_time(100, 4, 48, 1, 400) == 1 + 10 + 1000 + 400 + 52 + 100
    assert model.step_time(0, 0, 100) == 0.0


def test_transfer_time_prices_each_copy() -> None:
    model = simple_model(transfer_per_chunk_s=3e-6, transfer_layout="per-layer")
    assert model.transfer_time(2_000_000, 10) == pytest.approx(2e-3 + 30e-6)
    assert model.transfer_time(0, 10) == 0.0
    with pytest.raises(ValueError, match="unknown transfer layout 'sideways'; known: "):
        simple_model(transfer_layout="sideways")
    with pytest.raises(ValueError, match="form must be one of additive, overlap, got 'sum'"):
        simple_model(form="sum")


def test_roofline_derivation_tensor_parallel() -> None:
    model = derive_cost_model(
        LLAMA_3_1_70B,
        H100_SXM,
        tensor_parallel_size=4,
        efficiency=EFFICIENCY_ADDITIVE,
        form="additive",
    )
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
    overlap = derive_cost_model(LLAMA_3_1_70B, H100_SXM, tensor_parallel_size=4)
    assert overlap.per_prefill_token_s == pytest.approx(2 * params / (4 * 989.4e12 * 0.7) + comm)
    assert overlap.weight_read_s == pytest.approx(params * 2 / 4 / (3.35e12 * 0.85))
    assert overlap.per_step_s == pytest.approx(2.5e-3 + 2 * 80 * 8e-6)


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
        "(available: gemma-3-27b-h100, gpt-oss-120b-h100, gpt-oss-20b-h100, "
        "llama-4-scout-4xh100, llama3.1-70b-4xh100, llama3.1-70b-4xh100-additive, "
        "llama3.1-8b-h100, llama3.1-8b-h100-additive, llama3.1-8b-h200, "
        "llama3.1-8b-h200-measured, qwen3-next-80b-a3b-2xh200, smollm2-135m-cpu)"
    )
    with pytest.raises(ValueError, match=r"^unknown cost-model preset 'bert' \(available: "):
        get_preset("bert")


# -- the overlap form: invariants, and the fit against a known truth -------------------

_coef = st.floats(min_value=0.0, max_value=1e-2, allow_nan=False, allow_infinity=False)
_count = st.integers(min_value=0, max_value=100_000)


@settings(max_examples=60, deadline=None)
@given(
    coefficients=st.lists(_coef, min_size=7, max_size=7),
    quantities=st.lists(_count, min_size=5, max_size=5),
    which=st.integers(min_value=0, max_value=4),
    more=st.integers(min_value=1, max_value=1000),
)
def test_overlap_step_time_grows_with_every_quantity_and_never_exceeds_the_sum(
    coefficients: list[float], quantities: list[int], which: int, more: int
) -> None:
    """More work never costs less, and overlapping never costs more than adding."""
    step, seq, dec, tok, weights, pair, ctx = coefficients
    model = CostModel(form="overlap", per_step_s=step, per_prefill_step_s=seq,
                      per_decode_seq_s=dec, per_prefill_token_s=tok, weight_read_s=weights,
                      per_prefill_pair_s=pair, per_context_token_s=ctx,
                      transfer_bytes_per_s=1.0)  # fmt: skip
    prefill, decode, context, seqs, pairs = quantities
    if prefill == 0 and decode == 0:
        decode = 1
    before = model.step_time(prefill, decode, context, seqs, pairs)
    grown = list((prefill, decode, context, seqs, pairs))
    grown[which] += more
    assert model.step_time(*grown) >= before
    added = (step + seq * min(seqs, 1) + dec * decode + tok * (prefill + decode) + weights
             + pair * pairs + ctx * context)  # fmt: skip
    assert before <= added * (1 + 1e-12)


def test_the_overlap_fit_recovers_a_known_model_from_its_own_step_times() -> None:
    """A differential check of the fit: step times made by a known overlap model on the
    measured shapes (both sides of both maxes occur) give back its coefficients."""
    from kvframe.calibrate.fit import fit_step_model
    from kvframe.calibrate.steps import MeasuredStep, predict

    truth = attrs.evolve(get_preset("llama3.1-8b-h200").cost_model, per_step_s=1.5e-3)
    shapes = [(p, c, 0, 0) for p in (128, 512, 2048, 8192) for c in (0, 4096, 16384)]
    shapes += [(0, 0, b, ctx) for b in (1, 8, 64, 256) for ctx in (512, 8192)]
    shapes += [(512, 0, 64, 2048), (2048, 0, 128, 2048)]
    steps = []
    for p, c, b, ctx in shapes:
        shape = MeasuredStep(kind="x", prefill_tokens=p, cached_tokens=c, decode_seqs=b,
                           context_tokens_per_seq=ctx, seconds=1.0)  # fmt: skip
        steps.append(attrs.evolve(shape, seconds=predict(truth, shape)))
    fitted = fit_step_model(steps, transfer=truth)
    for field in ("per_step_s", "per_prefill_step_s", "per_decode_seq_s", "per_prefill_token_s",
                  "weight_read_s", "per_prefill_pair_s", "per_context_token_s"):  # fmt: skip
        assert getattr(fitted, field) == pytest.approx(getattr(truth, field), rel=1e-6), field
