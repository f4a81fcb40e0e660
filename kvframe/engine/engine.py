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

Why the loop is one long method: it runs once per step (hundreds of thousands
of times for a real trace), so it binds everything it touches to locals and
keeps per-request work to what the metrics need. Tracing costs one
``if hook is not None`` per trace point when no tracer is selected; the trace
records are built only inside those branches, by the helpers at the bottom.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

import kvframe
from kvframe.core.decode_run import STOP, DecodeRun
from kvframe.core.scheduler import Scheduler
from kvframe.engine.arrivals import ArrivalQueue
from kvframe.engine.config import EngineConfig
from kvframe.events import (
    PrefixCacheEvent,
    RequestFinished,
    StepDecision,
    StepSnapshot,
)
from kvframe.executors.sim import SimExecutor
from kvframe.log import get_logger
from kvframe.metrics import MetricsCollector, MetricsSummary
from kvframe.offload.contract import OffloadContext
from kvframe.request import Request
from kvframe.workloads.spec import PromptTokens

if TYPE_CHECKING:
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.executors.presets import Preset
    from kvframe.offload.offloading_connector import OffloadingConnector
    from kvframe.offload.worker import OffloadWorker
    from kvframe.plugins import PluginRegistry, Tracing
    from kvframe.workloads.spec import RequestSpec, Workload

__all__ = ["Engine", "EngineStalled", "RunProgress", "RunResult"]

log = get_logger(__name__)

IGNORED = "ignored"
"""``finish_status`` of a request the engine refused (it could never fit)."""

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
        executor: SimExecutor | Any,
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
        self._stop_token_ids = tuple(getattr(executor, "stop_token_ids", ()))

    @classmethod
    def from_config(cls, config: EngineConfig, registry: PluginRegistry | None = None) -> Engine:
        """Build the plugins the config selects, the scheduler and the executor.

        :param registry: where plugins are looked up (default: the installed ones).
        :raises ConfigError: for an unknown plugin or a bad option.
        """
        if registry is None:
            from kvframe.plugins import get_registry

            registry = get_registry()
        from kvframe.executors.torch.options import parse_executor

        executor_name, torch_options = parse_executor(config.executor)
        plan = None
        if torch_options is not None:
            # Validate the model (dtype, device, checkpoint) before anything else is built.
            from kvframe.config import ConfigError
            from kvframe.executors.torch.build import plan_model

            try:
                plan = plan_model(torch_options)
            except ValueError as err:
                raise ConfigError(str(err), origin="--executor") from None
            config = attrs.evolve(
                config,
                num_gpu_blocks=_torch_num_blocks(
                    config, plan.kv_bytes_per_block(config.block_size), torch_options.kv_memory
                ),
                kv_memory=None,
            )
        preset = config.preset_object
        policy = registry.create("scheduling", config.scheduler)
        eviction = None
        num_gpu_blocks = config.resolved_num_gpu_blocks()
        model = None
        if plan is not None:
            from kvframe.config import ConfigError

            try:
                model = plan.build(num_gpu_blocks, config.block_size)
            except ValueError as err:
                raise ConfigError(str(err), origin="--executor") from None
        if config.gpu_eviction is not None:
            eviction = registry.create("eviction", config.gpu_eviction, num_gpu_blocks)
            from kvframe.core.block_pool import gpu_eviction_problem

            problem = gpu_eviction_problem(eviction)
            if problem is not None:
                from kvframe.config import ConfigError

                selected = config.gpu_eviction
                text = selected if isinstance(selected, str) else type(eviction).name
                raise ConfigError(f"--gpu-eviction {text}: {problem}")
        tracing = registry.create_tracing(config.tracers) if config.tracers else None
        events = tracing is not None and tracing.active
        try:
            connector = worker = handler = None
            if config.offload is not None:
                connector, worker, handler = _build_offload(
                    config,
                    registry,
                    events,
                    kv_bytes_per_token=None if plan is None else plan.kv_bytes_per_token(),
                    real_bytes=plan is not None,
                )
            scheduler = Scheduler(
                config.scheduler_config(enable_kv_cache_events=events),
                policy,
                eviction_policy=eviction,
                connector=connector,
                cost_model=preset.cost_model,
            )
        except BaseException:
            if tracing is not None:
                tracing.close()
            raise
        executor: Any
        if model is not None:
            from kvframe.executors.torch.executor import TorchExecutor

            assert plan is not None and torch_options is not None
            if handler is not None:
                handler.register_kv_caches(model.kv_caches)
            eos = torch_options.eos if torch_options.eos is not None else plan.config.eos_token_id
            executor = TorchExecutor(
                model,
                preset.cost_model,
                clock=torch_options.clock,
                stop_token_ids=() if eos is None or eos < 0 else (eos,),
                offload_worker=worker,
                transfer_handler=handler,
                description=plan.describe(),
                tokenizer=plan.tokenizer,
            )
        else:
            executor = SimExecutor(
                preset.cost_model, offload_worker=worker, transfer_handler=handler
            )
        del executor_name
        return cls(config, scheduler, executor, tracing=tracing, preset=preset)

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
        scheduler = self.scheduler
        schedule = scheduler.schedule
        update_from_output = scheduler.update_from_output
        requests = scheduler.requests
        kv = scheduler.kv_cache_manager
        execute = self.executor.execute
        collector = self._collector
        on_step = collector.on_step
        on_first_token = collector.on_first_token
        on_finished = collector.on_finished
        on_scheduled = collector.on_scheduled
        on_prefix_hit = collector.on_prefix_hit
        stats = scheduler.stats
        hook = self.tracing.hook if self.tracing is not None and self.tracing.active else None
        view = RunProgress(self) if progress is not None else None
        connector = cast("OffloadingConnector | None", scheduler.connector)
        worker = self.executor.offload_worker
        handler = self.executor.transfer_handler
        record_finished = getattr(self.executor, "record_finished", None)
        # Runs of plain decode steps in one go (kvframe.core.decode_run): only
        # where every step's effects are the scheduler's own and the cost
        # model's, i.e. the sim executor with no offload tier and no tracer.
        decode_runs = (
            not self.config.step_by_step
            and hook is None
            and connector is None
            and type(self.executor) is SimExecutor
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
                    if arrivals.num_held:
                        raise EngineStalled(
                            f"{arrivals.num_held} agentic turns wait for earlier turns "
                            "that never finished"
                        )
                    break
                now = max(now, arrivals.next_time)
                self._now = now
                continue

            if hook is not None:
                hook.kvframe_step_snapshot(snapshot=_snapshot(scheduler, now))
            output = None
            if decode_runs:
                run = scheduler.start_decode_run(self.executor.token_id)
                if run is not None:
                    now, output = self._decode_run(run, arrivals, now)
                    if view is not None:
                        progress(view)  # type: ignore[misc]
            if output is None:
                output = schedule(now)
            step = stats.num_steps
            if hook is not None:
                _trace_decision(hook, output, step, now)

            if output.preempted_req_ids:
                for request_id in output.preempted_req_ids:
                    collector.on_preempted(request_id)
            if output.first_admissions:
                for hit in output.first_admissions:
                    on_prefix_hit(hit.req_id, hit.local_hit_tokens, hit.external_hit_tokens)
            if output.scheduled_new_reqs:
                # Stamped when the request enters RUNNING, as vLLM's SCHEDULED
                # event: an async load's first admission only reserves blocks.
                for new_request in output.scheduled_new_reqs:
                    on_scheduled(new_request.req_id, now)
            if output.recomputed_tokens:
                for request_id, num_tokens in output.recomputed_tokens.items():
                    if num_tokens:
                        collector.on_recomputed(request_id, num_tokens)

            if not output.total_num_scheduled_tokens:
                next_transfer = math.inf
                if handler is not None:
                    # No forward pass, but the connector's transfers still run
                    # (vLLM's model runner does the same without tokens).
                    kv_output = execute(output, requests, now).model_output
                    update_from_output(output, kv_output)
                    done = kv_output.kv_connector_output
                    if hook is not None:
                        _trace_kv_events(hook, kv, step, now, connector)
                    if done is not None and (done.finished_recving or done.finished_sending):
                        idle_steps = 0
                        continue
                    next_transfer = handler.next_completion()
                elif hook is not None:
                    _trace_kv_events(hook, kv, step, now)
                now = self._idle(arrivals, now, output, idle_steps, next_transfer)
                idle_steps = idle_steps + 1 if now == self._now else 0
                self._now = now
                if view is not None:
                    progress(view)  # type: ignore[misc]
                continue
            idle_steps = 0

            result = execute(output, requests, now)
            end = now + result.duration
            sampled = result.sampled
            on_step(
                now,
                result.duration,
                num_generated_tokens=len(sampled),
                num_computed_tokens=output.total_num_scheduled_tokens,
            )
            finished = update_from_output(output, result.model_output)
            for request in sampled:
                if request.first_token_time is None:
                    request.first_token_time = end
                    on_first_token(request.request_id, end)
            if hook is not None:
                _trace_kv_events(hook, kv, step, now, connector)
            if finished:
                for request in finished:
                    request.finish_time = end
                    on_finished(
                        request.request_id,
                        end,
                        num_output_tokens=request.num_output_tokens,
                        status=request.get_finished_reason() or str(request.status),
                    )
                    if record_finished is not None:
                        record_finished(request)
                    if request.job_id is not None:
                        arrivals.turn_finished(request.job_id, end)
                    if hook is not None:
                        hook.kvframe_request_finished(record=_finished_record(request, step, now))
            now = end
            self._now = end
            if view is not None:
                progress(view)  # type: ignore[misc]

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
            hook.kvframe_request_finished(
                record=RequestFinished(
                    step=self.scheduler.stats.num_steps,
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
            )

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
        executor_counters = getattr(self.executor, "counters", None)
        if executor_counters is not None:
            counters.update(executor_counters())
        source = getattr(workload, "source", None)
        metadata = {
            "kvframe_version": kvframe.__version__,
            "workload": {
                "name": getattr(workload, "name", "workload"),
                "source": None if source is None else str(source),
                "format": getattr(workload, "format", "memory"),
                "num_requests": self._num_total,
            },
            "engine": self.config.describe(),
            "scheduling_policy": self.policy_name,
            "preset": self.preset.describe(),
        }
        description = getattr(self.executor, "description", None)
        if description:
            metadata["executor"] = description
        return self._collector.summary(
            counters=counters, wall_clock_seconds=wall, partial=partial, metadata=metadata
        )


# ==========================================================================
# Trace records: built only when a tracer is active
# ==========================================================================


def _snapshot(scheduler: Scheduler, now: float) -> StepSnapshot:
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


def _trace_decision(hook: Any, output: SchedulerOutput, step: int, now: float) -> None:
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


def _trace_kv_events(hook: Any, kv: Any, step: int, now: float, connector: Any = None) -> None:
    events = kv.take_events()
    if connector is not None:
        events = [*events, *connector.take_events()]
    if events:
        hook.kvframe_kv_events(step=step, now=now, events=events)


def _finished_record(request: Request, step: int, now: float) -> RequestFinished:
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


# ==========================================================================
# Offload
# ==========================================================================


def _build_offload(
    config: EngineConfig,
    registry: PluginRegistry,
    enable_events: bool,
    *,
    kv_bytes_per_token: int | None = None,
    real_bytes: bool = False,
) -> tuple[OffloadingConnector, OffloadWorker, Any]:
    """The tier's manager (wrapped in the reuse filter), its connector and the worker.

    The sim executor's worker runs a :class:`SimTransferHandler`. With
    ``real_bytes`` (the torch executor) the tier's own transfer handler moves
    the bytes and the sim handler keeps the time (see
    :class:`~kvframe.executors.torch.executor.RealBytesTransferHandler`);
    ``kv_bytes_per_token`` is then the torch model's, not the preset's.

    ``config.eviction`` sets the tier's ``eviction`` option; if the offload
    config string sets it too, they must name the same policy with the same options.
    """
    from kvframe.config import ConfigError
    from kvframe.offload.manager import FilteredOffloadManager
    from kvframe.offload.offloading_connector import OffloadingConnector
    from kvframe.offload.worker import OffloadWorker, SimTransferHandler

    assert config.offload is not None
    resolved = registry.resolve("offload", config.offload)
    options = dict(resolved.options)
    if config.eviction is not None:
        wanted = registry.resolve("eviction", config.eviction)
        given = options.get("eviction")
        if given is not None:
            have = given if not isinstance(given, str) else registry.resolve("eviction", given)
            if (have.name, dict(have.options)) != (wanted.name, dict(wanted.options)):
                raise ConfigError(
                    f"the offload tier's eviction policy {have.name!r} disagrees with the "
                    f"eviction policy selected separately ({wanted.spec.source or wanted.name!r})",
                    hints=["name the tier's eviction policy once: --eviction or eviction=..."],
                )
        options["eviction"] = wanted.spec.source or wanted.name
    try:
        spec = resolved.cls(**options)
    except ValueError as err:
        raise ConfigError(f"offload tier {resolved.name!r} rejected its options: {err}") from err
    preset = config.preset_object
    context = OffloadContext(
        gpu_block_size=config.block_size,
        kv_bytes_per_token=(
            preset.shape.kv_bytes_per_token if kv_bytes_per_token is None else kv_bytes_per_token
        ),
        num_gpu_blocks=config.resolved_num_gpu_blocks(),
        enable_events=enable_events,
    )
    try:
        manager = spec.create_manager(context)  # type: ignore[attr-defined]
    except ValueError as err:
        raise ConfigError(f"offload tier {resolved.name!r}: {err}") from err
    if config.reuse_filter is not None:
        reuse_filter = registry.create("reuse_filter", config.reuse_filter)
        manager = FilteredOffloadManager(manager, reuse_filter)
    factor, rest = divmod(manager.block_size, config.block_size)
    if rest or factor < 1:
        raise ConfigError(
            f"offload tier {resolved.name!r}: its block of {manager.block_size} tokens is not "
            f"a whole number of {config.block_size}-token GPU blocks"
        )
    cost_model = preset.cost_model
    if config.offload_bandwidth is not None:
        cost_model = attrs.evolve(cost_model, transfer_bytes_per_s=float(config.offload_bandwidth))
    kv_bytes = context.kv_bytes_per_token
    connector = OffloadingConnector(
        manager,
        gpu_block_size=config.block_size,
        block_size_factor=factor,
        enable_prefix_caching=config.enable_prefix_caching,
        # The tier view's load estimate is the sim transfer model's (what a load costs here).
        load_time=lambda num_tokens: cost_model.transfer_time(num_tokens * kv_bytes),
    )
    handler: Any = SimTransferHandler(cost_model, context.gpu_block_bytes)
    if real_bytes:
        from kvframe.executors.torch.executor import RealBytesTransferHandler

        handler = RealBytesTransferHandler(handler, spec.create_transfer_handler(context))
    return connector, OffloadWorker(handler), handler


def _torch_num_blocks(config: EngineConfig, block_bytes: int, default_kv_memory: int) -> int:
    """GPU blocks for the torch executor: as given, or its KV memory over the *model's*
    block bytes (the preset's model shape only drives the sim's clock)."""
    if config.num_gpu_blocks is not None:
        return config.num_gpu_blocks
    memory = config.kv_memory if config.kv_memory is not None else default_kv_memory
    blocks = int(memory // block_bytes)
    if blocks < 2:
        from kvframe.config import ConfigError

        raise ConfigError(
            f"kv_memory={memory} bytes holds fewer than 2 blocks of {block_bytes} bytes "
            "for the torch executor's model"
        )
    return blocks
