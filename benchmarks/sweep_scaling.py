"""Sweep throughput with N worker processes, and what a cell costs beyond a bare run.

    python3 benchmarks/sweep_scaling.py [--jobs 1,2,4,8] [--limits 40,200,1000] [--cells 8]

Runs from the repository root with nothing installed but kvframe's
dependencies: the script puts the repository and ``plugins/kvframe-fcfs`` on
the path of every process it starts (``PYTHONPATH``), and selects the scheduler
as ``fcfs`` where its entry point is installed (as users do, which costs each
process an entry-point scan) and by class path where it is not, so neither an
entry point nor the console script is needed.

For each cell size (the first ``--limits`` requests of the bundled Mooncake
conversation trace, 8,000 GPU blocks; ``--cells`` cells differing only in the
block-hash seed, so each does the same work), in fresh processes:

1. **bare**: the cells run one after another in one warm process through the
   public API (``load_workload`` + ``Engine.run`` + the summary): what a shell
   loop over ``kvframe run`` would spend minus interpreter start-up and
   imports, i.e. the strictest baseline. Imports and the plugin scan happen
   before the clock starts.
2. **sweep, N workers**: ``kvframe sweep`` as the command runs it (the CLI's
   ``main``, ``--jobs N``, into a fresh SQLite database) in a process that has
   imported only what the command imports: forks, reads, runs, pickles the
   outcome back, stores cells, metrics and per-request rows.

Reported per mode: wall seconds, CPU seconds (the process and its workers:
``os.times``, children included), cells per minute. Per-cell overhead is
``(sweep_1 - bare) / bare``, in wall and in CPU time; the CPU figure is the one
to read on a loaded machine, where wall time mostly measures the other load.
Scaling is ``wall_1 / wall_N`` (ideal: N, when N cores are free). Each figure
is the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PATHS = [str(REPO), str(REPO / "plugins" / "kvframe-fcfs")]
TRACE = "mooncake:conversation"
GPU_BLOCKS = 8000


def _scheduler() -> str:
    """``fcfs`` by name, as users write it, when its entry point is installed.

    Selecting by name makes each process scan the entry points (a real cost the
    sweep must not repeat per cell); without the distribution installed, the
    class path selects the same policy with no scan.
    """
    from importlib.metadata import entry_points

    if any(ep.name == "fcfs" for ep in entry_points(group="kvframe")):
        return "fcfs"
    return "kvframe_fcfs:FCFSPolicy"


def _sweep_file(directory: Path, limit: int, cells: int, scheduler: str) -> Path:
    path = directory / f"bench-{limit}.toml"
    path.write_text(
        f'[sweep]\nname = "bench-{limit}"\n'
        f'[base]\nworkload = "{TRACE}"\nlimit = {limit}\nnum_gpu_blocks = {GPU_BLOCKS}\n'
        f'scheduler = "{scheduler}"\n'
        f"[grid]\nseed = {list(range(cells))}\n",
        encoding="utf-8",
    )
    return path


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# -- what runs in the measured processes ------------------------------------------------


def _bare(sweep: Path) -> dict[str, float]:
    from kvframe.engine import Engine
    from kvframe.host.registry import get_registry
    from kvframe.sweep import load_sweep
    from kvframe.sweep.cell import build_engine_config, load_cell_workload

    spec = load_sweep(sweep)
    get_registry().entries()  # start-up a bare run pays before its clock starts
    Engine.from_config(build_engine_config(spec.cells[0].settings))
    wall, cpu = time.perf_counter(), _cpu()
    for cell in spec.cells:
        result = Engine.from_config(build_engine_config(cell.settings)).run(
            load_cell_workload(cell.settings)
        )
        result.summary.to_dict()
    return {"wall": time.perf_counter() - wall, "cpu": _cpu() - cpu}


def _sweep(sweep: Path, jobs: int, db: Path) -> dict[str, float]:
    from kvframe.cli import main  # what `kvframe sweep` has imported when it starts

    wall, cpu = time.perf_counter(), _cpu()
    code = main(["-q", "sweep", str(sweep), "--jobs", str(jobs), "--db", str(db), "--no-progress"])
    result = {"wall": time.perf_counter() - wall, "cpu": _cpu() - cpu}
    if code != 0:
        raise SystemExit(f"sweep failed with exit code {code}")
    return result


def _measure(*args: str) -> dict[str, float]:
    """Run one measurement in a fresh interpreter; its last stdout line is the JSON result."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*PATHS, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    flags = ["-S"] if sys.flags.no_site else []  # keep how this interpreter was started
    done = subprocess.run(
        [sys.executable, *flags, __file__, "--_measure", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"measurement {args} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the driver -------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=_ints, default=[1, 2], help="worker counts, e.g. 1,2,4,8")
    parser.add_argument("--limits", type=_ints, default=[40, 200, 1000], help="requests per cell")
    parser.add_argument("--cells", type=int, default=8, help="cells per sweep")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs")
    parser.add_argument("--_measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args._measure:
        kind, sweep, *rest = args._measure
        if kind == "bare":
            result = _bare(Path(sweep))
        else:
            result = _sweep(Path(sweep), int(rest[0]), Path(rest[1]))
        print(json.dumps(result))
        return

    jobs = sorted(set(args.jobs) | {1})
    scheduler = _scheduler()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"{os.cpu_count()} cores, load average {load[0]:.2f} at start; {args.cells} cells of "
        f"{TRACE}, {GPU_BLOCKS} GPU blocks, scheduler {scheduler}; best of {args.repeat}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for limit in args.limits:
            sweep = _sweep_file(Path(tmp), limit, args.cells, scheduler)
            rows: dict[str, dict[str, float]] = {}
            for _ in range(args.repeat):
                runs = {"bare": _measure("bare", str(sweep))}
                for n in jobs:
                    db = Path(tmp) / f"r{limit}-{n}-{time.monotonic_ns()}.sqlite"
                    runs[f"sweep, {n} worker{'s' if n > 1 else ''}"] = _measure(
                        "sweep", str(sweep), str(n), str(db)
                    )
                for name, run in runs.items():
                    best = rows.setdefault(name, dict(run))
                    best["wall"] = min(best["wall"], run["wall"])
                    best["cpu"] = min(best["cpu"], run["cpu"])
            _report(limit, args.cells, rows)


def _report(limit: int, cells: int, rows: dict[str, dict[str, float]]) -> None:
    print(f"\nfirst {limit} requests per cell")
    print(f"  {'':20}{'wall s':>9}{'cpu s':>9}{'cells/min':>11}{'scaling':>9}")
    bare, one = rows["bare"], rows["sweep, 1 worker"]
    for name, run in rows.items():
        scaling = ""
        if name.startswith("sweep"):
            scaling = f"x{one['wall'] / run['wall']:.2f}"
        print(
            f"  {name:20}{run['wall']:9.2f}{run['cpu']:9.2f}"
            f"{60 * cells / run['wall']:11.1f}{scaling:>9}"
        )
    wall_pct = 100 * (one["wall"] / bare["wall"] - 1)
    print(
        f"  per-cell overhead, 1 worker vs bare: wall {wall_pct:+.1f}%"
        f", cpu {100 * (one['cpu'] / bare['cpu'] - 1):+.1f}%"
        f"  ({1000 * (one['cpu'] - bare['cpu']) / cells:+.0f} ms cpu per cell)"
    )


if __name__ == "__main__":
    main()
