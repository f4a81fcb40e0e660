"""The sim executor: prefill vs decode, what it samples, how long a step takes."""

from __future__ import annotations

import pytest
from kvframe_fcfs import FCFSPolicy

from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.domain.costs import CostModel
from kvframe.domain.request import Request
from kvframe.executors.sim import SAMPLED_TOKEN_ID, SimExecutor

COST = CostModel(
    per_step_s=1.0,
    per_prefill_token_s=0.01,
    per_decode_seq_s=0.1,
    per_context_token_s=0.001,
    transfer_bytes_per_s=1e9,
)


def make_scheduler(**overrides: int) -> Scheduler:
    settings = dict(
        block_size=4, num_gpu_blocks=64, max_num_batched_tokens=8, max_num_seqs=8, max_model_len=256
    )
    settings.update(overrides)
    return Scheduler(SchedulerConfig(**settings), FCFSPolicy())


def add(scheduler: Scheduler, request_id: str, num_prompt: int, max_tokens: int = 4) -> Request:
    base = 1000 * (len(scheduler.requests) + 1)
    request = Request(request_id, [base + i for i in range(num_prompt)], max_tokens)
    scheduler.add_request(request)
    return request


def step(scheduler: Scheduler, executor: SimExecutor):
    output = scheduler.schedule(0.0)
    result = executor.execute(output, scheduler.requests)
    finished = scheduler.update_from_output(output, result.model_output)
    return output, result, finished


def test_partial_prefill_chunk_samples_nothing_and_costs_prefill():
    scheduler, executor = make_scheduler(), SimExecutor(COST)
    add(scheduler, "a", 12)
    _, result, _ = step(scheduler, executor)  # 8 of 12 prompt tokens (budget 8)
    assert (result.num_prefill_tokens, result.num_decode_seqs, result.num_context_tokens) == (
        8,
        0,
        0,
    )
    assert result.sampled == [] and dict(result.model_output.sampled_token_ids) == {}
    assert result.duration == pytest.approx(1.0 + 8 * 0.01)


def test_last_prefill_chunk_samples_and_reads_the_earlier_chunks_as_context():
    scheduler, executor = make_scheduler(), SimExecutor(COST)
    request = add(scheduler, "a", 12)
    step(scheduler, executor)
    _, result, _ = step(scheduler, executor)  # the last 4 prompt tokens
    assert (result.num_prefill_tokens, result.num_decode_seqs, result.num_context_tokens) == (
        4,
        0,
        8,
    )
    assert result.sampled == [request]
    assert request.output_token_ids == [SAMPLED_TOKEN_ID]
    assert result.duration == pytest.approx(1.0 + 4 * 0.01 + 8 * 0.001)


def test_generating_requests_are_decode_sequences():
    scheduler, executor = make_scheduler(max_num_batched_tokens=64), SimExecutor(COST)
    add(scheduler, "a", 6)
    add(scheduler, "b", 10)
    step(scheduler, executor)  # both prefills, one token sampled each
    _, result, _ = step(scheduler, executor)
    assert (result.num_prefill_tokens, result.num_decode_seqs, result.num_context_tokens) == (
        0,
        2,
        16,
    )
    assert result.duration == pytest.approx(1.0 + 2 * 0.1 + 16 * 0.001)


def test_a_resumed_request_recomputing_its_tokens_costs_prefill():
    scheduler = make_scheduler(max_num_batched_tokens=64, enable_prefix_caching=False)
    executor = SimExecutor(COST)
    request = add(scheduler, "a", 8, max_tokens=10)
    step(scheduler, executor)
    step(scheduler, executor)
    # Preempt by hand, as the core does when blocks run out.
    scheduler.running.remove(request)
    scheduler._preempt(request)
    _, result, _ = step(scheduler, executor)
    # Prompt (8) + 2 outputs: all 10 tokens recomputed, and a token sampled.
    assert (result.num_prefill_tokens, result.num_decode_seqs) == (10, 0)
    assert result.sampled == [request]


def test_nothing_scheduled_costs_nothing():
    scheduler, executor = make_scheduler(), SimExecutor(COST)
    result = executor.execute(scheduler.schedule(0.0), scheduler.requests)
    assert result.duration == 0.0 and result.sampled == []


def test_requests_finish_after_max_tokens_with_the_configured_token():
    scheduler, executor = make_scheduler(max_num_batched_tokens=64), SimExecutor(COST, token_id=5)
    request = add(scheduler, "a", 4, max_tokens=3)
    finished: list[Request] = []
    for _ in range(3):
        finished += step(scheduler, executor)[2]
    assert finished == [request]
    assert request.output_token_ids == [5, 5, 5]


def test_same_inputs_give_same_durations_and_tokens():
    def run() -> list[tuple[float, list[int]]]:
        scheduler, executor = make_scheduler(), SimExecutor(COST)
        for i in range(5):
            add(scheduler, f"r{i}", 5 + 3 * i, max_tokens=4)
        out = []
        while scheduler.requests:
            _, result, _ = step(scheduler, executor)
            out.append((result.duration, sorted(result.model_output.sampled_token_ids)))
        return out

    assert run() == run()
