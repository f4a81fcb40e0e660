"""Trace points: what the engine reports, in which order, and that it adds up to the summary."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kvframe
from kvframe.engine import Engine, EngineConfig
from kvframe.host.registry import PluginRegistry


class Recorder(kvframe.Tracer):
    """Test-only: keeps every record in arrival order."""

    name = "recorder"
    instances: list[Recorder] = []

    def __init__(self) -> None:
        self.records: list[tuple[str, Any]] = []
        self.closed = False
        Recorder.instances.append(self)

    def on_step_snapshot(self, snapshot):
        self.records.append(("snapshot", snapshot))

    def on_prefix_cache(self, event):
        self.records.append(("prefix", event))

    def on_step_decision(self, decision):
        self.records.append(("decision", decision))

    def on_kv_events(self, step: int, now: float, events: Sequence[Any]) -> None:
        self.records.append(("kv", (step, now, list(events))))

    def on_request_finished(self, record):
        self.records.append(("finished", record))

    def close(self) -> None:
        self.closed = True


def test_trace_points_come_in_step_order_and_tracers_are_closed(conversation_chains):
    registry = PluginRegistry(entry_points=())
    registry.register_class(Recorder)
    from kvframe_fcfs import FCFSPolicy

    registry.register_class(FCFSPolicy)
    Recorder.instances.clear()
    engine = Engine.from_config(EngineConfig(num_gpu_blocks=8000, tracers=("recorder",)), registry)
    result = engine.run(conversation_chains[:30])
    (recorder,) = Recorder.instances
    assert recorder.closed
    kinds = [kind for kind, _ in recorder.records]
    # Each step opens with a snapshot and is decided before its KV events and finishes.
    order = {"snapshot": 0, "prefix": 1, "decision": 2, "kv": 3, "finished": 4}
    step_of = {
        "snapshot": lambda r: r.step,
        "prefix": lambda r: r.step,
        "decision": lambda r: r.step,
        "kv": lambda r: r[0],
        "finished": lambda r: r.step,
    }
    keys = [(step_of[k](r), order[k]) for k, r in recorder.records]
    assert keys == sorted(keys)
    assert kinds.count("snapshot") == kinds.count("decision") == result.counters["num_steps"]
    assert kinds.count("finished") == 30
    snapshots = [r for k, r in recorder.records if k == "snapshot"]
    assert snapshots[0].num_free_blocks == 7999 and snapshots[0].num_running == 0
    assert any(s.num_cached_blocks > 0 for s in snapshots)


def test_jsonl_trace_parses_and_agrees_with_the_summary(conversation_chains, tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    config = EngineConfig(
        num_gpu_blocks=8000, reserve_full_sequence=False, tracers=(f"jsonl:path={path}",)
    )
    engine = Engine.from_config(config)
    result = engine.run(conversation_chains)
    counters = result.counters
    records = [json.loads(line) for line in path.read_text().splitlines()]
    by_event = Counter(r["event"] for r in records)
    decisions = [r for r in records if r["event"] == "step_decision"]

    assert by_event["step_snapshot"] == by_event["step_decision"] == counters["num_steps"]
    assert (
        sum(d["total_num_scheduled_tokens"] for d in decisions) == counters["computed_tokens_total"]
    )
    assert (
        sum(sum(d["num_scheduled_tokens"].values()) for d in decisions)
        == counters["computed_tokens_total"]
    )
    assert sum(len(d["preempted_request_ids"]) for d in decisions) == counters["num_preemptions"]
    assert counters["num_preemptions"] > 0
    prefix = [r for r in records if r["event"] == "prefix_cache"]
    assert len(prefix) == len(conversation_chains)
    assert sum(r["local_hit_tokens"] for r in prefix) == counters["prefix_cache_hits"]
    assert sum(r["num_prompt_tokens"] for r in prefix) == counters["prefix_cache_queries"]
    finished = [r for r in records if r["event"] == "request_finished"]
    assert len(finished) == counters["num_requests_finished"] == len(conversation_chains)
    assert sum(r["num_output_tokens"] for r in finished) == counters["generation_tokens_total"]
    # KV events: hashes are hex strings, and every stored hash was stored before removal.
    stored = [r for r in records if r["event"] == "block_stored"]
    removed = [r for r in records if r["event"] == "block_removed"]
    assert stored and removed
    seen: set[str] = set()
    for r in records:
        if r["event"] == "block_stored":
            seen.update(r["block_hashes"])
        elif r["event"] == "block_removed":
            assert set(r["block_hashes"]) <= seen
    assert all(len(h) == 32 for r in stored for h in r["block_hashes"])


def test_without_a_tracer_the_run_is_the_same(conversation_chains, tmp_path: Path):
    plain = Engine.from_config(EngineConfig(num_gpu_blocks=8000)).run(conversation_chains[:40])
    traced = Engine.from_config(
        EngineConfig(num_gpu_blocks=8000, tracers=(f"jsonl:path={tmp_path / 't.jsonl'}",))
    ).run(conversation_chains[:40])
    ignore = {"wall_clock_seconds", "simulated_requests_per_wall_second"}
    assert {k: v for k, v in plain.counters.items() if k not in ignore} == {
        k: v for k, v in traced.counters.items() if k not in ignore
    }
