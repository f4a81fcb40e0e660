"""kvframe compare on known inputs: table values, JSON/CSV, figures and report.html."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from kvframe.cli import main
from kvframe.compare.load import load_entries
from kvframe.compare.table import table_rows
from kvframe.sweep import CellOutcome, ResultStore, parse_sweep


def _metrics(hits: int, queries: int, blocks: int, ttft: float, jct: float | None) -> dict:
    dist = {"count": 2, "mean": ttft, "p50": ttft, "p90": ttft, "p99": ttft, "max": ttft}
    distributions = {"time_to_first_token_seconds": dist}
    distributions["job_completion_time_seconds"] = None if jct is None else {**dist, "mean": jct}
    return {
        "partial": False,
        "metadata": {},
        "counters": {
            "prefix_cache_hits": hits,
            "prefix_cache_queries": queries,
            "prefix_cache_hit_rate": hits / queries,
            "connector_prefix_cache_hits": 0,
            "num_gpu_blocks": blocks,
            "output_throughput_tokens_per_second": 100.0,
            "num_preemptions": 0,
        },
        "distributions": distributions,
    }


def _row(rid: str, ttft: float) -> tuple:
    """A requests.csv row (CSV_COLUMNS order) with the given TTFT and e2e = TTFT + 1."""
    return (rid, "job-0", 0, True, 0.0, 0.0, ttft, ttft + 1, "stop", 10, 2, 0, 0, 0, 0,
            ttft, 0.5, ttft + 1, 0.0, ttft, 1.0)  # fmt: skip


@pytest.fixture
def known_db(tmp_path: Path) -> Path:
    """Four known cells: two policies x two pool sizes, plus one failed cell."""
    spec = parse_sweep(
        {
            "base": {"workload": "/data/trace.jsonl"},
            "grid": {"gpu_eviction": ["lru", "arc"], "num_gpu_blocks": [100, 200]},
        },
        path=tmp_path / "known.toml",
    )
    hits = {("lru", 100): 10, ("lru", 200): 30, ("arc", 100): 20, ("arc", 200): 40}
    store = ResultStore(spec.db)
    for cell in spec.cells:
        policy, blocks = cell.settings["gpu_eviction"], cell.settings["num_gpu_blocks"]
        ttft = 1.0 if policy == "arc" else 2.0
        jct = 5.0 if policy == "arc" else 8.0
        store.record(
            cell.index,
            cell.settings,
            CellOutcome(
                cell.key,
                "done",
                0.0,
                1.0,
                _metrics(hits[policy, blocks], 100, blocks, ttft, jct),
                (_row("a", ttft), _row("b", 2 * ttft)),
            ),
        )
    failed = {"workload": "/data/trace.jsonl", "gpu_eviction": "broken"}
    store.record(9, failed, CellOutcome("f" * 16, "failed", 0.0, 0.1, error="Boom: it broke"))
    store.close()
    return spec.db


def test_table_shows_the_varying_settings_and_the_stored_values(known_db: Path) -> None:
    headings, rows = table_rows(load_entries([known_db]))
    assert headings[:4] == ["gpu_eviction", "num_gpu_blocks", "status", "hit rate"]
    assert "JCT mean (s)" in headings and "CPU-tier hit tokens" not in headings
    first = dict(zip(headings, rows[0], strict=True))
    assert first["gpu_eviction"] == "lru" and first["num_gpu_blocks"] == "100"
    assert first["hit rate"] == "10.00%" and first["TTFT mean (s)"] == "2"
    hit_rates = [r[headings.index("hit rate")] for r in rows[:4]]
    assert hit_rates == ["10.00%", "30.00%", "20.00%", "40.00%"]
    assert rows[4][:3] == ["broken", "-", "failed"]


def test_json_and_csv_carry_every_metric(known_db: Path, capsys) -> None:
    assert main(["compare", str(known_db), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 5
    assert records[1]["metrics"]["total_hit_rate"] == pytest.approx(0.3)
    assert records[1]["metrics"]["time_to_first_token_seconds.p90"] == 2.0
    assert records[4]["status"] == "failed" and records[4]["error"] == "Boom: it broke"

    assert main(["compare", str(known_db), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["total_hit_rate"] for r in rows[:4]] == ["0.1", "0.3", "0.2", "0.4"]
    assert rows[3]["gpu_eviction"] == "arc" and rows[3]["num_gpu_blocks"] == "200"
    assert rows[4]["status"] == "failed" and rows[4]["total_hit_rate"] == ""


def test_terminal_table_names_failed_runs(known_db: Path, capsys) -> None:
    assert main(["compare", str(known_db)]) == 0
    out = capsys.readouterr().out
    assert "40.00%" in out and "failed ffffffffffffffff: Boom: it broke" in out


def test_plots_and_report_are_written_and_not_empty(known_db: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    assert main(["compare", str(known_db), "--plots", str(out), "--json"]) == 0
    for stem in ("hit_ratio_vs_pool_size", "latency_cdfs", "mean_jct"):
        png = (out / f"{stem}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5000
        svg = (out / f"{stem}.svg").read_text()
        assert "<svg" in svg and "</svg>" in svg
    assert not (out / "throughput_vs_load.png").exists()  # rate_scale does not vary
    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 3
    assert "Hit ratio vs pool size" in report and "40.00%" in report and "Boom: it broke" in report
    # axes say what they show, with units
    svg = (out / "hit_ratio_vs_pool_size.svg").read_text()
    assert "GPU: arc" in svg or "GPU:" in svg


def test_run_directories_compare_like_sweep_cells(chat_trace: Path, tmp_path: Path, capsys) -> None:
    dirs = []
    for blocks in (48, 96):
        out = tmp_path / f"run-{blocks}"
        args = ["run", str(chat_trace), "--no-config", "--num-gpu-blocks", str(blocks)]
        assert main([*args, "--out", str(out), "--no-progress", "--json"]) == 0
        dirs.append(out)
    capsys.readouterr()
    entries = load_entries(dirs)
    headings, rows = table_rows(entries)
    assert headings[0] == "num_gpu_blocks" and [r[0] for r in rows] == ["48", "96"]
    expected = json.loads((dirs[1] / "metrics.json").read_text())["counters"]
    assert entries[1].value("prefix_cache_hits") == expected["prefix_cache_hits"]
    assert len(entries[1].column("time_to_first_token_seconds")) == 40


def test_a_source_that_is_no_run_is_named(tmp_path: Path, capsys) -> None:
    assert main(["compare", str(tmp_path)]) == 2
    assert "no metrics.json" in capsys.readouterr().err


def test_compare_shows_that_runs_differ_in_executor_and_clock(
    chat_trace: Path, tmp_path: Path, capsys
) -> None:
    """As it was, a torch run (measured clock) and a sim run compared as if alike."""
    sim = tmp_path / "sim"
    assert main(["run", str(chat_trace), "--no-config", "--out", str(sim), "--json"]) == 0
    torch_run = tmp_path / "torch"
    torch_run.mkdir()
    metrics = json.loads((sim / "metrics.json").read_text())
    metrics["metadata"]["engine"]["executor"] = "torch:model=smollm2,clock=wall"
    metrics["metadata"]["clock"] = "wall"
    (torch_run / "metrics.json").write_text(json.dumps(metrics))
    capsys.readouterr()
    headings, rows = table_rows(load_entries([sim, torch_run]))
    assert headings[:2] == ["clock", "executor"]
    assert [r[:2] for r in rows] == [["virtual", "sim"], ["wall", "torch:model=smollm2,clock=wall"]]
