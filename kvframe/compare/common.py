"""Compare runs on the same requests: what one run ignored is left out of every run's figures.

Why: a run reports its hit rate and latencies over the requests it served. A
pool too small for the longest prompts *ignores* them (they can never run), so
its figures cover the other requests only; a larger pool serves them too. Put
side by side, the two figures describe different workloads: on a trace whose
longest prompts share nothing, the small pool's hit rate comes out *higher*,
and a miss-ratio curve points the wrong way.

:func:`on_common_requests` groups the runs that read the same requests (same
workload, reading options and seed) and, where some run of a group ignored or
did not finish a request, recomputes every run's per-request figures of that
group from its ``requests.csv`` rows over the requests all of them served. The
entries it returns carry a :class:`~kvframe.compare.load.Coverage` saying how
many requests that is; the table and the figures show it.

What is recomputed, and how (the same way for every run of the group, so that
they stay comparable): the hit rates from each request's first admission
(``num_cached_tokens`` from the GPU prefix cache, ``num_external_cached_tokens``
from a tier, over the prompt tokens of the requests that were scheduled), the
preemption and recomputation counts, and every per-request latency
distribution. Whole-run figures (throughput, steps, a tier's traffic) cannot
be narrowed to a subset of requests; they stay as the run reported them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from kvframe.compare.load import Coverage, Entry

__all__ = [
    "RECOMPUTED_COUNTERS",
    "coverage_note",
    "group_key",
    "narrow_metrics",
    "on_common_requests",
]

_WORKLOAD_IDENTITY = ("workload", "format", "limit", "skip_bad_lines", "seed")
"""Settings that decide which requests a run reads (``rate_scale`` and ``jitter``
change only when they arrive, so runs that differ in them share their requests)."""

RECOMPUTED_COUNTERS = (
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prefix_cache_hit_rate",
    "external_prefix_cache_hits",
    "num_preemptions",
    "num_recomputed_tokens",
    "prompt_tokens_total",
)
"""Counters :func:`narrow_metrics` recomputes over the common requests."""

_REQUEST_DISTRIBUTIONS = (
    "time_to_first_token_seconds",
    "time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
)


def group_key(entry: Entry) -> str:
    """Runs with equal keys read the same requests."""
    return json.dumps({k: entry.config.get(k) for k in _WORKLOAD_IDENTITY}, sort_keys=True)


def _served(row: Mapping[str, Any]) -> bool:
    """The request ran to its end: not ignored, not cut off by an interrupted run."""
    status = row.get("finish_status")
    return status is not None and status != "ignored"


def _served_all(entry: Entry) -> bool:
    """The run says it served every request (finished, none ignored)."""
    counters = (entry.metrics or {}).get("counters") or {}
    return (
        entry.status == "done"
        and counters.get("num_requests_ignored") == 0
        and counters.get("num_requests_unfinished") == 0
    )


def narrow_metrics(metrics: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``metrics`` with its per-request figures recomputed over ``rows`` only."""
    from kvframe.engine.metrics import Distribution

    scheduled = [r for r in rows if r.get("first_scheduled_time") is not None]
    queries = sum(r["num_prompt_tokens"] or 0 for r in scheduled)
    gpu = sum(r["num_cached_tokens"] or 0 for r in rows)
    external = sum(r["num_external_cached_tokens"] or 0 for r in rows)
    counters = dict(metrics.get("counters") or {})
    counters.pop("connector_prefix_cache_hits", None)  # the old name of external_*
    counters.update(
        prefix_cache_queries=queries,
        prefix_cache_hits=gpu,
        prefix_cache_hit_rate=gpu / queries if queries else 0.0,
        external_prefix_cache_hits=external,
        num_preemptions=sum(r["num_preemptions"] or 0 for r in rows),
        num_recomputed_tokens=sum(r["num_recomputed_tokens"] or 0 for r in rows),
        prompt_tokens_total=sum(r["num_prompt_tokens"] or 0 for r in rows),
        num_requests_compared=len(rows),
    )
    distributions = dict(metrics.get("distributions") or {})
    for name in _REQUEST_DISTRIBUTIONS:
        dist = Distribution.of(r[name] for r in rows if r.get(name) is not None)
        distributions[name] = None if dist is None else attrs.asdict(dist)
    return {**metrics, "counters": counters, "distributions": distributions}


def _narrowed(
    entry: Entry, all_rows: list[dict[str, Any]], keep: set[str], total: int, excluded_here: int
) -> Entry:
    rows = [r for r in all_rows if r["request_id"] in keep]

    def column(name: str) -> list[float]:
        return [r[name] for r in rows if r.get(name) is not None]

    return attrs.evolve(
        entry,
        metrics=narrow_metrics(entry.metrics or {}, rows),
        column=column,
        rows=lambda: rows,
        coverage=Coverage(len(rows), total, excluded_here),
    )


def on_common_requests(entries: Sequence[Entry]) -> list[Entry]:
    """The entries, each group's narrowed to the requests every run of the group served.

    Groups where every run served every request, failed runs and runs without
    per-request rows are returned unchanged (nothing to narrow, or nothing to
    narrow it with).
    """
    groups: dict[str, list[int]] = {}
    for i, entry in enumerate(entries):
        if entry.status != "failed" and entry.metrics is not None:
            groups.setdefault(group_key(entry), []).append(i)
    out = list(entries)
    for members in groups.values():
        if all(_served_all(entries[i]) for i in members):
            continue  # the counters already say so: no request rows to read
        rows = {i: entries[i].rows() for i in members}
        if any(not r for r in rows.values()):
            continue
        ids = {i: {r["request_id"] for r in rows[i]} for i in members}
        served = {i: {r["request_id"] for r in rows[i] if _served(r)} for i in members}
        every = set.union(*ids.values())
        keep = set.intersection(*served.values())
        if keep == every:
            continue
        for i in members:
            out[i] = _narrowed(entries[i], rows[i], keep, len(every), len(ids[i] - served[i]))
    return out


def coverage_note(entries: Sequence[Entry]) -> str | None:
    """One sentence for a table or a caption: how many requests the figures cover, or ``None``."""
    narrowed = [e for e in entries if e.coverage is not None]
    if not narrowed:
        return None
    parts = sorted(
        {f"{e.coverage.compared:,} of {e.coverage.total:,}" for e in narrowed if e.coverage}
    )
    ignored = sum(1 for e in narrowed if e.coverage and e.coverage.excluded_here)
    return (
        f"Compared on equal requests: each run's per-request figures cover the {' / '.join(parts)} "
        f"requests that every run of its workload served; {ignored} of the {len(narrowed)} runs "
        "ignored (prompt too long for the pool) or did not finish the others, which are left out "
        "of every run's figures. Throughput and tier traffic are whole-run figures."
    )
