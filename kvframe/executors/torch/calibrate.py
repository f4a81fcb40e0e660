"""Fit the sim's cost model to measured step times of the torch executor.

**Grid.** Steps of three kinds are timed directly on the model (its KV cache
filled with the context first, so attention reads real blocks): a prefill
chunk of ``p`` tokens after ``c`` cached tokens; a decode batch of ``b``
requests with ``l`` cached tokens each; and mixed steps (one chunk plus a
decode batch), so the fit sees the terms together as the engine runs them.
Each shape is timed ``repeats`` times after a warm-up; the median is kept
(the machine may be shared: the median ignores the slow outliers). To the
grid are added the steps of a *training* workload run through the engine
(:func:`measure_engine_steps`): the shapes a scheduler actually forms. The
held-out check (:func:`validate`) uses a different workload (another seed).

**Fit.** The cost model is linear: ``t = a + b*prefill + c*decode + d*context``.
The fit minimises *relative* squared error (each row divided by its measured
time), because the acceptance criteria are relative; coefficients are kept
non-negative by refitting without any that come out negative (an active-set
NNLS, enough for four unknowns). Transfer coefficients are not fitted here:
on CPU a "transfer" is a memcpy; they are measured as bytes / second of a
block copy and written with the rest.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Sequence

import attrs
import torch

from kvframe.executors.cost_model import CostModel
from kvframe.executors.torch.model import LlamaModel, StepChunk

__all__ = ["Sample", "fit_cost_model", "measure_grid"]


@attrs.frozen(slots=True)
class Sample:
    prefill: int
    decode: int
    context: int
    seconds: float


def _time(model: LlamaModel, chunks: Sequence[StepChunk], repeats: int) -> float:
    model.forward(chunks)  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        model.forward(chunks)
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_grid(
    model: LlamaModel,
    *,
    prefill_tokens: Sequence[int] = (16, 64, 128, 256, 512),
    prefill_context: Sequence[int] = (0, 256),
    decode_batch: Sequence[int] = (1, 2, 4, 8, 16, 32),
    decode_context: Sequence[int] = (32, 128, 512),
    repeats: int = 5,
) -> list[Sample]:
    """Time the grid of step shapes on ``model`` (tokens are arbitrary: timing only)."""
    bs = model.block_size
    next_block = 1

    def table(tokens: int) -> list[int]:
        nonlocal next_block
        n = -(-tokens // bs)
        if next_block + n > model.num_blocks:
            next_block = 1  # reuse blocks: only their shape matters for timing
        blocks = list(range(next_block, next_block + n))
        next_block += n
        if blocks and blocks[-1] >= model.num_blocks:
            raise ValueError(
                f"calibration needs {n} KV blocks for one request; the model has "
                f"{model.num_blocks - 1}: raise kv_memory"
            )
        return blocks

    def ids(n: int, salt: int) -> list[int]:
        return [(salt * 7919 + i * 31) % model.config.vocab_size for i in range(n)]

    samples: list[Sample] = []
    for p, c in itertools.product(prefill_tokens, prefill_context):
        chunk = StepChunk(ids(p, p + c), c, table(c + p), True)
        samples.append(Sample(p, 0, c, _time(model, [chunk], repeats)))
    for b, length in itertools.product(decode_batch, decode_context):
        chunks = [StepChunk(ids(1, i), length, table(length + 1), True) for i in range(b)]
        samples.append(Sample(0, b, b * length, _time(model, chunks, repeats)))
    for p, b in itertools.product(prefill_tokens[::2], decode_batch[::2]):
        length = decode_context[len(decode_context) // 2]
        chunks = [StepChunk(ids(p, p), 0, table(p), True)]
        chunks += [StepChunk(ids(1, i), length, table(length + 1), True) for i in range(b)]
        samples.append(Sample(p, b, b * length, _time(model, chunks, repeats)))
    return samples


def measure_engine_steps(executor: str, specs: Sequence, **settings: object) -> list[Sample]:
    """Every forward pass of a training workload run through the engine (wall clock).

    The grid times shapes in isolation; these are the shapes a scheduler
    actually forms (several prefill chunks and decodes in one step), with
    whatever caches they leave warm. The held-out check uses another workload.
    """
    from kvframe.engine import Engine, EngineConfig

    wall_executor = executor + ("," if ":" in executor else ":") + "clock=wall"
    engine = Engine.from_config(EngineConfig(executor=wall_executor, **settings))  # type: ignore[arg-type]
    engine.run(specs)
    return [Sample(s.prefill, s.decode, s.context, s.wall_s) for s in engine.executor.steps]


def fit_cost_model(
    samples: Sequence[Sample], *, transfer_bytes_per_s: float, transfer_latency_s: float = 0.0
) -> tuple[CostModel, dict[str, float]]:
    """Non-negative, relative-error least squares; returns the model and fit statistics."""
    names = ["per_step_s", "per_prefill_token_s", "per_decode_seq_s", "per_context_token_s"]
    rows = torch.tensor(
        [[1.0, s.prefill, s.decode, s.context] for s in samples], dtype=torch.float64
    )
    y = torch.tensor([s.seconds for s in samples], dtype=torch.float64)
    weights = 1.0 / y
    active = list(range(4))
    coef = torch.zeros(4, dtype=torch.float64)
    while active:
        a = rows[:, active] * weights[:, None]
        solution = torch.linalg.lstsq(a, (y * weights)[:, None]).solution[:, 0]
        if (solution >= 0).all():
            coef.zero_()
            coef[active] = solution
            break
        active = [i for i, v in zip(active, solution.tolist(), strict=True) if v >= 0]
    predicted = rows @ coef
    errors = ((predicted - y).abs() / y).tolist()
    model = CostModel(
        **{name: float(value) for name, value in zip(names, coef.tolist(), strict=True)},
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


def held_out_workload(num_requests: int = 40, *, seed: int = 7, rate: float = 0.0) -> list:
    """A workload unlike the grid: shared prefixes, mixed lengths, optional Poisson arrivals."""
    import random

    from kvframe.workloads.spec import RequestSpec

    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 4000) for _ in range(rng.randrange(64, 256))] for _ in range(4)]
    specs = []
    now = 0.0
    for i in range(num_requests):
        prompt = prefixes[rng.randrange(4)] + [
            rng.randrange(1, 4000) for _ in range(rng.randrange(16, 256))
        ]
        specs.append(RequestSpec(f"h{i:03d}", prompt, rng.randrange(8, 64), arrival_time=now))
        if rate > 0:
            now += rng.expovariate(rate)
    return specs


def validate(
    cost_model_file: str, executor: str, specs: Sequence, **settings: object
) -> dict[str, float]:
    """Run ``specs`` on the torch executor (wall clock) and on the sim with the calibrated
    cost model, with the same engine settings; return the three error figures.

    * ``step_median_abs_rel_error``: over the torch run's steps, the sim's
      prediction for that step's shape against its measured time;
    * ``duration_rel_error`` and ``mean_ttft_rel_error``: the two whole runs.
    """
    from kvframe.engine import Engine, EngineConfig

    wall_executor = executor + ("," if ":" in executor else ":") + "clock=wall"
    torch_engine = Engine.from_config(
        EngineConfig(executor=wall_executor, cost_model=cost_model_file, **settings)  # type: ignore[arg-type]
    )
    torch_result = torch_engine.run(specs)
    blocks = torch_engine.scheduler.config.num_gpu_blocks
    sim_engine = Engine.from_config(
        EngineConfig(
            cost_model=cost_model_file,
            **{**settings, "num_gpu_blocks": blocks, "kv_memory": None},  # type: ignore[arg-type]
        )
    )
    sim_result = sim_engine.run(specs)
    model = sim_engine.preset.cost_model
    errors = [
        abs(model.step_time(s.prefill, s.decode, s.context) - s.wall_s) / s.wall_s
        for s in torch_engine.executor.steps
        if s.wall_s > 0
    ]

    def mean_ttft(result) -> float:
        values = [
            r.time_to_first_token_seconds
            for r in result.summary.requests
            if r.time_to_first_token_seconds is not None
        ]
        return statistics.fmean(values)

    t_dur = torch_result.counters["simulated_duration_seconds"]
    s_dur = sim_result.counters["simulated_duration_seconds"]
    t_ttft, s_ttft = mean_ttft(torch_result), mean_ttft(sim_result)
    return {
        "num_steps": len(errors),
        "step_median_abs_rel_error": statistics.median(errors),
        "torch_duration_s": t_dur,
        "sim_duration_s": s_dur,
        "duration_rel_error": abs(s_dur - t_dur) / t_dur,
        "torch_mean_ttft_s": t_ttft,
        "sim_mean_ttft_s": s_ttft,
        "mean_ttft_rel_error": abs(s_ttft - t_ttft) / t_ttft,
    }
