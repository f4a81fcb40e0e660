"""The torch executor: runs each scheduled step through a real Llama decoder on paged KV.

It is a drop-in for :class:`~kvframe.executors.sim.SimExecutor` (same
``execute`` signature, same :class:`~kvframe.executors.sim.StepResult`), so the
engine, every plugin, tracing and metrics work unchanged. What differs:

* **Tokens are real.** The executor keeps the worker-side block table of every
  request from the :class:`~kvframe.core.scheduler_output.SchedulerOutput`
  alone -- new requests bring theirs, running ones append ``new_block_ids``,
  resumed ones replace it, finished and preempted ones are dropped -- as a
  vLLM model runner does. Each step it computes the scheduled tokens of every
  request (positions ``num_computed_tokens - scheduled .. num_computed_tokens``,
  so chunked prefill and prefix hits are honoured), and samples greedily
  (``argmax``; the lowest id on a tie) for every request whose known tokens are
  all computed. Stop tokens are the scheduler's business: a sampled EOS ends the
  request in ``update_from_output`` when it is in the request's ``stop_token_ids``.
* **Three clocks.** ``clock="virtual"`` (the default) advances the engine's
  clock by the cost model, exactly as the sim does, so a run's *decisions* do
  not depend on how loaded the machine is -- the output-invariance tests need
  that. ``clock="wall"`` advances it by the measured wall time of each step.
  ``clock="cpu"`` (CPU device, one intra-op thread) advances it by the CPU
  time the step's forward pass spent on this thread
  (``time.thread_time``): with one thread doing all the work, that is the
  step's wall time on an idle machine, and other processes' load does not
  enter it (they still share caches and memory bandwidth, which it cannot
  exclude). It is calibration's default ground truth on CPU. Every step's
  wall and CPU times are recorded (:attr:`TorchExecutor.steps`) and
  summarised in the run's counters, whatever the clock.
* **Offload carries bytes.** With a CPU tier the worker's handler is a
  :class:`RealBytesTransferHandler`: the tier's own
  ``TorchTransferHandler`` copies the blocks between this model's KV tensors and
  host memory, while transfer *timing* (completion on the engine's clock) is the
  sim's model, for the same reason as the virtual clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.executors.base import StepResult, StepShape, classify_step, offload_bracket
from kvframe.executors.torch.model import LlamaModel, StepChunk
from kvframe.executors.torch.options import CLOCKS, check_cpu_clock
from kvframe.log import get_logger

if TYPE_CHECKING:
    from kvframe.core.scheduler_output import SchedulerOutput
    from kvframe.domain.costs import CostModel
    from kvframe.domain.request import Request
    from kvframe.executors.torch.tokenizer import TextTokenizer
    from kvframe.offload.slots.worker import OffloadWorker, SimTransferHandler

__all__ = ["RealBytesTransferHandler", "StepTiming", "TorchExecutor"]

log = get_logger(__name__)


class StepTiming:
    """One executed forward pass: its shape, its modelled and its measured duration."""

    __slots__ = (
        "context",
        "cpu_s",
        "decode",
        "prefill",
        "prefill_pairs",
        "prefill_seqs",
        "virtual_s",
        "wall_s",
    )

    def __init__(
        self,
        prefill: int,
        decode: int,
        context: int,
        virtual_s: float,
        wall_s: float,
        *,
        prefill_seqs: int = 0,
        prefill_pairs: int = 0,
        cpu_s: float = 0.0,
    ) -> None:
        self.prefill = prefill
        self.decode = decode
        self.context = context
        self.virtual_s = virtual_s
        self.wall_s = wall_s
        self.prefill_seqs = prefill_seqs
        self.prefill_pairs = prefill_pairs
        self.cpu_s = cpu_s

    def measured(self, clock: str) -> float:
        """The step's measured duration on ``clock`` (``"wall"`` or ``"cpu"``)."""
        return self.cpu_s if clock == "cpu" else self.wall_s


class RealBytesTransferHandler:
    """A tier's real handler for the bytes, the sim's handler for the timing.

    Every transfer is issued to both. Completion is reported when the sim's
    model says so (after making sure the real copy has landed, which on CPU it
    has when ``start_transfers`` returns), so a run's decisions are the sim's.
    """

    def __init__(self, timing: SimTransferHandler, mover: Any) -> None:
        self.timing = timing
        self.mover = mover
        self._mover_job: dict[int, int] = {}

    @property
    def now(self) -> float:
        return self.timing.now

    @now.setter
    def now(self, value: float) -> None:
        self.timing.now = value

    def register_kv_caches(self, kv_caches: Sequence[Any]) -> None:
        self.mover.register_kv_caches(kv_caches)

    def start_transfers(
        self, loads: Sequence[tuple[int, int]], stores: Sequence[tuple[int, int]]
    ) -> int:
        real = self.mover.start_transfers(loads, stores)
        job = self.timing.start_transfers(loads, stores)
        self._mover_job[job] = real
        return job

    def finished_transfers(self) -> list[int]:
        done = self.timing.finished_transfers()
        if done:
            self.mover.wait([self._mover_job.pop(job) for job in done])
            self.mover.finished_transfers()
        return done

    def wait(self, transfer_ids: Iterable[int]) -> None:
        ids = list(transfer_ids)
        self.timing.wait(ids)
        self.mover.wait([self._mover_job[j] for j in ids if j in self._mover_job])

    def next_completion(self) -> float:
        return self.timing.next_completion()

    def __getattr__(self, name: str) -> Any:
        # Counters (bytes_stored, num_loads, transfer_time_s, ...) are the timing model's.
        return getattr(self.timing, name)


class TorchExecutor:
    """Executes scheduler outputs on a :class:`LlamaModel`.

    :param model: the decoder, owning its KV tensors.
    :param cost_model: the virtual clock's step times (and offload timing).
    :param clock: ``"virtual"``, ``"wall"`` or ``"cpu"`` (see the module docstring).
    :param stop_token_ids: given to every request the engine creates (EOS).
    :param tokenizer: makes the model's tokenizer when the outputs are decoded
        (lazily: a run that writes no outputs never builds it).
    """

    supports_decode_runs = False
    """Every step runs the model: the engine never takes decode runs in one go."""
    token_id = -1
    """Unused (no decode runs): the model samples its own tokens."""

    def __init__(
        self,
        model: LlamaModel,
        cost_model: CostModel,
        *,
        clock: str = "virtual",
        stop_token_ids: Iterable[int] = (),
        offload_worker: OffloadWorker | None = None,
        transfer_handler: Any = None,
        description: Mapping[str, Any] | None = None,
        tokenizer: Callable[[], TextTokenizer | None] | None = None,
    ) -> None:
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
        if clock == "cpu":
            check_cpu_clock(model.device.type, torch.get_num_threads())
        self._bracket = offload_bracket(offload_worker, transfer_handler)
        self.model = model
        self.cost_model = cost_model
        self.clock = clock
        self.stop_token_ids = frozenset(stop_token_ids)
        self.offload_worker = offload_worker
        self.transfer_handler = transfer_handler
        self.description = dict(description or {})
        self._tokenizer = tokenizer
        self.block_tables: dict[str, list[int]] = {}
        """Worker-side block table of every request the worker holds."""
        self.steps: list[StepTiming] = []
        self.outputs: dict[str, list[int]] = {}
        """Generated token ids of every finished request, in finish order."""
        self.logits: dict[str, list[float]] = {}
        """The winning logit of every generated token (for tolerance checks)."""
        self._cuda = model.device.type == "cuda"

    # -- worker-side request state -------------------------------------------

    def _update_block_tables(self, output: SchedulerOutput) -> None:
        tables = self.block_tables
        for request_id in output.finished_req_ids:
            tables.pop(request_id, None)
        for request_id in output.preempted_req_ids:
            tables.pop(request_id, None)
        for new in output.scheduled_new_reqs:
            tables[new.req_id] = list(new.block_ids)
        cached = output.scheduled_cached_reqs
        resumed = cached.resumed_req_ids
        for request_id, new_ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
            if request_id in resumed:
                tables[request_id] = list(new_ids or ())
            elif new_ids:
                tables[request_id].extend(new_ids)

    def block_table(self, request_id: str) -> Sequence[int]:
        """The blocks attention reads and writes for ``request_id`` this step."""
        return self.block_tables[request_id]

    # -- the step ---------------------------------------------------------------

    def execute(
        self,
        scheduler_output: SchedulerOutput,
        requests: Mapping[str, Request],
        now: float = 0.0,
    ) -> StepResult:
        """Run one step (the signature and result of :meth:`SimExecutor.execute`)."""
        bracket = self._bracket
        stall = 0.0 if bracket is None else bracket.start(scheduler_output, now)
        self._update_block_tables(scheduler_output)
        shape, sampled = classify_step(scheduler_output.num_scheduled_tokens, requests)
        tokens: dict[str, list[int]] = {}
        if scheduler_output.num_scheduled_tokens:
            duration = self._forward(scheduler_output, requests, shape, sampled, tokens)
        else:
            duration = 0.0
        model_output = ModelRunnerOutput(sampled_token_ids=tokens)
        if bracket is not None:
            duration += stall
            output, save_stall = bracket.end(scheduler_output, now, duration)
            model_output.kv_connector_output = output
            duration += save_stall
        return StepResult(
            model_output, duration, sampled, shape.prefill, shape.decode, shape.context
        )

    def _forward(
        self,
        scheduler_output: SchedulerOutput,
        requests: Mapping[str, Request],
        shape: StepShape,
        sampled: list[Request],
        tokens: dict[str, list[int]],
    ) -> float:
        """The step's forward pass: samples into ``tokens``; returns the step's duration
        on the selected clock (and records its timing)."""
        chunks: list[StepChunk] = []
        for request_id, num_new in scheduler_output.num_scheduled_tokens.items():
            request = requests[request_id]
            computed = request.num_computed_tokens
            all_ids = request.all_token_ids
            chunks.append(
                StepChunk(
                    token_ids=all_ids[computed - num_new : computed],
                    start=computed - num_new,
                    block_ids=self.block_table(request_id),
                    sample=computed >= len(all_ids),
                )
            )
        started = time.perf_counter()
        cpu_started = time.thread_time()
        logits = self.model.forward(chunks)
        best, index = logits.max(dim=-1) if len(logits) else (logits, logits)
        if self._cuda:
            torch.cuda.synchronize(self.model.device)
        cpu = time.thread_time() - cpu_started
        wall = time.perf_counter() - started
        for request, token, value in zip(sampled, index.tolist(), best.tolist(), strict=True):
            tokens[request.request_id] = [token]
            self.logits.setdefault(request.request_id, []).append(value)
        virtual = self.cost_model.step_time(
            shape.prefill, shape.decode, shape.context, shape.prefill_seqs, shape.prefill_pairs
        )
        self.steps.append(
            StepTiming(
                shape.prefill,
                shape.decode,
                shape.context,
                virtual,
                wall,
                prefill_seqs=shape.prefill_seqs,
                prefill_pairs=shape.prefill_pairs,
                cpu_s=cpu,
            )
        )
        return {"virtual": virtual, "wall": wall, "cpu": cpu}[self.clock]

    # -- results ------------------------------------------------------------------

    def record_finished(self, request: Request) -> None:
        """Keep a finished request's generated tokens (the engine calls this)."""
        self.outputs[request.request_id] = list(request.output_token_ids)
        logits = self.logits.get(request.request_id)
        if logits is not None and len(logits) > request.num_output_tokens:
            del logits[request.num_output_tokens :]

    def decoded_outputs(self) -> dict[str, str] | None:
        """Every finished request's generated text, special tokens left out.

        ``None`` when the model has no tokenizer (random weights, a safetensors
        directory) or the ``tokenizers`` package is missing (logged).
        """
        if self._tokenizer is None:
            return None
        try:
            tokenizer = self._tokenizer()
        except ValueError as err:
            log.warning("outputs_not_decoded", reason=str(err))
            return None
        if tokenizer is None:
            return None
        return {rid: tokenizer.decode(tokens) for rid, tokens in self.outputs.items()}

    def counters(self) -> dict[str, float | int]:
        """Measured step times for the run's summary, next to the virtual clock's."""
        walls = [s.wall_s for s in self.steps]
        cpus = [s.cpu_s for s in self.steps]
        return {
            "torch_forward_steps": len(walls),
            "torch_wall_step_time_s_total": sum(walls),
            "torch_wall_step_time_s_median": statistics.median(walls) if walls else 0.0,
            "torch_cpu_step_time_s_total": sum(cpus),
            "torch_virtual_step_time_s_total": sum(s.virtual_s for s in self.steps),
        }
