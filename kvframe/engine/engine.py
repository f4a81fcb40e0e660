"""The engine: replays a workload through the scheduler and the sim executor on a virtual clock.

One iteration of :meth:`Engine.run`'s loop is one engine step:

1. add every request whose arrival time has passed (``arrival_time <= now``);
2. (tracing) snapshot the queues and the KV pool;
3. ``scheduler.schedule(now)``; (tracing) prefix-cache events of first
   admissions, then the step decision;
4. the executor runs the step: sampled tokens and a duration from the cost model;
5. ``scheduler.update_from_output``; the clock moves to the end of the step,
   which is when the step's tokens exist: a request's first token time and
   finish time are the *end* of the step that produced them;
6. (tracing) KV events and finished requests.

Under asynchronous scheduling (``EngineConfig.async_scheduling``) the loop is
:mod:`kvframe.engine.batch_queue`'s instead: vLLM's batch queue, step N+1
scheduled before step N's output is applied.

A stretch of steps in which every running request only decodes is taken in
one go by a :class:`~kvframe.core.decode_run.DecodeRun` (:meth:`Engine._decode_run`):
per step it still queues arrivals, runs the waiting phase and records the
step's duration, but does not visit the running requests. The results are
those of the step-by-step loop (``EngineConfig.step_by_step`` turns runs off).

When nothing is in flight the clock jumps to the next arrival instead of
stepping through the idle gap. A step that schedules nothing while requests
wait (blocked) also jumps to the next arrival, or to the earliest retention
deadline if only retained blocks stand in the way; with neither, nothing can
ever change and :class:`EngineStalled` is raised instead of looping forever.

The loop runs once per step (hundreds of thousands of times for a real trace),
so it binds what it touches to locals and keeps per-request work to what the
metrics need; each kind of step is a method of its own. Tracing costs one
``if hook is not None`` per trace point when no tracer is selected; the trace
records are built only inside those branches (:mod:`kvframe.engine.records`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

from kvframe.core.decode_run import STOP, DecodeRun
from kvframe.core.scheduler import Scheduler
from kvframe.domain.request import Request
from kvframe.domain.version import __version__
from kvframe.engine.arrivals import ArrivalQueue
from kvframe.engine.batch_queue import run_batch_queue
from kvframe.engine.build import assemble
from kvframe.engine.config import EngineConfig
from kvframe.engine.metrics import MetricsCollector, MetricsSummary
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
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.executors.base import Executor
    from kvframe.executors.presets import Preset
    from kvframe.host.registry import PluginRegistry, Tracing
    from kvframe.offload.slots.connector import OffloadingConnector
    from kvframe.workloads.spec import RequestSpec, Workload

__all__ = ["Engine", "EngineStalled", "RunProgress", "RunResult"]

log = get_logger(__name__)

_MAX_IDLE_STEPS = 1000
"""Consecutive steps that schedule nothing without the clock moving before the
engine declares a stall (a policy that keeps preempting and re-queueing)."""


class EngineStalled(RuntimeError):
    """Requests wait, nothing can be scheduled, and no arrival or deadline can change that."""


@attrs.frozen(slots=True)
class RunResult:
    """What :meth:`Engine.run` returns.

    ``partial`` is true when the run was interrupted (Ctrl-C): the summary then
    covers what happened up to that point.
    """

    summary: MetricsSummary
    partial: bool
    wall_clock_seconds: float
    num_requests_total: int
    """Requests in the (limited) workload, arrived or not."""

    @property
    def counters(self) -> dict[str, int | float]:
        return dict(self.summary.counters)


class RunProgress:
    """A live view of a run for progress callbacks; read it, do not keep it.

    The engine passes the same object after every step; its properties read
    the engine's state when asked, so an unused field costs nothing.
    """

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def num_requests_total(self) -> int:
        return self._engine._num_total

    @property
    def num_requests_finished(self) -> int:
        return self._engine._collector.num_finished

    @property
    def num_requests_arrived(self) -> int:
        return self._engine._collector.num_requests

    @property
    def num_running(self) -> int:
        return len(self._engine.scheduler.running)

    @property
    def num_waiting(self) -> int:
        scheduler = self._engine.scheduler
        return len(scheduler.waiting) + len(scheduler.skipped_waiting)

    @property
    def num_steps(self) -> int:
        return self._engine.scheduler.stats.num_steps

    @property
    def now(self) -> float:
        """Virtual time at the end of the last step, seconds."""
        return self._engine._now

    @property
    def kv_usage(self) -> float:
        return self._engine.scheduler.kv_cache_manager.usage


ProgressCallback = Callable[[RunProgress], Any]


class Engine:
    """Scheduler + sim executor + metrics (+ tracers) for one run.

    Build it with :meth:`from_config`; an engine runs one workload once (its
    scheduler and KV cache keep their state).
    """

    def __init__(
        self,
        config: EngineConfig,
        scheduler: Scheduler,
        executor: Executor,
        *,
        tracing: Tracing | None = None,
        preset: Preset | None = None,
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.executor = executor
        self.tracing = tracing
        self.preset = preset if preset is not None else config.preset_object
        self._collector = MetricsCollector()
        self._num_total = 0
        self._now = 0.0
        self._ran = False
        self._num_ignored = 0
        self.num_decode_run_steps = 0
        """Steps taken inside runs of plain decode steps (see :mod:`kvframe.core.decode_run`);
        0 with ``step_by_step``. Not in the summary: results are the same either way."""
        self._stop_token_ids = tuple(executor.stop_token_ids)

    @classmethod
    def from_config(cls, config: EngineConfig, registry: PluginRegistry | None = None) -> Engine:
        """Build the plugins the config selects, the scheduler and the executor
        (:func:`kvframe.engine.build.assemble`).

        :param registry: where plugins are looked up (default: the installed ones).
        :raises ConfigError: for an unknown plugin or a bad option.
        """
        parts = assemble(config, registry)
        return cls(
            parts.config,
            parts.scheduler,
            parts.executor,
            tracing=parts.tracing,
            preset=parts.preset,
        )

    # ------------------------------------------------------------------
    # The run
    # ------------------------------------------------------------------

    def run(
        self,
        workload: Workload | Sequence[RequestSpec],
        *,
        limit: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> RunResult:
        """Replay ``workload`` until every request has finished.

        :param workload: specs in arrival order (a :class:`Workload` or a list).
        :param limit: replay only the first ``limit`` requests.
        :param progress: called after every step with a :class:`RunProgress`;
            it should throttle itself. An exception from it stops the run (a
            ``KeyboardInterrupt`` stops it cleanly, like Ctrl-C).
        :return: the metrics; ``partial`` if interrupted by ``KeyboardInterrupt``.
        :raises EngineStalled: when requests can never be scheduled.
        """
        if self._ran:
            raise RuntimeError("an Engine runs once; build a new one for another run")
        self._ran = True
        specs = getattr(workload, "requests", workload)
        if limit is not None:
            if limit < 1:
                raise ValueError(f"limit must be >= 1, got {limit}")
            specs = specs[:limit]
        self._num_total = len(specs)
        arrivals = ArrivalQueue(specs)
        started = time.perf_counter()
        partial = False
        log.info(
            "run_started",
            requests=len(specs),
            scheduling=self.policy_name,
            num_gpu_blocks=self.scheduler.config.num_gpu_blocks,
            block_size=self.scheduler.config.block_size,
            preset=self.preset.name,
        )
        try:
            self._loop(arrivals, progress)
        except KeyboardInterrupt:
            partial = True
            log.warning("run_interrupted", steps=self.scheduler.stats.num_steps, now=self._now)
        finally:
            if self.tracing is not None:
                self.tracing.close()
        wall = time.perf_counter() - started
        summary = self._summary(workload, arrivals, wall, partial)
        log.info(
            "run_finished",
            wall_seconds=round(wall, 3),
            partial=partial,
            decode_run_steps=self.num_decode_run_steps,
        )
        return RunResult(summary, partial, wall, len(specs))

    @property
    def policy_name(self) -> str:
        return getattr(self.scheduler.policy, "name", "") or type(self.scheduler.policy).__name__

    def _loop(self, arrivals: ArrivalQueue, progress: ProgressCallback | None) -> None:
        """One iteration per engine step (see the module docstring): arrivals, the
        decision (a decode run or ``schedule``), its record, then the step by its kind:
        one the executor runs (:meth:`_executed_step`) or one that schedules nothing
        (:meth:`_empty_step`). It runs once per step, so what it touches is bound to
        locals first. Under asynchronous scheduling the batch queue's loop runs
        instead (:func:`kvframe.engine.batch_queue.run_batch_queue`)."""
        if self.scheduler.async_scheduling:
            call = None
            if progress is not None:
                live = RunProgress(self)

                def call() -> None:
                    progress(live)

            run_batch_queue(self, arrivals, call)
            return
        scheduler = self.scheduler
        schedule = scheduler.schedule
        requests = scheduler.requests
        stats = scheduler.stats
        hook = self.tracing.hook if self.tracing is not None and self.tracing.active else None
        view = RunProgress(self) if progress is not None else None
        connector = cast("OffloadingConnector | None", scheduler.connector)
        worker = self.executor.offload_worker
        # Runs of plain decode steps in one go (kvframe.core.decode_run): only
        # where every step's effects are the scheduler's own and the cost
        # model's, i.e. an executor that allows it, no offload tier, no tracer.
        decode_runs = (
            not self.config.step_by_step
            and hook is None
            and connector is None
            and self.executor.supports_decode_runs
        )
        now = arrivals.next_time if arrivals.next_time != math.inf else 0.0
        idle_steps = 0
        while True:
            if arrivals.next_time <= now:
                self._arrive(arrivals, now, hook)
            if not requests and not (
                connector is not None and worker is not None and (connector.busy or worker.busy)
            ):
                # Nothing in flight: jump over the idle gap (or stop).
                if arrivals.next_time == math.inf:
                    self._check_no_turn_held(arrivals)
                    break
                now = self._now = max(now, arrivals.next_time)
                continue

            if hook is not None:
                hook.kvframe_step_snapshot(snapshot=snapshot(scheduler, now))
            output = None
            if decode_runs:
                run = scheduler.start_decode_run(self.executor.token_id)
                if run is not None:
                    now, output = self._decode_run(run, arrivals, now)
                    if view is not None:
                        progress(view)  # type: ignore[misc]
            if output is None:
                output = schedule(now)
            if hook is not None:
                trace_decision(hook, output, stats.num_steps, now)
            self._record_decision(output, now)

            if output.total_num_scheduled_tokens:
                idle_steps = 0
                now = self._executed_step(output, arrivals, now, hook)
            else:
                woke = self._empty_step(output, arrivals, now, idle_steps, hook)
                if woke is None:
                    idle_steps = 0
                    continue  # transfers finished: step again at the same time
                now, idle_steps = woke
            if view is not None:
                progress(view)  # type: ignore[misc]

    @staticmethod
    def _check_no_turn_held(arrivals: ArrivalQueue) -> None:
        """At the end of the arrivals: an agentic turn still held waits forever."""
        if arrivals.num_held:
            raise EngineStalled(
                f"{arrivals.num_held} agentic turns wait for earlier turns that never finished"
            )

    def _record_decision(self, output: SchedulerOutput, now: float) -> None:
        """The metrics of what ``schedule`` decided: preemptions, first admissions'
        prefix hits, requests entering RUNNING, recomputed tokens."""
        collector = self._collector
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

    def _executed_step(
        self, output: SchedulerOutput, arrivals: ArrivalQueue, now: float, hook: Any
    ) -> float:
        """Run a step that schedules tokens; returns the clock at its end, which is
        when its tokens exist (first-token and finish times)."""
        scheduler = self.scheduler
        collector = self._collector
        step = scheduler.stats.num_steps
        result = self.executor.execute(output, scheduler.requests, now)
        end = now + result.duration
        sampled = result.sampled
        collector.on_step(
            now,
            result.duration,
            num_generated_tokens=len(sampled),
            num_computed_tokens=output.total_num_scheduled_tokens,
        )
        finished = scheduler.update_from_output(output, result.model_output)
        on_first_token = collector.on_first_token
        for request in sampled:
            if request.first_token_time is None:
                request.first_token_time = end
                on_first_token(request.request_id, end)
        if hook is not None:
            trace_kv_events(hook, scheduler.kv_cache_manager, step, now, scheduler.connector)
        if finished:
            self._finish(finished, arrivals, step, now, end, hook)
        self._now = end
        return end

    def _finish(
        self,
        finished: Sequence[Request],
        arrivals: ArrivalQueue,
        step: int,
        now: float,
        end: float,
        hook: Any,
    ) -> None:
        """Requests that finished in the step from ``now`` to ``end``."""
        on_finished = self._collector.on_finished
        record_finished = self.executor.record_finished
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
                hook.kvframe_request_finished(record=finished_record(request, step, now))

    def _empty_step(
        self,
        output: SchedulerOutput,
        arrivals: ArrivalQueue,
        now: float,
        idle_steps: int,
        hook: Any,
    ) -> tuple[float, int] | None:
        """A step that schedules nothing. With an offload tier the connector's
        transfers still run (vLLM's model runner does the same without tokens): if
        some finished, ``None`` (step again now). Otherwise the clock of the next
        step (:meth:`_idle`) and the count of consecutive steps that did not move it.
        """
        scheduler = self.scheduler
        kv = scheduler.kv_cache_manager
        handler = self.executor.transfer_handler
        step = scheduler.stats.num_steps
        next_transfer = math.inf
        if handler is not None:
            kv_output = self.executor.execute(output, scheduler.requests, now).model_output
            scheduler.update_from_output(output, kv_output)
            done = kv_output.kv_connector_output
            if hook is not None:
                trace_kv_events(hook, kv, step, now, scheduler.connector)
            if done is not None and (
                done.finished_recving or done.finished_sending or done.completed_jobs
            ):
                return None
            worker = self.executor.offload_worker
            if getattr(worker, "has_deferred_stores", False) or not (
                scheduler.requests or getattr(scheduler.connector, "busy", False) or worker.busy
            ):
                # vLLM 0.33.0's connector offers a finished request's last stores in
                # a step that may schedule nothing: its worker submits them next step,
                # or, with nothing to store, the run is over.
                return None
            next_transfer = handler.next_completion()
        elif hook is not None:
            trace_kv_events(hook, kv, step, now)
        woke = self._idle(arrivals, now, output, idle_steps, next_transfer)
        idle_steps = idle_steps + 1 if woke == self._now else 0
        self._now = woke
        return woke, idle_steps

    # -- runs of plain decode steps ------------------------------------------

    def _decode_run(self, run: DecodeRun, arrivals: ArrivalQueue, now: float) -> tuple[float, Any]:
        """Take the steps of a decode run; return the clock and, if the run ended
        in an ordinary step, that step's output (to execute as usual).

        Per step this is what the loop does for a plain decode step -- arrivals
        first, the step's duration from the cost model (no prefill, one decode
        token per running request, their computed tokens as context), the
        metrics of the step -- without visiting the running requests.
        """
        step_time = self.executor.cost_model.step_time
        on_step = self._collector.on_step
        num_running = run.num_running
        output = None
        try:
            first = True
            while True:
                if not first and arrivals.next_time <= now:
                    self._arrive(arrivals, now, None)
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
                self._now = now
        finally:
            run.close()
        return now, output

    # -- arrivals ------------------------------------------------------------

    def _arrive(self, arrivals: ArrivalQueue, now: float, hook: Any) -> None:
        """Turn every due spec into a request, or finish it as ignored if it can never fit."""
        scheduler = self.scheduler
        collector = self._collector
        max_model_len = scheduler.max_model_len
        block_size = scheduler.block_size
        usable_blocks = scheduler.config.num_gpu_blocks - 1
        for arrival, spec in arrivals.pop_due(now):
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
                self._ignore(spec, arrival, now, arrivals, hook)
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

    def _ignore(
        self, spec: RequestSpec, arrival: float, now: float, arrivals: ArrivalQueue, hook: Any
    ) -> None:
        """vLLM refuses a prompt longer than max_model_len; a request that cannot fit the
        whole pool would preempt itself forever. Both finish at once, unscheduled."""
        self._num_ignored += 1
        self._collector.on_finished(spec.request_id, now, num_output_tokens=0, status=IGNORED)
        log.debug(
            "request_ignored",
            request_id=spec.request_id,
            prompt_tokens=spec.num_prompt_tokens,
            max_tokens=spec.max_tokens,
        )
        if spec.job_id is not None:
            arrivals.turn_finished(spec.job_id, now)
        if hook is not None:
            step = self.scheduler.stats.num_steps
            hook.kvframe_request_finished(record=ignored_record(spec, arrival, step, now))

    # -- steps that schedule nothing -------------------------------------------

    def _idle(
        self,
        arrivals: ArrivalQueue,
        now: float,
        output: SchedulerOutput,
        idle_steps: int,
        next_transfer: float = math.inf,
    ) -> float:
        """The clock for the next step after one that scheduled nothing.

        ``next_transfer`` is when the earliest in-flight offload transfer ends:
        a request waiting for its load, or blocks held by a store, change then.
        """
        scheduler = self.scheduler
        if output.preempted_req_ids and idle_steps < _MAX_IDLE_STEPS:
            return now  # preempted requests are re-admitted next step
        wake = min(arrivals.next_time, next_transfer)
        if wake != math.inf:
            return max(now, wake)
        earliest = scheduler.retained.earliest() if scheduler.retained else None
        if earliest is not None and earliest.deadline > now:
            return earliest.deadline
        raise EngineStalled(self._stall_message(now))

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

    # -- the end ---------------------------------------------------------------

    def _summary(
        self,
        workload: Workload | Sequence[RequestSpec],
        arrivals: ArrivalQueue,
        wall: float,
        partial: bool,
    ) -> MetricsSummary:
        counters: dict[str, int | float] = attrs.asdict(self.scheduler.stats)
        counters["num_requests_ignored"] = self._num_ignored
        counters["num_requests_not_arrived"] = arrivals.num_pending
        counters["num_skipped_lines"] = getattr(workload, "num_skipped_lines", 0)
        counters["num_gpu_blocks"] = self.scheduler.config.num_gpu_blocks
        uncomputed = self.scheduler.kv_cache_manager.uncomputed
        counters["prefix_cache_uncomputed_hits"] = uncomputed.hit_tokens
        counters["prefix_cache_uncomputed_rolled_back"] = uncomputed.num_rolled_back
        connector = self.scheduler.connector
        handler = self.executor.transfer_handler
        if connector is not None and handler is not None:
            stats = connector.stats  # type: ignore[attr-defined]
            counters["offload_hit_tokens"] = self.scheduler.stats.connector_prefix_cache_hits
            counters["offload_bytes_stored"] = handler.bytes_stored
            counters["offload_bytes_loaded"] = handler.bytes_loaded
            counters["offload_num_stores"] = handler.num_stores
            counters["offload_num_loads"] = handler.num_loads
            counters["offload_transfer_time_s"] = handler.transfer_time_s
            counters["offload_stored_blocks"] = stats.num_stored_blocks
            counters["offload_loaded_blocks"] = stats.num_loaded_blocks
            counters["offload_evicted_blocks"] = stats.num_evicted_blocks
            counters["offload_store_refused"] = stats.num_store_refused
        counters.update(self.executor.counters())
        source = getattr(workload, "source", None)
        metadata = {
            "kvframe_version": __version__,
            "workload": {
                "name": getattr(workload, "name", "workload"),
                "source": None if source is None else str(source),
                "format": getattr(workload, "format", "memory"),
                "num_requests": self._num_total,
            },
            "engine": self.config.describe(),
            "core": self.scheduler.kv_cache_manager.core,
            "core_note": self.scheduler.kv_cache_manager.core_note,
            # python or compiled (kvframe.core.hashing); None: nothing hashed.
            "hasher": getattr(self.scheduler.block_hasher, "core", None),
            "scheduling_policy": self.policy_name,
            "preset": self.preset.describe(),
        }
        description = self.executor.description
        if description:
            metadata["executor"] = description
        metadata["clock"] = getattr(self.executor, "clock", "virtual")
        return self._collector.summary(
            counters=counters, wall_clock_seconds=wall, partial=partial, metadata=metadata
        )
