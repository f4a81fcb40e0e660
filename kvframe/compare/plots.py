"""``kvframe compare --plots DIR``: figures (PNG + SVG) and one self-contained report.html.

Which figures: each appears when the runs can support it.

* **hit ratio vs pool size** (a miss-ratio curve, as libCacheSim draws them),
  one line per remaining setting (policy, tier), when the GPU pool size varies;
* **latency CDFs** -- TTFT, TPOT, end-to-end -- one line per run (at the middle
  pool size when the pool size varies, so that the legend stays readable);
* **mean job completion time** per setting, for agentic workloads (runs whose
  requests belong to jobs);
* **throughput vs load** when ``rate_scale`` varies.

matplotlib is an optional extra (``pip install 'kvframe[plot]'``); it is
imported only here, and only the object-oriented API is used (no pyplot, no
global backend state).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvframe.compare.load import Entry, varying_keys
from kvframe.config import ConfigError

__all__ = ["PlotFile", "write_plots", "write_report"]

_POOL_KEYS = ("num_gpu_blocks", "kv_memory")
_CDF_METRICS = (
    ("time_to_first_token_seconds", "time to first token (s)", 1.0),
    ("time_per_output_token_seconds", "time per output token (ms)", 1000.0),
    ("e2e_request_latency_seconds", "end-to-end latency (s)", 1.0),
)
_MAX_LINES = 12


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(
            "plots need matplotlib", origin="--plots", hints=["pip install 'kvframe[plot]'"]
        ) from None
    return Figure


class PlotFile:
    """One written figure: its title, caption and file stem (``.png`` and ``.svg`` exist)."""

    def __init__(self, stem: Path, title: str, caption: str, png: bytes) -> None:
        self.stem = stem
        self.title = title
        self.caption = caption
        self.png = png


def _ok(entries: Sequence[Entry]) -> list[Entry]:
    return [e for e in entries if e.status != "failed" and e.metrics is not None]


def _series(entries: Sequence[Entry], keys: Sequence[str]) -> dict[str, list[Entry]]:
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.label(keys) if keys else "all runs", []).append(entry)
    return groups


def _pool(entry: Entry, key: str) -> float:
    value = entry.config.get(key)
    if value is None:
        value = entry.value("num_gpu_blocks")
    return float(value or 0)


def _save(fig: Any, out: Path, stem: str, title: str, caption: str) -> PlotFile:
    fig.tight_layout()
    path = out / stem
    fig.savefig(path.with_suffix(".svg"))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    png = buffer.getvalue()
    path.with_suffix(".png").write_bytes(png)
    return PlotFile(path, title, caption, png)


def _hit_ratio_curve(entries: Sequence[Entry], varying: list[str], out: Path) -> PlotFile | None:
    pool_key = next((k for k in _POOL_KEYS if k in varying), None)
    if pool_key is None:
        return None
    fig = _figure_class()(figsize=(7, 4.5))
    ax = fig.add_subplot()
    from kvframe.compare.effects import REPEAT_KEYS, interval

    keys = [k for k in varying if k != pool_key and k not in REPEAT_KEYS]
    repeats = any(k in varying for k in REPEAT_KEYS)
    for label, group in _series(entries, keys).items():
        # Repeats (seeds) of one pool size are one point: their mean, with a 95% CI bar.
        by_pool: dict[float, list[float]] = {}
        for e in group:
            by_pool.setdefault(_pool(e, pool_key), []).append(
                100 * (e.value("total_hit_rate") or 0.0)
            )
        xs = sorted(by_pool)
        stats = [interval(by_pool[x]) for x in xs]
        errors = [s.half or 0.0 for s in stats]
        ax.errorbar(
            xs, [s.mean for s in stats], yerr=errors if repeats else None, marker="o",
            capsize=3, label=label,
        )  # fmt: skip
    unit = "blocks" if pool_key == "num_gpu_blocks" else "bytes"
    sizes = [_pool(e, pool_key) for e in entries if _pool(e, pool_key) > 0]
    if sizes and max(sizes) >= 8 * min(sizes):  # pool sizes usually grow by factors
        ax.set_xscale("log", base=2)
        unit += ", log scale"
    ax.set_xlabel(f"GPU KV-cache pool size ({unit})")
    ax.set_ylabel("prompt tokens served from cache (%)")
    ax.set_title("Hit ratio vs GPU pool size")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    caption = (
        "Share of prompt tokens found in a cache (GPU prefix cache plus what a CPU tier "
        "supplied) as the GPU pool grows; higher is better. One line per setting."
        + (
            " Each point is the mean over seeds, with its 95% confidence interval."
            if repeats
            else ""
        )
    )
    return _save(fig, out, "hit_ratio_vs_pool_size", "Hit ratio vs pool size", caption)


def _cdf_entries(entries: Sequence[Entry], varying: list[str]) -> tuple[list[Entry], str]:
    pool_key = next((k for k in _POOL_KEYS if k in varying), None)
    if pool_key is None:
        return list(entries)[:_MAX_LINES], ""
    sizes = sorted({_pool(e, pool_key) for e in entries})
    middle = sizes[len(sizes) // 2]
    chosen = [e for e in entries if _pool(e, pool_key) == middle][:_MAX_LINES]
    return chosen, f" at {pool_key} = {middle:g}"


def _latency_cdfs(entries: Sequence[Entry], varying: list[str], out: Path) -> PlotFile | None:
    chosen, note = _cdf_entries(entries, varying)
    keys = [k for k in varying if k not in _POOL_KEYS or not note]
    data = {
        e.name: {m: sorted(v * scale for v in e.column(m)) for m, _, scale in _CDF_METRICS}
        for e in chosen
    }
    if not any(values for per in data.values() for values in per.values()):
        return None
    fig = _figure_class()(figsize=(13, 4.2 + 0.25 * len(chosen) / 4))
    for i, (metric, axis_label, _) in enumerate(_CDF_METRICS):
        ax = fig.add_subplot(1, len(_CDF_METRICS), i + 1)
        for entry in chosen:
            values = data[entry.name][metric]
            if not values:
                continue
            n = len(values)
            ax.step(values, [(k + 1) / n for k in range(n)], where="post", label=entry.label(keys))
        ax.set_xlabel(axis_label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    # One legend below the three panels: inside the TTFT panel it covered the curves.
    handles, labels = fig.axes[0].get_legend_handles_labels()
    columns = min(4, max(1, len(labels)))
    fig.suptitle(f"Latency CDFs{note}")
    fig.tight_layout(rect=(0, 0.06 + 0.045 * ((len(labels) + columns - 1) // columns), 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize="small", frameon=False)
    caption = (
        "Cumulative distribution of per-request latencies: a curve further left is faster; "
        "where it reaches 0.9 is the p90." + (f" Runs{note}." if note else "")
    )
    return _save(fig, out, "latency_cdfs", "Latency CDFs", caption)


def _mean_jct(entries: Sequence[Entry], varying: list[str], out: Path) -> PlotFile | None:
    with_jobs = [e for e in entries if e.value("job_completion_time_seconds.mean") is not None]
    if not with_jobs:
        return None
    fig = _figure_class()(figsize=(7, 0.6 + 0.45 * len(with_jobs) + 1.5))
    ax = fig.add_subplot()
    labels = [e.label(varying) for e in with_jobs]
    values = [e.value("job_completion_time_seconds.mean") or 0.0 for e in with_jobs]
    ax.barh(range(len(values)), values, color="tab:blue")
    ax.set_yticks(range(len(values)), labels, fontsize="small")
    ax.invert_yaxis()
    for y, v in enumerate(values):
        ax.annotate(f"{v:.1f}", (v, y), xytext=(3, 0), textcoords="offset points", va="center")
    ax.set_xlabel("mean job completion time (s)")
    ax.set_title("Mean job completion time (agentic jobs)")
    ax.grid(axis="x", alpha=0.3)
    caption = (
        "Mean time from a job's first turn arriving to its last turn finishing; lower is better."
    )
    return _save(fig, out, "mean_jct", "Mean job completion time", caption)


def _throughput_vs_load(entries: Sequence[Entry], varying: list[str], out: Path) -> PlotFile | None:
    if "rate_scale" not in varying:
        return None
    fig = _figure_class()(figsize=(7, 4.5))
    ax = fig.add_subplot()
    keys = [k for k in varying if k != "rate_scale"]
    for label, group in _series(entries, keys).items():
        group = sorted(group, key=lambda e: float(e.config.get("rate_scale", 1)))
        xs = [float(e.config.get("rate_scale", 1)) for e in group]
        ys = [e.value("output_throughput_tokens_per_second") or 0.0 for e in group]
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xlabel("offered load (arrival rate x the trace's)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_title("Throughput vs load")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    caption = "Generated tokens per simulated second as arrivals speed up; it flattens at capacity."
    return _save(fig, out, "throughput_vs_load", "Throughput vs load", caption)


_PLOTS: tuple[Callable[[Sequence[Entry], list[str], Path], PlotFile | None], ...] = (
    _hit_ratio_curve,
    _latency_cdfs,
    _mean_jct,
    _throughput_vs_load,
)


def write_plots(entries: Sequence[Entry], out: Path) -> list[PlotFile]:
    """Write every figure the runs support into ``out``; returns them in order.

    When the entries were narrowed to their common requests
    (:func:`~kvframe.compare.common.on_common_requests`), every caption says
    how many requests each point covers.
    """
    from kvframe.compare.common import coverage_note

    _figure_class()
    out.mkdir(parents=True, exist_ok=True)
    ok = _ok(entries)
    varying = varying_keys(ok)
    note = coverage_note(ok)
    plots = [plot for make in _PLOTS if (plot := make(ok, varying, out)) is not None]
    for plot in plots:
        if note:
            plot.caption = f"{plot.caption} {note}"
    return plots


def write_report(
    entries: Sequence[Entry], plots: Sequence[PlotFile], path: Path, *, title: str
) -> None:
    """One HTML file with the table and every figure embedded (no other file needed)."""
    from kvframe.compare.common import coverage_note
    from kvframe.compare.table import table_rows

    headings, rows = table_rows(entries)
    note = coverage_note(entries)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    figures = "".join(
        f"<figure><h2>{html.escape(p.title)}</h2>"
        f'<img alt="{html.escape(p.title)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.png).decode("ascii")}">'
        f"<figcaption>{html.escape(p.caption)}</figcaption></figure>"
        for p in plots
    )
    from kvframe.compare.effects import repeated, settings_of, settings_rows, verdicts

    settings = settings_of(entries)
    effects = ""
    if repeated(settings):
        heads, cells = settings_rows(settings)
        effects = (
            "<h2>Per setting: mean ± 95% confidence interval over seeds</h2><table><thead><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in heads)
            + "</tr></thead><tbody>"
            + "".join(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                for row in cells
            )
            + "</tbody></table><ul>"
            + "".join(f"<li>{html.escape(v.sentence())}</li>" for v in verdicts(settings))
            + "</ul>"
        )
    failed = "".join(
        f"<li>{html.escape(e.name)}: {html.escape((e.error or '?').splitlines()[0])}</li>"
        for e in entries
        if e.status == "failed"
    )
    document = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1400px; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }}
th {{ background: #f2f2f2; }}
figure {{ margin: 2em 0; }} img {{ max-width: 100%; }}
figcaption {{ color: #444; max-width: 60em; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
{f"<p>{html.escape(note)}</p>" if note else ""}
{effects}
{f"<h2>Failed runs</h2><ul>{failed}</ul>" if failed else ""}
{figures}
</body></html>
"""
    path.write_text(document, encoding="utf-8")
