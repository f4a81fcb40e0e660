"""The synchronous engine loop as one iteration at a time, so that it can be driven from outside.

:meth:`Engine.run <kvframe.engine.engine.Engine.run>` calls
:meth:`SyncDriver.advance` until it returns :data:`DONE`; a fleet
(:mod:`kvframe.fleet`) calls it on whichever replica's next step starts
first, so that N engines share one virtual clock. One call is one iteration of
the loop the module docstring of :mod:`kvframe.engine.engine` describes:

1. add every request whose arrival time has passed;
2. nothing in flight: jump the clock to the next arrival (:data:`CONTINUE`),
   or :data:`DONE` when there is none;
3. a run of plain decode steps if one can start, then ``decide``; a step with
   tokens executed and applied at once, or one that schedules nothing
   (``run_empty``, which may move the clock over an idle gap).

The batch queue's loop (:class:`kvframe.engine.batch_queue.BatchQueueDriver`)
has the same shape. Both keep the state that lived in the loops' locals
(consecutive idle steps, the batch queue) as attributes, and report
:attr:`slept_from` when an iteration jumped the clock over an idle gap, which
a fleet needs when it later routes an arrival into that gap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvframe.engine.step import PAUSED

if TYPE_CHECKING:
    from kvframe.engine.step import EngineStep

__all__ = ["CONTINUE", "DONE", "STEPPED", "SyncDriver"]

DONE = 0
"""``advance`` result: no request is in flight and no arrival is known (the loop's ``break``)."""
CONTINUE = 1
"""``advance`` result: the clock moved or a step was prepared; no output applied (``continue``)."""
STEPPED = 2
"""``advance`` result: a step's output was applied (the loop calls ``progress``)."""


class SyncDriver:
    """The synchronous loop of :class:`~kvframe.engine.engine.Engine`, one iteration per call.

    :param decode_runs: take runs of plain decode steps in one go (the engine
        decides: an executor that allows it, no offload tier, no tracer).
    :param progress: called after each decode run (the loop's own callback).
    """

    __slots__ = (
        "_arrivals",
        "_requests",
        "_scheduler",
        "_tier",
        "decode_runs",
        "idle_steps",
        "progress",
        "slept_from",
        "step",
        "token_id",
    )

    def __init__(
        self,
        step: EngineStep,
        *,
        decode_runs: bool,
        token_id: int,
        progress: Callable[[], Any] | None = None,
    ) -> None:
        self.step = step
        self._scheduler = step.scheduler
        self._requests = step.scheduler.requests
        self._arrivals = step.arrivals
        self._tier = step.tier
        self.decode_runs = decode_runs
        self.token_id = token_id
        self.progress = progress
        self.idle_steps = 0
        self.slept_from: float | None = None
        """Set when the last iteration moved the clock over an idle gap: the clock before
        the jump (a fleet pulls the clock back to an arrival routed inside the gap)."""

    @property
    def takes_decode_runs(self) -> bool:
        """Whether this loop takes runs of plain decode steps in one go (a fleet whose
        router reads KV events then marks each step's events, so that every event still
        carries its own step's end)."""
        return self.decode_runs

    def has_work(self) -> bool:
        """Whether the next iteration steps at ``step.now`` (else it waits for an arrival)."""
        return bool(self._requests) or self._tier.busy

    def advance(self) -> int:
        """One iteration of the loop: :data:`DONE`, :data:`CONTINUE` or :data:`STEPPED`."""
        step = self.step
        self.slept_from = None
        if self._arrivals.next_time <= step.now:
            step.arrive()
        if not self._requests and not self._tier.busy:
            if step.wait_for_arrival():  # nothing in flight: jump over the idle gap
                return CONTINUE
            return DONE
        output = None
        if (
            self.decode_runs
            and (run := self._scheduler.start_decode_run(self.token_id)) is not None
        ):
            output = step.decode_run(run)
            if self.progress is not None:
                self.progress()
            if output is PAUSED:
                return CONTINUE  # the fleet's horizon: other replicas step first
        output = step.decide(output)
        if output.total_num_scheduled_tokens:
            self.idle_steps = 0
            flight = step.execute(output, step.now)
            step.apply(flight, flight.start)
            step.now = flight.end
            return STEPPED
        before = step.now
        woke = step.run_empty(output, self.idle_steps)
        if woke is None:
            self.idle_steps = 0
            return CONTINUE  # transfers finished: step again at the same time
        self.idle_steps = woke
        self.slept_from = before
        return STEPPED
