"""A fleet run's metrics: the fleet as a whole, each replica, and how evenly the load spread.

The fleet's summary is an ordinary :class:`~kvframe.engine.metrics.MetricsSummary`
over every request of every replica (so ``metrics.json``, ``requests.csv`` and
``kvframe compare`` read it as they read a single engine's), with:

* counters summed over the replicas (steps, preemptions, prefix-cache queries
  and hits, ...; rates such as ``prefix_cache_hit_rate`` recomputed from the
  sums), ``num_gpu_blocks`` the largest replica's pool;
* ``fleet_replicas``, ``fleet_request_imbalance`` and
  ``fleet_prompt_token_imbalance``: the most loaded replica's requests
  (prompt tokens) over the mean per replica -- 1.0 is an even spread, N is
  everything on one replica of N;
* ``metadata.fleet``: the router, the signal settings, and per replica its
  counters and TTFT / TPOT / E2E distributions (:data:`REPLICA_COUNTERS`);
* a ``replica`` column in ``requests.csv``
  (:attr:`MetricsSummary.request_replicas`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from kvframe.engine.metrics import MetricsCollector, MetricsSummary

__all__ = ["REPLICA_COUNTERS", "REPLICA_DISTRIBUTIONS", "fleet_summary", "replica_table"]

REPLICA_COUNTERS = (
    "num_requests",
    "num_requests_finished",
    "prompt_tokens_total",
    "generation_tokens_total",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prefix_cache_hit_rate",
    "num_preemptions",
    "num_recomputed_tokens",
    "num_steps",
    "busy_seconds",
)
"""The counters ``metadata.fleet.per_replica`` keeps of each replica."""

REPLICA_DISTRIBUTIONS = (
    "time_to_first_token_seconds",
    "time_per_output_token_seconds",
    "e2e_request_latency_seconds",
)

_NOT_SUMMED = frozenset({"num_gpu_blocks"})


def fleet_summary(
    collectors: Sequence[MetricsCollector],
    replicas: Sequence[MetricsSummary],
    raw_counters: Sequence[Mapping[str, int | float]],
    assigned: Mapping[str, int],
    *,
    wall: float,
    partial: bool,
    fleet: Mapping[str, Any],
) -> MetricsSummary:
    """The fleet's summary from its replicas' collectors and summaries (module docstring).

    :param raw_counters: each replica's engine counters
        (:meth:`Engine.run_counters <kvframe.engine.Engine.run_counters>`).
    :param assigned: request id -> replica, in routing order.
    """
    counters: dict[str, int | float] = {}
    for raw in raw_counters:
        for name, value in raw.items():
            if name in _NOT_SUMMED:
                counters[name] = max(counters.get(name, 0), value)
            else:
                counters[name] = counters.get(name, 0) + value
    merged = MetricsCollector.merged(collectors, assigned)
    per_replica = [_replica_entry(i, summary) for i, summary in enumerate(replicas)]
    counters.update(_imbalance(replicas))
    # Routed but not yet pulled by a replica (each replica's count), plus never routed.
    counters["num_requests_not_arrived"] = counters.get("num_requests_not_arrived", 0) + fleet.get(
        "num_requests_not_arrived", 0
    )
    metadata = dict(replicas[0].metadata)
    metadata["fleet"] = {**fleet, "per_replica": per_replica}
    summary = merged.summary(
        counters=counters, wall_clock_seconds=wall, partial=partial, metadata=metadata
    )
    return attrs.evolve(summary, request_replicas=dict(assigned))


def _replica_entry(index: int, summary: MetricsSummary) -> dict[str, Any]:
    counters = summary.counters
    distributions = summary.distributions
    return {
        "replica": index,
        "counters": {name: counters[name] for name in REPLICA_COUNTERS if name in counters},
        "distributions": {
            name: None if distributions.get(name) is None else attrs.asdict(distributions[name])
            for name in REPLICA_DISTRIBUTIONS
        },
    }


def _imbalance(replicas: Sequence[MetricsSummary]) -> dict[str, int | float]:
    """Max over mean of requests and of prompt tokens per replica (1.0: even)."""
    out: dict[str, int | float] = {"fleet_replicas": len(replicas)}
    for key, name in (
        ("num_requests", "fleet_request_imbalance"),
        ("prompt_tokens_total", "fleet_prompt_token_imbalance"),
    ):
        values = [summary.counters.get(key, 0) for summary in replicas]
        mean = sum(values) / len(values)
        out[name] = max(values) / mean if mean else 1.0
    return out


def replica_table(summary: MetricsSummary) -> Any | None:
    """The per-replica table ``kvframe run`` prints after a fleet's summary (``None``:
    not a fleet run)."""
    fleet = summary.metadata.get("fleet")
    if not fleet:
        return None
    from kvframe.console import new_table

    table = new_table(
        "replica",
        "requests",
        "prompt tokens",
        "hit rate",
        "preemptions",
        "TTFT p50",
        "TPOT p50",
        "E2E p50",
        title=f"fleet: {fleet['replicas']} replicas, router {fleet['router']}",
        numeric_from=1,
    )
    for entry in fleet["per_replica"]:
        c = entry["counters"]
        d = entry["distributions"]

        def p50(name: str, d: Mapping[str, Any] = d) -> str:
            return "-" if d.get(name) is None else f"{d[name]['p50']:.4f}"

        rate = c.get("prefix_cache_hit_rate")
        table.add_row(
            str(entry["replica"]),
            f"{c.get('num_requests', 0):,}",
            f"{c.get('prompt_tokens_total', 0):,}",
            "-" if rate is None else f"{rate:.2%}",
            f"{c.get('num_preemptions', 0):,}",
            p50("time_to_first_token_seconds"),
            p50("time_per_output_token_seconds"),
            p50("e2e_request_latency_seconds"),
        )
    return table
