"""SWEEP.toml: expansion into cells, stable hashes, and every bad input named before a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvframe.cli import main
from kvframe.config import ConfigError
from kvframe.sweep.spec import cell_hash, load_sweep, parse_sweep

GRID = """
[sweep]
db = "results.sqlite"
[base]
workload = "chat.jsonl"
limit = 20
[grid]
gpu_eviction = ["none", "arc"]
num_gpu_blocks = [64, 128, 256]
"""


def test_grid_is_the_cartesian_product_in_declaration_order(write_sweep) -> None:
    path = write_sweep(GRID)
    spec = load_sweep(path)
    assert len(spec.cells) == 6
    assert [c.settings.get("gpu_eviction") for c in spec.cells] == [None] * 3 + ["arc"] * 3
    assert [c.settings["num_gpu_blocks"] for c in spec.cells] == [64, 128, 256] * 2
    assert spec.varying == ("gpu_eviction", "num_gpu_blocks")
    assert spec.db == path.parent / "results.sqlite"
    # the workload is resolved against the sweep file's folder
    assert all(c.settings["workload"] == str(path.parent / "chat.jsonl") for c in spec.cells)
    assert len({c.key for c in spec.cells}) == 6


def test_explicit_cells_cross_the_grid_and_keys_do_not_depend_on_order(write_sweep) -> None:
    spec = load_sweep(
        write_sweep(
            """
            [base]
            workload = "chat.jsonl"
            [grid]
            num_gpu_blocks = [64, 128]
            [[cells]]
            scheduler = "fcfs"
            [[cells]]
            scheduling = "priority"
            offload = "cpu:capacity=1MiB"
            """.replace("            ", "")
        )
    )
    assert len(spec.cells) == 4
    assert spec.cells[2].settings["scheduler"] == "priority"
    assert spec.cells[2].settings["offload"] == "cpu:capacity=1MiB"
    reordered = dict(reversed(list(spec.cells[0].settings.items())))
    assert cell_hash(reordered) == spec.cells[0].key


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GRID.replace("[grid]", "[gird]"), "unknown key 'gird'; did you mean 'grid'?"),
        (GRID.replace("num_gpu_blocks", "num_gpu_block"), "did you mean 'num_gpu_blocks'?"),
        (GRID.replace("limit", "limt"), "[base]: unknown key 'limt'; did you mean 'limit'?"),
        (GRID.replace('db = "results.sqlite"', "jobz = 2"), "did you mean 'jobs'?"),
        (GRID.replace("[64, 128, 256]", "[]"), "empty list"),
        (GRID.replace("[64, 128, 256]", "64"), "takes a list"),
        (GRID.replace('"arc"]', '"arc:variant="]'), "grid] key 'gpu_eviction'"),
        (GRID.replace("limit = 20", "limit = 0"), "limit must be an integer >= 1"),
        ("[base]\nworkload = 'chat.jsonl'\n", "the sweep has no cells"),
        ("[grid]\nnum_gpu_blocks = [64]\n", "no workload"),
        ("[grid]\noffload = ['cpu:capacity=']\nworkload = ['x.jsonl']\n", "offload"),
        (
            GRID.replace("[grid]", '[grid]\nvllm = ["0.19.1", "0.3"]'),
            "grid] key 'vllm': unknown vLLM fidelity target '0.3'",
        ),
        (GRID.replace("[grid]", "[grid]\nvllm = [0.33]"), "vllm must be a release as a string"),
        # A typo inside generate: a did-you-mean and the generator's options, no TypeError.
        (
            "[base]\nworkload = 'gen:chat'\n[base.generate]\nnum_requets = 20\n"
            "[grid]\nseed = [0, 1]\n",
            "generate: unknown option 'num_requets' of gen:chat; did you mean 'num_requests'?",
        ),
        (
            "[base]\nworkload = 'gen:agentic'\n[base.generate]\npreset = 'swe-bench'\n"
            "num_jbos = 3\n[grid]\nseed = [0]\n",
            "unknown option 'num_jbos' of gen:agentic; did you mean 'num_jobs'?",
        ),
        (
            "[base]\nworkload = 'gen:skewed'\n[base.generate]\nseed = 4\n[grid]\nseed = [0]\n",
            "'seed' is the cell's own key",
        ),
    ],
)
def test_bad_sweep_files_fail_before_any_cell_runs(write_sweep, text: str, expected: str) -> None:
    path = write_sweep(text)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    assert expected in str(info.value)
    assert not (path.parent / "results.sqlite").exists()


def test_vllm_release_is_a_grid_axis(write_sweep) -> None:
    """Two fidelity targets side by side: the cells differ only in ``vllm``."""
    spec = load_sweep(write_sweep(GRID.replace("[grid]", '[grid]\nvllm = ["0.19.1", "0.33"]')))
    assert len(spec.cells) == 12
    assert set(spec.varying) == {"vllm", "gpu_eviction", "num_gpu_blocks"}
    assert [c.settings["vllm"] for c in spec.cells].count("0.33") == 6


def test_duplicate_cells_are_refused() -> None:
    data = {"base": {"workload": "/x.jsonl"}, "cells": [{"limit": 5}, {"limit": 5}]}
    with pytest.raises(ConfigError, match="same run as cell #1"):
        parse_sweep(data, path=Path("/tmp/s.toml"))


def test_command_line_reports_a_bad_file_with_exit_code_2(write_sweep, capsys) -> None:
    path = write_sweep(GRID.replace("[grid]", "[gird]"))
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'grid'?" in err and str(path) in err
    assert not (path.parent / "results.sqlite").exists()


def test_dry_run_lists_every_cell_and_runs_none(write_sweep, capsys) -> None:
    path = write_sweep(GRID)
    assert main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    spec = load_sweep(path)
    assert all(cell.key in out for cell in spec.cells)
    assert "gpu_eviction" in out and "num_gpu_blocks" in out
    assert not spec.db.exists()


def test_sweep_and_compare_import_no_matplotlib_or_ray() -> None:
    """The CLI registers both subcommands without loading their heavy dependencies.

    (rich is a core dependency, and structlog's console renderer loads it anyway.)
    """
    import json
    import subprocess
    import sys

    code = (
        "import sys, json, kvframe.cli, kvframe.sweep, kvframe.compare; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    assert "kvframe.sweep.runner" in loaded
    assert loaded.isdisjoint({"matplotlib", "ray"}), loaded & {"matplotlib", "ray"}


def test_the_continuum_paper_sweep_is_the_documented_grid() -> None:
    # docs/continuum.md publishes this sweep's table: 2 presets x 3 seeds x
    # (4 swe-bench + 3 bfcl loads) x 2 tiers x 3 schedulers.
    root = Path(__file__).resolve().parents[2]
    spec = load_sweep(root / "examples" / "agentic_continuum" / "paper" / "sweep.toml")
    assert len(spec.cells) == 126
    settings = [cell.settings for cell in spec.cells]
    assert {s["scheduler"] for s in settings} == {"fcfs", "continuum", "continuum:ttl=fixed"}
    assert {s.get("offload", "none") for s in settings} == {"none", "cpu:capacity=64GiB"}
    scales = {}
    for s in settings:
        preset = Path(s["workload"]).stem.rsplit("-s", 1)[0]
        scales.setdefault(preset, set()).add(s["rate_scale"])
    assert scales == {"swe-bench": {1, 2, 4, 8}, "bfcl": {1, 4, 16}}


def test_the_contended_bfcl_sweep_is_the_documented_grid() -> None:
    # docs/continuum.md, "bfcl when the KV pool is contended": 3 seeds x 3 loads
    # x 2 tiers x 3 schedulers, every cell with 16 GiB of KV.
    root = Path(__file__).resolve().parents[2]
    spec = load_sweep(root / "examples" / "agentic_continuum" / "paper" / "sweep_bfcl_16gib.toml")
    assert len(spec.cells) == 54
    settings = [cell.settings for cell in spec.cells]
    assert {s["kv_memory"] for s in settings} == {"16GiB"}
    assert {s.get("offload", "none") for s in settings} == {"none", "cpu:capacity=64GiB"}
    assert {(Path(s["workload"]).stem, s["rate_scale"]) for s in settings} == {
        (f"bfcl-s{seed}", scale) for seed in range(3) for scale in (1, 4, 16)
    }


def test_a_generate_typo_on_the_command_line_is_one_line_not_a_type_error(
    write_sweep, capsys
) -> None:
    path = write_sweep(
        "[base]\nworkload = 'gen:chat'\n[base.generate]\nrat = 2.0\n[grid]\nseed = [0, 1]\n"
    )
    assert main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "generate: unknown option 'rat' of gen:chat; did you mean 'rate'?" in err
    assert "gen:chat options: num_requests, rate," in err and "TypeError" not in err
