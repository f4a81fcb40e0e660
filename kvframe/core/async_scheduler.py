"""Asynchronous scheduling: vLLM's ``AsyncScheduler`` beside the synchronous scheduler.

With ``async_scheduling`` vLLM's engine core schedules step N+1 before step N's
sampled tokens come back (:mod:`kvframe.engine.batch_queue` plays that loop).
vLLM then builds an ``AsyncScheduler``, a subclass of its ``Scheduler`` that
differs in a few places; :class:`AsyncScheduler` is kvframe's, and differs in
the same ones:

* after a step is scheduled, every request that samples in it carries an
  output *placeholder* for its token in flight (:meth:`AsyncScheduler.add_output_placeholders`,
  vLLM's ``_update_after_schedule``), and the next step schedules from it;
* when a token arrives its placeholder goes, and only then are the blocks it
  completes cached (:meth:`AsyncScheduler._resolve_placeholders`), so every
  sampled output takes that path: there is no inline one-token case;
* with a connector under vLLM 0.33.0 (switch T22) blocks a step in flight may
  still write are freed when its output is applied
  (:class:`~kvframe.core.deferred_frees.DeferredFrees`);
* no decode run (:mod:`kvframe.core.decode_run`) starts: it assumes every step's
  output is applied before the next is scheduled.

Build one with :func:`kvframe.core.factory.make_scheduler`, which picks the class
from ``SchedulerConfig.async_scheduling``; the synchronous per-step code never
asks which it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from kvframe.core.deferred_frees import DeferredFrees, FreeRule
from kvframe.core.kv_cache_coordinator import InflightTokens
from kvframe.core.scheduler import Scheduler
from kvframe.domain.request import RequestStatus

if TYPE_CHECKING:
    from kvframe.core.connector import SchedulerConnector
    from kvframe.core.decode_run import DecodeRun
    from kvframe.core.scheduler_config import SchedulerConfig
    from kvframe.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
    from kvframe.domain.request import Request

__all__ = ["AsyncScheduler"]

_RUNNING = RequestStatus.RUNNING
_NO_INFLIGHT = InflightTokens()


class AsyncScheduler(Scheduler):
    """The scheduler under asynchronous scheduling (see the module docstring)."""

    async_scheduling: ClassVar[bool] = True

    def _free_rule(self, config: SchedulerConfig, connector: SchedulerConnector | None) -> FreeRule:
        """Switch T22: with a connector, blocks a step in flight may still write are
        freed when its output is applied. (Also binds switch G2's in-flight count:
        the KV-cache groups' manager has one, the one-group manager counts none.)"""
        self._inflight_tokens: InflightTokens = getattr(
            self.kv_cache_manager, "inflight_tokens", _NO_INFLIGHT
        )
        if config.fidelity.defer_block_free and connector is not None:
            return DeferredFrees(self.kv_cache_manager)
        return super()._free_rule(config, connector)

    def start_decode_run(self, token_id: int) -> DecodeRun | None:
        """Never: a decode run needs each step's output before the next step."""
        return None

    def _advance_after_schedule(self, output: SchedulerOutput) -> None:
        super()._advance_after_schedule(output)
        self.add_output_placeholders(output)
        self._inflight_tokens.after_schedule(output.num_scheduled_tokens)  # switch G2
        self._frees.after_schedule(output.num_scheduled_tokens, output.total_num_scheduled_tokens)

    def add_output_placeholders(self, output: SchedulerOutput) -> None:
        """One output placeholder for every scheduled request that samples in this step
        (vLLM's ``AsyncScheduler._update_after_schedule``).

        A request samples when its computed tokens, already advanced by the step,
        reach its known tokens plus the placeholders it carries (it is not a
        partial prefill chunk). The placeholder stands for the token in flight
        until :meth:`update_from_output` brings it; the next step schedules from
        it (``num_tokens_with_spec + num_output_placeholders - num_computed_tokens``).
        :meth:`schedule` calls this itself; a host that builds the step by hand
        calls it after ``num_computed_tokens`` moved.
        """
        requests = self.requests
        for request_id in output.num_scheduled_tokens:
            request = requests[request_id]
            if request.num_computed_tokens >= (
                request.num_tokens + request.num_output_placeholders
            ):
                request.num_output_placeholders += 1

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> list[Request]:
        # T22: every write of this step and the ones before it is done.
        self._frees.after_output(scheduler_output.total_num_scheduled_tokens)
        self._inflight_tokens.after_output(scheduler_output.num_scheduled_tokens)  # G2
        return super().update_from_output(scheduler_output, model_output)

    def _apply_sampled(
        self, scheduler_output: SchedulerOutput, sampled: Mapping[str, list[int]]
    ) -> tuple[list[Request], set[Request], set[Request]]:
        """As the synchronous scheduler's, every output through :meth:`_apply_generated`
        (its placeholders resolve). A request finished by the output of the step
        before (one step late) is skipped like an aborted one."""
        spec_tokens = scheduler_output.scheduled_spec_decode_tokens
        requests = self.requests
        finished: list[Request] = []
        stopped_running: set[Request] = set()
        stopped_waiting: set[Request] = set()
        for request_id in scheduler_output.num_scheduled_tokens:
            request = requests.get(request_id)
            if request is None or request.is_finished():
                continue
            generated = sampled.get(request_id)
            if not generated:
                continue  # a partial prefill chunk samples nothing
            drafts = spec_tokens.get(request_id) if spec_tokens else None
            status_before = request.status
            if self._apply_generated(request, generated, drafts):
                finished.append(request)
                if status_before == _RUNNING:
                    stopped_running.add(request)
                else:
                    stopped_waiting.add(request)
        return finished, stopped_running, stopped_waiting

    def _apply_generated(
        self, request: Request, generated: list[int], drafts: list[int] | None
    ) -> bool:
        """Append as the synchronous scheduler does, then resolve the placeholders of the
        tokens that arrived; whether the request stopped."""
        running = request.status == _RUNNING
        stopped = super()._apply_generated(request, generated, drafts)
        if running:
            self._resolve_placeholders(request, len(generated))
        elif request.num_output_placeholders:
            # vLLM 0.19.1: a session that stopped with a token in flight keeps its
            # placeholder until the token arrives (nothing is cached then).
            request.num_output_placeholders = max(
                0, request.num_output_placeholders - len(generated)
            )
        return stopped

    def _resolve_placeholders(self, request: Request, num_tokens: int) -> None:
        """``num_tokens`` in-flight tokens of a running request
        arrived. Their placeholders go, and the blocks they complete are cached now
        (vLLM caches up to ``num_computed_tokens - num_output_placeholders``: what is
        computed *and* known). A request preempted while its step ran has no
        placeholders left (:meth:`_preempt`); its token is appended, nothing cached."""
        placeholders = request.num_output_placeholders - num_tokens
        if placeholders < 0:
            raise RuntimeError(
                f"request {request.request_id!r}: {num_tokens} sampled tokens arrived for "
                f"{request.num_output_placeholders} in flight (output applied twice?)"
            )
        request.num_output_placeholders = placeholders
        self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens - placeholders)
