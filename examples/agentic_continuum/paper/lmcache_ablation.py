"""The tier's effect on FCFS and the Fig. 16 ablation, from sweep_lmcache_calibrated.toml's db.

Per load it prints FCFS's mean JCT without and with the tier (each seed's cut,
against the paper's ~10% at 0.13 jobs/s), then the ablation's four lines on
the tier -- FCFS, program-level FCFS (``continuum:ttl=none``), the preview's
fixed 2 s pin (``continuum:ttl=fixed``) and Continuum -- as mean JCT over the
seeds with its 95% Student-t interval, each seed's ratio to FCFS, and what
share of Continuum's gain over FCFS program-level order alone carries (the rest
is the pins'), per seed. Nothing is fitted to the paper.

    .venv/bin/python examples/agentic_continuum/paper/lmcache_ablation.py \\
        runs/agentic-lmcache-calibrated/results.sqlite
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

from table2_jct_vs_load import interval

TIER = "lmcache:capacity=200GB"
LINES = ("fcfs", "continuum:ttl=none", "continuum:ttl=fixed", "continuum")
"""The ablation's four lines, from no program order to the full cost model."""

Runs = dict[tuple[str, str, float], dict[int, float]]
"""(tier, scheduler, jobs/s) -> {seed: mean JCT}."""


def load(db: Path) -> Runs:
    """Every finished cell's mean JCT, keyed by its tier, scheduler, load and seed."""
    rows = (
        sqlite3.connect(db)
        .execute(
            "SELECT config, value FROM cells JOIN metrics ON cell = key "
            "WHERE status = 'done' AND name = 'job_completion_time_seconds.mean'"
        )
        .fetchall()
    )
    runs: Runs = defaultdict(dict)
    for text, value in rows:
        config = json.loads(text)
        key = (
            config.get("offload", "none"),
            config["scheduler"],
            float(config["generate"]["rate"]),
        )
        runs[key][int(config["seed"])] = float(value)
    return runs


def cell(values: dict[int, float]) -> str:
    """``mean ± half-width`` over the seeds."""
    mean, half = interval(list(values.values()))
    return f"{mean:,.0f} ± {half:,.0f}"


def per_seed(numerator: dict[int, float], denominator: dict[int, float]) -> list[float]:
    """The ratio on each seed both have, in seed order."""
    return [numerator[s] / denominator[s] for s in sorted(numerator) if s in denominator]


def tier_effect(runs: Runs, rates: list[float]) -> list[str]:
    """FCFS without and with the tier, and the tier's cut per seed."""
    lines = [
        "| jobs/s | fcfs, no tier | fcfs, tier | tier's cut of fcfs's mean JCT, per seed |",
        "| ---: | ---: | ---: | --- |",
    ]
    for rate in rates:
        bare, tier = runs.get(("none", "fcfs", rate), {}), runs.get((TIER, "fcfs", rate), {})
        cuts = " ".join(f"{1 - r:.0%}" for r in per_seed(tier, bare))
        lines.append(f"| {rate:g} | {cell(bare) if bare else '-'} | {cell(tier)} | {cuts} |")
    return lines


def ablation(runs: Runs, rates: list[float]) -> list[str]:
    """The four lines per load: mean JCT with its interval, each seed's ratio to FCFS."""
    lines = [
        "| jobs/s | line | mean JCT | / fcfs, per seed | mean ratio |",
        "| ---: | --- | ---: | --- | ---: |",
    ]
    for rate in rates:
        fcfs = runs.get((TIER, "fcfs", rate), {})
        for name in LINES:
            values = runs.get((TIER, name, rate), {})
            if not values:
                continue
            ratios = per_seed(values, fcfs)
            mean, half = interval(ratios) if ratios else (0.0, 0.0)
            text = " ".join(f"{r:.2f}" for r in ratios)
            lines.append(
                f"| {rate:g} | `{name}` | {cell(values)} | {text} | {mean:.2f} ± {half:.2f} |"
            )
    return lines


def shares(runs: Runs, rates: list[float]) -> list[str]:
    """Per seed, the share of Continuum's gain over FCFS that program-level order
    alone (``ttl=none``) carries; 1 - that share is the pins'."""
    lines = []
    for rate in rates:
        fcfs, order, full = (runs.get((TIER, n, rate), {}) for n in ("fcfs", LINES[1], "continuum"))
        seeds = sorted(set(fcfs) & set(order) & set(full))
        parts = []
        for s in seeds:
            gain = fcfs[s] - full[s]
            parts.append(
                f"seed {s}: {(fcfs[s] - order[s]) / gain:.0%}" if gain > 0 else f"seed {s}: -"
            )
        if parts:
            lines.append(
                f"{rate:g} jobs/s, program-level order's share of the gain: " + ", ".join(parts)
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path, help="the sweep's results.sqlite")
    runs = load(parser.parse_args().db)
    rates = sorted({k[2] for k in runs}, reverse=True)
    for block in (tier_effect(runs, rates), ablation(runs, rates), shares(runs, rates)):
        print("\n".join(block), end="\n\n")


if __name__ == "__main__":
    main()
