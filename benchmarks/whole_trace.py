"""Wall time and peak memory of a whole-trace run: lazy prompts against materialised ones.

    .venv/bin/python benchmarks/whole_trace.py                       # whole conversation trace
    .venv/bin/python benchmarks/whole_trace.py --sizes 1000,4000,12031
    .venv/bin/python benchmarks/whole_trace.py --trace T --offload cpu:capacity=8GiB

Each run is a fresh subprocess (so its peak RSS is its own, read from
``getrusage``) that loads the trace and replays it through
``Engine.from_config(EngineConfig(...))`` as ``kvframe run`` does. Two modes,
interleaved per size:

* ``lazy`` -- the current code: the engine gives each request a
  :class:`~kvframe.workloads.spec.PromptTokens` (the trace's recipe; Mooncake
  prompts are hashed straight from their hash ids, no token list is built).
* ``eager`` -- the reference: every request gets its prompt as a list of ints
  (and ``all_token_ids`` a copy), as before lazy prompts; the decisions must
  be the same, and the script checks that every summary counter is equal.

Printed per size and mode: wall seconds, CPU seconds, peak RSS, and the ratio
eager / lazy; then the summary counters that differ (none expected).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mooncake"
TRACE = TRACE / "conversation_trace.jsonl"

_EXCLUDED = {"wall_clock_seconds", "simulated_requests_per_wall_second"}


def _child(trace: str, limit: int, mode: str, offload: str | None) -> None:
    from kvframe.engine import Engine, EngineConfig
    from kvframe.workloads import load_workload

    if mode == "eager":
        import kvframe.engine.engine as engine_module

        # The reference representation: prompts as lists of Python ints.
        engine_module.PromptTokens = lambda prompt: prompt.token_ids()  # type: ignore[assignment]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    workload = load_workload(trace, limit=limit or None)
    config = EngineConfig(offload=offload) if offload else EngineConfig()
    result = Engine.from_config(config).run(workload)
    row = {
        "requests": len(workload),
        "mode": mode,
        "wall_seconds": time.perf_counter() - wall0,
        "cpu_seconds": time.process_time() - cpu0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "counters": {k: v for k, v in result.counters.items() if k not in _EXCLUDED},
    }
    print("ROW " + json.dumps(row))


def _run(trace: Path, limit: int, mode: str, offload: str | None) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--trace", str(trace),
               "--sizes", str(limit)]  # fmt: skip
    if offload:
        command += ["--offload", offload]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("ROW "))
    return json.loads(line[4:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--sizes", default="0", help="request counts, 0 = the whole trace")
    parser.add_argument("--offload", help="an offload tier, e.g. cpu:capacity=8GiB")
    parser.add_argument("--modes", default="lazy,eager")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(str(args.trace), int(args.sizes), args.child, args.offload)
        return

    modes = args.modes.split(",")
    print(f"trace {args.trace.name}, tier {args.offload or 'none'}, "
          f"load average {os.getloadavg()[0]:.1f} at start")  # fmt: skip
    header = f"{'requests':>9}{'mode':>7}{'wall s':>9}{'cpu s':>9}{'peak MB':>9}{'steps':>9}"
    print(header)
    print("-" * len(header))
    for size in (int(s) for s in args.sizes.split(",")):
        rows = {}
        for mode in modes:
            row = rows[mode] = _run(args.trace, size, mode, args.offload)
            print(
                f"{row['requests']:>9}{mode:>7}{row['wall_seconds']:>9.1f}"
                f"{row['cpu_seconds']:>9.1f}{row['peak_rss_mb']:>9.0f}"
                f"{row['counters']['num_steps']:>9}",
                flush=True,
            )
        if len(rows) == 2:
            a, b = (rows[m] for m in modes)
            print(
                f"{'':>9}{'ratio':>7}{b['wall_seconds'] / a['wall_seconds']:>9.2f}"
                f"{b['cpu_seconds'] / a['cpu_seconds']:>9.2f}"
                f"{b['peak_rss_mb'] / a['peak_rss_mb']:>9.2f}   ({modes[1]} / {modes[0]})"
            )
            differ = {k for k in a["counters"] if a["counters"][k] != b["counters"].get(k)}
            print(f"{'':>9}counters differing between modes: {sorted(differ) or 'none'}")
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
