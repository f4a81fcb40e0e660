"""Continuum against FCFS on an agentic workload, closed loop, under memory pressure.

The workload: 30 coding-agent jobs (4-8 turns, ~2.5k-token first prompts that
grow by tool results) arriving at 1.5 jobs/s, fast tools (median 0.1-0.5 s),
on a 1,500-block (24k-token) KV cache with a 512-token step budget and 20 ms
steps. These tests check what the mechanism does (pins turn into prefix hits,
nothing stalls); how much it gains -- mean JCT and re-prefill against FCFS --
is measured by ``benchmarks/continuum_closed_loop.py`` on the same workload.
"""

from __future__ import annotations

import pytest
from kvframe_continuum import ContinuumPolicy
from kvframe_fcfs import FCFSPolicy

from kvframe.domain.costs import CostModel
from kvframe.workloads.agentic import generate_agentic

from .closed_loop import run_closed_loop

STEP_TIME = 0.02
BUDGET = 512


def step_cost_model() -> CostModel:
    """The closed loop's time model as a cost model: a full-budget prefill step takes one step."""
    return CostModel(
        per_step_s=STEP_TIME,
        per_prefill_token_s=STEP_TIME / BUDGET,
        per_decode_seq_s=0.0,
        per_context_token_s=0.0,
        transfer_bytes_per_s=1e9,
    )


def continuum(**options) -> ContinuumPolicy:
    policy = ContinuumPolicy(**options)
    policy.set_cost_model(step_cost_model())
    return policy


@pytest.fixture(scope="module")
def workload():
    return generate_agentic(
        num_jobs=30,
        rate=1.5,
        num_turns="uniform:low=4,high=8",
        system_prompt_length=512,
        task_length="lognormal:median=2048,sigma=0.3,max=4096",
        output_length="uniform:low=16,high=32",
        tools="fast",
        tool_time_scale=0.5,
        max_context_tokens=8192,
        seed=0,
    )


def run(workload, policy, **kwargs):
    result, _ = run_closed_loop(
        workload,
        policy,
        num_gpu_blocks=1500,
        max_num_batched_tokens=BUDGET,
        step_time=STEP_TIME,
        **kwargs,
    )
    assert len(result.job_completion_times) == 30
    return result


def test_continuum_pins_turn_into_prefix_hits_versus_fcfs_and_order_only(workload):
    fcfs = run(workload, FCFSPolicy())
    policy = continuum()
    cont = run(workload, policy)
    no_pins = run(workload, continuum(max_ttl=0.0))
    print(
        f"\nmean JCT: fcfs {fcfs.mean_jct:.2f}s  continuum {cont.mean_jct:.2f}s  "
        f"no-pin {no_pins.mean_jct:.2f}s\n"
        f"re-prefilled tokens: fcfs {fcfs.reprefilled_tokens}  continuum "
        f"{cont.reprefilled_tokens}  no-pin {no_pins.reprefilled_tokens}\n{policy.stats}"
    )
    assert cont.prefix_hit_tokens > fcfs.prefix_hit_tokens
    # The pins themselves save prefill beyond what the queue order does.
    assert cont.reprefilled_tokens < no_pins.reprefilled_tokens
    assert policy.stats.num_pinned > 0 and policy.stats.num_not_pinned > 0


def test_pins_that_never_expire_still_cannot_stall_the_engine(workload):
    # Every turn pinned for ~forever in a cache that holds a handful of contexts:
    # only reclaim (and the core's safety net) make room, and every job completes.
    policy = continuum(ttl="fixed", fixed_ttl=1e6, queued_grace=1e6)
    result, scheduler = run_closed_loop(
        workload[:40], policy, num_gpu_blocks=700, max_num_batched_tokens=BUDGET,
        step_time=STEP_TIME,
    )  # fmt: skip
    jobs = {spec.job_id for spec in workload[:40]}
    finished_jobs = {spec.job_id for spec in workload[:40] if spec.is_last_turn}
    assert set(result.job_completion_times) == finished_jobs <= jobs
    assert policy.stats.released_reclaimed > 0
    assert not scheduler.has_unfinished_requests()
