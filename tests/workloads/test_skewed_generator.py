"""The skewed generator (``kvframe gen skewed``): documents by a Zipf law, one-use scans."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import structlog

from kvframe.cli import main
from kvframe.workloads import SyntheticPrompt
from kvframe.workloads.skewed import SkewedConfig, generate_skewed


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    assert generate_skewed(num_requests=200, seed=3) == generate_skewed(num_requests=200, seed=3)
    assert generate_skewed(num_requests=200, seed=3) != generate_skewed(num_requests=200, seed=4)


def test_requests_are_documents_or_unshared_scans() -> None:
    specs = generate_skewed(
        num_requests=400, num_documents=8, document_length=64, scan_length=96, seed=1
    )
    scans = [s for s in specs if s.prompt.shared_prefix_id is None]
    documents = [s for s in specs if s.prompt.shared_prefix_id is not None]
    assert all(s.prompt == SyntheticPrompt(96, key=s.request_id) for s in scans)
    assert all(s.prompt.shared_prefix_length == 64 for s in documents)
    assert all(s.prompt.length == 64 + 64 for s in documents)  # + the user part
    assert 0.2 < len(scans) / len(specs) < 0.4  # scan_fraction 0.3
    # Zipf (popularity 1): document 0 is the most requested, about twice document 1.
    counts = Counter(s.prompt.shared_prefix_id for s in documents)
    assert counts.most_common(1)[0][0] == "s1-doc0"
    assert 1.4 < counts["s1-doc0"] / counts["s1-doc1"] < 2.8


def test_the_scan_fraction_changes_only_which_requests_are_scans() -> None:
    few = generate_skewed(num_requests=300, scan_fraction=0.1, seed=2)
    many = generate_skewed(num_requests=300, scan_fraction=0.5, seed=2)
    assert [s.arrival_time for s in few] == [s.arrival_time for s in many]
    assert [s.max_tokens for s in few] == [s.max_tokens for s in many]
    docs_few = {s.request_id: s.prompt for s in few if s.prompt.shared_prefix_id}
    docs_many = {s.request_id: s.prompt for s in many if s.prompt.shared_prefix_id}
    assert set(docs_many) < set(docs_few)
    assert all(docs_few[rid] == prompt for rid, prompt in docs_many.items())


def test_zero_popularity_spreads_requests_evenly() -> None:
    specs = generate_skewed(num_requests=2000, num_documents=4, popularity=0.0, scan_fraction=0)
    counts = Counter(s.prompt.shared_prefix_id for s in specs)
    assert len(counts) == 4 and min(counts.values()) > 400


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scan_fraction": 1.5}, "scan_fraction must be in [0, 1], got 1.5"),
        ({"popularity": -1.0}, "popularity must be >= 0 and finite, got -1.0"),
        ({"num_documents": 0}, "num_documents must be a positive integer, got 0"),
        ({"rate": 0.0}, "rate must be > 0 requests/s and finite (or None: all at once), got 0.0"),
    ],
)
def test_bad_parameters_are_named(options: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        SkewedConfig(**options)
    assert str(caught.value) == message


def test_gen_skewed_writes_a_workload_that_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        argv = ["-q", "gen", "skewed", "--out", "s.jsonl", "--requests", "40", "--seed", "5"]
        assert main([*argv, "--num-documents", "4", "--document-length", "128"]) == 0
        lines = Path("s.jsonl").read_text().splitlines()
        header = json.loads(lines[0])
        assert header["generator"] == "skewed" and header["params"]["num_documents"] == 4
        assert len(lines) == 41
        capsys.readouterr()
        assert main(["-q", "run", "s.jsonl", "--json", "--out", "o"]) == 0
        counters = json.loads(capsys.readouterr().out)["counters"]
        assert counters["num_requests_finished"] == 40 and counters["prefix_cache_hits"] > 0
        assert main(["-q", "gen", "skewed", "--out", "x.jsonl", "--scan-fraction", "2"]) == 2
        assert "scan_fraction must be in [0, 1], got 2.0" in capsys.readouterr().err
    finally:
        structlog.reset_defaults()


def test_a_sweep_cell_generates_it_per_seed() -> None:
    from kvframe.sweep.cell import load_cell_workload

    cell = {"workload": "gen:skewed", "generate": {"num_requests": 30, "num_documents": 4}}
    first, again, other = (load_cell_workload({**cell, "seed": s}) for s in (0, 0, 1))
    assert [r.prompt for r in first] == [r.prompt for r in again]
    assert [r.prompt for r in first] != [r.prompt for r in other]
    assert first.metadata["generator"] == "gen:skewed" and len(first) == 30
