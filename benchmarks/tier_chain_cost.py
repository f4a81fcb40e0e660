"""What the tier-chain machinery costs a run with the DRAM tier alone (issue 49).

    .venv/bin/python benchmarks/tier_chain_cost.py --base /work/main [--limit 150] [--rounds 3]

Runs the first ``--limit`` requests of the Mooncake conversation trace under
``--vllm 0.33`` with ``--offload cpu:capacity=8GiB`` (no tier below DRAM), once
with this checkout's kvframe and once with ``--base``'s (a checkout without
the chain), interleaved round by round, each in a fresh interpreter. Prints the
CPU seconds of ``Engine.run`` per round and the median of the per-round ratios
this / base (each round runs both back to back, so load from other processes
hits both alike), and checks both made the same decisions (equal counters).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CHILD = """
import json, time
from kvframe.engine import Engine, EngineConfig
from kvframe.workloads import load_workload
workload = load_workload("mooncake:conversation", limit={limit})
engine = Engine.from_config(EngineConfig(vllm="0.33", offload="cpu:capacity=8GiB"))
started = time.process_time()
result = engine.run(workload)
cpu = time.process_time() - started
counters = {{k: v for k, v in result.counters.items() if "wall" not in k}}
print(json.dumps([cpu, counters]))
"""


def run(checkout: Path, limit: int) -> tuple[float, dict[str, object]]:
    """CPU seconds of one engine run with ``checkout``'s kvframe, and its counters."""
    paths = [str(checkout), *(str(p) for p in sorted((checkout / "plugins").glob("*/")))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(limit=limit)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    cpu, counters = json.loads(out.strip().splitlines()[-1])
    return cpu, counters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout without the chain")
    parser.add_argument("--limit", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    for round_ in range(args.rounds):
        this_cpu, this_counters = run(HERE, args.limit)
        base_cpu, base_counters = run(args.base, args.limit)
        if this_counters != base_counters:
            raise SystemExit(f"round {round_}: the two checkouts decided differently")
        ratios.append(this_cpu / base_cpu)
        print(
            f"round {round_}: this {this_cpu:.2f} s CPU, base {base_cpu:.2f} s, "
            f"ratio {ratios[-1]:.3f}"
        )
    print(
        f"median ratio this / base: {statistics.median(ratios):.3f} "
        f"(load average {os.getloadavg()[0]:.1f}); counters equal in every round"
    )


if __name__ == "__main__":
    main()
