"""The core's asynchronous-scheduling mode: vLLM's AsyncScheduler, without vLLM.

Under ``SchedulerConfig(async_scheduling=True)`` the caller schedules step N+1
before applying step N's output (vLLM's batch queue). These tests drive the
core in that order by hand and check the invariants the mode promises: a
placeholder per token in flight, scheduling from the placeholder, no step past
``max_tokens``, blocks cached only when their tokens are known, a preempted
request's in-flight token appended without a placeholder -- and that the
synchronous and asynchronous runs differ where the lag says they must. That the
decisions are vLLM's, step for step, is the differential harness's job
(``tests/differential/test_vllm_decisions.py``, which needs vLLM).
"""

from __future__ import annotations

import random
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvframe_priority import PriorityPolicy

from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import ModelRunnerOutput, SchedulerOutput

from .helpers import SAMPLED_TOKEN, add, make_scheduler, sample_for, step


def lagged(scheduler: Scheduler) -> tuple[SchedulerOutput, ModelRunnerOutput]:
    """Schedule one step and fix what it samples (the worker's view right after it)."""
    output = scheduler.schedule()
    return output, sample_for(scheduler, output)


def test_a_sampling_step_leaves_one_placeholder_per_token_in_flight() -> None:
    scheduler = make_scheduler(async_scheduling=True)
    request = add(scheduler, "a", 10, max_tokens=5)
    first = lagged(scheduler)
    assert first[0].num_scheduled_tokens == {"a": 10}
    assert request.num_output_placeholders == 1  # the first token is in flight
    assert request.num_tokens == 10

    # Step 2 is scheduled from the placeholder, before token 1 is known.
    second = lagged(scheduler)
    assert second[0].num_scheduled_tokens == {"a": 1}
    assert request.num_output_placeholders == 2
    assert request.num_computed_tokens == 11 == request.num_tokens + 1

    scheduler.update_from_output(*first)
    assert request.output_token_ids == [SAMPLED_TOKEN]
    assert request.num_output_placeholders == 1


def test_a_partial_prefill_chunk_has_no_placeholder() -> None:
    scheduler = make_scheduler(async_scheduling=True, max_num_batched_tokens=8)
    request = add(scheduler, "a", 12, max_tokens=3)
    chunk = lagged(scheduler)
    assert chunk[0].num_scheduled_tokens == {"a": 8}
    assert request.num_output_placeholders == 0
    assert chunk[1].sampled_token_ids == {}
    rest = lagged(scheduler)
    assert rest[0].num_scheduled_tokens == {"a": 4}
    assert request.num_output_placeholders == 1


def run_lagged(scheduler: Scheduler, max_steps: int = 10_000) -> list[SchedulerOutput]:
    """Schedule N+1, then apply N (a batch queue of two) until every request finished."""
    outputs: list[SchedulerOutput] = []
    in_flight: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
    while scheduler.has_requests() or in_flight:
        if scheduler.has_requests():
            in_flight.append(lagged(scheduler))
            outputs.append(in_flight[-1][0])
            if len(in_flight) < 2 and in_flight[-1][0].total_num_scheduled_tokens:
                continue
        scheduler.update_from_output(*in_flight.popleft())
        assert len(outputs) < max_steps, "the requests did not finish"
    return outputs


def test_no_step_is_scheduled_past_max_tokens() -> None:
    """The step after the one whose token is the last skips the request (vLLM's
    AsyncScheduler check), so it runs exactly max_tokens sampling steps."""
    scheduler = make_scheduler(async_scheduling=True)
    request = add(scheduler, "a", 6, max_tokens=4)
    outputs = run_lagged(scheduler)
    scheduled = [o.num_scheduled_tokens.get("a", 0) for o in outputs]
    assert scheduled[:4] == [6, 1, 1, 1]
    assert not any(scheduled[4:])
    assert request.num_output_tokens == 4
    assert request.num_output_placeholders == 0


def test_blocks_are_cached_once_their_tokens_are_known() -> None:
    """A block is cached when the token that completes it is known, as in vLLM:
    under async scheduling that is one step later than in sync."""

    def cached_after_each_schedule(async_scheduling: bool) -> list[int]:
        scheduler = make_scheduler(async_scheduling=async_scheduling, block_size=4)
        request = add(scheduler, "a", 7, max_tokens=6)
        kv = scheduler.kv_cache_manager
        seen = []
        in_flight: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
        for _ in range(3):
            in_flight.append(lagged(scheduler))
            seen.append(kv.num_cached_block.get(request.request_id, 0))
            if not async_scheduling or len(in_flight) == 2:
                scheduler.update_from_output(*in_flight.popleft())
        return seen

    # Sync: step 2 computes position 8 from the sampled token, known by then:
    # block 2 is cached when step 2 is scheduled.
    assert cached_after_each_schedule(False) == [1, 2, 2]
    # Async: step 2 is scheduled before token 8 is known; block 2 is cached when
    # step 3 is scheduled, after step 1's output was applied.
    assert cached_after_each_schedule(True) == [1, 1, 2]


def test_a_request_preempted_in_flight_gets_its_token_without_a_placeholder() -> None:
    """The victim's in-flight token arrives after the preemption: appended, not cached."""
    scheduler = make_scheduler(
        async_scheduling=True, num_gpu_blocks=5, block_size=4, max_num_seqs=2
    )
    a = add(scheduler, "a", 8, max_tokens=20)
    b = add(scheduler, "b", 7, max_tokens=20)
    in_flight: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
    preempted = None
    for _ in range(20):
        in_flight.append(lagged(scheduler))
        if in_flight[-1][0].preempted_req_ids:
            preempted = in_flight[-1][0].preempted_req_ids
            break
        if len(in_flight) == 2:
            scheduler.update_from_output(*in_flight.popleft())
    assert preempted == {"b"}
    tokens_before = b.num_output_tokens
    assert b.num_output_placeholders == 0 and b.num_computed_tokens == 0
    scheduler.update_from_output(*in_flight.popleft())  # b's last step, applied late
    assert b.num_output_tokens == tokens_before + 1
    assert b.num_output_placeholders == 0
    assert a.num_output_placeholders == 1  # a's newest token is still in flight


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    num_blocks=st.integers(8, 24),
    priority=st.booleans(),
    caching=st.booleans(),
)
def test_placeholders_count_the_tokens_in_flight(
    seed: int, num_blocks: int, priority: bool, caching: bool
) -> None:
    """At every point of a lagged run: a running request's placeholders are the
    tokens it has in flight (0, 1 or 2), a waiting one has none, computed tokens
    never exceed known tokens plus placeholders; every request ends with all its
    tokens and no placeholder."""
    rng = random.Random(seed)
    scheduler = make_scheduler(
        PriorityPolicy() if priority else None,
        async_scheduling=True,
        num_gpu_blocks=num_blocks,
        max_num_batched_tokens=16,
        enable_prefix_caching=caching,
    )
    requests = [
        add(
            scheduler,
            f"r{i}",
            [rng.randrange(3) for _ in range(rng.randint(1, 12))],
            max_tokens=rng.randint(1, 8),
            priority=rng.randrange(3),
            arrival_time=float(i),
        )
        for i in range(rng.randint(1, 6))
    ]
    in_flight: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
    for _ in range(2_000):
        if not (scheduler.has_requests() or in_flight):
            break
        if scheduler.has_requests():
            in_flight.append(lagged(scheduler))
        if (
            len(in_flight) == 2
            or not scheduler.has_requests()
            or not (in_flight and in_flight[-1][0].total_num_scheduled_tokens)
        ):
            scheduler.update_from_output(*in_flight.popleft())
        pending = {rid for out, sampled in in_flight for rid in sampled.sampled_token_ids}
        for request in scheduler.requests.values():
            if request in scheduler.running:
                in_flight_tokens = sum(
                    rid == request.request_id
                    for _, sampled in in_flight
                    for rid in sampled.sampled_token_ids
                )
                assert request.num_output_placeholders == in_flight_tokens
                assert (
                    request.num_computed_tokens
                    <= request.num_tokens + request.num_output_placeholders
                )
            else:
                assert request.num_output_placeholders == 0
        assert pending <= {r.request_id for r in requests}
    else:
        pytest.fail("the lagged run did not finish")
    for request in requests:
        assert request.is_finished()
        assert request.num_output_placeholders == 0
        assert request.num_output_tokens == request.max_tokens


def test_sync_and_async_differ_where_the_lag_says() -> None:
    """A second request asks for a prefix whose last block the first request completes
    with its sampled token: in sync that block is cached in the step that computes
    it, before the second request is admitted in the same step; under async
    scheduling that step is scheduled before the token is back, so the hit is one
    block shorter."""

    def hit(async_scheduling: bool) -> int:
        scheduler = make_scheduler(async_scheduling=async_scheduling, block_size=4)
        prompt = list(range(100, 107))  # 7 tokens: the 8th is the sampled one
        add(scheduler, "a", prompt, max_tokens=8)
        in_flight: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
        for k in range(3):
            if k == 1:
                # Admitted in step 2, after a in the running loop.
                add(scheduler, "b", [*prompt, SAMPLED_TOKEN, 300, 301, 302, 303, 304])
            in_flight.append(lagged(scheduler))
            if not async_scheduling or len(in_flight) == 2:
                scheduler.update_from_output(*in_flight.popleft())
        return scheduler.requests["b"].num_cached_tokens

    assert hit(False) == 8
    assert hit(True) == 4


def test_async_scheduling_with_drafts_is_refused() -> None:
    with pytest.raises(ValueError, match="async_scheduling with num_speculative_tokens"):
        SchedulerConfig(num_gpu_blocks=8, async_scheduling=True, num_speculative_tokens=2)


def test_sync_mode_is_unchanged_by_the_switch_machinery() -> None:
    """Synchronous runs never hold a placeholder (the default is sync)."""
    scheduler = make_scheduler()
    assert not scheduler.async_scheduling
    request = add(scheduler, "a", 9, max_tokens=3)
    while scheduler.has_unfinished_requests():
        step(scheduler)
        assert request.num_output_placeholders == 0
    assert request.num_output_tokens == 3
