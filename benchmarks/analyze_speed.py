"""How fast ``kvframe analyze`` is, and how far its sampled curves are from exact ones.

    .venv/bin/python benchmarks/analyze_speed.py [--trace mooncake:conversation ...]
        [--sample-rate auto]

For each trace (default: both bundled Mooncake traces), in one process each
so that peak memory is the analysis's own:

1. ``kvframe analyze``'s default path (hashing, every policy on a spatial
   sample when the trace is large -- LRU by stack distances on the same sample,
   with its exact curve as the reference -- the optimal bound): wall time and
   peak RSS;
2. the baseline, in the same process: every curve computed the plain way,
   the plugin replayed on the whole trace at every size (``lru`` included);
3. the error of each curve of (1) against (2), in percentage points: LRU's is
   the sample's measured error (0 when nothing is sampled), the others' are
   what ``docs/analyze.md`` states.

Prints the speed-up of (1) over (2) as a ratio measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time
from kvframe.analyze import analyze_trace, auto_block_size, build_block_trace, default_policy_specs
from kvframe.host.registry import get_registry
from kvframe.workloads import load_workload

name, rate, mode = sys.argv[1], sys.argv[2], sys.argv[3]
registry = get_registry()
policies = default_policy_specs(registry)
start = time.perf_counter()
workload = load_workload(name)
trace = build_block_trace(workload.requests, auto_block_size(workload), name=name)
hashing = time.perf_counter() - start
if mode == "fast":
    result = analyze_trace(trace, policies=policies, registry=registry,
                           sample_rate=rate if rate == "auto" else float(rate))
else:
    # The baseline: every policy, lru included, replayed through its plugin at every size.
    result = analyze_trace(trace, policies=policies, registry=registry,
                           sample_rate=1.0)
    from kvframe.analyze.replay import build_policy, replay_policy
    t = time.perf_counter()
    lru = [replay_policy(trace, build_policy(registry, "lru", s), s)[0] / trace.total_tokens
           if s < trace.num_distinct else result.ceiling for s in result.sizes]
    lru_seconds = time.perf_counter() - t
total = time.perf_counter() - start
out = {
    "seconds": total, "hashing": hashing,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "sample_rate": result.sample_rate, "sizes": result.sizes,
    "curves": {c.policy: [c.hit_rates, c.seconds, c.method] for c in result.curves},
}
if mode != "fast":
    out["curves"]["lru"] = [lru, lru_seconds, "exact (replay)"]
print(json.dumps(out))
"""


def run(trace: str, rate: str, mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, trace, rate, mode],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--trace", action="append", help="a trace (default: both bundled Mooncake traces)"
    )
    parser.add_argument("--sample-rate", default="auto")
    args = parser.parse_args()
    for trace in args.trace or ["mooncake:conversation", "mooncake:synthetic"]:
        fast = run(trace, args.sample_rate, "fast")
        base = run(trace, args.sample_rate, "baseline")
        print(f"\n{trace}: sample rate {fast['sample_rate']:g}, {len(fast['sizes'])} sizes")
        print(
            f"  analyze: {fast['seconds']:.1f} s (hashing {fast['hashing']:.1f} s), "
            f"peak RSS {fast['rss_mb']:.0f} MB"
        )
        print(
            f"  baseline (every plugin replayed on the whole trace at every size): "
            f"{base['seconds']:.1f} s, peak RSS {base['rss_mb']:.0f} MB"
        )
        print(f"  speed-up: {base['seconds'] / fast['seconds']:.1f}x")
        print(
            f"  {'curve':<20} {'method':<28} {'s fast':>7} {'s base':>7} {'max err pp':>10}"
            f" {'mean err pp':>11}"
        )
        for policy, (rates, seconds, method) in fast["curves"].items():
            exact, base_seconds, _ = base["curves"][policy]
            errors = [abs(a - b) * 100 for a, b in zip(rates, exact, strict=True)]
            print(
                f"  {policy:<20} {method:<28} {seconds:7.1f} {base_seconds:7.1f} "
                f"{max(errors):10.2f} {sum(errors) / len(errors):11.2f}"
            )
    print(f"\nload average while measuring: {', '.join(f'{x:.1f}' for x in _load())}")


def _load() -> tuple[float, ...]:
    import os

    return os.getloadavg()


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(
        f"benchmark wall time: {time.perf_counter() - start:.0f} s; "
        f"children peak RSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB"
    )
