"""The Mooncake trace reader: fields, token expansion, errors, laziness, ordering."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvframe.workloads import MooncakePrompt, WorkloadError, load_workload
from kvframe.workloads.mooncake_tokens import expand_hash_ids

REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_CONVERSATION = REPO_ROOT / "kvframe" / "data" / "mooncake" / "conversation.jsonl.gz"

# The first lines of conversation_trace.jsonl (plus one later arrival), copied
# so that these tests read plain text they can see.
LINES = [
    '{"timestamp": 0, "input_length": 6758, "output_length": 500, '
    '"hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}',
    '{"timestamp": 0, "input_length": 7322, "output_length": 490, '
    '"hash_ids": [0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]}',
    '{"timestamp": 0, "input_length": 2290, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]}',
    '{"timestamp": 3000, "input_length": 6324, "output_length": 548, '
    '"hash_ids": [0, 415, 416, 417, 418, 419, 420, 421, 422, 423, 424, 425, 426]}',
]


def write(tmp_path: Path, lines: list[str], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fields_map_to_request_specs(tmp_path: Path) -> None:
    workload = load_workload(write(tmp_path, LINES))

    assert workload.format == "mooncake"
    assert workload.name == "trace"
    assert len(workload) == 4
    first, *_, last = workload
    assert first.request_id == "line-1"
    assert first.num_prompt_tokens == 6758
    assert first.max_tokens == 500
    assert first.arrival_time == 0.0
    assert last.arrival_time == 3.0  # milliseconds -> seconds
    assert last.request_id == "line-4"
    assert isinstance(first.prompt, MooncakePrompt)
    assert first.is_last_turn and first.job_id is None and first.priority == 0


def test_prompt_tokens_come_from_expand_hash_ids(tmp_path: Path) -> None:
    workload = load_workload(write(tmp_path, LINES))
    first, second = workload[0], workload[1]

    tokens = first.prompt_token_ids
    assert tokens == expand_hash_ids(list(range(14)), 6758, 512)
    assert len(tokens) == 6758
    # Hash id 0 is shared: the first 512 tokens agree, the next block does not.
    other = second.prompt_token_ids
    assert tokens[:512] == other[:512]
    assert tokens[512:1024] != other[512:1024]


def test_surplus_hash_ids_are_dropped(tmp_path: Path) -> None:
    line = '{"timestamp": 5, "input_length": 600, "output_length": 1, "hash_ids": [7, 8, 9]}'
    (spec,) = load_workload(write(tmp_path, [line]))
    assert spec.prompt.hash_ids == (7, 8)
    assert len(spec.prompt_token_ids) == 600


def test_a_slice_of_the_bundled_conversation_trace() -> None:
    with gzip.open(BUNDLED_CONVERSATION, "rt") as f:
        expected = [json.loads(next(f)) for _ in range(300)]

    workload = load_workload("mooncake:conversation", limit=300)

    assert len(workload) == 300
    assert workload.name == "mooncake-conversation"
    assert workload.source == "mooncake:conversation"
    assert [s.num_prompt_tokens for s in workload] == [e["input_length"] for e in expected]
    assert [s.max_tokens for s in workload] == [e["output_length"] for e in expected]
    assert [s.arrival_time for s in workload] == [e["timestamp"] / 1000 for e in expected]
    spec = workload[299]
    assert spec.prompt_token_ids == expand_hash_ids(
        expected[299]["hash_ids"], expected[299]["input_length"]
    )


def test_limit_stops_reading(tmp_path: Path) -> None:
    # Line 3 is broken: with limit=2 the reader never gets there.
    path = write(tmp_path, [LINES[0], LINES[1], "{not json", LINES[3]])
    assert len(load_workload(path, limit=2)) == 2
    with pytest.raises(WorkloadError):
        load_workload(path, limit=3)


def test_gzip_files_are_read(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(LINES) + "\n")
    workload = load_workload(path)
    assert len(workload) == 4
    assert workload.name == "trace"


def test_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, [LINES[0], "", "   ", LINES[1]])
    assert [s.request_id for s in load_workload(path)] == ["line-1", "line-4"]


# -- malformed input --------------------------------------------------------------


def good(**changes: object) -> str:
    record: dict[str, object] = {
        "timestamp": 10,
        "input_length": 1000,
        "output_length": 20,
        "hash_ids": [1, 2],
    }
    for key, value in changes.items():
        if value is ...:
            del record[key]
        else:
            record[key] = value
    return json.dumps(record)


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"timestamp": 1, "input_length": ', "trace.jsonl:2: invalid JSON: Expecting value"),
        ("[1, 2, 3]", "trace.jsonl:2: expected a JSON object, got [1, 2, 3]"),
        (good(input_length=...), "trace.jsonl:2: field 'input_length': required field is missing"),
        (
            good(input_length="abc"),
            "trace.jsonl:2: field 'input_length': expected a positive integer, got \"abc\"",
        ),
        (
            good(input_length=-5),
            "trace.jsonl:2: field 'input_length': expected a positive integer, got -5",
        ),
        (
            good(output_length=True),
            "trace.jsonl:2: field 'output_length': expected a positive integer, got true",
        ),
        (
            good(output_length=2.5),
            "trace.jsonl:2: field 'output_length': expected a positive integer, got 2.5",
        ),
        (
            good(timestamp=-1),
            "trace.jsonl:2: field 'timestamp': expected a non-negative number, got -1",
        ),
        (
            good(hash_ids="1,2"),
            "trace.jsonl:2: field 'hash_ids': expected a list of integers, got \"1,2\"",
        ),
        (
            good(hash_ids=[1, -2]),
            "trace.jsonl:2: field 'hash_ids[1]': expected a non-negative integer, got -2",
        ),
        (
            good(hash_ids=[1, "x"]),
            "trace.jsonl:2: field 'hash_ids[1]': expected a non-negative integer, got \"x\"",
        ),
        (
            good(input_length=1500, hash_ids=[1, 2]),
            "trace.jsonl:2: field 'hash_ids': 2 hash ids cover at most 1024 tokens, fewer "
            "than input_length 1500 (one id per 512 tokens)",
        ),
        (
            good(hash_ids=[1, 2**31]),
            "trace.jsonl:2: field 'hash_ids': hash id 2147483648 is too large",
        ),
    ],
)
def test_malformed_lines_name_file_line_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_line: str, message: str
) -> None:
    write(tmp_path, [good(), bad_line, good()])
    monkeypatch.chdir(tmp_path)  # errors name the file as the user did
    with pytest.raises(WorkloadError) as info:
        load_workload("trace.jsonl")
    assert str(info.value).startswith(message)
    assert info.value.line == 2
    assert info.value.path == "trace.jsonl"
    assert isinstance(info.value, ValueError)


def test_integral_floats_are_accepted(tmp_path: Path) -> None:
    (spec,) = load_workload(write(tmp_path, [good(input_length=1000.0, timestamp=1.5)]))
    assert spec.num_prompt_tokens == 1000
    assert spec.arrival_time == 0.0015


def test_skip_bad_lines_counts_and_keeps_the_first_errors(tmp_path: Path) -> None:
    lines = [good(), "{oops", good(input_length="x"), good(timestamp=20), "[]"]
    workload = load_workload(write(tmp_path, lines), skip_bad_lines=True)

    assert [s.request_id for s in workload] == ["line-1", "line-4"]
    assert workload.num_skipped_lines == 3
    assert [e.line for e in workload.errors] == [2, 3, 5]
    assert workload.errors[1].field == "input_length"


def test_skipped_error_list_is_bounded(tmp_path: Path) -> None:
    workload = load_workload(write(tmp_path, [good()] + ["{"] * 25), skip_bad_lines=True)
    assert workload.num_skipped_lines == 25
    assert len(workload.errors) == 10


def test_a_file_with_no_requests_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no requests in the file"):
        load_workload(write(tmp_path, ["", ""]))
    with pytest.raises(WorkloadError, match=r"no requests .*2 bad lines skipped"):
        load_workload(write(tmp_path, ["{", "{"]), skip_bad_lines=True)


# -- arrival order --------------------------------------------------------------------


def test_backward_arrivals_are_an_error_by_default(tmp_path: Path) -> None:
    path = write(tmp_path, [good(timestamp=5000), good(timestamp=7000), good(timestamp=6000)])
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert str(info.value) == (
        f"{path}:3: field 'timestamp': arrival 6 s is earlier than 7 s on line 2; arrivals "
        "must not decrease (kvframe run --sort-arrivals, sort_arrivals = true in a sweep, "
        "or load_workload(sort_arrivals=True) sorts them stably)"
    )


def test_the_hint_for_backward_arrivals_names_a_flag_that_exists(tmp_path: Path, capsys) -> None:
    from kvframe.cli import main

    path = write(tmp_path, [good(timestamp=5000), good(timestamp=7000), good(timestamp=6000)])
    out = tmp_path / "o"
    assert main(["-q", "run", str(path), "--out", str(out)]) == 2
    assert "--sort-arrivals" in capsys.readouterr().err
    assert main(["-q", "run", str(path), "--sort-arrivals", "--out", str(out)]) == 0


def test_skip_bad_lines_does_not_hide_backward_arrivals(tmp_path: Path) -> None:
    path = write(tmp_path, [good(timestamp=5000), good(timestamp=1000)])
    with pytest.raises(WorkloadError, match="earlier than"):
        load_workload(path, skip_bad_lines=True)


def test_sort_arrivals_sorts_stably_then_limits(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [good(timestamp=3000), good(timestamp=1000), good(timestamp=3000), good(timestamp=2000)],
    )
    workload = load_workload(path, sort_arrivals=True)
    assert [s.request_id for s in workload] == ["line-2", "line-4", "line-1", "line-3"]
    limited = load_workload(path, sort_arrivals=True, limit=2)
    assert [s.request_id for s in limited] == ["line-2", "line-4"]


def test_format_argument_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format must be one of"):
        load_workload(write(tmp_path, LINES), format="csv")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit must be"):
        load_workload(write(tmp_path, LINES), limit=0)


def test_a_line_that_is_not_utf8_is_named_and_skip_bad_lines_skips_it(tmp_path: Path) -> None:
    """As it was, a non-UTF-8 byte failed the whole file without a line, even when skipping."""
    path = tmp_path / "trace.jsonl"
    bad = b'{"timestamp": 2000, "x": "caf\xe9"}'  # latin-1, column 30
    path.write_bytes(
        b"\n".join([good(timestamp=1000).encode(), bad, good(timestamp=3000).encode()])
    )
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert str(info.value) == f"{path}:2: not UTF-8 text (byte 0xe9 at column 30)"
    workload = load_workload(path, skip_bad_lines=True)
    assert len(workload) == 2 and workload.num_skipped_lines == 1


def test_a_compressed_file_without_gz_suffix_says_so_on_its_first_line(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "trace.jsonl"
    path.write_bytes(gzip.compress((good() + "\n").encode()))
    with pytest.raises(WorkloadError, match=r":1: not UTF-8 text .*compressed without a .gz"):
        load_workload(path)
