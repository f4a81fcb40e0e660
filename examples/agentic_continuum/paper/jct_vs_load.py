"""Mean JCT vs load from the paper sweep's database: the table and the figure of docs/continuum.md.

``kvframe compare`` shows every run; this script folds the three seeds of each
setting together, which compare does not know how to do (a seed is just another
workload file to it). Per preset, tier, scheduler and load it reports the mean
over seeds of each run's mean job completion time, and Continuum's gain over
FCFS on the same workload file, seed by seed (min and max over seeds).

    .venv/bin/python examples/agentic_continuum/paper/jct_vs_load.py \\
        runs/agentic-paper/results.sqlite --plot docs/img/continuum_jct_vs_load.png
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path

SCHEDULERS = ("fcfs", "continuum", "continuum:ttl=fixed")
TIERS = ("none", "cpu:capacity=64GiB")


def _workload_params(path: str, cache: dict[str, dict]) -> dict:
    """The generator's parameters from the workload file's header line."""
    if path not in cache:
        with open(path, encoding="utf-8") as handle:
            cache[path] = json.loads(handle.readline())["params"]
    return cache[path]


def load_runs(db: Path) -> dict[tuple[str, str, str, float], dict[int, float]]:
    """``(preset, tier, scheduler, jobs/s) -> {seed: mean JCT}`` for every finished cell."""
    connection = sqlite3.connect(db)
    rows = connection.execute(
        "SELECT config, value FROM cells JOIN metrics ON cell = key "
        "WHERE status = 'done' AND name = 'job_completion_time_seconds.mean'"
    ).fetchall()
    headers: dict[str, dict] = {}
    runs: dict[tuple[str, str, str, float], dict[int, float]] = defaultdict(dict)
    for config_text, value in rows:
        config = json.loads(config_text)
        params = _workload_params(config["workload"], headers)
        preset = Path(config["workload"]).stem.rsplit("-s", 1)[0]
        if config.get("kv_memory"):  # a pool other than the preset's (sweep_bfcl_16gib.toml)
            preset += f", {config['kv_memory']} KV"
        rate = round(params["rate"] * float(config.get("rate_scale", 1)), 6)
        tier = config.get("offload", "none")
        runs[preset, tier, config["scheduler"], rate][params["seed"]] = float(value)
    return runs


def gains(runs: dict, preset: str, tier: str, scheduler: str, rate: float) -> list[float]:
    """Per seed: 1 - JCT(scheduler) / JCT(fcfs) on the same workload and tier."""
    base = runs.get((preset, tier, "fcfs", rate), {})
    mine = runs.get((preset, tier, scheduler, rate), {})
    return [1 - mine[s] / base[s] for s in sorted(base) if s in mine]


def table(runs: dict) -> str:
    """The Markdown table of docs/continuum.md."""
    lines = [
        "| preset | tier | jobs/s | fcfs | continuum | `ttl=fixed` "
        "| continuum vs fcfs, per seed | `ttl=fixed` vs fcfs, per seed |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    presets = sorted({key[0] for key in runs}, reverse=True)
    for preset in presets:
        for tier in TIERS:
            rates = sorted({key[3] for key in runs if key[0] == preset and key[1] == tier})
            for rate in rates:
                means = []
                for scheduler in SCHEDULERS:
                    seeds = runs.get((preset, tier, scheduler, rate), {})
                    means.append(f"{statistics.mean(seeds.values()):.1f}" if seeds else "-")
                spans = []
                for scheduler in SCHEDULERS[1:]:
                    g = gains(runs, preset, tier, scheduler, rate)
                    spans.append(
                        f"{-100 * max(g):+.0f}% .. {-100 * min(g):+.0f}% ({len(g)})" if g else "-"
                    )
                tier_name = "CPU 64 GiB" if tier != "none" else "none"
                lines.append(
                    f"| {preset} | {tier_name} | {rate:g} | " + " | ".join(means + spans) + " |"
                )
    return "\n".join(lines)


def plot(runs: dict, out: Path) -> None:
    """One panel per preset and tier: mean JCT (over seeds) vs load, min-max over seeds as bars."""
    from matplotlib.figure import Figure

    presets = sorted({key[0] for key in runs}, reverse=True)
    fig = Figure(figsize=(11, 4 * len(presets)))
    for row, preset in enumerate(presets):
        for col, tier in enumerate(TIERS):
            ax = fig.add_subplot(len(presets), len(TIERS), row * len(TIERS) + col + 1)
            for scheduler in SCHEDULERS:
                points = sorted(
                    (key[3], seeds)
                    for key, seeds in runs.items()
                    if key[:3] == (preset, tier, scheduler) and seeds
                )
                if not points:
                    continue
                xs = [rate for rate, _ in points]
                ys = [statistics.mean(seeds.values()) for _, seeds in points]
                low = [y - min(seeds.values()) for y, (_, seeds) in zip(ys, points, strict=True)]
                high = [max(seeds.values()) - y for y, (_, seeds) in zip(ys, points, strict=True)]
                ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, label=scheduler)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("job arrival rate (jobs/s)")
            ax.set_ylabel("mean job completion time (s)")
            ax.set_title(f"{preset}, {'no tier' if tier == 'none' else 'CPU tier 64 GiB'}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path, help="the sweep's results.sqlite")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="also draw the figure here")
    args = parser.parse_args()
    runs = load_runs(args.db)
    print(table(runs))
    if args.plot is not None:
        plot(runs, args.plot)


if __name__ == "__main__":
    main()
