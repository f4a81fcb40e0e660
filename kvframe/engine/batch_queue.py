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

Each iteration composes the public phases of
:class:`~kvframe.engine.step.EngineStep` that the synchronous loop composes
too -- ``decide``, ``execute`` at the step's start, ``apply`` when the step
leaves the queue -- so the two loops differ only in their order. When a step
schedules nothing although every output before it was applied, and nothing
is in flight, the clock jumps as the synchronous loop's does
(:meth:`EngineStep.idle <kvframe.engine.step.EngineStep.idle>`): to the next
arrival or retention deadline, or :class:`~kvframe.engine.step.EngineStalled`.

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

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvframe.engine.driver import CONTINUE, DONE, STEPPED

if TYPE_CHECKING:
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.engine.step import EngineStep, Flight

__all__ = ["BATCH_QUEUE_SIZE", "BatchQueueDriver", "run_batch_queue"]

BATCH_QUEUE_SIZE = 2
"""vLLM's ``max_concurrent_batches`` with async scheduling and one engine (no
pipeline parallelism)."""


def run_batch_queue(step: EngineStep, progress: Callable[[], Any] | None) -> None:
    """Replay ``step``'s arrivals in the batch queue's order (module doc); ``progress``
    is called after every iteration that applied an output."""
    advance = BatchQueueDriver(step).advance
    if progress is None:
        while advance():
            pass
        return
    while status := advance():
        if status == STEPPED:
            progress()


class BatchQueueDriver:
    """The batch queue's loop, one iteration per :meth:`advance`, so that a fleet
    (:mod:`kvframe.fleet`) can interleave replicas on one clock.

    The queue and the GPU's next free time live here between iterations; the
    clock is :attr:`EngineStep.now <kvframe.engine.step.EngineStep.now>`.
    """

    __slots__ = (
        "_arrivals",
        "_has_requests",
        "_keeps_queue",
        "gpu_free",
        "idle_steps",
        "queue",
        "slept_from",
        "step",
    )

    def __init__(self, step: EngineStep) -> None:
        self.step = step
        self._has_requests = step.scheduler.has_requests
        self._keeps_queue = step.scheduler.config.fidelity.empty_step_keeps_queue
        self._arrivals = step.arrivals
        self.queue: deque[Flight] = deque()
        self.gpu_free = step.now  # the GPU runs steps back to back
        self.idle_steps = 0
        self.slept_from: float | None = None
        """Set when the last iteration moved the clock over an idle gap: the clock
        before the jump (a fleet pulls the clock back to an arrival routed inside it)."""

    @property
    def takes_decode_runs(self) -> bool:
        """Never: the batch queue takes every step on its own, so each KV event already
        carries its own step's end (:attr:`SyncDriver.takes_decode_runs`)."""
        return False

    def has_work(self) -> bool:
        """Whether the next iteration steps at :attr:`EngineStep.now` (else it waits for an
        arrival)."""
        return (
            bool(self.queue)
            or self._has_requests()
            or (self.step.tier.busy and self._arrivals.exhausted)
        )

    def advance(self) -> int:
        """One ``step_with_batch_queue`` call (module doc): :data:`DONE` when no arrival is
        left and nothing is in flight, :data:`STEPPED` after applying an output, else
        :data:`CONTINUE`."""
        step = self.step
        self.slept_from = None
        if self._arrivals.next_time <= step.now:
            step.arrive()
        queue = self.queue
        has_requests = self._has_requests
        if not queue and not has_requests():
            if self._arrivals.exhausted and step.tier.busy:
                # The last stores still land: steps without requests, applied at
                # once, as the synchronous loop's (vLLM's engine would stop here).
                before = step.now
                woke = step.run_empty(step.decide(), self.idle_steps)
                if woke is not None:
                    self.idle_steps = woke
                    self.slept_from = before
            elif not step.wait_for_arrival():
                return DONE
            return CONTINUE
        output: SchedulerOutput | None = None
        if has_requests():
            output = step.decide()
            flight = step.execute(output, max(step.now, self.gpu_free))
            self.gpu_free = flight.end
            queue.append(flight)
            if len(queue) < BATCH_QUEUE_SIZE and (
                output.total_num_scheduled_tokens or (self._keeps_queue and has_requests())
            ):
                return CONTINUE  # schedule the next step before waiting for this one
        done = queue.popleft()
        step.now = max(step.now, done.end)
        step.apply(done, done.end)
        if output is not None and _stalled(output, done, queue) and step.scheduler.requests:
            # The clock moves to the next arrival or the end of the next transfer.
            before = step.now
            woke = step.idle(output, self.idle_steps, step.tier.next_completion())
            self.idle_steps = self.idle_steps + 1 if woke == before else 0
            step.now = woke
            self.slept_from = before
        else:
            self.idle_steps = 0
        return STEPPED


def _stalled(output: SchedulerOutput, done: Flight, queue: deque[Flight]) -> bool:
    """Nothing scheduled after the last output was applied, and nothing in flight that
    could change that: no step with tokens, no transfer reported but not yet seen by
    the scheduler."""
    return (
        not output.total_num_scheduled_tokens
        and not done.output.total_num_scheduled_tokens
        and not any(q.output.total_num_scheduled_tokens for q in queue)
        and not done.reported_transfers
        and not any(q.reported_transfers for q in queue)
    )
