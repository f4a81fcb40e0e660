"""Runs of plain decode steps (kvframe.core.decode_run) give exactly the step-by-step results.

The engine takes stretches of decode-only steps in one go unless
``EngineConfig(step_by_step=True)``. Everything a run leaves behind must be
what the step-by-step path leaves: every summary counter and per-request
record (times to the last bit), the scheduler's and the KV manager's
counters, and the KV pool itself (free-queue order, cached hashes). These
tests compare the two paths over workloads chosen to hit every way a run
ends: finishes, arrivals, admissions after a finish, block allocations and
preemptions under memory pressure, chunked prefill, lookahead-free decoding
at block boundaries, several policies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvframe.core.decode_run import DecodeRun
from kvframe.domain.request import Request
from kvframe.engine import Engine, EngineConfig
from kvframe.workloads import load_workload
from kvframe.workloads.agentic import generate_agentic
from kvframe.workloads.chat import generate_chat
from kvframe.workloads.spec import RequestSpec

HEAD = Path(__file__).resolve().parents[1] / "core" / "data" / "mooncake_conversation_head300.jsonl"


def _state(engine: Engine, result: Any) -> dict[str, Any]:
    """Everything observable after a run, wall-clock figures aside."""
    summary = result.summary.to_dict(include_requests=True)
    summary["counters"] = {k: v for k, v in summary["counters"].items() if "wall" not in k}
    summary["metadata"]["engine"].pop("step_by_step")
    scheduler = engine.scheduler
    kv = scheduler.kv_cache_manager
    pool = kv.block_pool
    # get_all_free_blocks walks the links on either core (Python or compiled).
    free_order = [block.block_id for block in pool.free_block_queue.get_all_free_blocks()]
    return {
        "summary": summary,
        "scheduler_stats": repr(scheduler.stats),
        "prefix_cache_stats": repr(kv.prefix_cache_stats),
        "free_order": free_order,
        "cached": sorted((b.block_id, b.block_hash) for b in pool.blocks if b.block_hash),
        "tables": {r: [b.block_id for b in t] for r, t in kv.req_to_blocks.items()},
        "now": engine.now,
    }


def _both(specs: list[RequestSpec], **config: Any) -> tuple[dict, dict, int]:
    states = []
    run_steps = 0
    for step_by_step in (True, False):
        engine = Engine.from_config(EngineConfig(step_by_step=step_by_step, **config))
        result = engine.run(specs)
        states.append(_state(engine, result))
        if not step_by_step:
            run_steps = engine.num_decode_run_steps
        else:
            assert engine.num_decode_run_steps == 0
    return states[0], states[1], run_steps


def _assert_same(reference: dict, fast: dict) -> None:
    for key in reference:
        assert fast[key] == reference[key], f"{key} differs between step-by-step and decode runs"


CHAT = generate_chat(num_requests=150, seed=4, rate=12.0, system_prompt_length=300)
TRACE = list(load_workload(HEAD, limit=120).requests)


@pytest.mark.parametrize(
    ("specs", "config"),
    [
        (TRACE, {"num_gpu_blocks": 30000}),
        (TRACE, {"num_gpu_blocks": 2500}),  # pressure: preemptions, recomputation
        (TRACE, {"num_gpu_blocks": 4000, "enable_prefix_caching": False}),
        (TRACE, {"num_gpu_blocks": 3000, "scheduling": "priority"}),
        (TRACE, {"num_gpu_blocks": 3000, "gpu_eviction": "arc:variant=paper"}),
        (CHAT, {"num_gpu_blocks": 400}),
        (CHAT, {"num_gpu_blocks": 700, "block_size": 32, "max_num_seqs": 8}),
        (
            CHAT,
            {
                "num_gpu_blocks": 900,
                "long_prefill_token_threshold": 64,
                "max_num_batched_tokens": 256,
            },
        ),
        (CHAT, {"num_gpu_blocks": 900, "max_model_len": 700}),  # length-capped requests
        # vLLM 0.33's rules (kvframe.domain.fidelity): the free order, the lone-request cap.
        (TRACE, {"num_gpu_blocks": 2500, "vllm": "0.33"}),
        (TRACE, {"num_gpu_blocks": 3000, "scheduling": "priority", "vllm": "0.33"}),
        (
            CHAT,
            {
                "num_gpu_blocks": 900,
                "long_prefill_token_threshold": 64,
                "max_num_batched_tokens": 256,
                "vllm": "0.33",
            },
        ),
    ],
    ids=[
        "trace",
        "trace-pressure",
        "trace-nocache",
        "trace-priority",
        "trace-gpu-arc",
        "chat",
        "chat-bs32-seqs8",
        "chat-chunked",
        "chat-model-len",
        "trace-pressure-vllm033",
        "trace-priority-vllm033",
        "chat-chunked-vllm033",
    ],
)
def test_decode_runs_leave_what_step_by_step_leaves(specs, config) -> None:
    reference, fast, run_steps = _both(specs, **config)
    _assert_same(reference, fast)
    # Not vacuous: most steps of these runs are taken inside decode runs.
    assert run_steps > reference["summary"]["counters"]["num_steps"] // 3


def test_agentic_closed_loop_arrivals_during_runs() -> None:
    # Later turns arrive a tool call after the previous turn finished: arrivals
    # that depend on finish times, which a run must reproduce to the bit.
    specs = generate_agentic(num_jobs=25, seed=2, rate=1.0)
    reference, fast, run_steps = _both(specs, num_gpu_blocks=1200)
    _assert_same(reference, fast)
    assert run_steps > 0


def test_policies_that_read_running_requests_go_step_by_step() -> None:
    # Continuum overrides on_step_start / on_arrival: no runs, same results.
    specs = generate_agentic(num_jobs=10, seed=3, rate=1.0)
    reference, fast, run_steps = _both(specs, num_gpu_blocks=1200, scheduling="continuum")
    _assert_same(reference, fast)
    assert run_steps == 0


def test_offload_tier_and_tracers_go_step_by_step(tmp_path) -> None:
    for config in (
        {"offload": "cpu:capacity=64MiB"},
        {"tracers": (f"jsonl:path={tmp_path / 't.jsonl'}",)},
    ):
        engine = Engine.from_config(EngineConfig(num_gpu_blocks=3000, **config))
        engine.run(TRACE[:30])
        assert engine.num_decode_run_steps == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    num_gpu_blocks=st.integers(40, 400),
    block_size=st.sampled_from([1, 4, 16]),
    max_num_seqs=st.integers(1, 16),
    budget=st.integers(16, 512),
)
def test_random_workloads_match_step_by_step(
    seed, num_gpu_blocks, block_size, max_num_seqs, budget
) -> None:
    specs = generate_chat(
        num_requests=25,
        seed=seed,
        rate=20.0,
        system_prompt_length="uniform:low=8,high=200",
        user_prompt_length="uniform:low=1,high=120",
        output_length="uniform:low=1,high=90",
    )
    reference, fast, _ = _both(
        specs,
        num_gpu_blocks=num_gpu_blocks,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        max_model_len=budget * 4,
        enable_chunked_prefill=True,
    )
    _assert_same(reference, fast)


def _decoding(request_id: str, *, stop: tuple[int, ...] = (), outputs: int = 3) -> Request:
    request = Request(request_id, list(range(10)), max_tokens=20, stop_token_ids=stop)
    request.append_output_token_ids([5] * outputs)
    request.num_computed_tokens = request.num_tokens - 1
    return request


def test_finish_step_is_the_first_step_a_request_finishes() -> None:
    a, b = _decoding("a", outputs=3), _decoding("b", outputs=15)
    # b has 5 tokens left to max_tokens: it finishes in step 5.
    assert DecodeRun.finish_step([a, b], token_id=0, max_model_len=1000) == 5
    # max_model_len 30: b holds 25 tokens, so its 5th step reaches 30 as well;
    # 28 makes it the 3rd.
    assert DecodeRun.finish_step([a, b], token_id=0, max_model_len=28) == 3
    # Sampling a stop token finishes in the first step.
    assert (
        DecodeRun.finish_step([a, _decoding("s", stop=(0,))], token_id=0, max_model_len=1000) == 1
    )
    # A request still prefilling (or with no output yet) rules a run out.
    prefilling = _decoding("p", outputs=1)
    prefilling.num_computed_tokens -= 3
    assert DecodeRun.finish_step([a, prefilling], token_id=0, max_model_len=1000) == 0
    assert (
        DecodeRun.finish_step([a, _decoding("n", outputs=0)], token_id=0, max_model_len=1000) == 0
    )
