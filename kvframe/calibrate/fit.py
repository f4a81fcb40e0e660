"""Fit the sim's cost model to measured step times of the torch executor.

**Clock.** What is measured is chosen once (:func:`default_clock`): on a CPU
device with one intra-op thread, the CPU time the forward pass spends on the
calling thread (``clock=cpu``), which other processes' load does not inflate
the way it inflates wall time; otherwise (CUDA, or several threads) wall time
(``clock=wall``). The fitted model predicts that clock: on CPU, the step's
wall time on an idle machine with one thread.

**Grid.** Steps of four kinds are timed directly on the model (its KV cache
filled with the context first, so attention reads real blocks): a prefill
chunk of ``p`` tokens after ``c`` cached tokens; several chunks in one step;
a decode batch of ``b`` requests with ``l`` cached tokens each; and mixed
steps (a chunk plus a decode batch), so the fit sees the terms together as
the engine runs them. Each shape is timed ``repeats`` times after a warm-up
and the median kept: the engine's steps, which the model must predict, are
timed once each, so the median is the like-for-like statistic (the minimum
would bias every prediction low). To the grid are added the steps of a
*training* workload run through the engine
(:mod:`kvframe.calibrate.replay`): the shapes a scheduler actually
forms. The held-out check uses a different workload (another seed).

**Fit.** Step time is linear in six quantities (:data:`TERMS`, the fields of
:class:`~kvframe.domain.costs.CostModel`). The fit minimises
*relative* squared error (each row divided by its measured time), because the
acceptance criteria are relative, under non-negative coefficients. With six
unknowns the exact non-negative least-squares solution is found by trying
every subset of terms (64 small solves): the constrained optimum is the
unconstrained optimum on its support, so the best feasible subset is it.
Transfer coefficients are not fitted here: on CPU a "transfer" is a memcpy;
they are measured as bytes / second of a block copy and written with the rest.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Sequence

import attrs
import torch

from kvframe.domain.costs import CostModel, prefill_pairs
from kvframe.executors.torch.model import LlamaModel, StepChunk
from kvframe.executors.torch.options import check_cpu_clock

__all__ = [
    "LINEAR_TERMS",
    "TERMS",
    "Sample",
    "default_clock",
    "fit_cost_model",
    "grid_samples",
    "grid_steps",
    "measure_copy_bandwidth",
    "measure_grid",
    "time_steps",
]

TERMS = (
    "per_step_s",
    "per_prefill_token_s",
    "per_decode_seq_s",
    "per_context_token_s",
    "per_prefill_seq_s",
    "per_prefill_pair_s",
)
"""The step coefficients a fit may use, in :meth:`Sample.features` order."""
LINEAR_TERMS = TERMS[:4]
"""The roofline's four terms (what the derived presets use)."""


@attrs.frozen(slots=True)
class Sample:
    """One measured step: its shape in the cost model's quantities and its time."""

    prefill: int
    decode: int
    context: int
    seconds: float
    prefill_seqs: int = 0
    prefill_pairs: int = 0

    def features(self) -> tuple[float, ...]:
        """The multipliers of :data:`TERMS` for this step."""
        return (
            1.0,
            float(self.prefill),
            float(self.decode),
            float(self.context),
            float(self.prefill_seqs),
            float(self.prefill_pairs),
        )


def default_clock(device_type: str, threads: int) -> str:
    """``"cpu"`` where per-thread CPU time is the step's duration, else ``"wall"``."""
    try:
        check_cpu_clock(device_type, threads)
    except ValueError:
        return "wall"
    return "cpu"


def time_steps(
    model: LlamaModel, steps: Sequence[Sequence[StepChunk]], repeats: int, clock: str
) -> list[list[float]]:
    """``repeats`` timings of each step on ``clock``, after one warm-up run of each."""
    cuda = model.device.type == "cuda"
    timings = []
    for chunks in steps:
        model.forward(chunks)  # warm-up
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            cpu_started = time.thread_time()
            model.forward(chunks)
            if cuda:
                torch.cuda.synchronize(model.device)
            cpu = time.thread_time() - cpu_started
            wall = time.perf_counter() - started
            times.append(cpu if clock == "cpu" else wall)
        timings.append(times)
    return timings


def grid_samples(
    steps: Sequence[Sequence[StepChunk]], timings: Sequence[Sequence[float]]
) -> list[Sample]:
    """One sample per grid step: its shape and the median of its timings."""
    return [
        _sample(chunks, statistics.median(times))
        for chunks, times in zip(steps, timings, strict=True)
    ]


def _sample(chunks: Sequence[StepChunk], seconds: float) -> Sample:
    """The shape of a grid step: one-token chunks after a context are decodes."""
    prefill = decode = context = seqs = pairs = 0
    for chunk in chunks:
        n = len(chunk.token_ids)
        context += chunk.start
        if n == 1 and chunk.start > 0:
            decode += 1
        else:
            prefill += n
            seqs += 1
            pairs += prefill_pairs(n, chunk.start)
    return Sample(prefill, decode, context, seconds, seqs, pairs)


def grid_steps(
    model: LlamaModel,
    *,
    prefill_tokens: Sequence[int] = (16, 64, 128, 256, 512),
    prefill_context: Sequence[int] = (0, 256, 1024),
    prefill_chunks: Sequence[int] = (2, 4, 8),
    decode_batch: Sequence[int] = (1, 2, 4, 8, 16, 32),
    decode_context: Sequence[int] = (32, 128, 512),
) -> list[list[StepChunk]]:
    """The grid's steps on ``model``'s blocks (tokens are arbitrary: timing only).

    :raises ValueError: an empty axis, or too few KV blocks for one request.
    """
    axes = {
        "prefill_tokens": prefill_tokens,
        "prefill_context": prefill_context,
        "decode_batch": decode_batch,
        "decode_context": decode_context,
    }
    empty = [name for name, values in axes.items() if not values]
    if empty:
        raise ValueError(f"calibration grid: empty axis {', '.join(empty)}")
    bs = model.block_size
    next_block = 1

    def table(tokens: int) -> list[int]:
        nonlocal next_block
        n = -(-tokens // bs)
        if n > model.num_blocks - 1:
            raise ValueError(
                f"calibration needs {n} KV blocks for one request; the model has "
                f"{model.num_blocks - 1}: raise kv_memory"
            )
        if next_block + n > model.num_blocks:
            next_block = 1  # reuse blocks: only their shape matters for timing
        blocks = list(range(next_block, next_block + n))
        next_block += n
        return blocks

    def ids(n: int, salt: int) -> list[int]:
        return [(salt * 7919 + i * 31) % model.config.vocab_size for i in range(n)]

    steps: list[list[StepChunk]] = []
    for p, c in itertools.product(prefill_tokens, prefill_context):
        steps.append([StepChunk(ids(p, p + c), c, table(c + p), True)])
    for k, p in itertools.product(prefill_chunks, prefill_tokens[:3]):
        steps.append([StepChunk(ids(p, i), 0, table(p), True) for i in range(k)])
    for b, length in itertools.product(decode_batch, decode_context):
        steps.append([StepChunk(ids(1, i), length, table(length + 1), True) for i in range(b)])
    length = decode_context[len(decode_context) // 2]
    for p, b in itertools.product(prefill_tokens[::2], decode_batch[::2]):
        chunks = [StepChunk(ids(p, p), 0, table(p), True)]
        chunks += [StepChunk(ids(1, i), length, table(length + 1), True) for i in range(b)]
        steps.append(chunks)
    return steps


def measure_grid(
    model: LlamaModel, *, clock: str = "wall", repeats: int = 5, **axes: Sequence[int]
) -> list[Sample]:
    """Time the grid (:func:`grid_steps`, whose axes ``axes`` may override) on ``model``."""
    if repeats < 1:
        raise ValueError(f"calibration grid: repeats must be >= 1, got {repeats}")
    steps = grid_steps(model, **axes)
    return grid_samples(steps, time_steps(model, steps, repeats, clock))


def _solve(rows: torch.Tensor, y: torch.Tensor, terms: Sequence[int]) -> torch.Tensor | None:
    """Least squares on ``terms`` only; ``None`` when a coefficient comes out negative."""
    a = rows[:, list(terms)]
    solution = torch.linalg.lstsq(a, y[:, None], driver="gelsd").solution[:, 0]
    if (solution < 0).any() or not torch.isfinite(solution).all():
        return None
    coef = torch.zeros(rows.shape[1], dtype=torch.float64)
    coef[list(terms)] = solution
    return coef


def fit_cost_model(
    samples: Sequence[Sample],
    *,
    transfer_bytes_per_s: float,
    transfer_latency_s: float = 0.0,
    terms: Sequence[str] = TERMS,
) -> tuple[CostModel, dict[str, float]]:
    """Non-negative, relative-error least squares over ``terms``.

    :returns: the model (terms not fitted are 0) and fit statistics: the
        number of samples, the median and max relative residual.
    :raises ValueError: no samples, a non-positive time, or an unknown term.
    """
    unknown = [t for t in terms if t not in TERMS]
    if unknown:
        raise ValueError(f"unknown cost-model term(s) {unknown}; choose from {', '.join(TERMS)}")
    if not samples:
        raise ValueError("no timed steps to fit (an empty calibration grid?)")
    bad = [s for s in samples if not s.seconds > 0]
    if bad:
        raise ValueError(f"{len(bad)} timed steps have a non-positive time, e.g. {bad[0]}")
    y = torch.tensor([s.seconds for s in samples], dtype=torch.float64)
    raw = torch.tensor([s.features() for s in samples], dtype=torch.float64)
    rows = raw / y[:, None]
    # Scale columns to unit norm so that the solver's rank decisions do not
    # depend on units (pairs run to 1e5, the constant is 1).
    norms = rows.norm(dim=0)
    norms[norms == 0] = 1.0
    rows = rows / norms
    ones = torch.ones_like(y)
    allowed = [TERMS.index(t) for t in terms]
    best: torch.Tensor | None = None
    best_loss = float("inf")
    for size in range(len(allowed), 0, -1):
        for subset in itertools.combinations(allowed, size):
            coef = _solve(rows, ones, subset)
            if coef is None:
                continue
            loss = float(((rows @ coef - ones) ** 2).sum())
            if best is None or loss < best_loss * (1 - 1e-12):
                best, best_loss = coef, loss
    assert best is not None  # a single column's solution is positive
    coef = best / norms
    predicted = raw @ coef
    errors = ((predicted - y).abs() / y).tolist()
    model = CostModel(
        **{name: float(value) for name, value in zip(TERMS, coef.tolist(), strict=True)},
        transfer_bytes_per_s=transfer_bytes_per_s,
        transfer_latency_s=transfer_latency_s,
    )
    stats = {
        "num_samples": len(samples),
        "median_abs_rel_error": statistics.median(errors),
        "max_abs_rel_error": max(errors),
    }
    return model, stats


def measure_copy_bandwidth(model: LlamaModel, repeats: int = 5) -> float:
    """Bytes per second of copying KV blocks to host memory (the CPU tier's transfer)."""
    n = min(64, model.num_blocks - 1)
    host = [torch.empty_like(cache[1 : n + 1], device="cpu") for cache in model.kv_caches]
    nbytes = sum(h.numel() * h.element_size() for h in host)
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        for h, cache in zip(host, model.kv_caches, strict=True):
            h.copy_(cache[1 : n + 1])
        times.append(time.perf_counter() - started)
    return nbytes / max(statistics.median(times[1:]), 1e-9)
