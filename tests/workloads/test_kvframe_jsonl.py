"""The kvframe JSONL format: fields, defaults, errors, agentic fields, round trip."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from kvframe.workloads import (
    RequestSpec,
    SyntheticPrompt,
    TokenPrompt,
    WorkloadError,
    load_workload,
    write_jsonl,
)
from kvframe.workloads.chat import ChatConfig, generate_chat, write_chat_jsonl
from kvframe.workloads.spec import SYNTHETIC_VOCAB_SIZE


def write(tmp_path: Path, records: list[object], name: str = "w.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def load_one(tmp_path: Path, record: dict[str, object]) -> RequestSpec:
    (spec,) = load_workload(write(tmp_path, [record]), format="kvframe")
    return spec


def test_explicit_prompt_and_defaults(tmp_path: Path) -> None:
    spec = load_one(tmp_path, {"prompt_token_ids": [5, 6, 7], "max_tokens": 4})
    assert spec.request_id == "line-1"
    assert spec.prompt_token_ids == [5, 6, 7]
    assert isinstance(spec.prompt, TokenPrompt)
    assert (spec.arrival_time, spec.priority, spec.cache_salt) == (0.0, 0, None)
    assert (spec.job_id, spec.turn, spec.is_last_turn, spec.tool_name) == (None, 0, True, None)


def test_every_field(tmp_path: Path) -> None:
    spec = load_one(
        tmp_path,
        {
            "request_id": 42,
            "prompt_length": 100,
            "shared_prefix_id": 3,
            "shared_prefix_length": 64,
            "arrival": 1.25,
            "max_tokens": 9,
            "priority": -2,
            "cache_salt": "tenant-a",
            "job_id": "j1",
            "turn": 2,
            "last_turn": False,
            "tool": "search",
            "tool_duration": 0.5,
        },
    )
    assert spec.request_id == "42"  # integer ids become strings
    assert spec.prompt == SyntheticPrompt(100, "3", 64, key="42")
    assert (spec.arrival_time, spec.max_tokens, spec.priority) == (1.25, 9, -2)
    assert spec.cache_salt == "tenant-a"
    assert (spec.job_id, spec.turn, spec.is_last_turn) == ("j1", 2, False)
    assert (spec.tool_name, spec.tool_duration) == ("search", 0.5)


def test_shared_prefix_ids_share_tokens_and_nothing_else(tmp_path: Path) -> None:
    records = [
        {"request_id": "a", "prompt_length": 300, "shared_prefix_id": "sys",
         "shared_prefix_length": 200, "max_tokens": 1},
        {"request_id": "b", "prompt_length": 250, "shared_prefix_id": "sys",
         "shared_prefix_length": 120, "max_tokens": 1},
        {"request_id": "c", "prompt_length": 300, "shared_prefix_id": "other",
         "shared_prefix_length": 200, "max_tokens": 1},
        {"request_id": "d", "prompt_length": 300, "max_tokens": 1},
    ]  # fmt: skip
    a, b, c, d = (spec.prompt_token_ids for spec in load_workload(write(tmp_path, records)))
    assert (len(a), len(b), len(c), len(d)) == (300, 250, 300, 300)
    assert a[:120] == b[:120]  # the shorter prefix is a prefix of the longer one
    assert a[120:136] != b[120:136]
    assert a[:16] != c[:16] and a[:16] != d[:16]
    assert all(0 <= t < SYNTHETIC_VOCAB_SIZE for t in a + b + c + d)


def test_synthetic_tokens_are_stable_across_processes() -> None:
    # Pinned values: a change here changes every block hash of every workload.
    prompt = SyntheticPrompt(4, "sys", 2, key="r1")
    assert prompt.token_ids() == SyntheticPrompt(4, "sys", 2, key="r1").token_ids()
    assert prompt.token_ids() == [21137, 25303, 24818, 25697]
    # The definition: SHAKE-128 of the stream's name, read as little-endian
    # uint16 with the top bit cleared.
    digest = hashlib.shake_128(b"kvframe/prefix/sys").digest(4)
    assert [int.from_bytes(digest[i : i + 2], "little") & 0x7FFF for i in (0, 2)] == [
        21137,
        25303,
    ]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {"prompt_length": 5, "max_tokens": 1, "arival": 3},
            "field 'arival': unknown field; did you mean 'arrival'?",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "zzz": 3},
            "field 'zzz': unknown field; known fields: request_id, prompt_token_ids,",
        ),
        ({"max_tokens": 1}, "field 'prompt_length': required field is missing (give"),
        ({"prompt_length": 5}, "field 'max_tokens': required field is missing"),
        (
            {"prompt_length": 0, "max_tokens": 1},
            "field 'prompt_length': expected a positive integer, got 0",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "shared_prefix_id": "s"},
            "field 'shared_prefix_length': required with 'shared_prefix_id'",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "shared_prefix_length": 2},
            "field 'shared_prefix_length': needs 'shared_prefix_id'",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "shared_prefix_id": "s",
             "shared_prefix_length": 6},
            "field 'shared_prefix_length': 6 is longer than prompt_length 5",
        ),
        (
            {"prompt_token_ids": [1], "prompt_length": 1, "max_tokens": 1},
            "field 'prompt_length': not allowed with 'prompt_token_ids'",
        ),
        (
            {"prompt_token_ids": [], "max_tokens": 1},
            "field 'prompt_token_ids': a prompt needs at least one token",
        ),
        (
            {"prompt_token_ids": [1, 2**31], "max_tokens": 1},
            "field 'prompt_token_ids': token ids must be < 2**31",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "arrival": "soon"},
            "field 'arrival': expected a non-negative number, got \"soon\"",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "priority": 1.5},
            "field 'priority': expected an integer, got 1.5",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "cache_salt": 7},
            "field 'cache_salt': expected a string, got 7",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "turn": 1},
            "field 'turn': only meaningful with 'job_id'",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "job_id": "j", "last_turn": "yes"},
            "field 'last_turn': expected true or false, got \"yes\"",
        ),
        (
            {"prompt_length": 5, "max_tokens": 1, "job_id": "j", "tool_duration": -1},
            "field 'tool_duration': expected a non-negative number, got -1",
        ),
    ],
)  # fmt: skip
def test_malformed_records(tmp_path: Path, record: dict[str, object], message: str) -> None:
    path = write(tmp_path, [{"prompt_length": 3, "max_tokens": 1}, record])
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format="kvframe")
    assert str(info.value).startswith(f"{path}:2: {message}")


def test_duplicate_request_ids_and_turns_are_rejected(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [{"request_id": "x", "prompt_length": 3, "max_tokens": 1}] * 2,
    )
    with pytest.raises(WorkloadError, match=r":2: field 'request_id': duplicate request id 'x'"):
        load_workload(path)
    path = write(
        tmp_path,
        [{"prompt_length": 3, "max_tokens": 1, "job_id": "j", "turn": 1}] * 2,
    )
    with pytest.raises(WorkloadError, match=r":2: field 'turn': job 'j' already has a turn 1"):
        load_workload(path)


def test_last_turn_is_inferred_per_job_unless_given(tmp_path: Path) -> None:
    records = [
        {"request_id": "a0", "prompt_length": 3, "max_tokens": 1, "job_id": "a", "turn": 0},
        {"request_id": "b0", "prompt_length": 3, "max_tokens": 1, "job_id": "b", "turn": 0,
         "last_turn": False},
        {"request_id": "a1", "prompt_length": 3, "max_tokens": 1, "job_id": "a", "turn": 1},
        {"request_id": "b1", "prompt_length": 3, "max_tokens": 1, "job_id": "b", "turn": 1,
         "last_turn": False},
        {"request_id": "solo", "prompt_length": 3, "max_tokens": 1},
    ]  # fmt: skip
    path = write(tmp_path, records)
    last = {spec.request_id: spec.is_last_turn for spec in load_workload(path)}
    assert last == {"a0": False, "b0": False, "a1": True, "b1": False, "solo": True}
    # A job cut short by the limit ends at its last loaded turn.
    cut = {spec.request_id: spec.is_last_turn for spec in load_workload(path, limit=2)}
    assert cut == {"a0": True, "b0": False}


def test_header_sets_name_and_metadata(tmp_path: Path) -> None:
    header = {"kvframe_workload": 1, "name": "mine", "generator": "hand", "params": {"x": 1}}
    workload = load_workload(write(tmp_path, [header, {"prompt_length": 3, "max_tokens": 1}]))
    assert workload.name == "mine"
    assert workload.format == "kvframe"
    assert workload.metadata == {
        "format_version": 1, "name": "mine", "generator": "hand", "params": {"x": 1}
    }  # fmt: skip
    assert workload[0].request_id == "line-2"


def test_header_errors(tmp_path: Path) -> None:
    record = {"prompt_length": 3, "max_tokens": 1}
    with pytest.raises(WorkloadError, match=r":2: field 'kvframe_workload': the header must be"):
        load_workload(write(tmp_path, [record, {"kvframe_workload": 1}]))
    with pytest.raises(WorkloadError, match="format version 2 is not supported"):
        load_workload(write(tmp_path, [{"kvframe_workload": 2}, record]))
    with pytest.raises(WorkloadError, match="field 'nmae': unknown field; did you mean 'name'"):
        load_workload(write(tmp_path, [{"kvframe_workload": 1, "nmae": "x"}, record]))


def test_format_is_detected(tmp_path: Path) -> None:
    kv = write(tmp_path, [{"prompt_length": 3, "max_tokens": 1}], "a.jsonl")
    assert load_workload(kv).format == "kvframe"
    # Forcing the wrong format gives a field error, not a crash.
    with pytest.raises(WorkloadError, match="field 'timestamp': required field is missing"):
        load_workload(kv, format="mooncake")


# -- round trip -----------------------------------------------------------------------


def test_generator_file_reader_round_trip(tmp_path: Path) -> None:
    config = ChatConfig(num_requests=200, rate=5.0, seed=7, shared_fraction=0.5)
    specs = generate_chat(config)
    path = tmp_path / "chat.jsonl"
    assert write_chat_jsonl(path, config) == 200

    workload = load_workload(path)

    assert list(workload) == specs
    assert workload.name == "chat"
    assert workload.metadata["generator"] == "chat"
    assert workload.metadata["params"] == config.to_params()
    assert ChatConfig(**workload.metadata["params"]) == config  # the header regenerates it
    assert workload[10].prompt_token_ids == specs[10].prompt_token_ids


def test_round_trip_of_every_prompt_kind_and_agentic_fields(tmp_path: Path) -> None:
    specs = [
        RequestSpec("t", [1, 2, 3], 2, arrival_time=0.5, priority=3, cache_salt="s"),
        RequestSpec("u", SyntheticPrompt(40, "p", 16, key="other-key"), 5, arrival_time=0.5),
        RequestSpec("j-0", SyntheticPrompt(8, key="j-0"), 1, arrival_time=1.0, job_id="j",
                    turn=0, is_last_turn=False, tool_name="grep", tool_duration=2.0),
        RequestSpec("j-1", SyntheticPrompt(8, key="j-1"), 1, arrival_time=1.0, job_id="j",
                    turn=1),
    ]  # fmt: skip
    buffer = io.StringIO()
    assert write_jsonl(specs, buffer, name="mixed") == 4
    path = tmp_path / "mixed.jsonl"
    path.write_text(buffer.getvalue())
    assert list(load_workload(path)) == specs


def test_a_mooncake_workload_converts_to_explicit_tokens(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        ['{"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [4, 9]}'],
        "mc.jsonl",
    )
    original = load_workload(trace)
    path = tmp_path / "converted.jsonl"
    write_jsonl(original, path)
    converted = load_workload(path)
    assert converted.format == "kvframe" and converted.name == "mc"
    (spec,) = converted
    assert isinstance(spec.prompt, TokenPrompt)
    assert spec.prompt_token_ids == original[0].prompt_token_ids
    assert (spec.request_id, spec.arrival_time, spec.max_tokens) == ("line-1", 1.5, 3)
