"""The cost model against a real GPU: step times and copies measured on an NVIDIA H200.

The data (``kvframe/data/gpu/h200-llama3.1-8b/``, CC0, measured by this project,
shipped with kvframe so the tests need nothing beside the repository) are 37
step shapes of a Llama-3.1-8B-shaped bf16 model and the GPU <-> pinned-host copy
bandwidth by chunk size. These tests pin how well the derived ``llama3.1-8b-h200``
preset, the fitted ``llama3.1-8b-h200-measured`` preset and the layout-priced
transfer model reproduce them (issue 33's goals, where met; see the docstrings).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import attrs
import pytest
import structlog

from kvframe.calibrate.copies import fit_transfer, read_copy_table
from kvframe.calibrate.fit import error_summary, fit_step_model, leave_one_out
from kvframe.calibrate.steps import MeasuredStep, predict, read_step_timings
from kvframe.cli import main
from kvframe.domain.costs import CostModel
from kvframe.domain.transfers import chunk_bytes, num_chunks
from kvframe.executors.catalog import CALIBRATED_DIR, get_preset
from kvframe.executors.cost_model_file import load_cost_model_file
from kvframe.executors.presets import LLAMA_3_1_8B
from kvframe.offload.slots.worker import SimTransferHandler

DATA = Path(__file__).resolve().parents[2] / "kvframe" / "data" / "gpu" / "h200-llama3.1-8b"
STEPS = read_step_timings(DATA / "step_times.csv")
COPIES = read_copy_table(DATA / "scatter_copy.csv")


@pytest.fixture(autouse=True)
def _restore_logging():
    yield
    structlog.reset_defaults()


def errors(model: CostModel, steps: list[MeasuredStep]) -> list[float]:
    return [abs(predict(model, s) / s.seconds - 1) for s in steps]


def test_the_data_are_the_37_measured_shapes() -> None:
    kinds = [s.kind for s in STEPS]
    assert (kinds.count("prefill"), kinds.count("decode"), kinds.count("mixed")) == (18, 16, 3)
    after_16k = next(s for s in STEPS if (s.prefill_tokens, s.cached_tokens) == (8192, 16384))
    assert after_16k.quantities() == (8192, 0, 16384, 1, 8192 * 16384 + 8192 * 8193 // 2)
    assert after_16k.seconds == pytest.approx(0.4835, abs=1e-4)


def test_derived_h200_preset_is_within_15_percent_median_35_max() -> None:
    """Datasheet peaks x the stated efficiency factors (which were revised with this
    measurement in view, so this is a consistency check, not an independent one)."""
    found = errors(get_preset("llama3.1-8b-h200").cost_model, STEPS)
    assert statistics.median(found) <= 0.15
    assert max(found) <= 0.35
    # the rows the issue reported: prefill after 16k cached, large decode batches
    model = get_preset("llama3.1-8b-h200").cost_model
    late = next(s for s in STEPS if (s.prefill_tokens, s.cached_tokens) == (8192, 16384))
    assert predict(model, late) / late.seconds == pytest.approx(1.02, abs=0.02)
    big = next(s for s in STEPS if (s.decode_seqs, s.context_tokens_per_seq) == (256, 512))
    assert predict(model, big) / big.seconds == pytest.approx(1.12, abs=0.02)


def test_the_additive_form_misses_what_the_issue_reported() -> None:
    """The old form with H200 peaks: 8k prefill after 16k cached 0.56x, 256 x 512 decodes 1.5x."""
    from kvframe.executors.presets import EFFICIENCY_ADDITIVE, H200_SXM, derive_cost_model

    old = derive_cost_model(LLAMA_3_1_8B, H200_SXM, efficiency=EFFICIENCY_ADDITIVE, form="additive")
    late = next(s for s in STEPS if (s.prefill_tokens, s.cached_tokens) == (8192, 16384))
    big = next(s for s in STEPS if (s.decode_seqs, s.context_tokens_per_seq) == (256, 512))
    assert predict(old, late) / late.seconds == pytest.approx(0.56, abs=0.01)
    assert predict(old, big) / big.seconds == pytest.approx(1.51, abs=0.01)


def test_measured_preset_is_the_fit_of_the_shipped_data() -> None:
    shipped = get_preset("llama3.1-8b-h200-measured")
    fitted = fit_step_model(STEPS, transfer=shipped.cost_model)
    assert fitted == shipped.cost_model
    assert shipped.shape == LLAMA_3_1_8B
    assert shipped.cost_model.form == "overlap"
    assert shipped.cost_model.transfer_layout == "cross-layer"


def test_measured_form_leave_one_out_errors() -> None:
    """Each shape predicted by a fit to the other 36.

    Median 3.3% (issue 33's goal: <= 5%). Max 28% (goal: <= 15%, *not met*): the
    worst shapes are the small prefill chunks (128 tokens after 0 and 4,096 cached;
    +28% / -24%) and the noisiest mixed step (512 + 64 decodes, whose own 7 repeats
    spread 28-38 ms), where the measured script's eager torch path pays fixed costs
    (a masked attention path once a chunk has cached context, eager decode attention
    in a mixed step) that vLLM's kernels do not, and that the form deliberately
    does not model. Decode steps, which dominate a serving trace, are within 8%.
    """
    loo = leave_one_out(STEPS, transfer=get_preset("llama3.1-8b-h200-measured").cost_model)
    summary = error_summary(STEPS, loo)
    assert summary["all"]["median_abs_rel_error"] <= 0.05
    assert summary["all"]["max_abs_rel_error"] <= 0.30
    assert summary["decode"]["max_abs_rel_error"] <= 0.08
    assert summary["prefill"]["median_abs_rel_error"] <= 0.05


def test_overlap_form_beats_additive_form_fitted_to_the_same_steps() -> None:
    base = get_preset("llama3.1-8b-h200").cost_model
    overlap = statistics.median(map(abs, leave_one_out(STEPS, form="overlap", transfer=base)))
    additive = statistics.median(map(abs, leave_one_out(STEPS, form="additive", transfer=base)))
    assert overlap < additive


def test_transfer_model_reproduces_the_copy_table() -> None:
    """Per-chunk memcpy path within 15% at every chunk size, both directions; one
    contiguous copy and cross-layer (2 MiB) chunks within 10%."""
    model = get_preset("llama3.1-8b-h200-measured").cost_model
    assert model.transfer_per_chunk_s == pytest.approx(2.98e-6, rel=0.01)
    assert model.transfer_bytes_per_s == pytest.approx(54.8e9, rel=0.01)
    gib = 1 << 30
    for row in COPIES:
        chunks = gib // row.chunk_bytes
        achieved = gib / model.transfer_time(gib, chunks)
        assert achieved == pytest.approx(row.memcpy_bytes_per_s, rel=0.15), row
        if row.chunk_bytes == 2 << 20:
            assert achieved == pytest.approx(row.memcpy_bytes_per_s, rel=0.10), row
        contiguous = gib / model.transfer_time(gib, 1)
        assert contiguous == pytest.approx(row.contig_bytes_per_s, rel=0.10), row
    fitted = fit_transfer(COPIES)
    assert (fitted.per_chunk_s, fitted.bytes_per_s) == (
        model.transfer_per_chunk_s,
        model.transfer_bytes_per_s,
    )


def test_layouts_decide_the_chunks() -> None:
    block = LLAMA_3_1_8B.kv_bytes_per_block(16)  # 2 MiB
    assert [chunk_bytes(layout, block, 32) for layout in ("cross-layer", "per-layer")] == [
        2 << 20,
        64 << 10,
    ]
    assert chunk_bytes("per-layer-kv-split", block, 32) == 32 << 10
    layouts = ("contiguous", "cross-layer", "per-layer", "per-layer-kv-split")
    assert [num_chunks(layout, 10, 32) for layout in layouts] == [1, 10, 320, 640]
    assert num_chunks("per-layer", 0, 32) == 0


def test_sim_handler_prices_a_store_by_its_layout() -> None:
    """64 cross-layer blocks: 64 copies of 2 MiB; split per layer and K/V: 4,096 of 32 KiB,
    which the H200 moved at 9.4 GB/s instead of 51."""
    model = get_preset("llama3.1-8b-h200-measured").cost_model
    block = LLAMA_3_1_8B.kv_bytes_per_block(16)
    times = {}
    for layout in ("cross-layer", "per-layer-kv-split"):
        handler = SimTransferHandler(attrs.evolve(model, transfer_layout=layout), block, 32)
        handler.start_transfers([], [(i, i) for i in range(64)])
        times[layout] = handler.transfer_time_s
    assert times["cross-layer"] == pytest.approx(64 * (2.98e-6 + block / 54.8e9), rel=0.01)
    assert 64 * block / times["per-layer-kv-split"] == pytest.approx(9.2e9, rel=0.05)


def test_calibrate_from_steps_writes_the_shipped_preset(tmp_path: Path, capsys) -> None:
    out = tmp_path / "h200.json"
    argv = ["calibrate", "--from-steps", str(DATA / "step_times.csv"), "--copies",
            str(DATA / "scatter_copy.csv"), "--layout", "cross-layer",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["leave_one_out"]["median_abs_rel_error"] == pytest.approx(0.0325, abs=1e-3)
    written = load_cost_model_file(out)
    shipped = load_cost_model_file(CALIBRATED_DIR / "llama3.1-8b-h200-measured.json")
    assert written.cost_model == shipped.cost_model
    assert written.kv_memory_bytes == shipped.kv_memory_bytes
    data = json.loads(out.read_text())
    assert data["format"] == "kvframe-cost-model/3"
    assert set(data["calibration"]["leave_one_out"]) == {"all", "prefill", "decode", "mixed"}


def test_calibrate_from_steps_names_a_bad_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "steps.csv"
    bad.write_text(
        "kind,prefill_tokens,cached_tokens,decode_seqs,context_tokens_per_seq,median_s\n"
        "decode,0,0,8,512,0.007\n"
        "decode,0,0,eight,512,0.007\n"
    )
    assert main(["calibrate", "--from-steps", str(bad), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert f"--from-steps: step timings {bad}, line 3: not a number" in err
    missing = tmp_path / "short.csv"
    missing.write_text("kind,prefill_tokens,median_s\nprefill,128,0.01\n")
    assert main(["calibrate", "--from-steps", str(missing), "--out", str(tmp_path / "y.json")]) == 2
    assert (
        f"step timings {missing}: missing column(s) cached_tokens, decode_seqs, "
        "context_tokens_per_seq" in capsys.readouterr().err
    )


def test_older_cost_model_files_load_as_the_additive_form(tmp_path: Path) -> None:
    shipped = json.loads((CALIBRATED_DIR / "smollm2-135m-cpu.json").read_text())
    assert shipped["format"] == "kvframe-cost-model/2"
    assert "form" not in shipped["cost_model"]
    preset = get_preset("smollm2-135m-cpu")
    assert preset.cost_model.form == "additive"
    assert preset.cost_model.transfer_per_chunk_s == 0.0
    shipped["cost_model"]["form"] = 3
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(shipped))
    with pytest.raises(ValueError, match="cost_model field form must be a string, got 3"):
        load_cost_model_file(path)
