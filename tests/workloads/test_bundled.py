"""Bundled workloads: names, reading straight from the packaged ``.gz``, errors, listing."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from kvframe.cli import main
from kvframe.workloads import BUNDLED_WORKLOADS, WorkloadNotFoundError, load_workload

DATA = Path(__file__).resolve().parents[2] / "kvframe" / "data" / "mooncake"


@pytest.mark.parametrize("name", sorted(BUNDLED_WORKLOADS))
def test_a_bundled_name_reads_the_same_requests_as_the_decompressed_file(
    name: str, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.jsonl"
    with gzip.open(BUNDLED_WORKLOADS[name].traversable(), "rb") as f:
        plain.write_bytes(f.read())

    bundled = load_workload(name, limit=150)
    from_file = load_workload(plain, limit=150)

    assert bundled.requests == from_file.requests
    assert bundled.format == "mooncake"
    assert bundled.source == name
    assert bundled.name == name.replace(":", "-")


def test_every_packaged_trace_is_registered_under_a_name() -> None:
    shipped = {p.name for p in DATA.glob("*.jsonl.gz")}
    registered = {w.resource.rpartition("/")[2] for w in BUNDLED_WORKLOADS.values()}
    assert shipped == registered
    assert (DATA / "LICENSE-APACHE").is_file()


def test_a_real_file_wins_over_a_bundled_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    line = {"timestamp": 5, "input_length": 3, "output_length": 2, "hash_ids": [9]}
    Path("mooncake:conversation").write_text(json.dumps(line) + "\n")

    workload = load_workload("mooncake:conversation")

    assert len(workload) == 1
    assert workload.source == Path("mooncake:conversation")


@pytest.mark.parametrize(
    ("typed", "suggested"),
    [
        ("mooncake:conversaton", "mooncake:conversation"),
        ("mooncake:synthetc", "mooncake:synthetic"),
        ("conversation", "mooncake:conversation"),
        ("/no/such/dir/synthetic_trace.jsonl", "mooncake:synthetic"),
    ],
)
def test_a_near_miss_gets_a_did_you_mean(typed: str, suggested: str) -> None:
    with pytest.raises(WorkloadNotFoundError) as info:
        load_workload(typed)
    message = str(info.value)
    assert message.startswith(f"no such trace file or bundled workload: {typed}")
    assert f"did you mean {suggested}?" in message
    assert isinstance(info.value, FileNotFoundError)  # what path-only callers catch


def test_an_unrelated_name_lists_the_bundled_ones() -> None:
    with pytest.raises(WorkloadNotFoundError, match="bundled: mooncake:conversation, "):
        load_workload("nothing-like-it.jsonl")


def test_run_reports_a_mistyped_name_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "mooncake:conversaton", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "kvframe run: error: no such trace file or bundled workload: mooncake:conversaton "
        "(did you mean mooncake:conversation?)"
    )


def test_workloads_lists_names_sizes_and_request_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["workloads", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["workloads"]
    assert [r["name"] for r in rows] == list(BUNDLED_WORKLOADS)
    for row in rows:
        path = BUNDLED_WORKLOADS[row["name"]].traversable()
        with gzip.open(path, "rt") as f:
            assert row["requests"] == sum(1 for line in f if line.strip())
        assert row["size_bytes"] == os.path.getsize(path)
        assert row["description"]

    assert main(["workloads"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["name", "requests", "size", "description"]
    assert set(table[1]) == {"-"}
    assert [line.split()[0] for line in table[2:]] == list(BUNDLED_WORKLOADS)
    counts = {r["name"]: f"{r['requests']:,}" for r in rows}
    assert all(line.split()[1] == counts[line.split()[0]] for line in table[2:])
