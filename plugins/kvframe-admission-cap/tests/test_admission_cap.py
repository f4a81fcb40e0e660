"""admission-cap: at most ``max_prefilling`` requests prefill at once; the rest wait in order."""

from __future__ import annotations

import pytest
from kvframe_admission_cap import AdmissionCapPolicy

import kvframe
from kvframe import Request


def request(rid: str, tokens: int = 40) -> Request:
    return Request(rid, [hash((rid, i)) % 50_000 for i in range(tokens)], 3, arrival_time=0.0)


def run_steps(policy: kvframe.SchedulingPolicy, num_steps: int) -> list[dict[str, int]]:
    """Tokens scheduled per request in each of the first steps of a real scheduler."""
    from kvframe.core.scheduler import Scheduler, SchedulerConfig
    from kvframe.core.scheduler_output import ModelRunnerOutput

    config = SchedulerConfig(
        block_size=4, num_gpu_blocks=200, max_num_batched_tokens=64, max_num_seqs=8
    )
    scheduler = Scheduler(config, policy)
    for rid in ("r0", "r1", "r2"):
        scheduler.add_request(request(rid))
    steps = []
    for _ in range(num_steps):
        output = scheduler.schedule()
        steps.append(dict(output.num_scheduled_tokens))
        sampled = {
            rid: [7]
            for rid in output.num_scheduled_tokens
            if scheduler.requests[rid].num_computed_tokens >= scheduler.requests[rid].num_tokens
        }
        scheduler.update_from_output(output, ModelRunnerOutput(sampled_token_ids=sampled))
    return steps


def test_is_a_scheduling_policy_selected_as_admission_cap() -> None:
    assert issubclass(AdmissionCapPolicy, kvframe.SchedulingPolicy)
    assert AdmissionCapPolicy.name == "admission-cap"


def test_one_prefill_at_a_time_the_refused_go_next_in_arrival_order() -> None:
    # 40-token prompts, 64 tokens a step. FCFS starts r1's prefill beside r0's; the
    # cap of one admits r1 only once r0 decodes, then r2 once r1 decodes.
    assert run_steps(AdmissionCapPolicy(max_prefilling=1), 3) == [
        {"r0": 40},
        {"r0": 1, "r1": 40},
        {"r0": 1, "r1": 1, "r2": 40},
    ]


def test_without_a_binding_cap_it_schedules_as_fcfs() -> None:
    from kvframe_fcfs import FCFSPolicy

    fcfs = run_steps(FCFSPolicy(), 3)
    assert fcfs[0] == {"r0": 40, "r1": 24}
    assert run_steps(AdmissionCapPolicy(max_prefilling=3), 3) == fcfs
    # A cap of two: r2 waits while r0 and r1 prefill, as FCFS's budget makes it wait too.
    assert run_steps(AdmissionCapPolicy(max_prefilling=2), 3) == fcfs


class Context:
    def __init__(self, running: list[Request]) -> None:
        self.running = running


def test_counts_requests_admitted_within_the_step_and_recounts_at_each_step() -> None:
    decoding, prefilling = request("d", 8), request("p")
    decoding.num_computed_tokens = decoding.num_tokens - 1
    running = [decoding]
    policy = AdmissionCapPolicy(max_prefilling=2)
    policy.attach(Context(running))  # type: ignore[arg-type]
    policy.on_step_start(0.0)
    assert policy.may_admit(request("w1")) is True
    running.append(prefilling)  # admitted this step: it prefills
    assert policy.may_admit(request("w2")) is True
    running.append(request("q"))
    assert policy.may_admit(request("w3")) is False
    policy.on_step_start(0.01)  # the running phase preempted both prefills
    del running[1:]
    assert policy.may_admit(request("w3")) is True


def test_a_cap_below_one_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError) as caught:
        AdmissionCapPolicy(max_prefilling=0)
    assert str(caught.value) == (
        "admission-cap: max_prefilling=0 would admit nothing; it must be at least 1"
    )
