"""Calibration: the fit, the step quantities it fits on, the file, the clock, bad input.

No assertion here depends on how fast the machine is: fits are checked on
synthetic timings made from known coefficients, measured grids only for the
shapes they record, and clocks by what they feed the engine.
"""

from __future__ import annotations

import json
import math

import attrs
import pytest

from kvframe.calibrate.replay import Replay, compare, engine_samples, measure_interleaved
from kvframe.calibrate.torch_timing import (
    LINEAR_TERMS,
    TERMS,
    Sample,
    default_clock,
    fit_cost_model,
    measure_grid,
)
from kvframe.cli import main
from kvframe.domain.costs import CostModel, ModelShape, prefill_pairs
from kvframe.engine import Engine
from kvframe.engine.config import EngineConfig
from kvframe.executors.cost_model_file import load_cost_model_file, write_cost_model_file
from kvframe.executors.presets import PRESETS
from kvframe.executors.torch.build import plan_model
from kvframe.executors.torch.executor import StepTiming
from kvframe.executors.torch.options import parse_executor

from .invariance import shared_prefix_workload

TRUTH = CostModel(
    per_step_s=2e-3,
    per_prefill_token_s=5e-5,
    per_decode_seq_s=3e-4,
    per_context_token_s=1e-6,
    per_prefill_seq_s=4e-4,
    per_prefill_pair_s=2e-7,
    transfer_bytes_per_s=1e9,
)


def synthetic(model: CostModel) -> list[Sample]:
    """Steps of every kind the grid times, with the times ``model`` gives them."""
    shapes = []
    for p in (16, 64, 256, 512):
        for c in (0, 128, 1024):
            shapes.append((p, 0, c, 1, prefill_pairs(p, c)))
    for k in (2, 4):
        shapes.append((k * 64, 0, 0, k, k * prefill_pairs(64, 0)))
    for b in (1, 4, 16):
        for n in (32, 256):
            shapes.append((0, b, b * n, 0, 0))
            shapes.append((128, b, b * n, 1, prefill_pairs(128, 0)))
    return [Sample(p, d, c, model.step_time(p, d, c, s, q), s, q) for p, d, c, s, q in shapes]


def write(path, model: CostModel) -> None:
    write_cost_model_file(
        path,
        name="calibrated-test",
        description="test",
        shape=ModelShape(name="t", num_layers=2, num_kv_heads=2, head_dim=16, num_params=10**6),
        device="cpu",
        kv_memory_bytes=2**20,
        cost_model=model,
        calibration={},
    )


# -- the fit ------------------------------------------------------------------


def test_fit_recovers_all_six_coefficients_from_exact_timings():
    fitted, stats = fit_cost_model(synthetic(TRUTH), transfer_bytes_per_s=1e9)
    assert stats["max_abs_rel_error"] < 1e-9
    for term in TERMS:
        assert getattr(fitted, term) == pytest.approx(getattr(TRUTH, term), rel=1e-6), term


def test_linear_form_leaves_the_extra_terms_at_zero_and_fits_worse():
    samples = synthetic(TRUTH)
    linear, stats = fit_cost_model(samples, transfer_bytes_per_s=1e9, terms=LINEAR_TERMS)
    assert linear.per_prefill_seq_s == 0 and linear.per_prefill_pair_s == 0
    # The quadratic prefill cost is real in these timings: four terms cannot absorb it.
    assert stats["median_abs_rel_error"] > 0.01


def test_fit_keeps_every_coefficient_non_negative():
    # Timings that fall with context: unconstrained least squares would give
    # the context term a negative coefficient; the fit drops it instead.
    samples = [
        Sample(p, 0, c, 1e-3 + 1e-5 * p - 1e-8 * c, 1, prefill_pairs(p, c))
        for p in (16, 64, 256)
        for c in (0, 64, 128)
    ]
    fitted, _ = fit_cost_model(samples, transfer_bytes_per_s=1e9)
    assert all(getattr(fitted, term) >= 0 for term in TERMS)
    assert fitted.per_context_token_s == 0


def test_fit_is_unit_free():
    # The same timings in other units (x1000) give the same coefficients x1000.
    samples = synthetic(TRUTH)
    scaled = [attrs.evolve(s, seconds=s.seconds * 1000) for s in samples]
    a, _ = fit_cost_model(samples, transfer_bytes_per_s=1e9)
    b, _ = fit_cost_model(scaled, transfer_bytes_per_s=1e9)
    for term in TERMS:
        assert getattr(b, term) == pytest.approx(1000 * getattr(a, term), rel=1e-6, abs=1e-15)


@pytest.mark.parametrize(
    ("samples", "terms", "message"),
    [
        ([], TERMS, "no timed steps"),
        ([Sample(16, 0, 0, 0.0, 1, 136)], TERMS, "non-positive time"),
        ([Sample(16, 0, 0, 1e-3, 1, 136)], ("per_token_s",), "unknown cost-model term"),
    ],
)
def test_fit_refuses_bad_input(samples, terms, message):
    with pytest.raises(ValueError, match=message):
        fit_cost_model(samples, transfer_bytes_per_s=1e9, terms=terms)


# -- the step quantities ------------------------------------------------------------


def test_prefill_pairs_counts_query_key_pairs_of_causal_attention():
    assert prefill_pairs(1, 0) == 1
    assert prefill_pairs(4, 0) == 1 + 2 + 3 + 4
    assert prefill_pairs(3, 10) == 11 + 12 + 13


def test_additive_derived_presets_ignore_the_fitted_only_terms():
    for preset in PRESETS.values():
        model = preset.cost_model
        if model.form != "additive":
            continue
        assert model.per_prefill_seq_s == 0 and model.per_prefill_pair_s == 0
        assert model.step_time(300, 7, 4000, 2, 10**6) == model.step_time(300, 7, 4000)


def test_sim_and_torch_executors_cost_the_same_step_quantities(tmp_path):
    # On the virtual clock both executors take each step's time from the cost
    # model, so equal durations mean they count prefill requests and pairs alike.
    path = tmp_path / "cm.json"
    write(path, TRUTH)
    settings = dict(cost_model=str(path), num_gpu_blocks=200, max_num_batched_tokens=64)
    specs = shared_prefix_workload(8)
    sim = Engine.from_config(EngineConfig(**settings)).run(specs)
    torch_engine = Engine.from_config(EngineConfig(executor="torch:preset=tiny", **settings))
    real = torch_engine.run(specs)
    steps = torch_engine.executor.steps
    assert any(s.prefill_seqs > 1 for s in steps)  # chunked and batched prefills happened
    duration = real.counters["simulated_duration_seconds"]
    assert duration == pytest.approx(sim.counters["simulated_duration_seconds"], rel=1e-12)
    assert duration > 0


def test_measured_grid_records_each_shape(tmp_path):
    _, options = parse_executor("torch:preset=tiny")
    model = plan_model(options).build(64, 16)
    samples = measure_grid(
        model,
        prefill_tokens=(16, 32),
        prefill_context=(0, 48),
        prefill_chunks=(2,),
        decode_batch=(1, 3),
        decode_context=(20,),
        repeats=1,
    )
    shapes = {(s.prefill, s.decode, s.context, s.prefill_seqs, s.prefill_pairs) for s in samples}
    assert (32, 0, 48, 1, prefill_pairs(32, 48)) in shapes  # a chunk after a prefix
    assert (32, 0, 0, 2, 2 * prefill_pairs(16, 0)) in shapes  # two chunks in one step
    assert (0, 3, 60, 0, 0) in shapes  # a decode batch
    assert (16, 1, 20, 1, prefill_pairs(16, 0)) in shapes  # mixed
    assert all(s.seconds > 0 for s in samples)


def test_measured_grid_refuses_an_empty_axis_or_too_small_a_cache():
    _, options = parse_executor("torch:preset=tiny")
    model = plan_model(options).build(8, 16)
    with pytest.raises(ValueError, match="empty axis decode_batch"):
        measure_grid(model, decode_batch=())
    with pytest.raises(ValueError, match="needs 32 KV blocks"):
        measure_grid(model, prefill_tokens=(512,), prefill_context=(0,), repeats=1)


# -- the clock ----------------------------------------------------------------------


def test_cpu_clock_drives_the_engine_by_measured_cpu_time():
    engine = Engine.from_config(
        EngineConfig(executor="torch:preset=tiny,clock=cpu", num_gpu_blocks=200)
    )
    result = engine.run(shared_prefix_workload(4, gap=0.0))
    steps = engine.executor.steps
    assert all(s.cpu_s > 0 for s in steps)
    assert result.counters["simulated_duration_seconds"] == pytest.approx(
        sum(s.cpu_s for s in steps), rel=1e-9
    )
    assert result.counters["torch_cpu_step_time_s_total"] == sum(s.cpu_s for s in steps)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("torch:clock=cpu,threads=2", "needs threads=1"),
        ("torch:clock=cpu,threads=0", "needs threads=1"),
        ("torch:clock=cpu,device=cuda", "on cuda use clock=wall"),
        ("torch:clock=cycles", "clock must be one of virtual, wall, cpu"),
    ],
)
def test_cpu_clock_is_refused_where_cpu_time_is_not_the_step_time(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_executor(spec)


def test_default_clock_is_cpu_only_for_one_thread_on_cpu():
    assert default_clock("cpu", 1) == "cpu"
    assert default_clock("cpu", 4) == "wall"
    assert default_clock("cuda", 1) == "wall"


# -- the file -------------------------------------------------------------------------


def test_cost_model_file_round_trips_every_coefficient(tmp_path):
    path = tmp_path / "cm.json"
    write(path, TRUTH)
    assert json.loads(path.read_text())["format"] == "kvframe-cost-model/3"
    assert load_cost_model_file(path).cost_model == TRUTH
    engine = Engine.from_config(EngineConfig(cost_model=str(path), num_gpu_blocks=64))
    assert engine.preset.cost_model == TRUTH
    assert engine.run(shared_prefix_workload(4)).counters["simulated_duration_seconds"] > 0


def test_a_format_1_file_still_loads_without_the_new_terms(tmp_path):
    path = tmp_path / "old.json"
    write(path, TRUTH)
    data = json.loads(path.read_text())
    data["format"] = "kvframe-cost-model/1"
    del data["cost_model"]["per_prefill_seq_s"], data["cost_model"]["per_prefill_pair_s"]
    path.write_text(json.dumps(data))
    loaded = load_cost_model_file(path).cost_model
    assert loaded == attrs.evolve(TRUTH, per_prefill_seq_s=0.0, per_prefill_pair_s=0.0)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(format="kvframe-cost-model/9"), "'format' must be one of"),
        (lambda d: d.pop("model"), "missing field 'model'"),
        (lambda d: d["cost_model"].update(per_token_s=1.0), "unknown cost_model field"),
        (lambda d: d["cost_model"].update(per_step_s="fast"), "per_step_s must be a number"),
        (lambda d: d["cost_model"].update(per_step_s=-1.0), "per_step_s must be a finite"),
        (lambda d: d.update(cost_model=[1, 2]), "must be an object of coefficients"),
    ],
)
def test_a_malformed_cost_model_file_names_the_problem(tmp_path, edit, message):
    path = tmp_path / "bad.json"
    write(path, TRUTH)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message) as caught:
        load_cost_model_file(path)
    assert str(path) in str(caught.value)


def test_a_malformed_cost_model_file_is_a_usage_error_of_run(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    assert main(["run", "mooncake:conversation", "--limit", "2", "--cost-model", str(path)]) == 2
    assert "not readable JSON" in capsys.readouterr().err


# -- the command -------------------------------------------------------------------------


def test_calibrate_refuses_a_non_torch_executor(capsys):
    assert main(["calibrate", "--executor", "sim"]) == 2
    assert "calibrate times the torch executor" in capsys.readouterr().err


def test_calibrate_refuses_the_cpu_clock_with_several_threads(capsys):
    assert main(["calibrate", "--executor", "torch:threads=2", "--clock", "cpu"]) == 2
    assert "needs threads=1" in capsys.readouterr().err


@pytest.mark.slow  # times a whole calibration grid of the tiny torch model: 47 s on 2 cores
def test_calibrate_writes_a_file_that_run_accepts(tmp_path, capsys):
    out = tmp_path / "cm.json"
    argv = ["calibrate", "--executor", "torch:preset=tiny", "--repeats", "1", "--out", str(out)]
    assert main([*argv, "--check", "--runs", "2"]) == 0
    data = json.loads(out.read_text())
    assert data["calibration"]["clock"] == "cpu"
    assert data["calibration"]["form"] == "extended"
    assert len(data["calibration"]["samples"]) == data["calibration"]["fit"]["num_samples"]
    held_out = data["calibration"]["held_out"]
    assert held_out["torch_runs"] == 2 and held_out["num_steps"] > 0
    for key in ("step_median_abs_rel_error", "duration_rel_error", "mean_ttft_rel_error"):
        assert math.isfinite(held_out[key]), key
    capsys.readouterr()
    run = ["run", "mooncake:conversation", "--limit", "5", "--cost-model", str(out)]
    assert main([*run, "--out", str(tmp_path / "run")]) == 0  # not runs/ in the checkout


# -- replays ---------------------------------------------------------------------------


def fake_replay(times, shapes=None):
    """A replay whose steps have the given CPU times (shapes: one prefill chunk each)."""
    shapes = shapes or [(16 * (i + 1), 0, 0, 1, prefill_pairs(16 * (i + 1), 0)) for i in range(3)]
    steps = [
        StepTiming(p, d, c, 0.0, 2 * t, prefill_seqs=s, prefill_pairs=q, cpu_s=t)
        for (p, d, c, s, q), t in zip(shapes, times, strict=True)
    ]
    return Replay(sum(times), None, steps, 64)


def test_training_steps_are_the_per_step_median_over_replays():
    replays = [
        fake_replay([1.0, 5.0, 2.0]),
        fake_replay([3.0, 4.0, 9.0]),
        fake_replay([2.0, 6.0, 1.0]),
    ]
    samples = engine_samples(replays, "cpu")
    assert [s.seconds for s in samples] == [2.0, 5.0, 2.0]
    assert [s.prefill for s in samples] == [16, 32, 48]
    assert [s.seconds for s in engine_samples(replays[:1], "wall")] == [2.0, 10.0, 4.0]


def test_replays_that_formed_other_steps_are_all_kept():
    other = fake_replay([1.0, 1.0, 1.0], shapes=[(0, 2, 64, 0, 0)] * 3)
    samples = engine_samples([fake_replay([1.0, 2.0, 3.0]), other], "cpu")
    assert len(samples) == 6


def test_compare_refuses_no_replays():
    with pytest.raises(ValueError, match="no torch replays"):
        compare("unused.json", [], [], clock="cpu")


def test_measurement_rounds_refuse_zero_runs():
    with pytest.raises(ValueError, match="runs and repeats must be >= 1"):
        measure_interleaved(None, [], "torch:preset=tiny", [], None, runs=0, repeats=5, clock="cpu")


@pytest.mark.parametrize(
    ("executor", "name"),
    [
        ("torch:preset=small", "small"),
        ("torch:layers=16,hidden=2048", "custom"),
        ("torch:preset=small,heads=16", "custom"),
        ("torch:checkpoint=/ckpt", "checkpoint"),
        ("torch:model=/models/llama-1b.gguf", "llama-1b"),
    ],
)
def test_calibrated_preset_is_named_after_what_was_timed(executor, name):
    from kvframe.cli.cmd_calibrate import _model_name

    assert _model_name(parse_executor(executor)[1]) == name
