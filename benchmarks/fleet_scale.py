"""The fleet's cost against the single engine's, and its memory at 64 replicas (issue 47).

    .venv/bin/python benchmarks/fleet_scale.py                    # whole trace + 64 replicas
    .venv/bin/python benchmarks/fleet_scale.py --limit 3000       # a quicker slice
    .venv/bin/python benchmarks/fleet_scale.py --skip-trace       # the 64-replica part only

Part 1, in one process and interleaved: the whole Mooncake conversation trace
on the single engine, on a fleet of 1 replica and on a fleet of 8 replicas
under round-robin, each replica with the same pool as the single engine (the
default config). CPU time (``time.process_time``) of each run, and the ratios
fleet/single; the goal is ``8 replicas <= 2x`` the single engine. The 1-replica
fleet must print the single engine's counters (step-identical).

Part 2, in a child process per size: a generated chat workload
(``--gen-requests``, 20 req/s) on fleets of 1 and 64 replicas; peak RSS
(``ru_maxrss``) after the run minus RSS before the fleet was built, per replica,
and the peak's growth from 1 to 64 replicas per added replica.

The router is a round-robin defined here (uses no loads, no KV events), so the
benchmark measures the fleet, not a router plugin.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

from kvframe.contract.routing import FleetInfo, Router
from kvframe.engine import Engine, EngineConfig
from kvframe.fleet import Fleet
from kvframe.workloads import load_workload

COUNTERS = ("num_steps", "num_preemptions", "num_recomputed_tokens", "prefix_cache_hits")


class RoundRobin(Router):
    """Request i to replica i % N."""

    name = "bench-round-robin"
    description = "each replica in turn"
    uses_loads = False

    def attach(self, fleet: FleetInfo) -> None:
        self.n, self.next = fleet.num_replicas, 0

    def route(self, request: Any, view: Any) -> int:
        choice = self.next
        self.next = (self.next + 1) % self.n
        return choice


def _timed(run: Any) -> tuple[float, dict[str, Any]]:
    started = time.process_time()
    counters = run()
    return time.process_time() - started, counters


def _single(workload: Any) -> dict[str, Any]:
    return dict(Engine.from_config(EngineConfig()).run(workload).counters)


def _fleet(workload: Any, replicas: int) -> dict[str, Any]:
    result = Fleet.from_config(EngineConfig(), RoundRobin(), replicas=replicas).run(workload)
    return dict(result.summary.counters)


def trace_part(limit: int | None, repeats: int) -> None:
    workload = load_workload("mooncake:conversation", limit=limit)
    print(f"part 1: mooncake:conversation, {len(workload.requests):,} requests")
    runs = {
        "single engine": lambda: _single(workload),
        "fleet, 1 replica": lambda: _fleet(workload, 1),
        "fleet, 8 replicas": lambda: _fleet(workload, 8),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    counters: dict[str, dict[str, Any]] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            seconds, counters[name] = _timed(run)
            times[name].append(seconds)
            print(f"  {name:<18} {seconds:8.1f} s CPU", flush=True)
    base = min(times["single engine"])
    print(f"{'run':<18} {'CPU s (min)':>12} {'ratio':>7}  " + "  ".join(COUNTERS))
    for name in runs:
        best = min(times[name])
        figures = "  ".join(f"{counters[name].get(c, 0):,}" for c in COUNTERS)
        print(f"{name:<18} {best:12.1f} {best / base:7.2f}  {figures}")
    same = all(counters["single engine"][c] == counters["fleet, 1 replica"][c] for c in COUNTERS)
    print(f"1-replica fleet counters identical to the single engine's: {same}")
    print(
        "8 replicas: fleet_request_imbalance "
        f"{counters['fleet, 8 replicas'].get('fleet_request_imbalance', 0):.3f}, "
        f"prefix hit rate {counters['fleet, 8 replicas'].get('prefix_cache_hit_rate', 0):.2%} "
        f"(single: {counters['single engine'].get('prefix_cache_hit_rate', 0):.2%})"
    )


def _child(replicas: int, requests: int) -> None:
    """One fleet size in this process: prints JSON with the RSS figures."""
    from kvframe.workloads.chat import generate_chat

    workload = generate_chat(num_requests=requests, seed=7, rate=20.0, system_prompt_length=400)
    before = _rss_kib()
    started = time.process_time()
    result = Fleet.from_config(EngineConfig(), RoundRobin(), replicas=replicas).run(workload)
    cpu = time.process_time() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "replicas": replicas,
                "cpu_s": cpu,
                "rss_before_mib": before / 1024,
                "peak_mib": peak / 1024,
                "per_replica_mib": (peak - before) / 1024 / replicas,
                "finished": result.summary.counters["num_requests_finished"],
                "steps": result.summary.counters["num_steps"],
            }
        )
    )


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memory_part(requests: int) -> None:
    print(f"part 2: generated chat workload, {requests:,} requests")
    print(
        f"{'replicas':>8} {'CPU s':>8} {'RSS before':>11} {'peak':>9} "
        f"{'per replica':>12} {'steps':>9}"
    )
    peaks = {}
    for replicas in (1, 64):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(replicas), "--gen-requests", str(requests)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        row = json.loads(out.strip().splitlines()[-1])
        print(
            f"{row['replicas']:>8} {row['cpu_s']:8.1f} {row['rss_before_mib']:9.1f} MiB "
            f"{row['peak_mib']:6.1f} MiB {row['per_replica_mib']:8.2f} MiB {row['steps']:>9,}"
        )
        peaks[replicas] = row["peak_mib"]
    print(f"each replica beyond the first: {(peaks[64] - peaks[1]) / 63:.2f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="replay only the first N trace requests")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats of part 1")
    parser.add_argument("--gen-requests", type=int, default=20_000)
    parser.add_argument("--skip-trace", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.gen_requests)
        return
    if not args.skip_trace:
        trace_part(args.limit, args.repeats)
    if not args.skip_memory:
        memory_part(args.gen_requests)


if __name__ == "__main__":
    main()
