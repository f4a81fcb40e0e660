"""A tiny closed-loop driver for the scheduler, for the end-to-end tests.

It plays the engine's part with the fewest moving pieces: a job's first turn
arrives at its spec's arrival; turn ``k + 1`` arrives ``tool_duration`` after
turn ``k`` finished; every step that schedules something takes ``step_time``
seconds; a step that only preempted is retried at the same time; any other idle
step jumps the clock to the next arrival or retention deadline. Sampled tokens are
a constant (as kvframe's sim executor does), or with ``scripted=True`` the
workload's output stand-ins (as an executor replaying them would).
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict, deque
from collections.abc import Sequence

import attrs

from kvframe.contract.bases import SchedulingPolicy
from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.domain.request import Request
from kvframe.workloads import RequestSpec
from kvframe.workloads.agentic import scripted_output_tokens

SAMPLED_TOKEN = 0


@attrs.define
class RunResult:
    """What a closed-loop run measured."""

    job_completion_times: dict[str, float]
    prefill_tokens: int
    """Tokens computed for prompts (first admissions and recomputation), not decode."""
    reprefilled_tokens: int
    """Tokens an earlier turn of the same job had computed (its prompt's full blocks)
    that were computed again because they were not in the prefix cache, plus tokens
    recomputed after preemptions."""
    prefix_hit_tokens: int
    num_preemptions: int
    num_steps: int
    end_time: float
    waiting_time: float
    """Sum over turns of first admission minus arrival."""

    @property
    def mean_jct(self) -> float:
        return sum(self.job_completion_times.values()) / len(self.job_completion_times)


def run_closed_loop(
    specs: Sequence[RequestSpec],
    policy: SchedulingPolicy,
    *,
    num_gpu_blocks: int,
    block_size: int = 16,
    max_num_batched_tokens: int = 512,
    max_num_seqs: int = 64,
    step_time: float = 0.02,
    scripted: bool = False,
    max_steps: int = 200_000,
) -> tuple[RunResult, Scheduler]:
    scheduler = Scheduler(
        SchedulerConfig(
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=65536,
        ),
        policy,
    )
    held: dict[str, deque[RequestSpec]] = defaultdict(deque)
    opening: list[RequestSpec] = []
    for spec in sorted(specs, key=lambda s: (s.job_id or "", s.turn)):
        if spec.job_id is not None and spec.turn > 0:
            held[spec.job_id].append(spec)
        else:
            opening.append(spec)
    seq = itertools.count()
    due: list[tuple[float, int, RequestSpec]] = [(s.arrival_time, next(seq), s) for s in opening]
    heapq.heapify(due)

    specs_by_id = {spec.request_id: spec for spec in specs}
    previous_prompt: dict[str, int] = {}  # job -> previous turn's prompt length
    reusable: dict[str, int] = {}  # request id -> tokens an earlier turn computed
    outputs: dict[str, list[int]] = {}
    first_arrival: dict[str, float] = {}
    jct: dict[str, float] = {}
    arrival_of: dict[str, float] = {}
    prefill = hits = reprefilled = 0
    waiting_time = 0.0
    now = 0.0
    steps = 0

    while due or scheduler.has_unfinished_requests():
        while due and due[0][0] <= now:
            arrival, _, spec = heapq.heappop(due)
            job = spec.job_id
            if job is not None:
                first_arrival.setdefault(job, arrival)
                if job in previous_prompt:
                    reusable[spec.request_id] = previous_prompt[job] // block_size * block_size
                previous_prompt[job] = spec.num_prompt_tokens
            if scripted:
                outputs[spec.request_id] = scripted_output_tokens(spec)
            arrival_of[spec.request_id] = arrival
            scheduler.add_request(
                Request(
                    spec.request_id,
                    spec.prompt_token_ids,
                    spec.max_tokens,
                    arrival_time=arrival,
                    job_id=spec.job_id,
                    turn=spec.turn,
                    is_last_turn=spec.is_last_turn,
                    tool_name=spec.tool_name,
                )
            )
        if not scheduler.has_unfinished_requests():
            now = max(now, due[0][0])
            continue

        output = scheduler.schedule(now)
        steps += 1
        if steps > max_steps:
            raise AssertionError(f"no progress after {max_steps} steps at t={now:.2f}")
        for hit in output.first_admissions:
            hits += hit.local_hit_tokens
            waiting_time += now - arrival_of[hit.req_id]
            reprefilled += max(0, reusable.get(hit.req_id, 0) - hit.local_hit_tokens)
        if not output.total_num_scheduled_tokens:
            if output.preempted_req_ids:
                continue  # as the engine does: the preempted are re-admitted next step
            deadline = scheduler.retained.earliest()
            candidates = [due[0][0]] if due else []
            if deadline is not None:
                candidates.append(deadline.deadline)
            now = max(now + step_time, min(candidates, default=now + step_time))
            continue

        sampled: dict[str, list[int]] = {}
        for request_id, num_new in output.num_scheduled_tokens.items():
            request = scheduler.requests[request_id]
            before = request.num_computed_tokens - num_new
            if not (before >= request.num_prompt_tokens and request.output_token_ids):
                prefill += num_new
            if request.num_computed_tokens >= request.num_tokens:
                if scripted:
                    sampled[request_id] = [outputs[request_id][request.num_output_tokens]]
                else:
                    sampled[request_id] = [SAMPLED_TOKEN]
        end = now + step_time
        finished = scheduler.update_from_output(
            output, ModelRunnerOutput(sampled_token_ids=sampled)
        )
        for request in finished:
            spec = specs_by_id[request.request_id]
            job = spec.job_id
            if job is None:
                continue
            if spec.is_last_turn:
                jct[job] = end - first_arrival[job]
            elif held[job]:
                nxt = held[job].popleft()
                heapq.heappush(due, (end + (spec.tool_duration or 0.0), next(seq), nxt))
        now = end

    stats = scheduler.stats
    return (
        RunResult(
            job_completion_times=jct,
            prefill_tokens=prefill,
            reprefilled_tokens=reprefilled + stats.num_recomputed_tokens,
            prefix_hit_tokens=hits,
            num_preemptions=stats.num_preemptions,
            num_steps=steps,
            end_time=now,
            waiting_time=waiting_time,
        ),
        scheduler,
    )
