"""The engine loop under asynchronous scheduling: vLLM's batch queue on the virtual clock.

With ``async_scheduling`` vLLM's engine core runs ``step_with_batch_queue``
with a queue of two batches: it schedules a step and hands it to the worker
without waiting, schedules the next one while the first runs, and only then
blocks on the first's output and applies it. Step N+1 is thus decided before
step N's sampled tokens are known; the core's
:class:`~kvframe.core.scheduler.Scheduler` in ``async_scheduling`` mode holds an
output placeholder for each token in flight (vLLM's ``AsyncScheduler``).

One iteration of :func:`run_batch_queue` is one ``step_with_batch_queue`` call,
with a worker that is never done before the engine blocks on it:

1. add every request whose arrival time has passed;
2. if the scheduler has requests: ``schedule(now)``, hand the step to the
   executor (its tokens exist at the step's end; the GPU runs steps back to
   back, so a step starts when the previous one ends or when it was scheduled,
   whichever is later) and queue it. Return early if the queue has room and
   the step ran tokens -- or, under vLLM 0.33.0
   (:attr:`~kvframe.domain.fidelity.Fidelity.empty_step_keeps_queue`), if
   requests remain;
3. otherwise wait for the oldest queued step (the clock moves to its end) and
   apply its output: first tokens, finished requests.

When a step schedules nothing although every output before it was applied,
and nothing is in flight, the clock jumps as
the synchronous loop's does (:meth:`Engine._idle`): to the next arrival or
retention deadline, or :class:`~kvframe.engine.engine.EngineStalled`.

With an offload tier (vLLM 0.19.1's OffloadingConnector, or 0.33.0's job
connector, whose scheduler also holds a freed request's blocks until the steps
in flight that may write them are applied: switch T22,
:mod:`kvframe.core.deferred_frees`) the connector follows the batch queue as in vLLM:
the connector metadata is built in ``schedule`` and run by the worker when the
step is handed to the executor (its deferred stores submitted, its loads
started, a preempted request's stores waited for); the worker's report of
finished transfers rides on the step's output and is applied with it, one
iteration later -- so a request whose load landed is scheduled again only
after that output. A step that schedules nothing is still run (the connector
without a forward pass, no GPU time). The clock then waits for the next
arrival or the end of the next transfer when nothing else can change. When
mid-run no request is left, the loop waits for the next arrival without
stepping (vLLM's ``has_requests``); after the last arrival it steps until the
tier's last stores land, as the synchronous loop does.

Runs of plain decode steps (:mod:`kvframe.core.decode_run`) are not taken here:
every step goes through the scheduler and the executor.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.engine.records import snapshot, trace_decision, trace_kv_events

if TYPE_CHECKING:
    from kvframe.core.scheduler import Scheduler
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.domain.request import Request
    from kvframe.engine.arrivals import ArrivalQueue
    from kvframe.engine.metrics import MetricsCollector
    from kvframe.executors.base import Executor, StepResult
    from kvframe.host.registry import Tracing
    from kvframe.offload.slots.connector import OffloadingConnector

__all__ = ["BATCH_QUEUE_SIZE", "run_batch_queue"]

BATCH_QUEUE_SIZE = 2
"""vLLM's ``max_concurrent_batches`` with async scheduling and one engine (no
pipeline parallelism)."""


class EngineParts(Protocol):
    """What the loop uses of :class:`~kvframe.engine.engine.Engine` (which passes itself;
    a protocol so that this module does not import the engine module)."""

    scheduler: Scheduler
    executor: Executor
    tracing: Tracing | None
    _collector: MetricsCollector
    _now: float

    def _arrive(self, arrivals: ArrivalQueue, now: float, hook: Any) -> None: ...

    def _check_no_turn_held(self, arrivals: ArrivalQueue) -> None: ...

    def _record_decision(self, output: SchedulerOutput, now: float) -> None: ...

    def _idle(
        self,
        arrivals: ArrivalQueue,
        now: float,
        output: SchedulerOutput,
        idle_steps: int,
        next_transfer: float = math.inf,
    ) -> float: ...

    def _empty_step(
        self,
        output: SchedulerOutput,
        arrivals: ArrivalQueue,
        now: float,
        idle_steps: int,
        hook: Any,
    ) -> tuple[float, int] | None: ...

    def _finish(
        self,
        finished: Sequence[Request],
        arrivals: ArrivalQueue,
        step: int,
        now: float,
        end: float,
        hook: Any,
    ) -> None: ...


class _InFlight:
    """A step handed to the worker: its decision, its result and when it runs."""

    __slots__ = ("end", "output", "result", "start", "step")

    def __init__(
        self,
        output: SchedulerOutput,
        result: StepResult | None,
        start: float,
        end: float,
        step: int,
    ) -> None:
        self.output = output
        self.result = result
        self.start = start
        self.end = end
        self.step = step

    @property
    def reported_transfers(self) -> bool:
        """Whether the worker reported finished transfers in this step's output."""
        if self.result is None:
            return False
        done = self.result.model_output.kv_connector_output
        return done is not None and bool(done.finished_recving or done.finished_sending)


def run_batch_queue(
    engine: EngineParts, arrivals: ArrivalQueue, progress: Callable[[], Any] | None
) -> None:
    """Replay the arrivals through ``engine`` in the batch queue's order (module doc);
    ``progress`` is called after every iteration that applied an output."""
    scheduler = engine.scheduler
    executor = engine.executor
    collector = engine._collector
    requests = scheduler.requests
    has_requests = scheduler.has_requests
    keeps_queue = scheduler.config.fidelity.empty_step_keeps_queue
    handler = executor.transfer_handler
    worker = executor.offload_worker
    connector = cast("OffloadingConnector | None", scheduler.connector)
    hook = engine.tracing.hook if engine.tracing is not None and engine.tracing.active else None
    queue: deque[_InFlight] = deque()
    now = arrivals.next_time if arrivals.next_time != math.inf else 0.0
    gpu_free = now
    idle_steps = 0
    while True:
        if arrivals.next_time <= now:
            engine._arrive(arrivals, now, hook)
        if not queue and not has_requests():
            if arrivals.next_time == math.inf:
                if worker is not None and connector is not None and (connector.busy or worker.busy):
                    # The last stores still land: steps without requests, applied at
                    # once, as the synchronous loop's (vLLM's engine would stop here).
                    woke = _drain_step(engine, arrivals, now, idle_steps, hook)
                    if woke is not None:
                        now, idle_steps = woke
                    continue
                engine._check_no_turn_held(arrivals)
                break
            now = engine._now = max(now, arrivals.next_time)
            continue

        output: SchedulerOutput | None = None
        if has_requests():
            if hook is not None:
                hook.kvframe_step_snapshot(snapshot=snapshot(scheduler, now))
            output = scheduler.schedule(now)
            step = scheduler.stats.num_steps
            if hook is not None:
                trace_decision(hook, output, step, now)
            engine._record_decision(output, now)
            executed = output.total_num_scheduled_tokens > 0
            result = None
            start = end = max(now, gpu_free)
            if executed:
                result = executor.execute(output, requests, start)
                collector.on_step(
                    start,
                    result.duration,
                    num_generated_tokens=len(result.sampled),
                    num_computed_tokens=output.total_num_scheduled_tokens,
                )
                end += result.duration
                gpu_free = end
            elif handler is not None:
                # vLLM's model runner runs the connector without a forward pass:
                # this step's loads start, finished transfers are reported (in
                # its output, applied when the step leaves the queue). No time.
                result = executor.execute(output, requests, start)
            queue.append(_InFlight(output, result, start, end, step))
            if len(queue) < BATCH_QUEUE_SIZE and (executed or (keeps_queue and has_requests())):
                continue  # schedule the next step before waiting for this one

        done = queue.popleft()
        now = engine._now = max(now, done.end)
        _apply(engine, done, arrivals, hook)
        if (
            output is not None
            and not output.total_num_scheduled_tokens
            and not done.output.total_num_scheduled_tokens
            and requests
            and not any(q.output.total_num_scheduled_tokens for q in queue)
            and not done.reported_transfers
            and not any(q.reported_transfers for q in queue)
        ):
            # Nothing scheduled after the last output was applied, and nothing in
            # flight that could change that: no step with tokens, no transfer
            # reported but not yet seen by the scheduler. The clock moves to the
            # next arrival or the end of the next transfer.
            next_transfer = handler.next_completion() if handler is not None else math.inf
            woke = engine._idle(arrivals, now, output, idle_steps, next_transfer)
            idle_steps = idle_steps + 1 if woke == now else 0
            now = engine._now = woke
        else:
            idle_steps = 0
        if progress is not None:
            progress()


def _apply(engine: EngineParts, done: _InFlight, arrivals: ArrivalQueue, hook: Any) -> None:
    """Apply a finished step's output, one step late: tokens, first-token times, finishes."""
    scheduler = engine.scheduler
    result = done.result
    if result is None:
        # vLLM applies the empty output of a step that scheduled nothing too.
        scheduler.update_from_output(done.output, ModelRunnerOutput(sampled_token_ids={}))
        return
    # With a tier, the worker's report (finished sending / receiving) rides on
    # the step's output: the scheduler sees a transfer land one step late too.
    finished = scheduler.update_from_output(done.output, result.model_output)
    end = done.end
    on_first_token = engine._collector.on_first_token
    for request in result.sampled:
        if request.first_token_time is None and request.num_output_tokens:
            request.first_token_time = end
            on_first_token(request.request_id, end)
    if hook is not None:
        trace_kv_events(hook, scheduler.kv_cache_manager, done.step, end, scheduler.connector)
    if finished:
        engine._finish(finished, arrivals, done.step, done.start, end, hook)


def _drain_step(
    engine: EngineParts, arrivals: ArrivalQueue, now: float, idle_steps: int, hook: Any
) -> tuple[float, int] | None:
    """A step after the last request left the scheduler while the tier still moves
    blocks: scheduled, run and applied at once (:meth:`Engine._empty_step`)."""
    scheduler = engine.scheduler
    if hook is not None:
        hook.kvframe_step_snapshot(snapshot=snapshot(scheduler, now))
    output = scheduler.schedule(now)
    if hook is not None:
        trace_decision(hook, output, scheduler.stats.num_steps, now)
    engine._record_decision(output, now)
    return engine._empty_step(output, arrivals, now, idle_steps, hook)
