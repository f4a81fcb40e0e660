"""What every executor is: the protocol the engine drives, and the two pieces of a
step that every executor shares.

* :class:`Executor` -- what the engine calls (``execute``) and reads (its
  offload worker and handler, stop tokens, what it reports at the end).
  :class:`~kvframe.executors.sim.SimExecutor` and
  :class:`~kvframe.executors.torch.executor.TorchExecutor` implement it.
* :func:`classify_step` -- which scheduled tokens are prefill and which are
  decode, the attention context, and which requests sample a token. Both
  executors price a step with it (the torch executor's *virtual* clock is the
  sim's cost model over the same classification), so the two cannot disagree
  about what a step is.
* :class:`OffloadBracket` -- the worker half of an offload connector around a
  step: deferred stores and this step's loads submitted at its start (a wait
  for a preempted request's stores delays the step), finished transfers
  reported at its end.

Why the classification reads the requests rather than the output's new/cached
split: a resumed request is "cached" in vLLM's output but recomputes its whole
prefix, which costs prefill, not decode. The scheduler has already advanced
``num_computed_tokens`` when an executor runs, so the count before the step is
``num_computed_tokens - scheduled``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kvframe.core.scheduler_output import (
        KVConnectorOutput,
        ModelRunnerOutput,
        SchedulerOutput,
    )
    from kvframe.domain.request import Request
    from kvframe.offload.slots.worker import OffloadWorker, SimTransferHandler

__all__ = ["Executor", "OffloadBracket", "StepResult", "StepShape", "classify_step"]


class StepShape:
    """What a step computes, in the cost model's terms.

    A plain slotted class: one is built per engine step.
    """

    __slots__ = ("context", "decode", "prefill", "prefill_pairs", "prefill_seqs")

    def __init__(
        self, prefill: int, decode: int, context: int, prefill_seqs: int, prefill_pairs: int
    ) -> None:
        self.prefill = prefill
        """Prefill tokens: prompt (or recomputed) tokens, and decode steps' extra tokens."""
        self.decode = decode
        """Decode sequences: requests computing the one token they sampled last step."""
        self.context = context
        """Tokens attention reads: each scheduled request's computed tokens before the step."""
        self.prefill_seqs = prefill_seqs
        """Requests with a prefill chunk."""
        self.prefill_pairs = prefill_pairs
        """Query-key pairs of the prefill chunks' attention (causal, after their cached prefix)."""


def classify_step(
    num_scheduled_tokens: Mapping[str, int], requests: Mapping[str, Request]
) -> tuple[StepShape, list[Request]]:
    """The step's shape and the requests that sample a token, in scheduling order.

    A request samples when every token it knows is computed after the step (a
    partial prefill chunk samples nothing), as a real model runner does. Runs
    once per step over the scheduled requests: kept to one loop of local
    arithmetic (the sim executor's whole cost per step).
    """
    prefill = decode = context = chunks = pairs = 0
    sampled: list[Request] = []
    for request_id, num_new in num_scheduled_tokens.items():
        request = requests[request_id]
        computed = request.num_computed_tokens
        before = computed - num_new
        context += before
        if before >= request.num_prompt_tokens and (
            request.output_token_ids or request.num_output_placeholders
        ):
            # Generating: one decode token, any extra (drafts) cost like prefill.
            # (Under asynchronous scheduling the first output may still be in
            # flight: a placeholder.)
            decode += 1
            prefill += num_new - 1
        else:
            prefill += num_new
            chunks += 1
            pairs += num_new * (2 * before + num_new + 1)  # 2 x prefill_pairs
        if computed >= request.num_tokens:
            sampled.append(request)
    return StepShape(prefill, decode, context, chunks, pairs // 2), sampled


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


class OffloadBracket:
    """The offload worker around one step; both executors call it the same way.

    :meth:`start` at the step's start returns the stall (seconds the step waits
    for stores it must see finish, and for its loads when the tier's loads are
    synchronous); :meth:`end`, given the step's duration so far, moves the
    handler's clock to the step's end and returns the transfers that finished,
    for ``ModelRunnerOutput.kv_connector_output``, with the seconds the step
    then waits for its own stores when they block (both stalls add to the
    step's duration).
    """

    __slots__ = ("handler", "worker")

    def __init__(self, worker: OffloadWorker, handler: SimTransferHandler) -> None:
        self.worker = worker
        self.handler = handler

    def start(self, scheduler_output: SchedulerOutput, now: float) -> float:
        handler = self.handler
        handler.now = now
        self.worker.start_step(scheduler_output.kv_connector_metadata)  # type: ignore[arg-type]
        return handler.now - now

    def end(
        self, scheduler_output: SchedulerOutput, now: float, duration: float
    ) -> tuple[KVConnectorOutput | None, float]:
        """The finished transfers, and the seconds the step waited at its end for its
        own stores (blocking stores only; ``0.0`` with vLLM's native connector)."""
        handler = self.handler
        handler.now = end = now + duration
        output = self.worker.end_step(
            scheduler_output.kv_connector_metadata,  # type: ignore[arg-type]
            scheduler_output.finished_req_ids,
        )
        return output, handler.now - end


def offload_bracket(
    worker: OffloadWorker | None, handler: SimTransferHandler | None
) -> OffloadBracket | None:
    """The bracket of an executor given both halves of a tier, or ``None`` without a tier."""
    if (worker is None) != (handler is None):
        raise ValueError("give both offload_worker and transfer_handler, or neither")
    return None if worker is None else OffloadBracket(worker, handler)  # type: ignore[arg-type]


class Executor(Protocol):
    """What the engine drives, and all it reads of an executor."""

    offload_worker: OffloadWorker | None
    transfer_handler: SimTransferHandler | None
    stop_token_ids: Collection[int]
    """Token ids that finish a request (the model's end of sequence; none in the sim)."""
    description: Mapping[str, Any] | None
    """What ran, for the summary's configuration line (``None``: the cost model alone)."""
    clock: str
    """What moves the engine's clock: ``virtual`` (the cost model), or the torch
    executor's measured ``wall`` or ``cpu`` time (for the summary's metadata)."""
    supports_decode_runs: bool
    """Whether every step's effects are the scheduler's and the cost model's alone, so
    the engine may take runs of plain decode steps in one go
    (:mod:`kvframe.core.decode_run`); ``token_id`` is then the token sampled."""
    token_id: int

    def execute(
        self, scheduler_output: SchedulerOutput, requests: Mapping[str, Request], now: float
    ) -> StepResult:
        """Run one step starting at ``now``: its outputs and duration."""
        ...

    def record_finished(self, request: Request) -> None:
        """A request finished (an executor with real outputs keeps them)."""
        ...

    def counters(self) -> dict[str, Any]:
        """Executor-specific counters for the run's summary."""
        ...
