"""Runs of decode-only steps, scheduled without visiting every running request.

Most steps of a loaded engine are *plain decode steps*: every running request
computes the one token it sampled last step, nothing is admitted, preempted or
finished. In the Mooncake conversation trace that is 85% of all steps, each
visiting ~35 running requests in five places (schedule, output, executor,
update, metrics) to add 1 to the same counters. A :class:`DecodeRun` takes
such a stretch of steps in one go and gives the same result:

* **What it still does every step, for real**: count the step, call the
  policy's ``on_step_start``, the allocations a request needs when it crosses
  a block boundary or fills a block (``allocate_slots``, in running order, as
  the running phase would), and the whole waiting phase (the head's prefix
  lookup and admission attempt), so the KV pool, the prefix cache, the waiting
  queues and every counter change exactly as they would step by step.
* **What it defers**: each running request's counters and output tokens.
  Between its own allocations a decoding request only gains one token per
  step, so the run keeps how many steps it is behind and catches it up
  (:meth:`_catch_up`) when something reads it: its next allocation, the end of
  the run, or a step that turns out not to be plain.

A run ends *before* a step it cannot take in one go, leaving everything as the
step-by-step path would have left it before that step:

* a request would finish in that step (its ``max_tokens``, ``max_model_len``,
  or a stop token equal to the executor's sampled token);
* that step's allocations would need more blocks than are free (a preemption);
* the step would admit a request: that step is then finished as an ordinary
  step (:meth:`step` returns its :class:`SchedulerOutput`, every request caught
  up), and the run is over.

Conditions to start one (:meth:`Scheduler.start_decode_run`): no connector,
no retained requests, nothing in ``skipped_waiting``, a policy that allows
decode runs (:attr:`kvframe.SchedulingPolicy.allows_decode_runs`), and every
running request decoding: one token due, at least one output token, no draft
tokens, no output placeholders. The engine adds its own conditions (the sim
executor, no tracer); ``tests/engine/test_decode_runs.py`` checks the whole
equivalence against the step-by-step path.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from kvframe.core.step import StepPlan

if TYPE_CHECKING:
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.core.step import StepPhases
    from kvframe.domain.request import Request

__all__ = ["DecodeRun"]

_block_id = attrgetter("block_id")

STOP = object()
"""Returned by :meth:`DecodeRun.step`: the run cannot take this step; nothing was done."""


class DecodeRun:
    """A stretch of plain decode steps; see the module docstring.

    Step ``j`` (1-based) of the run is the ``j``-th engine step after the one
    that made the current state. Use it as::

        run = scheduler.start_decode_run(token_id)
        while True:
            result = run.step(now)          # None: a plain decode step was scheduled
            if result is STOP: break        # the caller schedules this step normally
            if result is not None: ...      # a whole SchedulerOutput for this step; the run is over
            duration = cost(0, run.num_running, run.context_tokens)
            ...
        run.close()

    :meth:`close` (also after ``STOP`` or an exception) catches every request up.
    """

    __slots__ = (
        "_base_computed",
        "_caught_up",
        "_closed",
        "_events",
        "_finish_step",
        "_lookahead",
        "_scheduler",
        "_token_id",
        "context_tokens",
        "num_running",
        "running",
        "step_index",
    )

    def __init__(self, scheduler: StepPhases, token_id: int, finish_step: int) -> None:
        self._scheduler = scheduler
        self._token_id = token_id
        self.running: list[Request] = list(scheduler.running)
        self.num_running = len(self.running)
        self._finish_step = finish_step
        """The first step in which some request finishes (not taken by the run)."""
        self._lookahead = scheduler.num_lookahead_tokens
        self._caught_up = [0] * self.num_running
        """Steps already applied to each request (its counters are at step ``n + 1``'s start)."""
        self._base_computed = [r.num_computed_tokens for r in self.running]
        self.context_tokens = sum(self._base_computed)
        """Tokens attention reads in the current step: the running requests' computed tokens."""
        self.step_index = 0
        """Steps taken so far (the next :meth:`step` is step ``step_index + 1``)."""
        self._closed = False
        limits = scheduler.kv_cache_manager.decode_limits
        self._events: dict[int, list[int]] = {}
        """Step -> running indices that need ``allocate_slots`` in it (ascending once sorted)."""
        for index, request in enumerate(self.running):
            event = limits.get(request.request_id, -1) - self._base_computed[index] + 2
            self._events.setdefault(max(event, 1), []).append(index)

    @staticmethod
    def finish_step(running: list[Request], token_id: int, max_model_len: int) -> int:
        """The first step (1-based) in which one of ``running`` finishes, 0 if a request
        is not plainly decoding (so no run can start)."""
        first = 1 << 62
        # Newest first: a request still prefilling was admitted last, so a
        # mixed step is recognised after one look.
        for request in reversed(running):
            if (
                request.num_computed_tokens != request.num_tokens - 1
                or not request.num_output_tokens
                or request.spec_token_ids
                or request.num_output_placeholders
            ):
                return 0
            if token_id in request.stop_token_ids:
                return 1
            steps = request.max_tokens - request.num_output_tokens
            by_length = max_model_len - request.num_tokens
            if by_length < steps:
                steps = by_length
            if steps < first:
                first = steps
        return first

    # ------------------------------------------------------------------ steps

    def step(self, now: float) -> SchedulerOutput | object | None:
        """Schedule the next step of the run.

        Returns ``None`` for a plain decode step (every running request gets one
        token; :attr:`context_tokens` is the step's attention context until the
        next call), a :class:`SchedulerOutput` when the waiting phase admitted
        something (an ordinary step: execute it as usual; the run is over and
        closed), or :data:`STOP`, having changed nothing, when the step cannot be
        taken in one go.
        """
        j = self.step_index + 1
        if j >= self._finish_step:
            return STOP
        scheduler = self._scheduler
        kv = scheduler.kv_cache_manager
        events = self._events.pop(j, None)
        if events is not None:
            events.sort()
            if self._blocks_needed(events, j) > kv.block_pool.get_num_free_blocks():
                self._events[j] = events  # untouched: the step is not taken
                return STOP

        if j > 1:
            self.context_tokens += self.num_running
        self.step_index = j
        budget = scheduler.config.max_num_batched_tokens - self.num_running
        step = scheduler.begin_step(now, budget)
        new_block_ids: dict[str, list[int] | None] | None = None
        if events is not None:
            new_block_ids = self._allocate(events, j)

        scheduler.schedule_waiting(step)
        if step.num_scheduled_tokens:
            return self._ordinary_step(step, new_block_ids)
        if j == 1:
            # The output this step would have carried took the finished ids.
            scheduler.finished_req_ids = set()
        return None

    def _blocks_needed(self, events: list[int], j: int) -> int:
        """New blocks step ``j``'s allocations take (what ``allocate_slots`` would allocate)."""
        kv = self._scheduler.kv_cache_manager
        block_size = kv.block_size
        max_model_len = kv.max_model_len
        needed = 0
        for index in events:
            request = self.running[index]
            computed = self._base_computed[index] + j - 1
            slots = min(computed + 1 + self._lookahead, max_model_len)
            more = -(-slots // block_size) - len(kv.req_to_blocks[request.request_id])
            if more > 0:
                needed += more
        return needed

    def _allocate(self, events: list[int], j: int) -> dict[str, list[int] | None]:
        """Step ``j``'s allocations, in running order; returns the new block ids."""
        kv = self._scheduler.kv_cache_manager
        limits = kv.decode_limits
        new_block_ids: dict[str, list[int] | None] = {}
        for index in events:
            request = self.running[index]
            self._catch_up(index, j - 1)
            new_blocks = kv.allocate_slots(request, 1, num_lookahead_tokens=self._lookahead)
            if new_blocks is None:  # _blocks_needed said they fit
                raise AssertionError(f"decode run: allocation for {request.request_id!r} failed")
            new_block_ids[request.request_id] = list(map(_block_id, new_blocks)) or None
            event = limits[request.request_id] - self._base_computed[index] + 2
            self._events.setdefault(max(event, j + 1), []).append(index)
        return new_block_ids

    def _ordinary_step(
        self, admitted: StepPlan, new_block_ids: dict[str, list[int] | None] | None
    ) -> SchedulerOutput:
        """The waiting phase admitted requests: finish this step as ``schedule`` would."""
        scheduler = self._scheduler
        self.close(self.step_index - 1)  # every request as at this step's start
        full = StepPlan(admitted.token_budget)
        full.scheduled_running = list(self.running)
        # Running requests first, in running order, then the admitted ones: the
        # order schedule() fills these in.
        full.num_scheduled_tokens = dict.fromkeys([r.request_id for r in self.running], 1)
        full.num_scheduled_tokens.update(admitted.num_scheduled_tokens)
        full.new_block_ids = dict.fromkeys(full.num_scheduled_tokens)
        if new_block_ids:
            full.new_block_ids.update(new_block_ids)
        full.new_block_ids.update(admitted.new_block_ids)
        full.scheduled_new = admitted.scheduled_new
        full.scheduled_resumed = admitted.scheduled_resumed
        full.first_admissions = admitted.first_admissions
        full.recomputed_tokens = admitted.recomputed_tokens
        return scheduler.finish_step(full)

    # ------------------------------------------------------------- catching up

    def _catch_up(self, index: int, steps: int) -> None:
        """Apply the first ``steps`` steps of the run to request ``index``."""
        behind = steps - self._caught_up[index]
        if behind <= 0:
            return
        request = self.running[index]
        request.append_output_token_ids([self._token_id] * behind)
        request.num_computed_tokens += behind
        self._caught_up[index] = steps

    def close(self, steps: int | None = None) -> None:
        """Catch every request up to ``steps`` steps (default: every step taken); idempotent."""
        if self._closed:
            return
        self._closed = True
        if steps is None:
            steps = self.step_index
        for index in range(self.num_running):
            self._catch_up(index, steps)
