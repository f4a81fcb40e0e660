"""The trace records of a run: built only when a tracer is active.

The engine calls these inside ``if hook is not None`` branches, so a run with
no tracer never builds a record. Every record carries the step it belongs to and
the virtual time of that step's start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvframe.contract.records import (
    PrefixCacheEvent,
    RequestFinished,
    StepDecision,
    StepSnapshot,
)
from kvframe.engine.metrics import IGNORED

if TYPE_CHECKING:
    from kvframe.core.scheduler import Scheduler
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.domain.request import Request
    from kvframe.workloads.spec import RequestSpec

__all__ = [
    "IGNORED",
    "finished_record",
    "ignored_record",
    "snapshot",
    "trace_decision",
    "trace_kv_events",
]


def snapshot(scheduler: Scheduler, now: float) -> StepSnapshot:
    kv = scheduler.kv_cache_manager
    return StepSnapshot(
        step=scheduler.stats.num_steps + 1,
        now=now,
        num_waiting=len(scheduler.waiting),
        num_skipped_waiting=len(scheduler.skipped_waiting),
        num_running=len(scheduler.running),
        num_retained=len(scheduler.retained),
        num_free_blocks=kv.num_free_blocks,
        num_cached_blocks=kv.num_cached_blocks,
        kv_usage=kv.usage,
    )


def trace_decision(hook: Any, output: SchedulerOutput, step: int, now: float) -> None:
    for hit in output.first_admissions:
        hook.kvframe_prefix_cache_event(
            event=PrefixCacheEvent(
                step=step,
                now=now,
                request_id=hit.req_id,
                num_prompt_tokens=hit.num_prompt_tokens,
                local_hit_tokens=hit.local_hit_tokens,
                external_hit_tokens=hit.external_hit_tokens,
            )
        )
    cached = output.scheduled_cached_reqs
    resumed = cached.resumed_req_ids
    hook.kvframe_step_decision(
        decision=StepDecision(
            step=step,
            now=now,
            num_scheduled_tokens=dict(output.num_scheduled_tokens),
            new_request_ids=tuple(r.req_id for r in output.scheduled_new_reqs),
            resumed_request_ids=tuple(r for r in cached.req_ids if r in resumed),
            # Sets: sorted so that traces are identical run to run.
            preempted_request_ids=tuple(sorted(output.preempted_req_ids)),
            finished_request_ids=tuple(sorted(output.finished_req_ids)),
        )
    )


def trace_kv_events(hook: Any, kv: Any, step: int, now: float, connector: Any = None) -> None:
    events = kv.take_events()
    if connector is not None:
        events = [*events, *connector.take_events()]
    if events:
        hook.kvframe_kv_events(step=step, now=now, events=events)


def finished_record(request: Request, step: int, now: float) -> RequestFinished:
    """``now`` is the step's start, like every record of the step; ``finish_time`` its end."""
    return RequestFinished(
        step=step,
        now=now,
        request_id=request.request_id,
        status=request.get_finished_reason() or str(request.status),
        num_prompt_tokens=request.num_prompt_tokens,
        num_output_tokens=request.num_output_tokens,
        num_cached_tokens=max(request.num_cached_tokens, 0),
        num_preemptions=request.num_preemptions,
        arrival_time=request.arrival_time,
        first_token_time=request.first_token_time,
        finish_time=request.finish_time if request.finish_time is not None else now,
    )


def ignored_record(spec: RequestSpec, arrival: float, step: int, now: float) -> RequestFinished:
    """A request the engine refused at arrival (it could never fit): finished unscheduled."""
    return RequestFinished(
        step=step,
        now=now,
        request_id=spec.request_id,
        status=IGNORED,
        num_prompt_tokens=spec.num_prompt_tokens,
        num_output_tokens=0,
        num_cached_tokens=0,
        num_preemptions=0,
        arrival_time=arrival,
        first_token_time=None,
        finish_time=now,
    )
