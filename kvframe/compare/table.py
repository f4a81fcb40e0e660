"""The side-by-side table of ``kvframe compare``: rich in a terminal, or JSON, or CSV.

The terminal table shows the settings that vary between runs and a fixed set
of headline metrics (:data:`TABLE_METRICS`); JSON and CSV carry every summary
metric (``metrics.json`` flattened: counters, ``DIST.STAT``, derived figures).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from typing import IO, Any

from kvframe.compare.load import Entry, derived_metrics, varying_keys

__all__ = ["TABLE_METRICS", "flat_metrics", "render_table", "table_rows", "write_csv", "write_json"]

TABLE_METRICS: tuple[tuple[str, str, str], ...] = (
    ("total_hit_rate", "hit rate", "pct"),
    ("prefix_cache_hit_rate", "GPU hit rate", "pct"),
    ("offload_hit_tokens", "CPU-tier hit tokens", "int"),
    ("offload_hit_tokens_preempted", "of them preempted", "int"),
    ("offload_bytes_loaded", "CPU-tier loaded", "bytes"),
    ("time_to_first_token_seconds.mean", "TTFT mean (s)", "num"),
    ("time_to_first_token_seconds.p90", "TTFT p90 (s)", "num"),
    ("time_per_output_token_seconds.mean", "TPOT mean (s)", "num"),
    ("e2e_request_latency_seconds.mean", "e2e mean (s)", "num"),
    ("job_completion_time_seconds.mean", "JCT mean (s)", "num"),
    ("output_throughput_tokens_per_second", "output tok/s", "num"),
    ("num_preemptions", "preemptions", "int"),
    ("num_requests_ignored", "ignored", "int"),
    ("fleet_request_imbalance", "load imbalance", "num"),
    ("disagg_ttft_queue_seconds.mean", "TTFT queue (s)", "num"),
    ("disagg_ttft_prefill_seconds.mean", "TTFT prefill (s)", "num"),
    ("disagg_ttft_transfer_seconds.mean", "TTFT transfer (s)", "num"),
    ("disagg_ttft_first_decode_seconds.mean", "TTFT 1st decode (s)", "num"),
    ("disagg_transfer_bytes", "P/D moved", "bytes"),
    ("disagg_link_utilisation_max", "link use max", "pct"),
)
"""(metric, column heading, format) of the terminal table; a column no run has is left out."""


def flat_metrics(entry: Entry) -> dict[str, float]:
    """Every number of a run: counters, ``DIST.STAT`` and :func:`derived_metrics`."""
    from kvframe.sweep.store import flatten_metrics

    if entry.metrics is None:
        return {}
    return {**flatten_metrics(entry.metrics), **derived_metrics(entry.metrics)}


def _fmt(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "pct":
        return f"{100 * value:.2f}%"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "bytes":
        return f"{value / 2**30:,.2f} GiB"
    return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"


def table_rows(entries: Sequence[Entry]) -> tuple[list[str], list[list[str]]]:
    """Headings and formatted cells of the terminal table (also what tests check)."""
    keys = varying_keys(entries) or ["workload"]
    metrics = [m for m in TABLE_METRICS if any(e.value(m[0]) is not None for e in entries)]
    narrowed = any(e.coverage is not None for e in entries)
    headings = [*keys, "status", *(["requests"] if narrowed else [])]
    headings += [heading for _, heading, _ in metrics]
    rows = []
    for entry in entries:
        rows.append(
            [
                *(_cell(entry.config.get(k)) for k in keys),
                entry.status,
                *([_coverage(entry)] if narrowed else []),
                *(_fmt(entry.value(m), kind) for m, _, kind in metrics),
            ]
        )
    return headings, rows


def _coverage(entry: Entry) -> str:
    """``480 of 500`` when the run's figures were narrowed to the common requests."""
    if entry.coverage is None:
        return "all"
    return f"{entry.coverage.compared:,} of {entry.coverage.total:,}"


def _cell(value: Any) -> str:
    if isinstance(value, dict):  # a generated workload's options, compactly
        text = ",".join(f"{k}={v}" for k, v in sorted(value.items()))
        return text if len(text) <= 40 else text[:39] + "…"
    return "-" if value is None else str(value)


def render_table(entries: Sequence[Entry], out: IO[str], *, title: str | None = None) -> None:
    """Print the table (rich on a terminal, plain text elsewhere: :mod:`kvframe.console`)."""
    from kvframe.console import emit, new_table

    headings, rows = table_rows(entries)
    table = new_table(*headings, title=title, numeric_from=headings.index("status") + 1)
    for row in rows:
        table.add_row(*row)
    failed = [e for e in entries if e.status == "failed"]
    from kvframe.compare.common import coverage_note
    from kvframe.compare.effects import repeated, settings_of, settings_rows, verdicts

    note = coverage_note(entries)
    extra: list[Any] = []
    settings = settings_of(entries)
    if repeated(settings):
        heads, cells = settings_rows(settings)
        summary = new_table(*heads, title="per setting: mean ± 95% CI over seeds", numeric_from=1)
        for row in cells:
            summary.add_row(*row)
        extra = [summary, *(v.sentence() for v in verdicts(settings))]
    emit(
        out,
        table,
        *([note] if note else []),
        *extra,
        *(
            f"failed {e.name}: {(e.error or '?').splitlines()[0] if e.error else '?'}"
            for e in failed
        ),
    )


def _records(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    return [
        {
            "name": e.name,
            "config": dict(e.config),
            "status": e.status,
            "error": e.error,
            "wall_seconds": e.wall_seconds,
            "metrics": flat_metrics(e),
            "requests_compared": None if e.coverage is None else e.coverage.compared,
            "requests_total": None if e.coverage is None else e.coverage.total,
        }
        for e in entries
    ]


def write_json(entries: Sequence[Entry], out: IO[str]) -> None:
    json.dump(_records(entries), out, indent=2, sort_keys=True)
    out.write("\n")


def write_csv(entries: Sequence[Entry], out: IO[str]) -> None:
    """One row per run: its settings, status, then every metric (empty where absent)."""
    records = _records(entries)
    config_keys = sorted({k for r in records for k in r["config"]})
    metric_keys = sorted({k for r in records for k in r["metrics"]})
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["name", *config_keys, "status", "wall_seconds", "requests_compared", *metric_keys]
    )
    for r in records:
        writer.writerow(
            [
                r["name"],
                *("" if r["config"].get(k) is None else r["config"][k] for k in config_keys),
                r["status"],
                "" if r["wall_seconds"] is None else r["wall_seconds"],
                "" if r["requests_compared"] is None else r["requests_compared"],
                *(r["metrics"].get(k, "") for k in metric_keys),
            ]
        )
