"""What tracing costs the engine: none, a no-op tracer, and a disabled trace point.

    .venv/bin/python benchmarks/trace_overhead.py [--requests 100] [--repeat 5]

Three measurements, printed as ratios:

1. **Engine steps/s without a tracer vs with a no-op tracer** that overrides
   every tracing hook with ``pass``. The difference is the price of building
   the trace records and broadcasting them through pluggy, i.e. what *any*
   selected tracer costs before it does its own work. The workload is the first
   ``--requests`` requests of the Mooncake conversation trace with a 8,000-block
   pool (preemptions and evictions, so KV events are frequent).
2. **A disabled trace point vs an empty loop**: with no tracer the engine holds
   ``hook = None`` and guards each trace point with ``if hook is not None:``.
   ``timeit`` runs a loop containing that branch and a loop containing nothing,
   1 million iterations a round, 40 rounds interleaved, fastest round kept; the
   ratio and the nanoseconds per branch say what a trace point costs when
   tracing is off.
3. That per-branch cost times the trace points per step (four) as a fraction of
   the mean wall time of one engine step.

Engine rates are steps per CPU second of this process, and each figure is the
best of ``--repeat`` runs, interleaved: both keep other processes on a shared
machine out of the comparison as far as possible.
"""

from __future__ import annotations

import argparse
import time
import timeit

import kvframe
from kvframe.engine import Engine, EngineConfig
from kvframe.host.registry import PluginRegistry
from kvframe.workloads import load_workload

TRACE = "mooncake:conversation"  # bundled with kvframe; a path works too
TRACE_POINTS_PER_STEP = 4  # snapshot, decision (with prefix events), KV events, finished


class NoopTracer(kvframe.Tracer):
    """Receives every record and does nothing with it."""

    name = "noop"

    def on_step_snapshot(self, snapshot):
        pass

    def on_prefix_cache(self, event):
        pass

    def on_step_decision(self, decision):
        pass

    def on_kv_events(self, step, now, events):
        pass

    def on_request_finished(self, record):
        pass


def registry() -> PluginRegistry:
    from kvframe_fcfs import FCFSPolicy

    reg = PluginRegistry(entry_points=())
    reg.register_class(FCFSPolicy)
    reg.register_class(NoopTracer)
    return reg


def engine_rate(workload, tracers: tuple[str, ...]) -> tuple[float, int]:
    """(steps per CPU second of this process, steps) of one run.

    CPU time rather than wall time: on a shared machine other processes
    stretch wall time by whatever they happen to do, not by what we measure.
    """
    engine = Engine.from_config(EngineConfig(num_gpu_blocks=8000, tracers=tracers), registry())
    started = time.process_time()
    result = engine.run(workload)
    cpu = time.process_time() - started
    steps = int(result.counters["num_steps"])
    return steps / cpu, steps


def branch_cost(number: int, repeat: int = 40) -> tuple[float, float]:
    """(seconds per iteration of a loop holding a disabled trace point, of an empty loop).

    Many short rounds, the two loops interleaved, the fastest round of each
    kept: a busy moment on a shared machine then spoils one round of one
    loop, not the comparison.
    """
    setup = "hook = None"
    guarded = timeit.Timer(
        "if hook is not None: hook.kvframe_step_snapshot(snapshot=None)", setup=setup
    )
    empty = timeit.Timer("pass", setup=setup)
    best_guarded = best_empty = float("inf")
    for _ in range(repeat):
        best_guarded = min(best_guarded, guarded.timeit(number))
        best_empty = min(best_empty, empty.timeit(number))
    return best_guarded / number, best_empty / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=TRACE)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=1_000_000)
    args = parser.parse_args()

    workload = load_workload(args.trace, limit=args.requests)
    plain_runs, noop_runs = [], []
    for _ in range(args.repeat):  # interleaved, so that a busy spell hits both alike
        plain_runs.append(engine_rate(workload, ()))
        noop_runs.append(engine_rate(workload, ("noop",)))
    plain, steps = max(plain_runs)
    noop, _ = max(noop_runs)
    per_branch, per_empty = branch_cost(args.iterations)
    branch_ns = (per_branch - per_empty) * 1e9
    step_s = 1.0 / plain

    print(f"workload: first {args.requests} requests of {args.trace}, {steps} steps")
    print(f"{'engine steps per CPU second, no tracer':<44}{plain:>12,.0f}")
    print(f"{'engine steps per CPU second, no-op tracer':<44}{noop:>12,.0f}")
    print(f"{'  ratio no tracer / no-op tracer':<44}{plain / noop:>12.3f}")
    print(f"{'disabled trace point, ns per iteration':<44}{per_branch * 1e9:>12.2f}")
    print(f"{'empty loop, ns per iteration':<44}{per_empty * 1e9:>12.2f}")
    print(f"{'  ratio disabled trace point / empty loop':<44}{per_branch / per_empty:>12.3f}")
    print(f"{'  cost of one disabled trace point, ns':<44}{branch_ns:>12.2f}")
    share = TRACE_POINTS_PER_STEP * branch_ns * 1e-9 / step_s
    print(f"{'  4 disabled trace points / one step':<44}{share:>12.2e}")


if __name__ == "__main__":
    main()
