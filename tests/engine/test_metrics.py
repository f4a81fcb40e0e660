"""Metrics: per-request latencies, percentiles, counters and the three outputs."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from kvframe.engine.metrics import Distribution, MetricsCollector, percentile


def test_percentile_interpolates_linearly_between_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)  # rank 2.7
    assert percentile(values, 100) == 4.0
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    assert Distribution.of([]) is None


def run_three_requests() -> MetricsCollector:
    """A: queued 1 s, 5 tokens; B: immediate, 3 tokens; C: 1 token; D never scheduled."""
    m = MetricsCollector()
    m.on_arrival("A", 0.0, 100)
    m.on_arrival("B", 1.0, 50)
    m.on_scheduled("A", 1.0, num_cached_tokens=50)
    m.on_scheduled("B", 1.0)
    m.on_step(1.0, 1.0, num_generated_tokens=2, num_computed_tokens=150)
    m.on_first_token("B", 1.5)
    m.on_arrival("C", 2.0, 40)
    m.on_first_token("A", 2.0)
    m.on_preempted("A")
    m.on_recomputed("A", 30)
    m.on_arrival("D", 3.0, 10)
    m.on_finished("B", 3.5, num_output_tokens=3, status="length")
    m.on_step(2.0, 2.0, num_generated_tokens=4, num_computed_tokens=4)
    m.on_scheduled("C", 4.0, num_cached_tokens=20, num_external_cached_tokens=16)
    m.on_scheduled("A", 4.0, num_cached_tokens=99)  # a re-admission: ignored
    m.on_first_token("C", 5.0)
    m.on_finished("C", 5.0, num_output_tokens=1)
    m.on_step(4.0, 2.0, num_generated_tokens=3, num_computed_tokens=30)
    m.on_first_token("A", 5.5)  # not the first: ignored
    m.on_finished("A", 6.0, num_output_tokens=5, status="stop")
    return m


def test_per_request_latencies() -> None:
    rows = {row.request_id: row for row in run_three_requests().summary().requests}
    a, b, c, d = rows["A"], rows["B"], rows["C"], rows["D"]
    assert a.time_to_first_token_seconds == 2.0
    assert a.time_per_output_token_seconds == 1.0  # (6 - 2) / (5 - 1)
    assert a.e2e_request_latency_seconds == 6.0
    assert a.request_queue_time_seconds == 1.0
    assert a.request_prefill_time_seconds == 1.0
    assert a.request_decode_time_seconds == 4.0
    assert (a.num_cached_tokens, a.num_preemptions, a.num_recomputed_tokens) == (50, 1, 30)
    assert b.time_to_first_token_seconds == 0.5
    assert b.time_per_output_token_seconds == 1.0  # (3.5 - 1.5) / 2
    assert b.request_queue_time_seconds == 0.0
    assert b.finish_status == "length"
    assert c.time_per_output_token_seconds is None  # one token: no inter-token time
    assert c.num_external_cached_tokens == 16
    assert d.time_to_first_token_seconds is None and d.finish_time is None


def test_distributions() -> None:
    dist = run_three_requests().summary().distributions
    ttft = dist["time_to_first_token_seconds"]  # values 2, 0.5, 3
    assert ttft is not None
    assert ttft.count == 3
    assert ttft.mean == pytest.approx(5.5 / 3)
    assert (ttft.p50, ttft.max) == (2.0, 3.0)
    assert ttft.p90 == pytest.approx(2.8)  # rank 1.8 between 2 and 3
    assert ttft.p99 == pytest.approx(2.98)
    e2e = dist["e2e_request_latency_seconds"]  # 6, 2.5, 3
    assert e2e is not None
    assert (e2e.mean, e2e.p50, e2e.p90) == (pytest.approx(11.5 / 3), 3.0, pytest.approx(5.4))
    queue = dist["request_queue_time_seconds"]  # 1, 0, 2
    assert queue is not None and (queue.mean, queue.p50) == (1.0, 1.0)
    tpot = dist["time_per_output_token_seconds"]
    assert tpot is not None and (tpot.count, tpot.mean) == (2, 1.0)
    assert dist["job_completion_time_seconds"] is None


def test_counters_derived_from_records() -> None:
    counters = run_three_requests().summary(wall_clock_seconds=0.5).counters
    assert counters["num_requests"] == 4
    assert counters["num_requests_finished"] == 3
    assert counters["num_requests_unfinished"] == 1
    assert counters["prompt_tokens_total"] == 200
    assert counters["prefix_cache_queries"] == 190  # A, B, C at first admission
    assert counters["prefix_cache_hits"] == 70
    assert counters["prefix_cache_hit_rate"] == pytest.approx(70 / 190)
    assert counters["num_preemptions"] == 1
    assert counters["num_recomputed_tokens"] == 30
    assert counters["num_steps"] == 3
    assert counters["busy_seconds"] == 5.0
    assert counters["generation_tokens_total"] == 9
    assert counters["computed_tokens_total"] == 184
    assert counters["simulated_duration_seconds"] == 6.0  # first arrival 0 -> last event 6
    assert counters["output_throughput_tokens_per_second"] == 1.5
    assert counters["request_throughput_per_second"] == 0.5
    assert counters["wall_clock_seconds"] == 0.5
    assert counters["simulated_requests_per_wall_second"] == 6.0


def test_engine_counters_override_and_extend() -> None:
    m = run_three_requests()
    m.count("offload_bytes_stored", 4096)
    m.count("offload_bytes_stored", 4096)
    counters = m.summary(
        counters={
            "prefix_cache_queries": 1000,
            "prefix_cache_hits": 250,
            "external_prefix_cache_queries": 0,
            "external_prefix_cache_hits": 0,
            "num_retentions": 2,
        },
        end_time=10.0,
    ).counters
    assert counters["prefix_cache_hit_rate"] == 0.25
    assert counters["external_prefix_cache_hit_rate"] == 0.0  # no division by zero
    assert counters["num_retentions"] == 2
    assert counters["offload_bytes_stored"] == 8192
    assert counters["simulated_duration_seconds"] == 10.0
    assert "wall_clock_seconds" not in counters


def test_job_completion_time_needs_the_last_turn() -> None:
    m = MetricsCollector()
    m.on_arrival("j-0", 10.0, 5, job_id="j", turn=0, is_last_turn=False)
    m.on_arrival("k-0", 10.0, 5, job_id="k", turn=0, is_last_turn=False)
    for rid, t in (("j-0", 12.0), ("k-0", 12.0)):
        m.on_scheduled(rid, 10.0)
        m.on_first_token(rid, 11.0)
        m.on_finished(rid, t, num_output_tokens=2)
    m.on_arrival("j-1", 14.0, 5, job_id="j", turn=1, is_last_turn=True)
    m.on_scheduled("j-1", 14.0)
    m.on_first_token("j-1", 14.5)
    m.on_finished("j-1", 15.0, num_output_tokens=2)
    jct = m.summary().distributions["job_completion_time_seconds"]
    assert jct is not None
    assert (jct.count, jct.mean) == (1, 5.0)  # job k never finished its last turn


def test_events_out_of_order_are_rejected() -> None:
    m = MetricsCollector()
    m.on_arrival("a", 0.0, 1)
    with pytest.raises(ValueError, match="arrived twice"):
        m.on_arrival("a", 1.0, 1)
    m.on_finished("a", 1.0, num_output_tokens=1)
    with pytest.raises(ValueError, match="finished twice"):
        m.on_finished("a", 2.0, num_output_tokens=1)
    with pytest.raises(KeyError):
        m.on_scheduled("never-arrived", 0.0)


def test_json_csv_and_table_outputs() -> None:
    summary = run_three_requests().summary(partial=True, metadata={"preset": "x"})

    buffer = io.StringIO()
    summary.write_json(buffer)
    data = json.loads(buffer.getvalue())
    assert data["partial"] is True
    assert data["metadata"] == {"preset": "x"}
    assert data["counters"]["num_requests"] == 4
    assert data["distributions"]["time_to_first_token_seconds"]["p50"] == 2.0
    assert data["distributions"]["job_completion_time_seconds"] is None
    assert "requests" not in data

    buffer = io.StringIO()
    summary.write_csv(buffer)
    rows = list(csv.DictReader(io.StringIO(buffer.getvalue())))
    assert [row["request_id"] for row in rows] == ["A", "B", "C", "D"]
    assert rows[0]["time_to_first_token_seconds"] == "2.0"
    assert rows[3]["finish_time"] == "" and rows[3]["num_prompt_tokens"] == "10"

    table = summary.render_table()
    assert table.splitlines()[0] == "kvframe run summary (PARTIAL: the run was interrupted)"
    lines = table.splitlines()
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in lines if "  " in line)
    assert rows["requests finished / arrived"] == "3 / 4"
    assert "\x1b" not in table  # plain text: no ANSI codes
    assert "prefix_cache_hit_rate" in table and "36.84%" in table
    ttft_line = next(line for line in table.splitlines() if line.startswith("time_to_first"))
    assert ttft_line.split()[1:] == ["3", "1.8333", "2.0000", "2.8000", "2.9800", "3.0000"]


def test_an_empty_run_summarises() -> None:
    summary = MetricsCollector().summary()
    assert summary.counters["num_requests"] == 0
    assert summary.counters["output_throughput_tokens_per_second"] == 0.0
    assert all(dist is None for dist in summary.distributions.values())
    assert "kvframe run summary" in summary.render_table()


def test_job_waiting_time_and_reprefilled_tokens() -> None:
    m = MetricsCollector()
    # turn 0: 100-token prompt, 20 output tokens, waits 1 s.
    m.on_arrival("j-0", 0.0, 100, job_id="j", turn=0, is_last_turn=False)
    m.on_scheduled("j-0", 1.0)
    m.on_first_token("j-0", 1.5)
    m.on_finished("j-0", 2.0, num_output_tokens=20)
    # turn 1: 150-token prompt extending turn 0's 120 tokens; 96 of them hit,
    # so 24 are prefilled again; it waits 0.5 s and is preempted once, losing 10.
    m.on_arrival("j-1", 3.0, 150, job_id="j", turn=1, is_last_turn=True)
    m.on_scheduled("j-1", 3.5, num_cached_tokens=64, num_external_cached_tokens=32)
    m.on_recomputed("j-1", 10)
    m.on_first_token("j-1", 4.0)
    m.on_finished("j-1", 5.0, num_output_tokens=5)
    summary = m.summary()
    waiting = summary.distributions["job_waiting_time_seconds"]
    assert (waiting.count, waiting.mean) == (1, 1.5)
    assert summary.counters["reprefilled_tokens_total"] == 24 + 10
    assert summary.counters["num_jobs_completed"] == 1
    assert summary.distributions["job_completion_time_seconds"].mean == 5.0


def test_old_counter_names_read_as_vllms_external_prefix_cache_names() -> None:
    from kvframe.engine.metrics import canonical_counters

    old = {"connector_prefix_cache_hits": 5, "connector_prefix_cache_queries": 9, "x": 1}
    assert canonical_counters(old) == {
        "external_prefix_cache_hits": 5,
        "external_prefix_cache_queries": 9,
        "x": 1,
    }
    # A current name in the file wins over an old one.
    both = {"connector_prefix_cache_hits": 1, "external_prefix_cache_hits": 2}
    assert canonical_counters(both) == {"external_prefix_cache_hits": 2}
