"""The JSONL tracer: one parseable object per line, hex hashes, flushed per step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kvframe_jsonl_trace import JsonlTracer, record_to_dict

from kvframe.config import ConfigError
from kvframe.contract.records import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    PrefixCacheEvent,
    RequestFinished,
    StepDecision,
    StepSnapshot,
)
from kvframe.host.registry import PluginRegistry

H1, H2, H3 = b"\x01" * 16, b"\x02" * 16, b"\xab" * 16


@pytest.fixture
def registry() -> PluginRegistry:
    """A registry that sees only this plugin, whatever else is installed."""
    registry = PluginRegistry(entry_points=())
    registry.register_class(JsonlTracer)
    return registry


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def snapshot(step: int = 1) -> StepSnapshot:
    return StepSnapshot(step, 0.5, 2, 0, 1, 0, 100, 7, 0.25)


def decision(step: int = 1) -> StepDecision:
    return StepDecision(step, 0.5, {"a": 16, "b": 1}, ("a",), (), ("c",), ("d",))


def test_every_record_is_one_json_object_with_an_event_type(tmp_path: Path):
    tracer = JsonlTracer(path=tmp_path / "t.jsonl")
    tracer.on_step_snapshot(snapshot())
    tracer.on_prefix_cache(PrefixCacheEvent(1, 0.5, "a", 64, 32, 0))
    tracer.on_step_decision(decision())
    tracer.on_kv_events(1, 0.5, [BlockStored((H1, H2), None, 16), AllBlocksCleared()])
    tracer.on_request_finished(RequestFinished(1, 0.5, "a", "length", 64, 4, 32, 0, 0.0, 0.4, 0.6))
    tracer.close()
    records = lines(tmp_path / "t.jsonl")
    assert [r["event"] for r in records] == [
        "step_snapshot",
        "prefix_cache",
        "step_decision",
        "block_stored",
        "all_blocks_cleared",
        "request_finished",
    ]
    assert records[0] == {
        "event": "step_snapshot",
        "step": 1,
        "now": 0.5,
        "num_waiting": 2,
        "num_skipped_waiting": 0,
        "num_running": 1,
        "num_retained": 0,
        "num_free_blocks": 100,
        "num_cached_blocks": 7,
        "kv_usage": 0.25,
    }
    assert records[2]["num_scheduled_tokens"] == {"a": 16, "b": 1}
    assert records[2]["total_num_scheduled_tokens"] == 17
    assert records[2]["resumed_request_ids"] == [] and records[2]["preempted_request_ids"] == ["c"]
    assert records[3] == {
        "event": "block_stored",
        "step": 1,
        "now": 0.5,
        "block_hashes": [H1.hex(), H2.hex()],
        "parent_block_hash": None,
        "block_size": 16,
        "medium": "GPU",
        "group_idx": None,  # a one-group model's events name no KV-cache group
        "kv_cache_spec_kind": None,
    }
    assert records[5]["first_token_time"] == 0.4


def test_consecutive_removals_share_a_line(tmp_path: Path):
    tracer = JsonlTracer(path=tmp_path / "t.jsonl")
    events = [
        BlockRemoved((H1,)),
        BlockRemoved((H2,)),
        BlockStored((H3,), H1, 16),
        BlockRemoved((H3,)),
        BlockRemoved((H1,), medium="CPU"),
    ]
    tracer.on_kv_events(3, 1.0, events)
    tracer.close()
    records = lines(tmp_path / "t.jsonl")
    assert [(r["event"], r["block_hashes"]) for r in records] == [
        ("block_removed", [H1.hex(), H2.hex()]),
        ("block_stored", [H3.hex()]),
        ("block_removed", [H3.hex()]),
        ("block_removed", [H1.hex()]),
    ]
    assert records[1]["parent_block_hash"] == H1.hex() and records[3]["medium"] == "CPU"


def test_the_file_is_flushed_at_every_step_decision(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    tracer = JsonlTracer(path=path)
    tracer.on_step_snapshot(snapshot())
    tracer.on_step_decision(decision())
    # Readable before close: a crashed or interrupted run leaves a usable trace.
    assert [r["event"] for r in lines(path)] == ["step_snapshot", "step_decision"]
    tracer.close()
    tracer.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        tracer.on_step_snapshot(snapshot())


def test_kv_events_can_be_left_out_and_files_appended(tmp_path: Path):
    path = tmp_path / "deep" / "t.jsonl"
    first = JsonlTracer(path=path, kv_events=False)
    first.on_kv_events(1, 0.0, [BlockRemoved((H1,))])
    first.on_step_decision(decision(1))
    first.close()
    second = JsonlTracer(path=path, append=True)
    second.on_step_decision(decision(2))
    second.close()
    assert [(r["event"], r["step"]) for r in lines(path)] == [
        ("step_decision", 1),
        ("step_decision", 2),
    ]


def test_selected_by_config_string_with_typed_options(tmp_path: Path, registry: PluginRegistry):
    path = tmp_path / "x.jsonl"
    tracing = registry.create_tracing([f"jsonl:path={path},kv_events=no"])
    (tracer,) = tracing.tracers
    assert isinstance(tracer, JsonlTracer) and tracer.path == path and tracer.kv_events is False
    tracing.hook.kvframe_step_decision(decision=decision())
    tracing.close()
    assert lines(path)[0]["event"] == "step_decision"
    with pytest.raises(ConfigError, match="did you mean 'path'"):
        registry.create_tracing(["jsonl:pth=x.jsonl"])


def test_an_unwritable_path_is_a_config_error(tmp_path: Path, registry: PluginRegistry):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot open") as caught:
        registry.create_tracing([f"jsonl:path={blocker}/sub/t.jsonl"])
    assert f"{blocker} is a file, not a directory" in str(caught.value)  # not "File exists"


def test_record_to_dict_converts_bytes_mappings_and_tuples():
    data = record_to_dict(BlockStored((H1,), H2, 16), extra=1)
    assert data == {
        "event": "block_stored",
        "extra": 1,
        "block_hashes": [H1.hex()],
        "parent_block_hash": H2.hex(),
        "block_size": 16,
        "medium": "GPU",
        "group_idx": None,  # a one-group model's events name no KV-cache group
        "kv_cache_spec_kind": None,
    }


def test_int_block_hashes_are_written_as_their_digest_hex_not_as_numbers():
    """kvframe's hashes are ints: written as the hex of the 16 digest bytes, the text
    the same blocks had when hashes were bytes (trace files unchanged)."""
    h1, h2 = int.from_bytes(H1), int.from_bytes(H3)
    data = record_to_dict(BlockStored((h1, h2), None, 16))
    assert data["block_hashes"] == [H1.hex(), H3.hex()] and data["parent_block_hash"] is None
    assert record_to_dict(BlockRemoved((2,)))["block_hashes"] == ["0" * 31 + "2"]
    assert data["block_size"] == 16  # other int fields stay numbers


def test_a_large_trace_is_reported_when_the_tracer_closes(tmp_path, monkeypatch) -> None:
    """A whole trace writes hundreds of MB: the tracer says so, with the way to shrink it."""
    import kvframe_jsonl_trace
    from structlog.testing import capture_logs

    monkeypatch.setattr(kvframe_jsonl_trace, "LARGE_TRACE_BYTES", 64)
    tracer = kvframe_jsonl_trace.JsonlTracer(path=tmp_path / "t.jsonl")
    for step in range(4):
        tracer.on_kv_events(step, 0.0, [BlockRemoved(block_hashes=(b"\x01" * 16,), medium="GPU")])
    with capture_logs() as logs:
        tracer.close()
        tracer.close()  # idempotent: one report
    assert [(e["event"], e["records"], e["hint"]) for e in logs] == [
        ("trace_file_large", 4, "kv_events=false leaves the KV events out")
    ]


def test_a_small_trace_is_not_reported_as_large(tmp_path) -> None:
    import kvframe_jsonl_trace
    from structlog.testing import capture_logs

    tracer = kvframe_jsonl_trace.JsonlTracer(path=tmp_path / "t.jsonl", kv_events=False)
    with capture_logs() as logs:
        tracer.close()
    assert [e for e in logs if e["event"] == "trace_file_large"] == []
