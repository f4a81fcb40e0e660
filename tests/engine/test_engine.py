"""The engine loop: virtual clock, arrivals, ignored requests, stalls, interruption, metrics."""

from __future__ import annotations

import gc
import statistics
import zlib
from collections.abc import Sequence

import attrs
import pytest

import kvframe
from kvframe.config import ConfigError
from kvframe.domain.costs import prefill_pairs
from kvframe.domain.request import Request, RequestStatus
from kvframe.engine import Engine, EngineConfig, EngineStalled, RunProgress
from kvframe.executors import get_preset
from kvframe.host.registry import PluginRegistry, get_registry
from kvframe.workloads import RequestSpec
from kvframe.workloads.chat import generate_chat

PRESET = get_preset("llama3.1-8b-h100")
COST = PRESET.cost_model


def prefill_time(num_tokens: int) -> float:
    """One step prefilling a single ``num_tokens`` prompt from scratch."""
    return COST.step_time(num_tokens, 0, 0, 1, prefill_pairs(num_tokens, 0))


def spec(
    request_id: str, num_prompt: int, max_tokens: int, arrival: float = 0.0, **fields
) -> RequestSpec:
    base = 1000 * (zlib.crc32(request_id.encode()) % 100_000 + 1)
    return RequestSpec(
        request_id=request_id,
        prompt=[base + i for i in range(num_prompt)],
        max_tokens=max_tokens,
        arrival_time=arrival,
        **fields,
    )


def run(specs: Sequence[RequestSpec], registry: PluginRegistry | None = None, **config):
    engine = Engine.from_config(EngineConfig(**config), registry)
    return engine, engine.run(specs)


def rows(result) -> dict:
    return {row.request_id: row for row in result.summary.requests}


# -- the clock ---------------------------------------------------------------


def test_first_token_time_is_the_end_of_the_step_that_sampled_it():
    _, result = run([spec("a", 100, 3)], num_gpu_blocks=64)
    row = rows(result)["a"]
    prefill = prefill_time(100)
    decode1 = COST.step_time(0, 1, 100)
    decode2 = COST.step_time(0, 1, 101)
    assert row.first_scheduled_time == 0.0
    assert row.time_to_first_token_seconds == pytest.approx(prefill)
    assert row.e2e_request_latency_seconds == pytest.approx(prefill + decode1 + decode2)
    assert row.time_per_output_token_seconds == pytest.approx((decode1 + decode2) / 2)
    assert row.finish_status == "length" and row.num_output_tokens == 3


def test_the_clock_jumps_over_idle_gaps_to_the_next_arrival():
    _, result = run([spec("a", 32, 2), spec("b", 32, 2, arrival=1000.0)], num_gpu_blocks=64)
    b = rows(result)["b"]
    # Four steps in all: no stepping through the 1,000 idle seconds.
    assert result.counters["num_steps"] == 4
    assert b.request_queue_time_seconds == 0.0
    assert b.time_to_first_token_seconds == pytest.approx(prefill_time(32))
    assert result.counters["simulated_duration_seconds"] == pytest.approx(
        1000.0 + prefill_time(32) + COST.step_time(0, 1, 32)
    )


def test_a_request_arriving_mid_step_waits_for_the_step_to_end():
    step = prefill_time(4000)
    _, result = run([spec("a", 4000, 1), spec("b", 16, 1, arrival=step / 2)], num_gpu_blocks=512)
    b = rows(result)["b"]
    assert b.arrival_time == step / 2
    assert b.first_scheduled_time == pytest.approx(step)
    assert b.request_queue_time_seconds == pytest.approx(step / 2)


def test_engine_runs_once():
    engine, _ = run([spec("a", 8, 1)], num_gpu_blocks=16)
    with pytest.raises(RuntimeError, match="runs once"):
        engine.run([spec("b", 8, 1)])


# -- requests that can never run -----------------------------------------------


def test_requests_that_can_never_fit_are_ignored_not_hung():
    specs = [
        spec("ok", 64, 4),
        spec("too-long-prompt", 300, 1),  # > max_model_len
        spec("too-big-for-pool", 100, 200),  # 299 slots > 15 blocks x 16 tokens
        spec("fits-exactly", 200, 41),  # 240 slots = 15 blocks
    ]
    _, result = run(specs, num_gpu_blocks=16, max_model_len=256)
    by_id = rows(result)
    assert result.counters["num_requests_ignored"] == 2
    assert by_id["too-long-prompt"].finish_status == "ignored"
    assert by_id["too-big-for-pool"].finish_status == "ignored"
    assert by_id["too-long-prompt"].first_scheduled_time is None
    assert by_id["ok"].num_output_tokens == 4
    assert by_id["fits-exactly"].num_output_tokens == 41
    # Ignored requests are reported apart, not as finished.
    assert result.counters["num_requests_finished"] == 2


def test_a_prompt_of_exactly_max_model_len_is_ignored():
    # It could never produce a token: the core caps computed tokens at max_model_len - 1.
    _, result = run([spec("a", 128, 4)], num_gpu_blocks=64, max_model_len=128)
    assert rows(result)["a"].finish_status == "ignored"


class _BlockedForever(kvframe.SchedulingPolicy):
    """Test-only: marks every request as waiting for a KV load that never lands."""

    name = "blocked-forever"

    def __init__(self) -> None:
        from kvframe_fcfs import FCFSPolicy

        self._fcfs = FCFSPolicy()

    def create_queue(self):
        return self._fcfs.create_queue()

    def select_queue(self, waiting, skipped_waiting):
        return self._fcfs.select_queue(waiting, skipped_waiting)

    def choose_victim(self, running):
        return running[-1]

    def on_arrival(self, request: Request) -> None:
        request.status = RequestStatus.WAITING_FOR_REMOTE_KVS


def test_a_stall_raises_a_clear_error_instead_of_looping(registry: PluginRegistry):
    registry.register_class(_BlockedForever)
    with pytest.raises(EngineStalled, match=r"stalled.*'a'.*WAITING_FOR_REMOTE_KVS"):
        run([spec("a", 16, 1)], registry, scheduling="blocked-forever", num_gpu_blocks=16)


def test_a_blocked_request_waits_for_the_next_arrival_before_stalling(registry: PluginRegistry):
    registry.register_class(_BlockedForever)
    engine = Engine.from_config(
        EngineConfig(scheduling="blocked-forever", num_gpu_blocks=16), registry
    )
    with pytest.raises(EngineStalled):
        engine.run([spec("a", 16, 1), spec("b", 16, 1, arrival=50.0)])
    assert engine.now == 50.0  # it jumped to b's arrival, then gave up


# -- interruption ------------------------------------------------------------------


def test_keyboard_interrupt_stops_cleanly_with_a_partial_result(tmp_path):
    calls = []

    def interrupt_after_20_steps(progress: RunProgress) -> None:
        calls.append(progress.num_steps)
        if progress.num_steps == 20:
            raise KeyboardInterrupt

    trace = tmp_path / "t.jsonl"
    engine = Engine.from_config(EngineConfig(num_gpu_blocks=256, tracers=(f"jsonl:path={trace}",)))
    specs = [spec(f"r{i}", 64, 16, arrival=0.01 * i) for i in range(20)]
    result = engine.run(specs, progress=interrupt_after_20_steps)
    assert result.partial and result.summary.partial
    assert calls[-1] == 20 and result.counters["num_steps"] == 20
    assert result.counters["num_requests_unfinished"] > 0
    assert result.summary.distributions["time_to_first_token_seconds"] is not None
    # The tracer was closed (flushed) although the run was interrupted.
    assert trace.read_text().count('"step_decision"') == 20
    assert engine.tracing is not None and engine.tracing.tracers[0]._out is None


# -- closed-loop agentic turns ---------------------------------------------------------


def test_a_follow_up_turn_arrives_a_tool_duration_after_the_previous_turn_finishes():
    specs = [
        spec("j-0", 64, 2, job_id="j", turn=0, tool_name="search", tool_duration=5.0),
        spec("j-1", 80, 2, job_id="j", turn=1, is_last_turn=False, tool_duration=1.0),
        spec("other", 32, 2, arrival=0.5),
        spec("j-2", 96, 2, job_id="j", turn=2, arrival=0.0),
    ]
    _, result = run(specs, num_gpu_blocks=64)
    by_id = rows(result)
    assert by_id["j-1"].arrival_time == pytest.approx(by_id["j-0"].finish_time + 5.0)
    assert by_id["j-2"].arrival_time == pytest.approx(by_id["j-1"].finish_time + 1.0)
    assert by_id["other"].arrival_time == 0.5
    jct = result.summary.distributions["job_completion_time_seconds"]
    assert jct is not None and jct.count == 1
    assert jct.max == pytest.approx(by_id["j-2"].finish_time)


# -- metrics ------------------------------------------------------------------------------


def test_per_request_recomputed_tokens_add_up_to_the_scheduler_counter(conversation_chains):
    _, result = run(conversation_chains, num_gpu_blocks=8000, reserve_full_sequence=False)
    counters = result.counters
    assert counters["num_preemptions"] > 0
    assert (
        sum(r.num_recomputed_tokens for r in result.summary.requests)
        == counters["num_recomputed_tokens"]
    )
    assert sum(r.num_preemptions for r in result.summary.requests) == counters["num_preemptions"]
    assert (
        sum(r.num_cached_tokens for r in result.summary.requests) == counters["prefix_cache_hits"]
    )


def test_finished_requests_are_not_kept_alive():
    live_counts = []

    def count_live_requests(progress: RunProgress) -> None:
        if progress.num_steps % 50 == 0:
            gc.collect()
            live_counts.append(sum(type(o) is Request for o in gc.get_objects()))

    engine = Engine.from_config(EngineConfig(num_gpu_blocks=2048, max_num_seqs=8))
    specs = [spec(f"r{i}", 256, 8, arrival=0.05 * i) for i in range(200)]
    engine.run(specs, progress=count_live_requests)
    gc.collect()
    assert sum(type(o) is Request for o in gc.get_objects()) == 0
    # In flight at most: 8 running plus the queue that has built up.
    assert live_counts and max(live_counts) < 60


# -- the directions of the "done when", on a slice of the conversation trace ---------


@pytest.mark.parametrize("reserve_full_sequence", [True, False])
def test_a_smaller_pool_lowers_the_hit_rate_and_raises_preemptions(
    conversation_chains, reserve_full_sequence: bool
):
    _, large = run(
        conversation_chains, num_gpu_blocks=27771, reserve_full_sequence=reserve_full_sequence
    )
    _, small = run(
        conversation_chains, num_gpu_blocks=8000, reserve_full_sequence=reserve_full_sequence
    )
    assert large.counters["num_requests_ignored"] == small.counters["num_requests_ignored"] == 0
    assert small.counters["prefix_cache_hit_rate"] < large.counters["prefix_cache_hit_rate"]
    assert small.counters["prefix_cache_hits"] < large.counters["prefix_cache_hits"]
    if reserve_full_sequence:
        # vLLM 0.19's default admits a request only when its whole prompt fits,
        # so with these short outputs nothing is ever preempted, whatever the pool.
        assert small.counters["num_preemptions"] == large.counters["num_preemptions"] == 0
    else:
        # Admitting on the first chunk alone overcommits a small pool.
        assert large.counters["num_preemptions"] == 0
        assert small.counters["num_preemptions"] > 10


def test_without_prefix_caching_nothing_hits_and_every_token_is_computed(conversation_chains):
    _, on = run(conversation_chains, num_gpu_blocks=27771)
    _, off = run(conversation_chains, num_gpu_blocks=27771, enable_prefix_caching=False)
    assert on.counters["prefix_cache_hits"] > 0
    assert off.counters["prefix_cache_hits"] == 0
    assert off.counters["preempted_prefix_cache_hits"] == 0
    prompt = off.counters["prompt_tokens_total"]
    decode = sum(r.num_output_tokens - 1 for r in off.summary.requests)
    recomputed = off.counters["num_recomputed_tokens"]
    assert off.counters["computed_tokens_total"] == prompt + decode + recomputed
    assert on.counters["computed_tokens_total"] < off.counters["computed_tokens_total"]


def test_priority_scheduling_lowers_ttft_of_high_priority_requests():
    chat = generate_chat(num_requests=200, rate=40.0, seed=3, output_length=64)
    specs = [attrs.evolve(s, priority=0 if i % 4 == 0 else 1) for i, s in enumerate(chat)]
    high = {s.request_id for s in specs if s.priority == 0}

    def mean_ttft(scheduling: str, wanted: bool) -> float:
        _, result = run(specs, scheduling=scheduling, num_gpu_blocks=3000)
        return statistics.mean(
            r.time_to_first_token_seconds
            for r in result.summary.requests
            if (r.request_id in high) == wanted
        )

    assert mean_ttft("priority", True) < 0.5 * mean_ttft("fcfs", True)
    assert mean_ttft("priority", False) > mean_ttft("fcfs", False)  # the price, paid by the rest


# -- configuration ---------------------------------------------------------------------------


def test_kv_memory_becomes_blocks_through_the_model_shape():
    config = EngineConfig(kv_memory=2**30, block_size=16)
    # Llama-3.1-8B: 128 KiB of KV per token, 2 MiB per 16-token block.
    assert config.resolved_num_gpu_blocks() == 512
    assert EngineConfig().resolved_num_gpu_blocks() == PRESET.num_gpu_blocks(16)
    assert EngineConfig().resolved_max_model_len() == 131072


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(num_gpu_blocks=100, kv_memory=2**30), "not both"),
        (dict(num_gpu_blocks=1), ">= 2"),
        (dict(block_size=0), "block_size must be a positive integer"),
        (dict(preset="llama3.1-8b-h10"), "did you mean 'llama3.1-8b-h100'"),
        (dict(enable_prefix_caching="no"), "true or false"),
    ],
)
def test_bad_engine_settings_are_rejected(settings, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**settings)


def test_settings_from_kvframe_toml_name_their_origin():
    config = EngineConfig.from_settings(
        {"kv_memory": "4GiB", "prefix_caching": False, "block_size": 32}
    )
    assert config.kv_memory == 4 * 2**30 and config.enable_prefix_caching is False
    with pytest.raises(ConfigError, match="did you mean 'block_size'") as info:
        EngineConfig.from_settings(
            {"blok_size": 8}, origins={"blok_size": "kvframe.toml, key 'blok_size'"}
        )
    assert str(info.value).startswith("kvframe.toml, key 'blok_size'")
    with pytest.raises(ConfigError, match="--block-size"):
        EngineConfig.from_settings({"block_size": -4}, origins={"block_size": "--block-size"})


def test_unknown_scheduler_names_the_closest_one():
    with pytest.raises(ConfigError, match="did you mean 'priority'"):
        Engine.from_config(EngineConfig(scheduling="priorty"), get_registry())


def test_kv_cache_events_are_recorded_only_when_a_tracer_is_active(tmp_path):
    plain = Engine.from_config(EngineConfig(num_gpu_blocks=64))
    traced = Engine.from_config(
        EngineConfig(num_gpu_blocks=64, tracers=(f"jsonl:path={tmp_path / 't.jsonl'}",))
    )
    assert plain.tracing is None
    assert not plain.scheduler.config.enable_kv_cache_events
    assert traced.scheduler.config.enable_kv_cache_events
    traced.run([spec("a", 8, 1)])
