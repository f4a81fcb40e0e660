"""Sweep throughput with 1 vs 2 worker processes, and what a cell costs beyond a bare run.

    .venv/bin/python benchmarks/sweep_scaling.py [--cells 8] [--limit 300]

Three measurements on the same cells (the first ``--limit`` requests of the
bundled Mooncake conversation trace, 8,000 GPU blocks; cells differ only in the
block-hash seed, so each does the same work):

1. **bare**: each cell's settings run in this process through the public API
   (``load_workload`` + ``Engine.run``), one after another -- what a shell loop
   over ``kvframe run`` would spend, minus interpreter start-up;
2. **sweep, 1 worker**: ``run_sweep`` with ``LocalBackend(jobs=1)`` into a fresh
   SQLite database: fork, run, send the outcome back, store cells, metrics and
   per-request rows. ``(sweep_1 - bare) / bare`` is the per-cell overhead
   (goal: <= 5%);
3. **sweep, 2 workers**: the same with ``jobs=2``. ``rate_2 / rate_1`` is the
   scaling (goal: near 2 on a machine with 2 free cores).

Wall-clock figures: on a shared machine other processes compete for the cores,
which depresses the 2-worker figure first; run it on an idle machine for the
scaling ratio, and read the overhead ratio (measured back to back) as the more
robust figure.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kvframe.engine import Engine
from kvframe.sweep import LocalBackend, ResultStore, parse_sweep, run_sweep
from kvframe.sweep.cell import build_engine_config, load_cell_workload

TRACE = "mooncake:conversation"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--limit", type=int, default=300)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data = {
            "base": {"workload": TRACE, "limit": args.limit, "num_gpu_blocks": 8000},
            "grid": {"seed": list(range(args.cells))},
        }
        spec = parse_sweep(data, path=Path(tmp) / "bench.toml")

        started = time.perf_counter()
        for cell in spec.cells:
            Engine.from_config(build_engine_config(cell.settings)).run(
                load_cell_workload(cell.settings)
            )
        bare = time.perf_counter() - started

        walls = {}
        for jobs in (1, 2):
            store = ResultStore(Path(tmp) / f"jobs{jobs}.sqlite")
            report = run_sweep(spec, store, LocalBackend(jobs))
            store.close()
            assert report.done == args.cells and report.failed == 0
            walls[jobs] = report.wall_seconds

    n = args.cells
    print(f"{n} cells, first {args.limit} requests of {TRACE}, 8000 GPU blocks")
    print(f"bare runs in-process     {bare:8.2f} s   {60 * n / bare:7.1f} cells/min")
    for jobs, wall in walls.items():
        print(f"sweep, {jobs} worker(s)      {wall:8.2f} s   {60 * n / wall:7.1f} cells/min")
    print(f"per-cell overhead (1 worker vs bare): {100 * (walls[1] - bare) / bare:+.1f}%")
    print(f"scaling 2 workers / 1 worker:        x{walls[1] / walls[2]:.2f}")


if __name__ == "__main__":
    main()
