"""What a CPU offload tier costs the simulation: the same run with and without it.

    .venv/bin/python benchmarks/offload_speed.py [--limit 200] [--rounds 5]
        [--tier cpu:capacity=8GiB --tier cpu:capacity=8GiB,eviction=arc]

Replays the first ``--limit`` requests of the bundled Mooncake conversation
trace through the engine (Python API, the default preset and pool, as
``kvframe run mooncake:conversation --limit N [--offload TIER]`` does), once
without a tier and once per ``--tier``, interleaved, for ``--rounds`` rounds.
Per configuration it prints the best wall and CPU seconds of the engine run
(``Engine.run`` only: the trace is loaded before the clock starts) and the
ratio to the no-tier run: best over best, and the median of the per-round
ratios (each round runs every configuration back to back, so load from other
processes hits both sides alike). CPU seconds are the figure to quote on a
shared machine; the load average is printed with the table.

A second reference row, ``no tier, step by step``, is the no-tier run with
``EngineConfig(step_by_step=True)``: the engine takes runs of plain decode
steps in one go only without a tier (``kvframe.core.decode_run``), so this row
separates what the tier's own work costs (tier / step-by-step) from what
losing decode runs costs (step-by-step / no tier).

It also checks that every round of a configuration made the same decisions
(all counters but wall-clock ones equal) and prints the tier's hit, transfer
and eviction counters, which a speed change must leave exactly as they were.
``--json FILE`` writes the rows and the counters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from kvframe.engine import Engine, EngineConfig
from kvframe.workloads import load_workload

TRACE = "mooncake:conversation"
TIER_COUNTERS = (
    "offload_hit_tokens",
    "offload_num_loads",
    "offload_loaded_blocks",
    "offload_num_stores",
    "offload_stored_blocks",
    "offload_evicted_blocks",
    "offload_store_refused",
    "num_steps",
    "num_preemptions",
)


STEP_BY_STEP = "no tier, step by step"


def run_once(trace: str, limit: int, tier: str | None) -> tuple[float, float, dict[str, Any]]:
    """One engine run: (wall seconds, CPU seconds, counters without wall-clock ones)."""
    workload = load_workload(trace, limit=limit)
    step_by_step = tier == STEP_BY_STEP
    config = EngineConfig(step_by_step=True) if step_by_step else EngineConfig(offload=tier)
    engine = Engine.from_config(config)
    wall_started, cpu_started = time.perf_counter(), time.process_time()
    result = engine.run(workload)
    cpu = time.process_time() - cpu_started
    wall = time.perf_counter() - wall_started
    counters = {
        k: v for k, v in result.counters.items() if "wall" not in k and "decode_run" not in k
    }
    return wall, cpu, counters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=TRACE)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tier", action="append", help="an --offload config string (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    tiers = args.tier or ["cpu:capacity=8GiB", "cpu:capacity=8GiB,eviction=arc"]
    configs: list[str | None] = [None, STEP_BY_STEP, *tiers]

    times: dict[str | None, list[tuple[float, float]]] = {c: [] for c in configs}
    counters: dict[str | None, dict[str, Any]] = {}
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for config in configs:
            wall, cpu, got = run_once(args.trace, args.limit, config)
            times[config].append((wall, cpu))
            if counters.setdefault(config, got) != got:
                raise SystemExit(f"{config or 'no tier'}: two rounds made different decisions")
    load_after = os.getloadavg()[0]

    base = times[None]
    rows = []
    print(
        f"{args.trace} --limit {args.limit}, {args.rounds} interleaved rounds, "
        f"load average {load_before:.1f} -> {load_after:.1f}"
    )
    print(
        f"{'configuration':36} {'wall s':>7} {'cpu s':>7} {'cpu ratio':>9} "
        f"{'median':>7} {'wall ratio':>10}"
    )
    for config in configs:
        walls = [w for w, _ in times[config]]
        cpus = [c for _, c in times[config]]
        row = {
            "configuration": config or "no tier",
            "best_wall_s": min(walls),
            "best_cpu_s": min(cpus),
            "cpu_ratio": min(cpus) / min(c for _, c in base),
            "median_round_cpu_ratio": statistics.median(
                c / b for (_, c), (_, b) in zip(times[config], base, strict=True)
            ),
            "wall_ratio": min(walls) / min(w for w, _ in base),
        }
        rows.append(row)
        print(
            f"{row['configuration']:36} {row['best_wall_s']:7.2f} {row['best_cpu_s']:7.2f} "
            f"{row['cpu_ratio']:9.2f} {row['median_round_cpu_ratio']:7.2f} "
            f"{row['wall_ratio']:10.2f}"
        )
    print()
    for config in tiers:
        shown = ", ".join(f"{k}={counters[config].get(k)}" for k in TIER_COUNTERS)
        print(f"{config}: {shown}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"rows": rows, "counters": {str(k): v for k, v in counters.items()}}, indent=1
            )
        )


if __name__ == "__main__":
    main()
