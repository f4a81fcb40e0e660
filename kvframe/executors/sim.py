"""The sim executor: runs a scheduled step on a cost model instead of a GPU.

There are no tensors. For each step the executor

1. classifies the scheduled tokens into *prefill tokens* (a request still
   computing its prompt, or recomputing prompt and outputs after a
   preemption) and *decode sequences* (a request computing the one token it
   sampled last step), and sums the *context tokens* attention reads (each
   scheduled request's ``num_computed_tokens`` before the step); it also
   counts the requests with a prefill chunk and their attention's query-key
   pairs, terms only a fitted cost model uses;
2. samples one token for every request whose known tokens are all computed
   after the step (a partial prefill chunk samples nothing), as a real model
   runner does;
3. returns the step's duration from
   :meth:`~kvframe.domain.costs.CostModel.step_time`.

Why the classification reads the requests rather than the output's
new/cached split: a resumed request is "cached" in vLLM's output but
recomputes its whole prefix, which costs prefill, not decode. The scheduler
has already advanced ``num_computed_tokens`` when the executor runs, so the
count before the step is ``num_computed_tokens - scheduled``.

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
the connector (:class:`~kvframe.offload.worker.OffloadWorker`) on a
:class:`~kvframe.offload.worker.SimTransferHandler`: at the step's start the
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

if TYPE_CHECKING:
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.domain.costs import CostModel
    from kvframe.domain.request import Request
    from kvframe.offload.worker import OffloadWorker, SimTransferHandler

__all__ = ["SAMPLED_TOKEN_ID", "SimExecutor", "StepResult"]

SAMPLED_TOKEN_ID = 0
"""The token id the sim executor samples for every request (see the module docstring)."""


class StepResult:
    """One executed step: the model output, its duration and what it computed.

    A plain slotted class rather than attrs: one is built per engine step, and
    the engine reads its fields right away.
    """

    __slots__ = (
        "duration",
        "model_output",
        "num_context_tokens",
        "num_decode_seqs",
        "num_prefill_tokens",
        "sampled",
    )

    def __init__(
        self,
        model_output: ModelRunnerOutput,
        duration: float,
        sampled: list[Request],
        num_prefill_tokens: int,
        num_decode_seqs: int,
        num_context_tokens: int,
    ) -> None:
        self.model_output = model_output
        self.duration = duration
        self.sampled = sampled
        """Requests that sampled a token this step, in scheduling order."""
        self.num_prefill_tokens = num_prefill_tokens
        self.num_decode_seqs = num_decode_seqs
        self.num_context_tokens = num_context_tokens


class SimExecutor:
    """Executes scheduler outputs on a :class:`~kvframe.domain.costs.CostModel`.

    Deterministic: the same outputs and requests give the same tokens and
    durations in every process.

    :param cost_model: step-time coefficients (usually a preset's).
    :param token_id: the token sampled for every request.
    """

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
        if (offload_worker is None) != (transfer_handler is None):
            raise ValueError("give both offload_worker and transfer_handler, or neither")
        self.cost_model = cost_model
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
        worker = self.offload_worker
        stall = 0.0
        if worker is not None:
            handler = self.transfer_handler
            assert handler is not None
            handler.now = now
            meta = scheduler_output.kv_connector_metadata
            worker.start_step(meta)  # type: ignore[arg-type]
            stall = handler.now - now
        prefill = 0
        decode = 0
        context = 0
        chunks = 0
        pairs = 0
        sampled: list[Request] = []
        tokens: dict[str, list[int]] = {}
        sample = self._sample
        for request_id, num_new in scheduler_output.num_scheduled_tokens.items():
            request = requests[request_id]
            computed = request.num_computed_tokens
            before = computed - num_new
            context += before
            if before >= request.num_prompt_tokens and request.output_token_ids:
                # Generating: one decode token, any extra (drafts) cost like prefill.
                decode += 1
                prefill += num_new - 1
            else:
                prefill += num_new
                chunks += 1
                pairs += num_new * (2 * before + num_new + 1)  # 2 x prefill_pairs
            if computed >= request.num_tokens:
                # Every known token is computed: the model samples the next one.
                # The list is shared and read-only (update_from_output only iterates it).
                tokens[request_id] = sample
                sampled.append(request)
        duration = self.cost_model.step_time(prefill, decode, context, chunks, pairs // 2)
        model_output = ModelRunnerOutput(sampled_token_ids=tokens)
        if worker is not None:
            duration += stall
            handler.now = now + duration
            model_output.kv_connector_output = worker.end_step(
                meta,  # type: ignore[arg-type]
                scheduler_output.finished_req_ids,
            )
        return StepResult(
            model_output,
            duration,
            sampled,
            prefill,
            decode,
            context,
        )
