"""The evidence table: each bundled policy against its baseline, paired by seed.

Reads ``kvframe compare --json`` of the policy-evidence sweep (run.sh pipes it
in) and prints, per workload, one row per policy: the mean and 95% confidence
interval over the seeds of

* hit rate -- GPU prefix-cache hit tokens over prompt tokens looked up;
* TTFT p50 and p99 -- each run's percentiles, in seconds of virtual time;
* recompute tax -- tokens computed again after a recompute preemption, as a
  share of the prompt tokens (``num_recomputed_tokens / prompt_tokens_total``);
* host ms per step -- the simulation's wall-clock time per engine step, which
  bounds the scheduler's and the policy's overhead from above (it includes the
  sim executor; measured on a shared machine, so read it as a rough figure);

and, for every policy but the baseline, the difference to the baseline
(``lru`` for eviction, ``fcfs`` for scheduling) paired by seed with its
interval, marked ``*`` where the interval excludes zero.

    .venv/bin/kvframe compare runs/policy-evidence/results.sqlite --json \\
        | .venv/bin/python examples/policy_evidence/summarise.py [--figure PATH.png]

``--figure`` also draws the differences to the baselines (matplotlib, the
``plot`` extra): eviction's hit rate in points, scheduling's TTFT p50 in % of
the baseline's.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Any

from kvframe.compare.effects import interval

BASELINES = {"gpu_eviction": "lru", "scheduler": "fcfs"}
"""The setting key each cell varies, and the policy every other is compared with."""

METRICS: tuple[tuple[str, str, float], ...] = (
    ("hit rate %", "hit_rate", 100.0),
    ("TTFT p50 s", "ttft_p50", 1.0),
    ("TTFT p99 s", "ttft_p99", 1.0),
    ("recompute %", "recompute", 100.0),
    ("host ms/step", "ms_per_step", 1.0),
)


def values(metrics: dict[str, Any]) -> dict[str, float]:
    """The table's figures of one run."""
    prompt = metrics["prompt_tokens_total"] or 1
    return {
        "hit_rate": metrics["prefix_cache_hit_rate"],
        "ttft_p50": metrics["time_to_first_token_seconds.p50"],
        "ttft_p99": metrics["time_to_first_token_seconds.p99"],
        "recompute": metrics["num_recomputed_tokens"] / prompt,
        "ms_per_step": 1000.0 * metrics["wall_clock_seconds"] / max(1, metrics["num_steps"]),
    }


def shown(mean: float, half: float | None, scale: float, star: str = "") -> str:
    digits = 2 if scale == 100.0 else 4
    text = f"{mean * scale:.{digits}f}"
    if half is not None:
        text += f" ± {half * scale:.{digits}f}"
    return text + star


def summarise(runs: list[dict[str, Any]]) -> str:
    # (kind, workload) -> policy -> seed -> figures
    table: dict[tuple[str, str], dict[str, dict[int, dict[str, float]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for run in runs:
        if run.get("error") or not run.get("metrics"):
            continue
        config = run["config"]
        kind = next((key for key in BASELINES if key in config), None)
        if kind is None:
            continue
        workload = config["workload"]
        table[(kind, workload)][config[kind]][config.get("seed", 0)] = values(run["metrics"])
    lines: list[str] = []
    for (kind, workload), policies in table.items():
        baseline = policies.get(BASELINES[kind], {})
        seeds = sorted({seed for per_seed in policies.values() for seed in per_seed})
        lines.append(f"\n## {kind} on {workload} ({len(seeds)} seeds)\n")
        head = ["policy", *(label for label, _, _ in METRICS)]
        head += [f"Δ {label}" for label, _, _ in METRICS[:4]]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + " --- |" * len(head))
        for policy, per_seed in policies.items():
            cells = [f"`{policy}`"]
            for _, key, scale in METRICS:
                got = interval([figures[key] for figures in per_seed.values()])
                cells.append(shown(got.mean, got.half, scale))
            for _, key, scale in METRICS[:4]:
                common = sorted(set(per_seed) & set(baseline))
                if policy == BASELINES[kind] or len(common) < 2:
                    cells.append("--")
                    continue
                diff = interval([per_seed[s][key] - baseline[s][key] for s in common])
                real = diff.half is not None and abs(diff.mean) > diff.half
                cells.append(shown(diff.mean, diff.half, scale, "*" if real else ""))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines).lstrip("\n") + "\n"


def differences(
    runs: list[dict[str, Any]], kind: str, key: str, relative: bool = False
) -> dict[str, list[tuple]]:
    """workload -> [(policy, mean, half)] of ``key``'s paired difference to the baseline
    (``relative``: as a fraction of the baseline's value on the same seed)."""
    per: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for run in runs:
        config = run["config"]
        if run.get("error") or not run.get("metrics") or kind not in config:
            continue
        figures = values(run["metrics"])
        per[config["workload"]][config[kind]][config.get("seed", 0)] = figures[key]
    out: dict[str, list[tuple]] = {}
    for workload, policies in per.items():
        baseline = policies.get(BASELINES[kind], {})
        rows = []
        for policy, by_seed in policies.items():
            common = sorted(set(by_seed) & set(baseline))
            if policy != BASELINES[kind] and len(common) >= 2:
                diff = interval(
                    [
                        (by_seed[s] - baseline[s]) / (baseline[s] if relative else 1.0)
                        for s in common
                    ]
                )
                rows.append((policy, diff.mean, diff.half or 0.0))
        out[workload] = rows
    return out


def figure(runs: list[dict[str, Any]], path: str) -> None:
    """Two panels: eviction's hit-rate gain over lru (points), scheduling's TTFT p50
    change over fcfs (% of fcfs's, since the workloads' TTFTs differ a thousandfold)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("gpu_eviction", "hit_rate", 100.0, False, "hit rate vs lru (points)"),
        ("scheduler", "ttft_p50", 100.0, True, "TTFT p50 vs fcfs (%)"),
    )
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (kind, key, scale, relative, title) in zip(axes, panels, strict=True):
        labels, means, halves = [], [], []
        for workload, rows in differences(runs, kind, key, relative).items():
            for policy, mean, half in rows:
                labels.append(f"{policy}\n{workload}")
                means.append(mean * scale)
                halves.append(half * scale)
        ax.barh(range(len(labels)), means, xerr=halves, color="tab:blue", capsize=3)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        ax.set_title(title + ", mean and 95% CI over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    runs = json.load(sys.stdin)
    sys.stdout.write(summarise(runs))
    if len(sys.argv) == 3 and sys.argv[1] == "--figure":
        try:
            figure(runs, sys.argv[2])
        except ImportError:
            print("(no figure: pip install 'kvframe[plot]')", file=sys.stderr)
    elif len(sys.argv) > 1:
        sys.exit("usage: summarise.py [--figure PATH.png] < compare.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
