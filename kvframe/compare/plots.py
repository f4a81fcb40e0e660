"""``kvframe compare --plots DIR``: figures (PNG + SVG) and one self-contained report.html.

Which figures: each appears when the runs can support it.

* **hit ratio vs pool size** (a miss-ratio curve, as libCacheSim draws them),
  one line per remaining setting (policy, tier), when the GPU pool size varies;
* **latency CDFs** -- TTFT, TPOT, end-to-end -- one line per *setting* (every
  one: no run is ever left out), the mean over its seeds with a band from the
  fastest to the slowest seed at each quantile, a distinct colour per setting
  (:func:`distinct_colors`) and the legend below the panels, where it covers
  nothing;
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
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kvframe.compare.load import Entry, varying_keys
from kvframe.config import ConfigError

__all__ = ["PlotFile", "distinct_colors", "latency_cdf_figure", "write_plots", "write_report"]

_POOL_KEYS = ("num_gpu_blocks", "kv_memory")
_CDF_METRICS = (
    ("time_to_first_token_seconds", "time to first token (s)", 1.0),
    ("time_per_output_token_seconds", "time per output token (ms)", 1000.0),
    ("e2e_request_latency_seconds", "end-to-end latency (s)", 1.0),
)
_QUANTILE_POINTS = 200
"""Quantiles a setting's CDF is drawn at (its seeds are averaged quantile by quantile)."""


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
    if fig.get_layout_engine() is None:
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
    series = _series(entries, keys)
    colors = distinct_colors(len(series))
    for color, (label, group) in zip(colors, series.items(), strict=True):
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
            capsize=3, label=label, color=color,
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
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the curves
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


def distinct_colors(count: int) -> list[tuple[float, float, float, float]]:
    """``count`` colours, all different: tab10 up to 10, tab20 up to 20, else evenly spaced
    hues of a cyclic map at alternating lightness (neighbours never look alike)."""
    from matplotlib import colormaps

    if count <= 10:
        return [colormaps["tab10"](i) for i in range(count)]
    if count <= 20:
        return [colormaps["tab20"](i) for i in range(count)]
    hues = colormaps["hsv"]
    out = []
    for i in range(count):
        r, g, b, a = hues(i / count)
        shade = 0.6 if i % 2 else 1.0  # every other one darker: adjacent hues stay apart
        out.append((r * shade, g * shade, b * shade, a))
    return out


def _quantile_curve(values: Sequence[float]) -> list[float]:
    """The values at :data:`_QUANTILE_POINTS` evenly spaced quantiles (nearest rank)."""
    ordered = sorted(values)
    last = len(ordered) - 1
    return [ordered[round(last * k / (_QUANTILE_POINTS - 1))] for k in range(_QUANTILE_POINTS)]


def _setting_cdfs(
    entries: Sequence[Entry], keys: Sequence[str]
) -> dict[str, dict[str, list[list[float]]]]:
    """``setting label -> metric -> one quantile curve per run`` (runs without values
    add nothing); every setting of ``entries``, in first-seen order."""
    out: dict[str, dict[str, list[list[float]]]] = {}
    for label, group in _series(entries, keys).items():
        per_metric: dict[str, list[list[float]]] = {}
        for metric, _, scale in _CDF_METRICS:
            runs = [[v * scale for v in e.column(metric)] for e in group]
            per_metric[metric] = [_quantile_curve(r) for r in runs if r]
        out[label] = per_metric
    return out


def latency_cdf_figure(entries: Sequence[Entry], varying: Sequence[str]) -> Any | None:
    """TTFT / TPOT / end-to-end CDFs: one line per setting, its seeds' mean quantile by
    quantile, a band from the fastest to the slowest seed; ``None`` with no latencies.

    Why not one line per run (as before issue 50): a legend of 54 settings x 4 seeds
    is unreadable, so only the first twelve runs were drawn and the rest dropped in
    silence. Settings are the comparison; seeds are its spread.
    """
    from kvframe.compare.effects import REPEAT_KEYS

    keys = [k for k in varying if k not in REPEAT_KEYS]
    curves = _setting_cdfs(entries, keys)
    if not any(runs for per in curves.values() for runs in per.values()):
        return None
    colors = dict(zip(curves, distinct_colors(len(curves)), strict=True))
    rows = (len(curves) + 2) // 3
    fig = _figure_class()(figsize=(13, 4.2 + 0.22 * rows), layout="constrained")
    probabilities = [k / (_QUANTILE_POINTS - 1) for k in range(_QUANTILE_POINTS)]
    for i, (metric, axis_label, _) in enumerate(_CDF_METRICS):
        ax = fig.add_subplot(1, len(_CDF_METRICS), i + 1)
        for label, per in curves.items():
            runs = per[metric]
            if not runs:
                continue
            mean = [sum(qs) / len(qs) for qs in zip(*runs, strict=True)]
            ax.plot(mean, probabilities, color=colors[label], label=label, linewidth=1.2)
            if len(runs) > 1:
                low = [min(qs) for qs in zip(*runs, strict=True)]
                high = [max(qs) for qs in zip(*runs, strict=True)]
                ax.fill_betweenx(probabilities, low, high, color=colors[label], alpha=0.15)
        ax.set_xlabel(axis_label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.suptitle(f"Latency CDFs: {len(curves)} settings")
    # Below the panels, outside every axes: inside one it covered the curves and labels.
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize="small")
    return fig


def _latency_cdfs(entries: Sequence[Entry], varying: list[str], out: Path) -> PlotFile | None:
    fig = latency_cdf_figure(entries, varying)
    if fig is None:
        return None
    caption = (
        "Cumulative distribution of per-request latencies, one line per setting (every "
        "setting of the comparison): a curve further left is faster; where it reaches 0.9 "
        "is the p90. With several seeds the line is their mean at each quantile and the "
        "band spans the fastest to the slowest seed."
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
{_html_table(headings, rows)}
{f"<p>{html.escape(note)}</p>" if note else ""}
{_effects_html(entries)}
{f"<h2>Failed runs</h2><ul>{failed}</ul>" if failed else ""}
{_figures_html(plots)}
</body></html>
"""
    path.write_text(document, encoding="utf-8")


def _html_table(headings: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A plain HTML table, every cell escaped: the one shape both report tables use."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _effects_html(entries: Sequence[Entry]) -> str:
    """Per-setting means with confidence intervals and the verdicts; empty unless some
    setting was run with more than one seed (one run has no interval)."""
    from kvframe.compare.effects import repeated, settings_of, settings_rows, verdicts

    settings = settings_of(entries)
    if not repeated(settings):
        return ""
    heads, cells = settings_rows(settings)
    return (
        "<h2>Per setting: mean ± 95% confidence interval over seeds</h2>"
        + _html_table(heads, cells)
        + "<ul>"
        + "".join(f"<li>{html.escape(v.sentence())}</li>" for v in verdicts(settings))
        + "</ul>"
    )


def _figures_html(plots: Sequence[PlotFile]) -> str:
    """Every figure with its PNG inlined as base64, so the report is one file."""
    return "".join(
        f"<figure><h2>{html.escape(p.title)}</h2>"
        f'<img alt="{html.escape(p.title)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.png).decode("ascii")}">'
        f"<figcaption>{html.escape(p.caption)}</figcaption></figure>"
        for p in plots
    )
