"""One engine step as public phases, which both engine loops compose.

A step is the same pipeline whichever loop runs it -- schedule, connector,
execute, update, metrics -- and :class:`EngineStep` holds it once:

* :meth:`~EngineStep.decide` -- (tracing) the queues and the pool before the
  step, ``scheduler.schedule``, (tracing) the decision, and the decision's
  metrics (preemptions, prefix hits, admissions, recomputed tokens);
* :meth:`~EngineStep.execute` -- the step handed to the executor at a given
  start: its duration from the cost model and the step's metrics, or, for a
  step that schedules nothing, the tier's connector run without a forward pass
  (no time); a :class:`Flight` is what it returns;
* :meth:`~EngineStep.apply` -- ``update_from_output`` with the flight's
  output, first-token times, (tracing) KV events, finished requests.

The synchronous loop (:class:`kvframe.engine.driver.SyncDriver`) applies each
flight at once; the batch queue
(:class:`kvframe.engine.batch_queue.BatchQueueDriver`) decides the next step
before it applies the last. Both advance one iteration per call, so a fleet
(:mod:`kvframe.fleet`) can interleave replicas on one clock; a fleet's replica
sets :attr:`EngineStep.horizon` and :attr:`EngineStep.in_fleet`. Around the phases the object keeps what both loops
share: the clock (:attr:`EngineStep.now`), arrivals (:meth:`~EngineStep.arrive`,
requests that can never fit finished as ignored), a step that schedules
nothing (:meth:`~EngineStep.run_empty`), the clock after one
(:meth:`~EngineStep.idle`, or :class:`EngineStalled`) and, for the
synchronous loop alone, runs of plain decode steps in one go
(:meth:`~EngineStep.decode_run`).

The phases run once per step (hundreds of thousands of times for a real
trace): they bind what they touch to locals, and tracing costs one
``if hook is not None`` per trace point when no tracer is selected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvframe.core.decode_run import STOP, DecodeRun
from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.domain.request import Request
from kvframe.engine.records import (
    IGNORED,
    finished_record,
    ignored_record,
    snapshot,
    trace_decision,
    trace_kv_events,
)
from kvframe.log import get_logger
from kvframe.workloads.spec import PromptTokens

if TYPE_CHECKING:
    from kvframe.contract.offload import Tier
    from kvframe.core.scheduler import Scheduler
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.engine.arrivals import ArrivalQueue
    from kvframe.engine.metrics import MetricsCollector
    from kvframe.executors.base import Executor, StepResult
    from kvframe.workloads.spec import RequestSpec

__all__ = ["PAUSED", "EngineStalled", "EngineStep", "Flight"]

log = get_logger(__name__)

_MAX_IDLE_STEPS = 1000
"""Consecutive steps that schedule nothing without the clock moving before the
engine declares a stall (a policy that keeps preempting and re-queueing)."""


PAUSED = object()
"""Returned by :meth:`EngineStep.decode_run` when the run stopped at :attr:`EngineStep.horizon`
(a fleet's next event elsewhere) rather than at a step it cannot take."""


class EngineStalled(RuntimeError):
    """Requests wait, nothing can be scheduled, and no arrival or deadline can change that."""


class Flight:
    """A step handed to the executor: its decision, its result and when it runs.

    ``result`` is ``None`` for a step that scheduled nothing without a tier (the
    executor was not asked). A plain slotted class: one is built per step.
    """

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


class EngineStep:
    """The step pipeline of one run, and the clock, arrivals and idle logic around it.

    :param hook: the tracers' hook, or ``None`` when no tracer is active.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        executor: Executor,
        tier: Tier,
        collector: MetricsCollector,
        arrivals: ArrivalQueue,
        hook: Any,
    ) -> None:
        self.scheduler = scheduler
        self.executor = executor
        self.tier = tier
        self.collector = collector
        self.arrivals = arrivals
        self.hook = hook
        self.now = arrivals.next_time if arrivals.next_time != math.inf else 0.0
        """The engine's virtual clock, seconds: the end of the last step applied."""
        self.num_ignored = 0
        """Requests finished at arrival because they could never fit."""
        self.num_decode_run_steps = 0
        """Steps taken inside runs of plain decode steps (:meth:`decode_run`)."""
        self._stop_token_ids = tuple(executor.stop_token_ids)
        self.horizon = math.inf
        """A run of plain decode steps takes no step starting at or after this time (a
        fleet sets it to its next arrival; the single engine never does)."""
        self.in_fleet = False
        """A fleet's replica: a step that can change nothing waits for the next routed
        arrival (the clock becomes ``inf``) instead of raising :class:`EngineStalled`, since
        another replica may still release work for it."""

    # -- the phases ------------------------------------------------------------

    def decide(self, output: SchedulerOutput | None = None) -> SchedulerOutput:
        """Schedule a step at :attr:`now` and record the decision; ``output``: a step a
        decode run already decided (it only needs recording)."""
        scheduler = self.scheduler
        hook = self.hook
        now = self.now
        if output is None:
            if hook is not None:
                hook.kvframe_step_snapshot(snapshot=snapshot(scheduler, now))
            output = scheduler.schedule(now)
        if hook is not None:
            trace_decision(hook, output, scheduler.stats.num_steps, now)
        self._record_decision(output, now)
        return output

    def execute(self, output: SchedulerOutput, start: float) -> Flight:
        """Hand the step to the executor at ``start``; its tokens exist at the flight's end.

        A step that schedules nothing takes no time: with a tier the executor
        still runs its connector (loads start, finished transfers are reported
        in its output), without one it is not asked.
        """
        step = self.scheduler.stats.num_steps
        if output.total_num_scheduled_tokens:
            result = self.executor.execute(output, self.scheduler.requests, start)
            self.collector.on_step(
                start,
                result.duration,
                num_generated_tokens=len(result.sampled),
                num_computed_tokens=output.total_num_scheduled_tokens,
            )
            return Flight(output, result, start, start + result.duration, step)
        if self.tier.moves_blocks:
            result = self.executor.execute(output, self.scheduler.requests, start)
            return Flight(output, result, start, start, step)
        return Flight(output, None, start, start, step)

    def apply(self, flight: Flight, events_at: float) -> None:
        """Apply a flight's output: sampled tokens, first-token times (the flight's end),
        KV events (traced at ``events_at``), finished requests."""
        scheduler = self.scheduler
        result = flight.result
        if result is None:
            # vLLM applies the empty output of a step that scheduled nothing too.
            scheduler.update_from_output(flight.output, ModelRunnerOutput(sampled_token_ids={}))
            return
        # With a tier, the worker's report (finished sending / receiving) rides on
        # the step's output: the scheduler sees a transfer land when it is applied.
        finished = scheduler.update_from_output(flight.output, result.model_output)
        end = flight.end
        on_first_token = self.collector.on_first_token
        for request in result.sampled:
            # A request preempted before its output was applied (batch queue) has none.
            if request.first_token_time is None and request.num_output_tokens:
                request.first_token_time = end
                on_first_token(request.request_id, end)
        if self.hook is not None:
            trace_kv_events(
                self.hook, scheduler.kv_cache_manager, flight.step, events_at, scheduler.connector
            )
        if finished:
            self._finish(finished, flight.step, flight.start, end)

    # -- steps that schedule nothing -------------------------------------------

    def run_empty(self, output: SchedulerOutput, idle_steps: int) -> int | None:
        """A step that schedules nothing, run and applied at once.

        With an offload tier the connector's transfers still run (vLLM's model
        runner does the same without tokens): if some finished, or stores wait
        for the next step's start, or the tier's last transfers are all that is
        left, ``None`` (step again now). Otherwise the clock moves to the next
        step's (:meth:`idle`); returns the count of consecutive steps that did
        not move it.
        """
        now = self.now
        next_transfer = math.inf
        tier = self.tier
        if tier.moves_blocks:
            flight = self.execute(output, now)
            self.apply(flight, now)
            assert flight.result is not None
            done = flight.result.model_output.kv_connector_output
            if done is not None and (
                done.finished_recving or done.finished_sending or done.completed_jobs
            ):
                return None
            if tier.has_deferred_stores or not (self.scheduler.requests or tier.busy):
                # vLLM 0.33.0's connector offers a finished request's last stores in
                # a step that may schedule nothing: its worker submits them next step,
                # or, with nothing to store, the run is over.
                return None
            next_transfer = tier.next_completion()
        elif self.hook is not None:
            scheduler = self.scheduler
            trace_kv_events(self.hook, scheduler.kv_cache_manager, scheduler.stats.num_steps, now)
        woke = self.idle(output, idle_steps, next_transfer)
        self.now = woke
        return idle_steps + 1 if woke == now else 0

    def idle(self, output: SchedulerOutput, idle_steps: int, next_transfer: float) -> float:
        """The clock for the next step after one that scheduled nothing.

        ``next_transfer`` is when the earliest in-flight offload transfer ends:
        a request waiting for its load, or blocks held by a store, change then.

        :raises EngineStalled: when no arrival, transfer or deadline can change anything.
        """
        now = self.now
        if output.preempted_req_ids and idle_steps < _MAX_IDLE_STEPS:
            return now  # preempted requests are re-admitted next step
        wake = min(self.arrivals.next_time, next_transfer)
        if wake != math.inf:
            return max(now, wake)
        retained = self.scheduler.retained
        earliest = retained.earliest() if retained else None
        if earliest is not None and earliest.deadline > now:
            return earliest.deadline
        if self.in_fleet:
            return math.inf
        raise EngineStalled(self._stall_message(now))

    def wait_for_arrival(self) -> bool:
        """Nothing is in flight: move the clock to the next arrival, or return ``False``
        when there is none (the run is over)."""
        arrivals = self.arrivals
        if arrivals.next_time == math.inf:
            if arrivals.num_held:
                raise EngineStalled(
                    f"{arrivals.num_held} agentic turns wait for earlier turns that never finished"
                )
            return False
        self.now = max(self.now, arrivals.next_time)
        return True

    # -- runs of plain decode steps ------------------------------------------

    def decode_run(self, run: DecodeRun) -> SchedulerOutput | object | None:
        """Take the steps of a decode run (the clock moves with them); return, if the run
        ended in an ordinary step, that step's output (to record and execute as usual),
        or :data:`PAUSED` if it stopped at :attr:`horizon` (every request caught up).

        Per step this is what the loop does for a plain decode step -- arrivals
        first, the step's duration from the cost model (no prefill, one decode
        token per running request, their computed tokens as context), the
        metrics of the step -- without visiting the running requests.
        """
        step_time = self.executor.cost_model.step_time
        on_step = self.collector.on_step
        arrivals = self.arrivals
        num_running = run.num_running
        now = self.now
        horizon = self.horizon
        output = None
        try:
            first = True
            while True:
                if not first:
                    if now >= horizon:
                        output = PAUSED
                        break
                    if arrivals.next_time <= now:
                        self.arrive()
                first = False
                result = run.step(now)
                if result is STOP:
                    break
                if result is not None:
                    output = result
                    break
                self.num_decode_run_steps += 1
                duration = step_time(0, num_running, run.context_tokens)
                on_step(
                    now,
                    duration,
                    num_generated_tokens=num_running,
                    num_computed_tokens=num_running,
                )
                now += duration
                self.now = now
        finally:
            run.close()
        return output

    # -- arrivals and finishes ---------------------------------------------------

    def arrive(self) -> None:
        """Turn every spec due by :attr:`now` into a request, or finish it as ignored if it
        can never fit."""
        scheduler = self.scheduler
        collector = self.collector
        arrivals = self.arrivals
        max_model_len = scheduler.max_model_len
        block_size = scheduler.block_size
        usable_blocks = scheduler.config.num_gpu_blocks - 1
        for arrival, spec in arrivals.pop_due(self.now):
            num_prompt = spec.num_prompt_tokens
            collector.on_arrival(
                spec.request_id,
                arrival,
                num_prompt,
                job_id=spec.job_id,
                turn=spec.turn,
                is_last_turn=spec.is_last_turn,
            )
            # The most slots a request ever holds: every token but the last
            # sampled one, and never more than max_model_len - 1 (the core caps it).
            peak_slots = min(num_prompt + spec.max_tokens - 1, max_model_len - 1)
            if num_prompt >= max_model_len or -(-peak_slots // block_size) > usable_blocks:
                self._ignore(spec, arrival)
                continue
            scheduler.add_request(
                Request(
                    spec.request_id,
                    PromptTokens(spec.prompt),
                    spec.max_tokens,
                    arrival_time=arrival,
                    priority=spec.priority,
                    cache_salt=spec.cache_salt,
                    job_id=spec.job_id,
                    turn=spec.turn,
                    is_last_turn=spec.is_last_turn,
                    tool_name=spec.tool_name,
                    stop_token_ids=self._stop_token_ids,
                )
            )

    def _ignore(self, spec: RequestSpec, arrival: float) -> None:
        """vLLM refuses a prompt longer than max_model_len; a request that cannot fit the
        whole pool would preempt itself forever. Both finish at once, unscheduled."""
        now = self.now
        self.num_ignored += 1
        self.collector.on_finished(spec.request_id, now, num_output_tokens=0, status=IGNORED)
        log.debug(
            "request_ignored",
            request_id=spec.request_id,
            prompt_tokens=spec.num_prompt_tokens,
            max_tokens=spec.max_tokens,
        )
        if spec.job_id is not None:
            self.arrivals.turn_finished(spec.job_id, now)
        if self.hook is not None:
            step = self.scheduler.stats.num_steps
            self.hook.kvframe_request_finished(record=ignored_record(spec, arrival, step, now))

    def _record_decision(self, output: SchedulerOutput, now: float) -> None:
        """The metrics of what ``schedule`` decided: preemptions, first admissions'
        prefix hits, requests entering RUNNING, recomputed tokens."""
        collector = self.collector
        if output.preempted_req_ids:
            for request_id in output.preempted_req_ids:
                collector.on_preempted(request_id)
        if output.first_admissions:
            on_prefix_hit = collector.on_prefix_hit
            for hit in output.first_admissions:
                on_prefix_hit(hit.req_id, hit.local_hit_tokens, hit.external_hit_tokens)
        if output.scheduled_new_reqs:
            # Stamped when the request enters RUNNING, as vLLM's SCHEDULED
            # event: an async load's first admission only reserves blocks.
            on_scheduled = collector.on_scheduled
            for new_request in output.scheduled_new_reqs:
                on_scheduled(new_request.req_id, now)
        if output.recomputed_tokens:
            for request_id, num_tokens in output.recomputed_tokens.items():
                if num_tokens:
                    collector.on_recomputed(request_id, num_tokens)

    def _finish(self, finished: Sequence[Request], step: int, start: float, end: float) -> None:
        """Requests that finished in the step from ``start`` to ``end``."""
        on_finished = self.collector.on_finished
        record_finished = self.executor.record_finished
        arrivals = self.arrivals
        hook = self.hook
        for request in finished:
            request.finish_time = end
            on_finished(
                request.request_id,
                end,
                num_output_tokens=request.num_output_tokens,
                status=request.get_finished_reason() or str(request.status),
            )
            record_finished(request)
            if request.job_id is not None:
                arrivals.turn_finished(request.job_id, end)
            if hook is not None:
                hook.kvframe_request_finished(record=finished_record(request, step, start))

    def _stall_message(self, now: float) -> str:
        scheduler = self.scheduler
        head = None
        for queue in (scheduler.waiting, scheduler.skipped_waiting):
            if queue:
                head = queue.peek_request()
                break
        what = (
            f"request {head.request_id!r} ({head.num_tokens} tokens, status {head.status.name})"
            if head is not None
            else "no waiting request"
        )
        return (
            f"engine stalled at t={now:.3f}s: nothing can be scheduled and no arrival or "
            f"deadline is pending; head of the queue: {what}; "
            f"{len(scheduler.running)} running, {len(scheduler.waiting)} waiting, "
            f"{len(scheduler.skipped_waiting)} skipped-waiting, {len(scheduler.retained)} "
            f"retained; {scheduler.kv_cache_manager.num_free_blocks} free blocks of "
            f"{scheduler.config.num_gpu_blocks - 1}"
        )
