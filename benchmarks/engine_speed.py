"""How fast ``kvframe run`` replays a real trace, and how that grows with its length.

    .venv/bin/python benchmarks/engine_speed.py [--sizes 1000,4000,12031] [--profile]

Replays the first N requests of the Mooncake conversation trace (12,031
requests, ~145 M prompt tokens, block size 16, the default preset
``llama3.1-8b-h100`` and its KV budget) for each N in ``--sizes`` and prints,
per run, the wall time, the CPU time of this process (less disturbed by other
processes than wall time on a shared machine), engine steps, simulated time,
simulated requests per wall second, steps per wall second and wall
microseconds per step. The last two columns show how time grows with trace
length: wall and CPU seconds per request relative to the first size, which
stay near 1.00 when growth is linear.

``--profile`` runs the largest size under cProfile and prints the 30 functions
with the most own time, which is how the engine/executor loop was tuned and
what the scheduler and KV-cache core cost.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from pathlib import Path

from kvframe.engine import Engine, EngineConfig
from kvframe.workloads import load_workload

TRACE = "mooncake:conversation"  # bundled with kvframe; a path works too


def run_once(trace: str, limit: int, config: EngineConfig, profile: bool) -> dict:
    load_started = time.perf_counter()
    workload = load_workload(trace, limit=limit)
    load_s = time.perf_counter() - load_started
    engine = Engine.from_config(config)
    profiler = cProfile.Profile() if profile else None
    wall_started, cpu_started = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    result = engine.run(workload)
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - wall_started
    cpu = time.process_time() - cpu_started
    counters = result.counters
    row = {
        "requests": len(workload),
        "load_seconds": load_s,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "steps": counters["num_steps"],
        "simulated_seconds": counters["simulated_duration_seconds"],
        "simulated_requests_per_wall_second": len(workload) / wall,
        "steps_per_wall_second": counters["num_steps"] / wall,
        "preemptions": counters["num_preemptions"],
        "prefix_cache_hit_rate": counters["prefix_cache_hit_rate"],
    }
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        row["profile"] = out.getvalue()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=TRACE)
    parser.add_argument("--sizes", default="1000,4000,12031")
    parser.add_argument("--preset", default="llama3.1-8b-h100")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()

    sizes = [int(s) for s in args.sizes.split(",")]
    config = EngineConfig(preset=args.preset, block_size=args.block_size)
    rows = []
    header = (
        f"{'requests':>9}{'wall s':>9}{'cpu s':>9}{'steps':>9}{'sim s':>9}"
        f"{'req/wall s':>11}{'steps/s':>9}{'us/step':>9}{'wall/req':>10}{'cpu/req':>9}"
    )
    print(f"trace {args.trace}, preset {args.preset}, block size {args.block_size}, "
          f"{config.resolved_num_gpu_blocks()} GPU blocks")  # fmt: skip
    print(header)
    print("-" * len(header))
    for size in sizes:
        row = run_once(args.trace, size, config, args.profile and size == max(sizes))
        rows.append(row)
        # Growth with trace length: seconds per request relative to the first size
        # (1.00 everywhere is linear). CPU time is the steadier of the two on a
        # shared machine.
        wall_ratio = (row["wall_seconds"] / row["requests"]) / (
            rows[0]["wall_seconds"] / rows[0]["requests"]
        )
        cpu_ratio = (row["cpu_seconds"] / row["requests"]) / (
            rows[0]["cpu_seconds"] / rows[0]["requests"]
        )
        print(
            f"{row['requests']:>9}{row['wall_seconds']:>9.1f}{row['cpu_seconds']:>9.1f}"
            f"{row['steps']:>9}{row['simulated_seconds']:>9.0f}"
            f"{row['simulated_requests_per_wall_second']:>11.1f}"
            f"{row['steps_per_wall_second']:>9.0f}"
            f"{row['wall_seconds'] / row['steps'] * 1e6:>9.0f}{wall_ratio:>10.2f}{cpu_ratio:>9.2f}",
            flush=True,
        )
    for row in rows:
        if "profile" in row:
            print()
            print(row.pop("profile"))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
