"""Files that are not what their name says: every error names the file (and line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvframe.workloads import WorkloadError, load_workload

LINE = '{"timestamp": 0, "input_length": 20, "output_length": 4, "hash_ids": [1]}\n'


def test_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    with pytest.raises(WorkloadError, match=r"traces: is a directory, not a workload file"):
        load_workload(tmp_path / "traces")


def test_a_gz_file_that_is_not_gzip_is_named(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_text(LINE)
    with pytest.raises(WorkloadError, match=r"t\.jsonl\.gz: not a gzip file"):
        load_workload(path)


def test_a_truncated_line_says_where_it_ends_not_column_1(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    cut = LINE[:30]
    path.write_text(LINE + cut + "\n")
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    assert str(caught.value).startswith(f"{path}:2: invalid JSON: ")
    assert "the line ends at column 30" in str(caught.value)


def test_bad_json_inside_a_line_points_at_its_column(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0,, "input_length": 20}\n')
    with pytest.raises(WorkloadError, match=r"t\.jsonl:1: invalid JSON: .* at column 17"):
        load_workload(path)
