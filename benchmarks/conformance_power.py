"""The conformance suite's power: how many mutants it catches at default settings, how fast.

Runs the whole suite, exactly as a plugin author would (``pytest --kvframe-plugin
KIND:mutants:Class``, default settings, one process each), on every mutant in
``tests/testing/mutants.py`` (the bundled ``lru``, ``arc``, ``fcfs`` and ``priority``,
and the test-only ``lfu-aging`` of ``tests/testing/lfu_aging.py``, with one defect
each) and on the correct plugins they were made from (which must pass). Prints one
row per run: caught or not, the checks that failed, seconds; then the catch rate
and the time of a control run against the mean mutant run.

    .venv/bin/python benchmarks/conformance_power.py            # about 2-3 minutes
    .venv/bin/python benchmarks/conformance_power.py --only lru # mutants of one policy
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "testing"
CONTROLS = (
    "eviction:lru",
    "eviction:arc",
    "eviction:arc:variant=paper",
    "eviction:lfu_aging:LFUAgingPolicy",
    "scheduling:fcfs",
    "scheduling:priority",
)


def run_suite(selection: str) -> tuple[int, list[str], float]:
    """Run the suite on one plugin; return (exit code, failed checks, seconds)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), env_path()]))
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "kvframe.testing",
        "--assert=plain",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rf",
        "--kvframe-plugin",
        selection,
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=TESTS)
    seconds = time.perf_counter() - start
    failed = sorted(set(re.findall(r"FAILED \S+::(test_\w+)", done.stdout)))
    return done.returncode, failed, seconds


def env_path() -> str:
    return os.environ.get("PYTHONPATH", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="only the mutants of this bundled policy (lru, arc, ...)")
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    import mutants

    rows = []
    for cls, kind, _check, _words in mutants.MUTANTS:
        base = cls.__mro__[1].name
        if args.only and base != args.only:
            continue
        code, failed, seconds = run_suite(f"{kind}:mutants:{cls.__name__}")
        rows.append((cls.__name__, base, code == 1, failed, seconds))
        print(
            f"{cls.__name__:28} {base:9} {'caught' if code == 1 else 'MISSED':7} "
            f"{seconds:5.1f}s  {', '.join(failed)}",
            flush=True,
        )
    controls = []
    for selection in CONTROLS:
        if args.only and selection.split(":")[1].replace("_", "-") != args.only:
            continue
        code, failed, seconds = run_suite(selection)
        controls.append((selection, code, seconds))
        print(
            f"control {selection:28} {'passes' if code == 0 else 'FAILS'}  {seconds:5.1f}s",
            flush=True,
        )
    caught = sum(1 for row in rows if row[2])
    mean = sum(row[4] for row in rows) / max(1, len(rows))
    control_mean = sum(c[2] for c in controls) / max(1, len(controls))
    print(
        f"\ncaught {caught}/{len(rows)} mutants at default settings; mean run "
        f"{mean:.1f}s per mutant, {control_mean:.1f}s per correct plugin "
        f"(mutant/control {mean / control_mean if control_mean else 0:.2f}); controls pass: "
        f"{all(c[1] == 0 for c in controls)}"
    )


if __name__ == "__main__":
    main()
