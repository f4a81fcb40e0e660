"""``kvframe run``'s start-up: CPU time to the first step, against a bare interpreter (issue 51).

    .venv/bin/python benchmarks/startup.py              # 7 rounds
    .venv/bin/python benchmarks/startup.py --rounds 15

Each round starts, in this order, fresh child interpreters for:

* ``python -c pass``-like baseline: the interpreter and ``site`` (with the editable
  installs' finders), printing its own CPU time;
* ``kvframe run mooncake:conversation --limit 1`` up to the first step: the command's
  ``main()`` with ``Engine.run`` (or ``Fleet.run`` for ``--replicas 8 --router
  round-robin``) replaced by a function that prints the CPU time so far and exits --
  imports, the argument parser, the plugin scan, the workload's first request, the
  engine (its block pool included);
* the whole ``kvframe run mooncake:conversation --limit 1`` command as a user types it
  (the console script; one request, the summary tables, ``metrics.json`` and
  ``requests.csv``), CPU from ``getrusage(RUSAGE_CHILDREN)`` and wall time.

It prints the median of each (CPU seconds) and the ratios against the baseline of
the same rounds. The goal (issue 51) is the time to the first step under 0.3 s.
Bytecode caches must exist (a first round writes them unless
``PYTHONDONTWRITEBYTECODE`` is set, which the script unsets for its children).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_FIRST_STEP = """
import os, sys, time
import kvframe.engine.engine as _engine
import kvframe.fleet.runner as _runner

def _report(*args, **kwargs):
    sys.stdout.write(f"{time.process_time()!r}\\n")
    sys.stdout.flush()
    os._exit(0)

_engine.Engine.run = _report
_runner.Fleet.run = _report
from kvframe.cli import main
main(sys.argv[1:])
"""
# The two patched modules are imported by every `kvframe run` before its first step
# anyway; importing them first only moves their cost earlier.

_BASELINE = "import time, sys; sys.stdout.write(repr(time.process_time()))"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _child_cpu(code: str, argv: list[str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
        timeout=120,
    )
    return float(done.stdout.strip().splitlines()[-1])


def _command(argv: list[str]) -> tuple[float, float]:
    """(CPU, wall) of the console script ``kvframe`` with ``argv``."""
    script = Path(sys.executable).with_name("kvframe")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([str(script), *argv], capture_output=True, check=True, env=_env(), timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--trace", default="mooncake:conversation")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        single = ["run", args.trace, "--limit", "1", "--out", f"{tmp}/one", "--force"]
        fleet = [*single[:-3], "--out", f"{tmp}/fleet", "--force"]
        fleet += ["--replicas", "8", "--router", "round-robin"]
        rows: dict[str, list[float]] = {k: [] for k in ("base", "single", "fleet", "cmd", "wall")}
        _child_cpu(_FIRST_STEP, single)  # writes the bytecode caches
        for _ in range(args.rounds):
            rows["base"].append(_child_cpu(_BASELINE, []))
            rows["single"].append(_child_cpu(_FIRST_STEP, single))
            rows["fleet"].append(_child_cpu(_FIRST_STEP, fleet))
            cpu, wall = _command(single)
            rows["cmd"].append(cpu)
            rows["wall"].append(wall)
    med = {k: statistics.median(v) for k, v in rows.items()}
    base = med["base"]
    print(f"median of {args.rounds} rounds, CPU seconds (ratio to the bare interpreter)")
    print(f"  bare interpreter (python -c)            {base:7.3f}  1.00")
    for key, label in (
        ("single", "kvframe run --limit 1, to first step"),
        ("fleet", "  ... --replicas 8, to first step"),
        ("cmd", "kvframe run --limit 1, whole command"),
    ):
        print(f"  {label:<39} {med[key]:7.3f}  {med[key] / base:5.2f}")
    print(f"  (whole command, wall: {med['wall']:.3f} s)")
    goal = "met" if med["single"] < 0.3 else "NOT met"
    print(f"goal: first step under 0.3 s CPU -- {goal} ({med['single']:.3f} s)")


if __name__ == "__main__":
    main()
