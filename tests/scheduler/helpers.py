"""Shared helpers for scheduler tests: build a scheduler, run steps like an executor would."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from kvframe_fcfs import FCFSPolicy

from kvframe.core import factory
from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from kvframe.domain.request import Request

SAMPLED_TOKEN = 7


def make_scheduler(policy=None, **overrides) -> Scheduler:
    settings = dict(
        block_size=4,
        num_gpu_blocks=64,
        max_num_batched_tokens=64,
        max_num_seqs=16,
        max_model_len=256,
    )
    settings.update(overrides)
    return factory.make_scheduler(SchedulerConfig(**settings), policy or FCFSPolicy())


def add(
    scheduler: Scheduler,
    request_id: str,
    prompt: Sequence[int] | int,
    max_tokens: int = 4,
    **kwargs,
) -> Request:
    """Add a request; an int prompt means that many distinct tokens."""
    if isinstance(prompt, int):
        base = 1000 * (zlib.crc32(request_id.encode()) % 100_000 + 1)
        prompt = [base + i for i in range(prompt)]
    request = Request(
        request_id, list(prompt), max_tokens, block_hasher=scheduler.block_hasher, **kwargs
    )
    scheduler.add_request(request)
    return request


def sample_for(scheduler: Scheduler, output: SchedulerOutput) -> ModelRunnerOutput:
    """One fixed token for every request whose prompt is fully computed after this step."""
    sampled = {}
    for request_id in output.num_scheduled_tokens:
        request = scheduler.requests[request_id]
        if request.num_computed_tokens >= request.num_tokens:
            sampled[request_id] = [SAMPLED_TOKEN]
    return ModelRunnerOutput(sampled_token_ids=sampled)


def step(scheduler: Scheduler, now: float | None = None) -> tuple[SchedulerOutput, list[Request]]:
    output = scheduler.schedule(now)
    finished = scheduler.update_from_output(output, sample_for(scheduler, output))
    return output, finished


def run_to_completion(scheduler: Scheduler, max_steps: int = 10_000) -> int:
    steps = 0
    while scheduler.has_unfinished_requests():
        step(scheduler)
        steps += 1
        if steps > max_steps:
            raise AssertionError("scheduler did not finish its requests")
    return steps
