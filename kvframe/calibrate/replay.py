"""Workloads replayed through the engine on the torch executor: calibration's
training steps and its held-out check.

**Replays, not runs.** Both workloads arrive all at once (``rate=0``), so
the scheduler forms the same steps in every replay whatever they measure,
and a step's measured times can be compared across replays. That matters on
a shared machine: the torch executor's own duration varies between identical
replays (by 1-24% in CPU time on the development machine), and that
variation is not the sim's error. So the training steps are the per-step
median over several replays, and the check compares the sim with the replay
of median duration.

**Interleaving.** A machine's speed drifts over minutes (other processes'
cache and memory traffic, clock frequency), and CPU time does not exclude
that. ``kvframe calibrate`` therefore measures in rounds
(:func:`measure_interleaved`): a share of the grid's timings, a training
replay, a held-out replay, and again, all before fitting. The data the model
is fitted on and the data it is checked against are measured at the same
times, so a drift shifts both alike. The held-out replays do not depend on
the fitted file (their clock is measured), so nothing of them leaks into the
fit.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.calibrate.fit import Sample, grid_samples, time_steps

if TYPE_CHECKING:
    from kvframe.executors.torch.model import LlamaModel, StepChunk

__all__ = [
    "Replay",
    "compare",
    "engine_samples",
    "held_out_workload",
    "measure_interleaved",
    "replay",
    "with_clock",
]


@attrs.frozen(slots=True)
class Replay:
    """One replay's measurements (the engine itself, with its model, is let go)."""

    duration_s: float
    result: Any
    """The engine's ``RunResult`` (counters, per-request summary)."""
    steps: list[Any]
    """The executor's :class:`~kvframe.executors.torch.executor.StepTiming` list."""
    num_gpu_blocks: int


def with_clock(executor: str, clock: str) -> str:
    """``executor`` with ``clock=`` set (a later option overrides an earlier one)."""
    return executor + ("," if ":" in executor else ":") + f"clock={clock}"


def replay(executor: str, specs: Sequence, *, clock: str, **settings: object) -> Replay:
    """Run ``specs`` through the engine on the torch executor, its clock on ``clock``."""
    from kvframe.engine import Engine, EngineConfig

    engine = Engine.from_config(EngineConfig(executor=with_clock(executor, clock), **settings))  # type: ignore[arg-type]
    result = engine.run(specs)
    return Replay(
        result.counters["simulated_duration_seconds"],
        result,
        list(engine.executor.steps),
        engine.scheduler.config.num_gpu_blocks,
    )


def measure_interleaved(
    model: LlamaModel,
    grid: Sequence[Sequence[StepChunk]],
    executor: str,
    training: Sequence,
    held_out: Sequence | None,
    *,
    runs: int,
    repeats: int,
    clock: str,
    **settings: object,
) -> tuple[list[Sample], list[Replay], list[Replay]]:
    """Everything calibration measures, in ``runs`` alternating rounds.

    Each round times every grid step ``ceil(repeats / runs)`` times on
    ``model``, then replays ``training`` and (if given) ``held_out`` through
    the engine. Returns the grid's samples (medians over all rounds), the
    training replays and the held-out replays.
    """
    if runs < 1 or repeats < 1:
        raise ValueError(f"runs and repeats must be >= 1, got {runs} and {repeats}")
    per_round = -(-repeats // runs)
    timings: list[list[float]] = [[] for _ in grid]
    train: list[Replay] = []
    check: list[Replay] = []
    for _ in range(runs):
        for times, new in zip(timings, time_steps(model, grid, per_round, clock), strict=True):
            times.extend(new)
        train.append(replay(executor, training, clock=clock, **settings))
        if held_out is not None:
            check.append(replay(executor, held_out, clock=clock, **settings))
    return grid_samples(grid, timings), train, check


def _shape(step: Any) -> tuple[int, ...]:
    return (step.prefill, step.decode, step.context, step.prefill_seqs, step.prefill_pairs)


def engine_samples(replays: Sequence[Replay], clock: str) -> list[Sample]:
    """The training steps as fit samples: each step's median time over the replays.

    When the replays did not form the same steps (a scheduling policy that
    reads the clock), every replay's steps are used as they are.
    """
    if not replays:
        return []
    shapes = [[_shape(s) for s in r.steps] for r in replays]
    if any(other != shapes[0] for other in shapes[1:]):
        return [
            Sample(*_shape(s)[:3], s.measured(clock), *_shape(s)[3:])
            for r in replays
            for s in r.steps
        ]
    return [
        Sample(
            *shape[:3], statistics.median(r.steps[i].measured(clock) for r in replays), *shape[3:]
        )
        for i, shape in enumerate(shapes[0])
    ]


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


def _mean_ttft(result: Any) -> float:
    values = [
        r.time_to_first_token_seconds
        for r in result.summary.requests
        if r.time_to_first_token_seconds is not None
    ]
    return statistics.fmean(values)


def compare(
    cost_model_file: str,
    replays: Sequence[Replay],
    specs: Sequence,
    *,
    clock: str,
    **settings: object,
) -> dict[str, Any]:
    """Run ``specs`` on the sim with the calibrated cost model and compare it with the
    torch replay of median duration; return the error figures.

    * ``step_median_abs_rel_error``: over that replay's steps, the sim's
      prediction for each step's shape against its measured time;
    * ``duration_rel_error`` and ``mean_ttft_rel_error``: the two whole runs;
    * ``torch_duration_spread``: (max - min) / median of the replays' durations,
      the torch executor's own noise, for scale.

    ``settings`` must be those the replays ran with.
    """
    from kvframe.engine import Engine, EngineConfig

    if not replays:
        raise ValueError("no torch replays to compare with")
    ordered = sorted(replays, key=lambda r: r.duration_s)
    reference = ordered[(len(ordered) - 1) // 2]
    sim_engine = Engine.from_config(
        EngineConfig(
            cost_model=cost_model_file,
            **{**settings, "num_gpu_blocks": reference.num_gpu_blocks, "kv_memory": None},  # type: ignore[arg-type]
        )
    )
    sim_result = sim_engine.run(specs)
    model = sim_engine.preset.cost_model
    errors = []
    for s in reference.steps:
        measured = s.measured(clock)
        if measured > 0:
            predicted = model.step_time(
                s.prefill, s.decode, s.context, s.prefill_seqs, s.prefill_pairs
            )
            errors.append(abs(predicted - measured) / measured)
    t_dur = reference.duration_s
    s_dur = sim_result.counters["simulated_duration_seconds"]
    t_ttft, s_ttft = _mean_ttft(reference.result), _mean_ttft(sim_result)
    durations = [r.duration_s for r in ordered]
    return {
        "clock": clock,
        "torch_runs": len(ordered),
        "torch_duration_spread": (durations[-1] - durations[0]) / statistics.median(durations),
        "num_steps": len(errors),
        "step_median_abs_rel_error": statistics.median(errors),
        "torch_duration_s": t_dur,
        "sim_duration_s": s_dur,
        "duration_rel_error": abs(s_dur - t_dur) / t_dur,
        "torch_mean_ttft_s": t_ttft,
        "sim_mean_ttft_s": s_ttft,
        "mean_ttft_rel_error": abs(s_ttft - t_ttft) / t_ttft,
    }
