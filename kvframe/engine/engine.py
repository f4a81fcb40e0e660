"""The engine: replays a workload through the scheduler and the sim executor on a virtual clock.

One iteration of :meth:`Engine.run`'s loop is one engine step, built from the
public phases of :class:`~kvframe.engine.step.EngineStep`:

1. add every request whose arrival time has passed (``arrival_time <= now``);
2. ``decide``: (tracing) snapshot the queues and the KV pool,
   ``scheduler.schedule(now)``, (tracing) prefix-cache events of first
   admissions and the step decision, the decision's metrics;
3. ``execute``: the executor runs the step: sampled tokens and a duration from
   the cost model;
4. ``apply``: ``scheduler.update_from_output``; the clock moves to the end of
   the step, which is when the step's tokens exist: a request's first token
   time and finish time are the *end* of the step that produced them;
   (tracing) KV events and finished requests.

Under asynchronous scheduling (``EngineConfig.async_scheduling``) the loop is
:mod:`kvframe.engine.batch_queue`'s instead: vLLM's batch queue, step N+1
decided before step N's output is applied, from the same phases.

A stretch of steps in which every running request only decodes is taken in
one go by a :class:`~kvframe.core.decode_run.DecodeRun`
(:meth:`EngineStep.decode_run <kvframe.engine.step.EngineStep.decode_run>`):
per step it still queues arrivals, runs the waiting phase and records the
step's duration, but does not visit the running requests. The results are
those of the step-by-step loop (``EngineConfig.step_by_step`` turns runs off).

When nothing is in flight the clock jumps to the next arrival instead of
stepping through the idle gap. A step that schedules nothing while requests
wait (blocked) also jumps to the next arrival, or to the earliest retention
deadline if only retained blocks stand in the way; with neither, nothing can
ever change and :class:`EngineStalled` is raised instead of looping forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.contract.offload import NO_TIER
from kvframe.core.scheduler import Scheduler
from kvframe.domain.version import __version__
from kvframe.engine.arrivals import ArrivalQueue
from kvframe.engine.batch_queue import BatchQueueDriver, run_batch_queue
from kvframe.engine.build import assemble
from kvframe.engine.config import EngineConfig
from kvframe.engine.driver import STEPPED, SyncDriver
from kvframe.engine.metrics import MetricsCollector, MetricsSummary
from kvframe.engine.step import EngineStalled, EngineStep
from kvframe.engine.steplog import StepLog, StepRecordingCollector
from kvframe.hot_modules import hot_modules_state
from kvframe.log import get_logger
from kvframe.workloads.spec import Workload

if TYPE_CHECKING:
    from kvframe.contract.offload import Tier
    from kvframe.executors.base import Executor
    from kvframe.executors.presets import Preset
    from kvframe.host.registry import PluginRegistry, Tracing
    from kvframe.workloads.spec import RequestSpec

__all__ = ["Engine", "EngineStalled", "RunProgress", "RunResult"]

log = get_logger(__name__)


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
    steps: StepLog | None = None
    """Every step's times and tokens, when the run was asked to record them
    (``Engine.run(record_steps=True)``); ``None`` otherwise."""

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
        return self._engine.now

    @property
    def kv_usage(self) -> float:
        return self._engine.scheduler.kv_cache_manager.usage


ProgressCallback = Callable[[RunProgress], Any]


class Engine:
    """Scheduler + sim executor + metrics (+ tracers, + an offload tier) for one run.

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
        tier: Tier = NO_TIER,
        collector: MetricsCollector | None = None,
    ) -> None:
        """:param tier: the offload tier whose connector ``scheduler`` and whose worker
        ``executor`` were built with (:func:`kvframe.engine.build.build_offload`).
        :param collector: where the run's metrics go (a fleet passes one that also
            tells it which requests finished)."""
        self.config = config
        self.scheduler = scheduler
        self.executor = executor
        self.tracing = tracing
        self.tier = tier
        self.preset = preset if preset is not None else config.preset_object
        self._collector = MetricsCollector() if collector is None else collector
        self._num_total = 0
        self._ran = False
        self._step: EngineStep | None = None

    @classmethod
    def from_config(
        cls,
        config: EngineConfig,
        registry: PluginRegistry | None = None,
        *,
        kv_events: bool = False,
        collector: MetricsCollector | None = None,
        tier: Tier | None = None,
    ) -> Engine:
        """Build the plugins the config selects, the scheduler, the executor and the
        offload tier (:func:`kvframe.engine.build.assemble`).

        :param registry: where plugins are looked up (default: the installed ones).
        :param kv_events: make the block pool record KV events (a fleet whose router
            reads them takes them after each step).
        :param collector: see :class:`Engine`.
        :param tier: a tier the caller built (a disaggregated fleet's replica) instead
            of ``config.offload``'s.
        :raises ConfigError: for an unknown plugin or a bad option.
        """
        parts = assemble(config, registry, kv_events=kv_events, tier=tier)
        return cls(
            parts.config,
            parts.scheduler,
            parts.executor,
            tracing=parts.tracing,
            preset=parts.preset,
            tier=parts.tier,
            collector=collector,
        )

    @property
    def now(self) -> float:
        """Virtual time at the end of the last step, seconds (0 before the run)."""
        return 0.0 if self._step is None else self._step.now

    @property
    def num_decode_run_steps(self) -> int:
        """Steps taken inside runs of plain decode steps (see :mod:`kvframe.core.decode_run`);
        0 with ``step_by_step``. Not in the summary: results are the same either way."""
        return 0 if self._step is None else self._step.num_decode_run_steps

    @property
    def policy_name(self) -> str:
        policy = self.scheduler.policy
        return policy.name or type(policy).__name__

    # ------------------------------------------------------------------
    # The run
    # ------------------------------------------------------------------

    def run(
        self,
        workload: Workload | Sequence[RequestSpec],
        *,
        limit: int | None = None,
        progress: ProgressCallback | None = None,
        record_steps: bool = False,
    ) -> RunResult:
        """Replay ``workload`` until every request has finished.

        :param workload: specs in arrival order (a :class:`Workload` or a list).
        :param limit: replay only the first ``limit`` requests.
        :param progress: called after every step with a :class:`RunProgress`;
            it should throttle itself. An exception from it stops the run (a
            ``KeyboardInterrupt`` stops it cleanly, like Ctrl-C).
        :param record_steps: keep every step's times and tokens in
            :attr:`RunResult.steps` (:mod:`kvframe.engine.steplog`; a run without it
            pays nothing for them).
        :return: the metrics; ``partial`` if interrupted by ``KeyboardInterrupt``.
        :raises EngineStalled: when requests can never be scheduled; its ``result`` is
            the partial result up to the stall (``metadata.stalled`` says why).
        """
        if self._ran:
            raise RuntimeError("an Engine runs once; build a new one for another run")
        specs = workload.requests if isinstance(workload, Workload) else workload
        if limit is not None:
            if limit < 1:
                raise ValueError(f"limit must be >= 1, got {limit}")
            specs = specs[:limit]
        if record_steps:
            self._collector = StepRecordingCollector()
        step = self.prepare(ArrivalQueue(specs), len(specs))
        self._log_start(len(specs))
        tracing = self.tracing
        started = time.perf_counter()
        try:
            partial, stalled = self._run_until_stopped(step, progress)
        finally:
            if tracing is not None:
                tracing.close()
        wall = time.perf_counter() - started
        summary = self.summarize(
            workload, step, wall, partial, stalled=None if stalled is None else str(stalled)
        )
        log.info(
            "run_finished",
            wall_seconds=round(wall, 3),
            partial=partial,
            decode_run_steps=step.num_decode_run_steps,
        )
        steps = self._collector.steps if record_steps else None  # type: ignore[attr-defined]
        result = RunResult(summary, partial, wall, len(specs), steps)
        if stalled is not None:
            stalled.result = result
            raise stalled
        return result

    def _log_start(self, num_requests: int) -> None:
        """The ``run_started`` log line: what this run replays, with which policy and pool."""
        log.info(
            "run_started",
            requests=num_requests,
            scheduling=self.policy_name,
            num_gpu_blocks=self.scheduler.config.num_gpu_blocks,
            block_size=self.scheduler.config.block_size,
            preset=self.preset.name,
        )

    def _run_until_stopped(
        self, step: EngineStep, progress: ProgressCallback | None
    ) -> tuple[bool, EngineStalled | None]:
        """Run the loop; ``(partial, stall)``: ``partial`` when Ctrl-C/SIGTERM or a stall
        ended it, ``stall`` the :class:`EngineStalled` of a stall.

        A stall is kept like an interrupt: the requests that finished before it are
        results (a scheduling policy that never admits some requests loses no others).
        """
        try:
            self._run_loop(step, progress)
        except KeyboardInterrupt:
            log.warning("run_interrupted", steps=self.scheduler.stats.num_steps, now=step.now)
            return True, None
        except EngineStalled as err:
            log.warning("run_stalled", steps=self.scheduler.stats.num_steps, now=step.now)
            return True, err
        return False, None

    def prepare(self, arrivals: ArrivalQueue, num_total: int) -> EngineStep:
        """The step pipeline over ``arrivals``, for a loop driven from outside (a fleet's
        replica; :meth:`run` calls it too). ``num_total``: requests the run may see."""
        if self._step is not None:
            raise RuntimeError("an Engine runs once; build a new one for another run")
        self._ran = True
        self._num_total = num_total
        tracing = self.tracing
        hook = tracing.hook if tracing is not None and tracing.active else None
        step = self._step = EngineStep(
            self.scheduler, self.executor, self.tier, self._collector, arrivals, hook
        )
        return step

    def _run_loop(self, step: EngineStep, progress: ProgressCallback | None) -> None:
        """The batch queue's loop under asynchronous scheduling, else the synchronous one,
        each driven one iteration at a time (:mod:`kvframe.engine.driver`)."""
        call = None
        if progress is not None:
            live = RunProgress(self)

            def call() -> None:
                progress(live)

        if self.scheduler.async_scheduling:
            run_batch_queue(step, call)
            return
        driver = self.driver(step, call)
        assert isinstance(driver, SyncDriver)
        advance = driver.advance
        if call is None:
            while advance():
                pass
            return
        while status := advance():
            if status == STEPPED:
                call()

    def driver(
        self, step: EngineStep, progress: Callable[[], Any] | None = None
    ) -> SyncDriver | BatchQueueDriver:
        """The loop over ``step``, one iteration per ``advance()``: the batch queue's under
        asynchronous scheduling, else the synchronous one (module docstring). Runs of plain
        decode steps are taken in one go only where every step's effects are the
        scheduler's own and the cost model's: an executor that allows it, no offload
        tier, no tracer (:mod:`kvframe.core.decode_run`)."""
        decode_runs = (
            not self.config.step_by_step
            and step.hook is None
            and not step.tier.moves_blocks
            and self.executor.supports_decode_runs
        )
        if self.scheduler.async_scheduling:
            return BatchQueueDriver(step)
        token_id = self.executor.token_id if decode_runs else 0
        return SyncDriver(step, decode_runs=decode_runs, token_id=token_id, progress=progress)

    # -- the end ---------------------------------------------------------------

    def run_counters(self, step: EngineStep, num_skipped_lines: int = 0) -> dict[str, int | float]:
        """The scheduler's, the tier's and the executor's counters of the run so far."""
        scheduler = self.scheduler
        counters: dict[str, int | float] = attrs.asdict(scheduler.stats)
        counters["num_requests_ignored"] = step.num_ignored
        counters["num_requests_not_arrived"] = step.arrivals.num_pending
        counters["num_skipped_lines"] = num_skipped_lines
        counters["num_gpu_blocks"] = scheduler.config.num_gpu_blocks
        uncomputed = scheduler.kv_cache_manager.uncomputed
        counters["prefix_cache_uncomputed_hits"] = uncomputed.hit_tokens
        counters["prefix_cache_uncomputed_rolled_back"] = uncomputed.num_rolled_back
        stats = scheduler.stats
        counters.update(
            self.tier.counters(
                stats.connector_prefix_cache_hits, stats.preempted_external_prefix_cache_hits
            )
        )
        counters.update(self.executor.counters())
        return counters

    @property
    def collector(self) -> MetricsCollector:
        """Where the run's metrics go."""
        return self._collector

    def summarize(
        self,
        workload: Workload | Sequence[RequestSpec],
        step: EngineStep,
        wall: float,
        partial: bool,
        *,
        stalled: str | None = None,
    ) -> MetricsSummary:
        """The run's summary: the collector's metrics, the scheduler's counters, what ran
        (``stalled``: why a stalled run stopped, kept in ``metadata.stalled``)."""
        scheduler = self.scheduler
        known = workload if isinstance(workload, Workload) else None
        counters = self.run_counters(step, 0 if known is None else known.num_skipped_lines)
        hasher = scheduler.block_hasher
        metadata = {
            "kvframe_version": __version__,
            "workload": {
                "name": "workload" if known is None else known.name,
                "source": None if known is None or known.source is None else str(known.source),
                "format": "memory" if known is None else known.format,
                "num_requests": self._num_total,
            },
            "engine": self.config.describe(),
            "core": scheduler.kv_cache_manager.core,
            "core_note": scheduler.kv_cache_manager.core_note,
            # python or compiled (kvframe.core.hashing); None: nothing hashed.
            "hasher": None if hasher is None else hasher.core,
            # python or compiled: the scheduler, requests, queues (kvframe.hot_modules).
            "hot_modules": hot_modules_state(),
            "scheduling_policy": self.policy_name,
            "preset": self.preset.describe(),
        }
        description = self.executor.description
        if description:
            metadata["executor"] = description
        metadata["clock"] = self.executor.clock
        if stalled is not None:
            metadata["stalled"] = stalled
        return self._collector.summary(
            counters=counters, wall_clock_seconds=wall, partial=partial, metadata=metadata
        )
