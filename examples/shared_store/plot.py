"""Hit tokens, TTFT and bytes per tier of each configuration of ``sweep.toml``, with 95% intervals.

    .venv/bin/python examples/shared_store/plot.py \
        runs/shared-store/results.sqlite docs/img/shared-store.png

Prints one row per configuration (mean and 95% confidence half-width over the
seeds, Student's t) and draws hit tokens and mean TTFT side by side.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from collections import defaultdict

# Student's t at 97.5% for 1..9 degrees of freedom (repeats - 1).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262]
LABELS = {0: "no store", 1: "shared store", 2: "disk + shared store"}


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and 95% half-width (0 for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, T975[len(values) - 2] * statistics.stdev(values) / len(values) ** 0.5


def load(path: str) -> dict[str, dict[str, list[float]]]:
    """Per configuration (its number of tiers below DRAM): metric -> values over seeds."""
    db = sqlite3.connect(path)
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for key, config in db.execute("select key, config from cells where status = 'done'"):
        label = LABELS[len(json.loads(config)["offload_tiers"])]
        for name, value in db.execute("select name, value from metrics where cell = ?", (key,)):
            out[label][name].append(value)
    return out


def main(path: str, figure: str | None) -> None:
    data = load(path)
    print(
        f"{'configuration':22} {'runs':>4} {'offload hit tokens':>22} {'TTFT mean (s)':>16} "
        f"{'store read GiB':>16} {'disk read GiB':>15}"
    )
    for label in LABELS.values():
        m = data[label]
        hits = interval(m["offload_hit_tokens"])
        ttft = interval(m["time_to_first_token_seconds.mean"])
        store = interval([v / 2**30 for v in m.get("tier_store_read_bytes", [0.0])])
        disk = interval([v / 2**30 for v in m.get("tier_disk_read_bytes", [0.0])])
        print(
            f"{label:22} {len(m['offload_hit_tokens']):>4} "
            f"{hits[0]:>12,.0f} ± {hits[1]:<7,.0f} {ttft[0]:>8.3f} ± {ttft[1]:<5.3f} "
            f"{store[0]:>8.1f} ± {store[1]:<5.1f} {disk[0]:>7.1f} ± {disk[1]:<5.1f}"
        )
    if figure is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(LABELS.values())
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, metric, title in (
        (axes[0], "offload_hit_tokens", "tokens served by the tiers (fleet)"),
        (axes[1], "time_to_first_token_seconds.mean", "mean TTFT (s)"),
    ):
        stats = [interval(data[label][metric]) for label in labels]
        ax.bar(
            labels,
            [s[0] for s in stats],
            yerr=[s[1] for s in stats],
            capsize=4,
            color=["#999999", "#4477aa", "#66aa55"],
        )
        ax.set_title(title)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("4 replicas, round-robin, gen:agentic (40 jobs), 3 seeds; bars: 95% CI")
    fig.tight_layout()
    fig.savefig(figure, dpi=110)
    print(f"wrote {figure}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
