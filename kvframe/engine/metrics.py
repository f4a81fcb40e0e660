"""Run metrics: per-request latencies, their distributions, and engine counters.

The engine feeds a :class:`MetricsCollector` as events happen (arrival, first
scheduling, first token, preemption, finish, step). Every feed is O(1): a dict
lookup and a few attribute writes on a slotted record, or a few integer
additions for a step. Nothing is sorted or aggregated until
:meth:`MetricsCollector.summary`, which runs once at the end (or when a run is
interrupted, with ``partial=True``).

Names follow vLLM's metrics where one exists (without the ``vllm:`` prefix):

=====================================  ==========================================
``time_to_first_token_seconds``        first token time - arrival
``time_per_output_token_seconds``      (finish - first token) / (output tokens - 1),
                                       per request, over requests with >= 2 tokens
                                       (vLLM's per-request
                                       ``request_time_per_output_token_seconds``)
``e2e_request_latency_seconds``        finish - arrival
``request_queue_time_seconds``         first scheduled - arrival
``request_prefill_time_seconds``       first token - first scheduled
``request_decode_time_seconds``        finish - first token
``job_completion_time_seconds``        (kvframe) last turn's finish - first turn's
                                       arrival, per agentic job
``prefix_cache_queries`` / ``_hits``   prompt tokens looked up / found at first
                                       admission (once per request)
``num_preemptions``                    recompute preemptions
``external_prefix_cache_queries`` /   prompt tokens asked of / found in an
``_hits``                              offload tier (vLLM's ``external_...``)
``prompt_tokens_total``                prompt tokens of arrived requests that
                                       were not ignored
``generation_tokens_total``            tokens sampled
=====================================  ==========================================

Ignored requests (a prompt longer than ``max_model_len``, or one that could
never fit the GPU pool) finish at once with status ``"ignored"``, as in vLLM.
They are counted in ``num_requests_ignored`` and kept in ``requests.csv``, but
not in ``num_requests_finished``, the token totals or any latency
distribution: a 0 s latency for a request that never ran would flatter the run.

Percentiles use linear interpolation between closest ranks (NumPy's default
``"linear"`` method), so they agree with ``numpy.percentile``.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

import attrs

__all__ = [
    "IGNORED",
    "LATENCY_METRICS",
    "RENAMED_COUNTERS",
    "Distribution",
    "MetricsCollector",
    "MetricsSummary",
    "RequestMetrics",
    "canonical_counters",
    "percentile",
]

LATENCY_METRICS = (
    "time_to_first_token_seconds",
    "time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "job_completion_time_seconds",
    "job_waiting_time_seconds",
)
"""The distributions a summary reports, in display order."""

PERCENTILES = (50, 90, 99)

# Counter pairs whose ratio a summary reports as ``<prefix>_hit_rate``.
_HIT_RATE_PAIRS = ("prefix_cache", "external_prefix_cache", "preempted_prefix_cache")

IGNORED = "ignored"
"""The finish status of a request the engine could never run (the engine's ``IGNORED``)."""

RENAMED_COUNTERS: Mapping[str, str] = {
    "connector_prefix_cache_queries": "external_prefix_cache_queries",
    "connector_prefix_cache_hits": "external_prefix_cache_hits",
    "connector_prefix_cache_hit_rate": "external_prefix_cache_hit_rate",
}
"""Old counter name -> current name, for ``metrics.json`` files written before the rename."""


def canonical_counters(counters: Mapping[str, Any]) -> dict[str, Any]:
    """``counters`` from any ``metrics.json`` with old names replaced by current ones.

    Readers of stored results (comparisons, sweeps) call this so files written
    before ``connector_prefix_cache_*`` became vLLM's ``external_prefix_cache_*``
    still read the same. A current name present in the file wins.
    """
    out = dict(counters)
    for old, new in RENAMED_COUNTERS.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, linearly interpolated.

    :raises ValueError: for an empty sequence or ``q`` outside [0, 100].
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    rank = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = rank - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


@attrs.frozen(slots=True)
class Distribution:
    """Summary statistics of one latency metric over the requests that have it."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution | None:
        """``None`` when there are no values (e.g. no request finished)."""
        ordered = sorted(values)
        if not ordered:
            return None
        return cls(
            count=len(ordered),
            mean=math.fsum(ordered) / len(ordered),
            p50=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p99=percentile(ordered, 99),
            max=ordered[-1],
        )


class _Record:
    """Mutable per-request state while a run is in progress (slotted: cheap to update)."""

    __slots__ = (
        "arrival_time",
        "finish_status",
        "finish_time",
        "first_scheduled_time",
        "first_token_time",
        "is_last_turn",
        "job_id",
        "num_cached_tokens",
        "num_external_cached_tokens",
        "num_output_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "num_recomputed_tokens",
        "request_id",
        "turn",
    )

    def __init__(
        self,
        request_id: str,
        arrival_time: float,
        num_prompt_tokens: int,
        job_id: str | None,
        turn: int | None,
        is_last_turn: bool,
    ) -> None:
        self.request_id = request_id
        self.arrival_time = arrival_time
        self.num_prompt_tokens = num_prompt_tokens
        self.job_id = job_id
        self.turn = turn
        self.is_last_turn = is_last_turn
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.finish_status: str | None = None
        self.num_output_tokens = 0
        self.num_cached_tokens = 0
        self.num_external_cached_tokens = 0
        self.num_preemptions = 0
        self.num_recomputed_tokens = 0


@attrs.frozen(slots=True)
class RequestMetrics:
    """One request's record and the latencies derived from it (``None``: not reached)."""

    request_id: str
    job_id: str | None
    turn: int | None
    is_last_turn: bool
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finish_time: float | None
    finish_status: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int
    num_external_cached_tokens: int
    num_preemptions: int
    num_recomputed_tokens: int
    time_to_first_token_seconds: float | None
    time_per_output_token_seconds: float | None
    e2e_request_latency_seconds: float | None
    request_queue_time_seconds: float | None
    request_prefill_time_seconds: float | None
    request_decode_time_seconds: float | None

    @classmethod
    def from_record(cls, record: _Record) -> RequestMetrics:
        arrival = record.arrival_time
        scheduled = record.first_scheduled_time
        first = record.first_token_time
        finish = record.finish_time
        tpot = None
        if first is not None and finish is not None and record.num_output_tokens >= 2:
            tpot = (finish - first) / (record.num_output_tokens - 1)
        return cls(
            request_id=record.request_id,
            job_id=record.job_id,
            turn=record.turn,
            is_last_turn=record.is_last_turn,
            arrival_time=arrival,
            first_scheduled_time=scheduled,
            first_token_time=first,
            finish_time=finish,
            finish_status=record.finish_status,
            num_prompt_tokens=record.num_prompt_tokens,
            num_output_tokens=record.num_output_tokens,
            num_cached_tokens=record.num_cached_tokens,
            num_external_cached_tokens=record.num_external_cached_tokens,
            num_preemptions=record.num_preemptions,
            num_recomputed_tokens=record.num_recomputed_tokens,
            time_to_first_token_seconds=None if first is None else first - arrival,
            time_per_output_token_seconds=tpot,
            # An ignored request never ran: its "finish" is the refusal, not a latency.
            e2e_request_latency_seconds=(
                None if finish is None or record.finish_status == IGNORED else finish - arrival
            ),
            request_queue_time_seconds=None if scheduled is None else scheduled - arrival,
            request_prefill_time_seconds=(
                None if first is None or scheduled is None else first - scheduled
            ),
            request_decode_time_seconds=(
                None if finish is None or first is None else finish - first
            ),
        )


CSV_COLUMNS = tuple(field.name for field in attrs.fields(RequestMetrics))


@attrs.frozen(slots=True)
class MetricsSummary:
    """Everything a run reports: ``metrics.json``, ``requests.csv`` and a text table.

    ``partial`` marks a run that was interrupted: latencies then cover only the
    requests that got that far, and counters stop where the run stopped.
    """

    partial: bool
    counters: Mapping[str, int | float]
    distributions: Mapping[str, Distribution | None]
    requests: tuple[RequestMetrics, ...] = attrs.field(repr=False)
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    request_replicas: Mapping[str, int] | None = attrs.field(default=None, repr=False)
    """A fleet run's replica of each request (``requests.csv``'s ``replica`` column);
    ``None`` for a single engine."""

    # -- serialisation ---------------------------------------------------------

    def to_dict(self, *, include_requests: bool = False) -> dict[str, Any]:
        """JSON-ready: counters, distributions (``null`` when empty), metadata."""
        data: dict[str, Any] = {
            "partial": self.partial,
            "metadata": dict(self.metadata),
            "counters": dict(self.counters),
            "distributions": {
                name: None if dist is None else attrs.asdict(dist)
                for name, dist in self.distributions.items()
            },
        }
        if include_requests:
            data["requests"] = [attrs.asdict(row) for row in self.requests]
            replicas = self.request_replicas
            if replicas is not None:
                for row in data["requests"]:
                    row["replica"] = replicas.get(row["request_id"])
        return data

    def write_json(self, path: str | os.PathLike[str] | IO[str]) -> None:
        """Write ``metrics.json`` (without the per-request rows; see :meth:`write_csv`)."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False) + "\n"
        if isinstance(path, str | os.PathLike):
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
            return
        path.write(text)

    def write_csv(self, path: str | os.PathLike[str] | IO[str]) -> None:
        """Write one row per request (empty cells for times a request never reached)."""

        replicas = self.request_replicas

        def emit(out: IO[str]) -> None:
            writer = csv.writer(out, lineterminator="\n")
            if replicas is None:
                writer.writerow(CSV_COLUMNS)
                for row in self.requests:
                    writer.writerow(
                        "" if value is None else value
                        for value in (getattr(row, name) for name in CSV_COLUMNS)
                    )
                return
            # A fleet's rows end with the replica that served the request.
            writer.writerow((*CSV_COLUMNS, "replica"))
            for row in self.requests:
                writer.writerow(
                    (
                        *(
                            "" if value is None else value
                            for value in (getattr(row, name) for name in CSV_COLUMNS)
                        ),
                        replicas.get(row.request_id, ""),
                    )
                )

        if isinstance(path, str | os.PathLike):
            with open(path, "w", encoding="utf-8", newline="") as out:
                emit(out)
            return
        emit(path)

    # -- the text table --------------------------------------------------------

    def render_table(self) -> str:
        """The summary as plain text: what ``kvframe run`` prints when stdout is not a terminal."""
        from kvframe.console import render_text

        return render_text(*self.tables()).rstrip("\n")

    def tables(self) -> list[Any]:
        """The summary as rich renderables: counters, a blank line, latency percentiles.

        ``kvframe run`` prints them with :func:`kvframe.console.emit` (rich on a
        terminal, plain text elsewhere); :meth:`render_table` is the plain text.
        """
        out: list[Any] = [self._counters_table()]
        latency = self._latency_table()
        if latency is not None:
            out += ["", latency]
        return out

    def _counters_table(self) -> Any:
        """The counters present in this run, in a fixed reading order; absent ones are left
        out rather than shown as zero (a run without jobs has no job rows)."""
        from kvframe.console import new_table

        c = self.counters
        title = "kvframe run summary"
        if self.partial:
            title += " (PARTIAL: the run was interrupted)"
        counters = new_table("metric", "value", title=title, numeric_from=1)
        row = counters.add_row
        row(
            "requests finished / arrived",
            f"{c.get('num_requests_finished', 0):,} / {c.get('num_requests', 0):,}",
        )
        if c.get("num_requests_ignored"):
            row("requests ignored (never ran)", f"{c['num_requests_ignored']:,}")
        for key in (
            "prompt_tokens_total",
            "generation_tokens_total",
            "num_steps",
            "num_preemptions",
            "num_recomputed_tokens",
            "num_jobs_completed",
            "reprefilled_tokens_total",
        ):
            if key in c:
                row(key, f"{c[key]:,}")
        for prefix in _HIT_RATE_PAIRS:
            rate = c.get(f"{prefix}_hit_rate")
            if rate is not None and c.get(f"{prefix}_queries"):
                row(
                    f"{prefix}_hits / queries",
                    f"{c[f'{prefix}_hits']:,} / {c[f'{prefix}_queries']:,}",
                )
                row(f"{prefix}_hit_rate", f"{rate:.2%}")
        for key, fmt in (
            ("simulated_duration_seconds", "{:,.3f}"),
            ("output_throughput_tokens_per_second", "{:,.1f}"),
            ("request_throughput_per_second", "{:.3f}"),
            ("wall_clock_seconds", "{:,.3f}"),
            ("simulated_requests_per_wall_second", "{:,.1f}"),
        ):
            if c.get(key) is not None:
                row(key, fmt.format(c[key]))
        return counters

    def _latency_table(self) -> Any | None:
        """Percentiles of every latency with at least one value; ``None`` when none has."""
        from kvframe.console import new_table

        shown = [(name, dist) for name, dist in self.distributions.items() if dist is not None]
        if not shown:
            return None
        latency = new_table(
            "latency (seconds)", "count", "mean", "p50", "p90", "p99", "max", numeric_from=1
        )
        for name, dist in shown:
            latency.add_row(
                name,
                f"{dist.count:,}",
                *(f"{value:.4f}" for value in (dist.mean, dist.p50, dist.p90, dist.p99, dist.max)),
            )
        return latency


class MetricsCollector:
    """What the engine feeds as a run proceeds; turns into a :class:`MetricsSummary`.

    Each ``on_*`` method is O(1). Times are virtual seconds. A request must be
    announced with :meth:`on_arrival` before any other event names it; the
    "first" events (scheduled, first token) keep only their first occurrence,
    so the engine may call them without tracking whether it already did.

    Counters the scheduler keeps itself (prefix-cache queries and hits,
    preemptions, recomputed tokens) are best passed to :meth:`summary` as
    ``counters``; without them the summary derives the same names from the
    per-request records, counting each request's first admission once.
    """

    def __init__(self) -> None:
        self._records: dict[str, _Record] = {}
        self._counters: dict[str, int | float] = {}
        self.num_steps = 0
        self.busy_seconds = 0.0
        """Sum of step durations: time the (simulated) GPU was running a step."""
        self.generation_tokens = 0
        self.computed_tokens = 0
        self.first_arrival: float | None = None
        self.last_event_time = 0.0
        self.num_finished = 0

    # -- per request -----------------------------------------------------------

    def on_arrival(
        self,
        request_id: str,
        now: float,
        num_prompt_tokens: int,
        *,
        job_id: str | None = None,
        turn: int | None = None,
        is_last_turn: bool = True,
    ) -> None:
        if request_id in self._records:
            raise ValueError(f"request {request_id!r} arrived twice")
        self._records[request_id] = _Record(
            request_id, now, num_prompt_tokens, job_id, turn, is_last_turn
        )
        if self.first_arrival is None or now < self.first_arrival:
            self.first_arrival = now
        if now > self.last_event_time:
            self.last_event_time = now

    def on_scheduled(
        self,
        request_id: str,
        now: float,
        *,
        num_cached_tokens: int = 0,
        num_external_cached_tokens: int = 0,
    ) -> None:
        """The request was scheduled; only its first admission is recorded.

        ``num_cached_tokens`` are prompt tokens found in the GPU prefix cache,
        ``num_external_cached_tokens`` those an offload tier supplied beyond them.
        """
        record = self._records[request_id]
        if record.first_scheduled_time is None:
            record.first_scheduled_time = now
            if num_cached_tokens or num_external_cached_tokens:
                record.num_cached_tokens = num_cached_tokens
                record.num_external_cached_tokens = num_external_cached_tokens

    def on_prefix_hit(
        self, request_id: str, num_cached_tokens: int, num_external_cached_tokens: int = 0
    ) -> None:
        """The request's prefix was looked up at its first admission.

        Separate from :meth:`on_scheduled`: a request whose prefix an offload
        tier loads asynchronously is looked up when the load starts but enters
        RUNNING (vLLM's SCHEDULED event, which starts the prefill clock) only
        once the load landed.
        """
        record = self._records[request_id]
        record.num_cached_tokens = num_cached_tokens
        record.num_external_cached_tokens = num_external_cached_tokens

    def on_first_token(self, request_id: str, now: float) -> None:
        record = self._records[request_id]
        if record.first_token_time is None:
            record.first_token_time = now

    def on_preempted(self, request_id: str) -> None:
        self._records[request_id].num_preemptions += 1

    def on_recomputed(self, request_id: str, num_tokens: int) -> None:
        """``num_tokens`` computed before a preemption had to be computed again."""
        self._records[request_id].num_recomputed_tokens += num_tokens

    def on_finished(
        self, request_id: str, now: float, *, num_output_tokens: int, status: str = "finished"
    ) -> None:
        """The request left the engine (``status``: e.g. ``"stop"``, ``"length"``, ``"abort"``)."""
        record = self._records[request_id]
        if record.finish_time is not None:
            raise ValueError(f"request {request_id!r} finished twice")
        record.finish_time = now
        record.finish_status = status
        record.num_output_tokens = num_output_tokens
        self.num_finished += 1
        if now > self.last_event_time:
            self.last_event_time = now

    # -- per step --------------------------------------------------------------

    def on_step(
        self,
        now: float,
        duration: float,
        *,
        num_generated_tokens: int = 0,
        num_computed_tokens: int = 0,
    ) -> None:
        """A step started at ``now`` and took ``duration`` seconds.

        ``num_computed_tokens`` counts all tokens the step ran through the model
        (prefill and decode), ``num_generated_tokens`` the tokens it sampled.
        """
        self.num_steps += 1
        self.busy_seconds += duration
        self.generation_tokens += num_generated_tokens
        self.computed_tokens += num_computed_tokens
        end = now + duration
        if end > self.last_event_time:
            self.last_event_time = end

    def count(self, name: str, value: int | float = 1) -> None:
        """Add to a named counter (offload bytes, evictions, ...); reported as is."""
        self._counters[name] = self._counters.get(name, 0) + value

    @classmethod
    def merged(
        cls, collectors: Sequence[MetricsCollector], order: Iterable[str]
    ) -> MetricsCollector:
        """One collector holding the records and step totals of several (a fleet's
        replicas), its records in ``order`` (request ids; the fleet's routing order)."""
        out = cls()
        records: dict[str, _Record] = {}
        for collector in collectors:
            records.update(collector._records)
            out.num_steps += collector.num_steps
            out.busy_seconds += collector.busy_seconds
            out.generation_tokens += collector.generation_tokens
            out.computed_tokens += collector.computed_tokens
            out.num_finished += collector.num_finished
            out.last_event_time = max(out.last_event_time, collector.last_event_time)
            if collector.first_arrival is not None and (
                out.first_arrival is None or collector.first_arrival < out.first_arrival
            ):
                out.first_arrival = collector.first_arrival
            for name, value in collector._counters.items():
                out._counters[name] = out._counters.get(name, 0) + value
        out._records = {rid: records[rid] for rid in order if rid in records}
        return out

    # -- the end ---------------------------------------------------------------

    @property
    def num_requests(self) -> int:
        return len(self._records)

    def summary(
        self,
        *,
        counters: Mapping[str, int | float] | None = None,
        wall_clock_seconds: float | None = None,
        partial: bool = False,
        end_time: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> MetricsSummary:
        """Aggregate everything collected so far.

        :param counters: engine counters (e.g. ``attrs.asdict(scheduler.stats)``);
            they override same-named values derived here.
        :param wall_clock_seconds: real time the run took, for the simulation
            speed figures.
        :param partial: the run was interrupted before the workload finished.
        :param end_time: virtual time the run ended (default: the latest event).
        """
        rows = tuple(RequestMetrics.from_record(record) for record in self._records.values())
        ran = [row for row in rows if row.finish_status != IGNORED]
        num_ignored = len(rows) - len(ran)
        num_finished = self.num_finished - num_ignored
        start = self.first_arrival if self.first_arrival is not None else 0.0
        end = self.last_event_time if end_time is None else end_time
        duration = max(0.0, end - start)

        merged = self._request_counters(rows, ran, num_ignored, num_finished)
        merged.update(self._counters)
        if counters:
            # The scheduler keeps vLLM's internal names (``connector_prefix_cache_*``,
            # as vLLM's SchedulerStats); reports use vLLM's metric names.
            merged.update(canonical_counters(counters))
        _add_rates(merged, duration, num_finished, wall_clock_seconds)
        distributions: dict[str, Distribution | None] = {
            name: Distribution.of(
                value for value in (getattr(row, name) for row in ran) if value is not None
            )
            for name in LATENCY_METRICS
            if not name.startswith("job_")
        }
        _add_job_figures(merged, distributions, _job_metrics(rows))
        return MetricsSummary(
            partial=partial,
            counters=merged,
            distributions=distributions,
            requests=rows,
            metadata=dict(metadata or {}),
        )

    def _request_counters(
        self,
        rows: tuple[RequestMetrics, ...],
        ran: list[RequestMetrics],
        num_ignored: int,
        num_finished: int,
    ) -> dict[str, int | float]:
        """The counters derived from the per-request rows; ignored requests never ran, so
        their prompts count in no token or cache total."""
        return {
            "num_requests": len(rows),
            "num_requests_finished": num_finished,
            "num_requests_ignored": num_ignored,
            "num_requests_unfinished": len(rows) - self.num_finished,
            "prompt_tokens_total": sum(row.num_prompt_tokens for row in ran),
            "generation_tokens_total": (
                self.generation_tokens
                if self.num_steps
                else sum(row.num_output_tokens for row in ran)
            ),
            "computed_tokens_total": self.computed_tokens,
            "prefix_cache_queries": sum(
                row.num_prompt_tokens for row in ran if row.first_scheduled_time is not None
            ),
            "prefix_cache_hits": sum(row.num_cached_tokens for row in ran),
            "external_prefix_cache_hits": sum(row.num_external_cached_tokens for row in ran),
            "num_preemptions": sum(row.num_preemptions for row in ran),
            "num_recomputed_tokens": sum(row.num_recomputed_tokens for row in ran),
            "num_steps": self.num_steps,
            "busy_seconds": self.busy_seconds,
        }


def _add_rates(
    merged: dict[str, int | float],
    duration: float,
    num_finished: int,
    wall_clock_seconds: float | None,
) -> None:
    """Hit rates and throughputs, computed after the engine's counters are merged so a
    rate always agrees with the hits, queries and tokens printed beside it."""
    for prefix in _HIT_RATE_PAIRS:
        queries = merged.get(f"{prefix}_queries")
        hits = merged.get(f"{prefix}_hits")
        if queries is not None and hits is not None:
            merged[f"{prefix}_hit_rate"] = hits / queries if queries else 0.0
    generated = merged["generation_tokens_total"]
    merged["simulated_duration_seconds"] = duration
    merged["output_throughput_tokens_per_second"] = generated / duration if duration else 0.0
    merged["request_throughput_per_second"] = num_finished / duration if duration else 0.0
    if wall_clock_seconds is not None:
        merged["wall_clock_seconds"] = wall_clock_seconds
        merged["simulated_requests_per_wall_second"] = (
            num_finished / wall_clock_seconds if wall_clock_seconds > 0 else 0.0
        )


def _add_job_figures(
    merged: dict[str, int | float],
    distributions: dict[str, Distribution | None],
    jobs: list[JobMetrics],
) -> None:
    """The job latencies (always present, ``None`` without jobs) and, for a run with
    agentic jobs, the job counters."""
    distributions["job_completion_time_seconds"] = Distribution.of(
        job.completion_time for job in jobs if job.completion_time is not None
    )
    distributions["job_waiting_time_seconds"] = Distribution.of(
        job.waiting_time for job in jobs if job.completion_time is not None
    )
    if jobs:
        reprefilled = [job.reprefilled_tokens for job in jobs]
        merged["num_jobs"] = len(jobs)
        merged["num_jobs_completed"] = sum(job.completion_time is not None for job in jobs)
        merged["reprefilled_tokens_total"] = sum(reprefilled)
        merged["reprefilled_tokens_per_job_mean"] = sum(reprefilled) / len(reprefilled)


@attrs.frozen(slots=True)
class JobMetrics:
    """One agentic job's figures, from its turns' records."""

    job_id: str
    completion_time: float | None
    """Last turn's finish minus the first turn's arrival; ``None`` until the last turn finished."""
    waiting_time: float
    """Sum of its turns' queueing times (arrival to first scheduling)."""
    reprefilled_tokens: int
    """Tokens an earlier turn of the job had computed that a later turn computed again:
    per turn k >= 1, the part of its prompt the previous turn had covered (its prompt
    and output) minus the prefix-cache hits it got, plus tokens recomputed after a
    preemption in any turn."""


def _job_metrics(rows: Iterable[RequestMetrics]) -> list[JobMetrics]:
    turns: dict[str, list[RequestMetrics]] = {}
    for row in rows:
        if row.job_id is not None:
            turns.setdefault(row.job_id, []).append(row)
    jobs: list[JobMetrics] = []
    for job_id, job_rows in turns.items():
        job_rows.sort(key=lambda r: (r.turn if r.turn is not None else 0, r.arrival_time))
        first_arrival = min(r.arrival_time for r in job_rows)
        last = job_rows[-1]
        completion = (
            last.finish_time - first_arrival
            if last.is_last_turn and last.finish_time is not None
            else None
        )
        waiting = sum(r.request_queue_time_seconds or 0.0 for r in job_rows)
        reprefilled = sum(r.num_recomputed_tokens for r in job_rows)
        for previous, row in itertools.pairwise(job_rows):
            if row.first_scheduled_time is None:
                continue
            covered = min(
                row.num_prompt_tokens, previous.num_prompt_tokens + previous.num_output_tokens
            )
            hit = row.num_cached_tokens + row.num_external_cached_tokens
            reprefilled += max(0, covered - hit)
        jobs.append(JobMetrics(job_id, completion, waiting, reprefilled))
    return jobs
