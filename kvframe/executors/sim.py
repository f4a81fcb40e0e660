"""The sim executor: runs a scheduled step on a cost model instead of a GPU.

There are no tensors. For each step the executor

1. classifies the scheduled tokens (:func:`kvframe.executors.base.classify_step`)
   into *prefill tokens* (a request still computing its prompt, or recomputing
   prompt and outputs after a preemption) and *decode sequences* (a request
   computing the one token it sampled last step), and sums the *context
   tokens* attention reads (each scheduled request's ``num_computed_tokens``
   before the step); it also counts the requests with a prefill chunk and their
   attention's query-key pairs, terms only a fitted cost model uses;
2. samples one token for every request whose known tokens are all computed
   after the step (a partial prefill chunk samples nothing), as a real model
   runner does;
3. returns the step's duration from
   :meth:`~kvframe.domain.costs.CostModel.step_time`.

**The sampled token.** Every sampled token is :data:`SAMPLED_TOKEN_ID` (0),
whatever the request. That is deterministic, costs nothing, and is safe for
prefix caching: block hashes chain through the parent block, so two requests
whose outputs are both runs of ``0`` share output blocks only if their prompts
(hence every earlier block) were equal too -- which is exactly when a real
greedy model would also have produced equal outputs. A workload that gives
``stop_token_ids`` containing the sampled id would stop at the first token;
pass another ``token_id`` if that matters (trace workloads have no stop tokens).
Speculative decoding is not modelled: drafts are never proposed, so exactly one
token is sampled per finished computation.

**Offload.** With an offload tier the executor also runs the worker half of
the connector (:class:`~kvframe.offload.slots.worker.OffloadWorker`) on a
:class:`~kvframe.offload.slots.worker.SimTransferHandler`: at the step's start the
deferred stores and this step's loads are submitted (and a preempted
request's stores waited for, which delays the step), at its end this step's
stores are deferred and finished transfers are reported in
``ModelRunnerOutput.kv_connector_output``. The engine calls :meth:`SimExecutor.execute`
for steps that schedule no tokens too when offload is on, as vLLM's model
runner runs the connector without a forward pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.executors.base import StepResult, StepShape, classify_step, offload_bracket

if TYPE_CHECKING:
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.domain.costs import CostModel
    from kvframe.domain.request import Request
    from kvframe.offload.slots.worker import OffloadWorker, SimTransferHandler

__all__ = ["SAMPLED_TOKEN_ID", "SimExecutor", "StepResult"]

SAMPLED_TOKEN_ID = 0
"""The token id the sim executor samples for every request (see the module docstring)."""


class SimExecutor:
    """Executes scheduler outputs on a :class:`~kvframe.domain.costs.CostModel`.

    Deterministic: the same outputs and requests give the same tokens and
    durations in every process.

    :param cost_model: step-time coefficients (usually a preset's).
    :param token_id: the token sampled for every request.
    """

    supports_decode_runs = True
    """A step's effects are the scheduler's and the cost model's alone."""
    clock = "virtual"
    """The cost model moves the clock."""
    stop_token_ids: tuple[int, ...] = ()
    description: str | None = None

    def __init__(
        self,
        cost_model: CostModel,
        *,
        token_id: int = SAMPLED_TOKEN_ID,
        offload_worker: OffloadWorker | None = None,
        transfer_handler: SimTransferHandler | None = None,
    ) -> None:
        """
        :param offload_worker: the worker half of an offload connector, if any.
        :param transfer_handler: its handler, whose clock the executor moves.
        """
        self._bracket = offload_bracket(offload_worker, transfer_handler)
        self.cost_model = cost_model
        self._hybrid = cost_model.is_hybrid
        if self._hybrid:
            # A hybrid model's windowed layers read per request (the context capped
            # at the window), which a run of decode steps, summing contexts only,
            # cannot price: every step goes through execute().
            self.supports_decode_runs = False
        self.token_id = token_id
        self._sample = [token_id]
        self.offload_worker = offload_worker
        self.transfer_handler = transfer_handler

    def execute(
        self,
        scheduler_output: SchedulerOutput,
        requests: Mapping[str, Request],
        now: float = 0.0,
    ) -> StepResult:
        """Run one step.

        :param scheduler_output: what ``Scheduler.schedule`` decided (after which
            the scheduled requests' ``num_computed_tokens`` are already advanced).
        :param requests: the scheduler's live requests by id (``scheduler.requests``).
        :param now: the step's start on the virtual clock (offload transfers only).
        """
        bracket = self._bracket
        stall = 0.0 if bracket is None else bracket.start(scheduler_output, now)
        shape, sampled = classify_step(scheduler_output.num_scheduled_tokens, requests)
        # The sampled-token list is shared and read-only (update_from_output only
        # iterates it).
        sample = self._sample
        tokens = {request.request_id: sample for request in sampled}
        if self._hybrid:
            duration = self._hybrid_step_time(scheduler_output, requests, shape)
        else:
            duration = self.cost_model.step_time(
                shape.prefill, shape.decode, shape.context, shape.prefill_seqs, shape.prefill_pairs
            )
        model_output = ModelRunnerOutput(sampled_token_ids=tokens)
        if bracket is not None:
            duration += stall
            output, save_stall = bracket.end(scheduler_output, now, duration)
            model_output.kv_connector_output = output
            duration += save_stall
        return StepResult(
            model_output, duration, sampled, shape.prefill, shape.decode, shape.context
        )

    def _hybrid_step_time(
        self,
        scheduler_output: SchedulerOutput,
        requests: Mapping[str, Request],
        shape: StepShape,
    ) -> float:
        """A hybrid model's step: the full-attention layers priced from ``shape`` as for
        any model, the windowed layers and Mamba state per request
        (:meth:`~kvframe.domain.costs.CostModel.hybrid_attention`)."""
        spans = []
        for request_id, num_new in scheduler_output.num_scheduled_tokens.items():
            request = requests[request_id]
            before = request.num_computed_tokens - num_new
            decoding = before >= request.num_prompt_tokens and (
                request.output_token_ids or request.num_output_placeholders
            )
            spans.append((before, 0 if decoding else num_new))
        pair_s, read_s = self.cost_model.hybrid_attention(spans)
        counts = (
            shape.prefill,
            shape.decode,
            shape.context,
            shape.prefill_seqs,
            shape.prefill_pairs,
        )
        return self.cost_model.hybrid_step_time(counts, pair_s, read_s)

    def record_finished(self, request: Request) -> None:
        """Nothing to keep: every sampled token is :attr:`token_id`."""

    def counters(self) -> dict[str, object]:
        """No counters of its own."""
        return {}
