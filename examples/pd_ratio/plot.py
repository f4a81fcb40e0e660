"""TTFT and TPOT against the prefill:decode ratio, with 95% intervals over seeds.

Reads the sweep's results (``kvframe sweep examples/pd_ratio/sweep.toml``) and
draws three panels: the mean TTFT with its parts (queueing for the prefill, the
prefill, waiting on the decode replica for the load to start, the transfer, the
first decode step), the mean TPOT on the decode
replicas, and the mean end-to-end latency; each point is the mean over the
seeds with its 95% t-interval. Also prints the numbers as a table.

    .venv/bin/python examples/pd_ratio/plot.py runs/pd-ratio/results.sqlite docs/img/pd-ratio.png
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from kvframe.compare.effects import interval
from kvframe.compare.load import load_entries

METRICS = (
    ("time_to_first_token_seconds.mean", "TTFT"),
    ("disagg_ttft_queue_seconds.mean", "queue"),
    ("disagg_ttft_prefill_seconds.mean", "prefill"),
    ("disagg_ttft_decode_wait_seconds.mean", "decode wait"),
    ("disagg_ttft_transfer_seconds.mean", "transfer"),
    ("disagg_ttft_first_decode_seconds.mean", "1st decode"),
    ("time_per_output_token_seconds.mean", "TPOT"),
    ("e2e_request_latency_seconds.mean", "e2e"),
)


def collect(db: str) -> dict[str, dict[str, list[float]]]:
    """Per ratio (``P:D``, in order of P), each metric's value in every seed's run."""
    by_ratio: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for entry in load_entries([db]):
        if entry.status != "done":
            continue
        ratio = str(entry.config.get("disagg"))
        for metric, _ in METRICS:
            value = entry.value(metric)
            if value is not None:
                by_ratio[ratio][metric].append(value)
    return dict(sorted(by_ratio.items(), key=lambda item: int(item[0].split(":")[0])))


def table(by_ratio: dict[str, dict[str, list[float]]]) -> str:
    """The means and 95% half-widths, in milliseconds."""
    head = ["P:D", "runs", *(f"{label} (ms)" for _, label in METRICS)]
    lines = ["  ".join(f"{h:>16}" for h in head)]
    for ratio, values in by_ratio.items():
        cells = [ratio, str(len(values[METRICS[0][0]]))]
        for metric, _ in METRICS:
            ci = interval(values[metric])
            cells.append(f"{1e3 * ci.mean:.2f} ± {1e3 * (ci.half or 0):.2f}")
        lines.append("  ".join(f"{c:>16}" for c in cells))
    return "\n".join(lines)


def plot(by_ratio: dict[str, dict[str, list[float]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = list(by_ratio)
    x = range(len(ratios))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = (
        (axes[0], METRICS[:6], "TTFT and its parts (ms, log)"),
        (axes[1], METRICS[6:7], "TPOT on the decode replicas (ms)"),
        (axes[2], METRICS[7:8], "end-to-end latency (ms, log)"),
    )
    for ax, metrics, title in panels:
        for metric, label in metrics:
            cis = [interval(by_ratio[r][metric]) for r in ratios]
            means = [1e3 * c.mean for c in cis]
            halves = [1e3 * (c.half or 0.0) for c in cis]
            style = "-o" if label in ("TTFT", "TPOT", "e2e") else "--."
            ax.errorbar(list(x), means, yerr=halves, fmt=style, capsize=3, label=label)
        ax.set_xticks(list(x), ratios)
        ax.set_xlabel("prefill : decode replicas (8 in all)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if "log" in title:
            ax.set_yscale("log")
        if len(metrics) > 1:
            ax.legend(fontsize=7, ncol=2)
    fig.suptitle("P:D ratio of an 8-replica fleet (mean ± 95% CI over 3 seeds)", fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    by_ratio = collect(argv[0])
    if not by_ratio:
        print(f"{argv[0]}: no finished runs", file=sys.stderr)
        return 1
    print(table(by_ratio))
    plot(by_ratio, Path(argv[1]))
    print(f"wrote {argv[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
