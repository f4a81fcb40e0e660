"""What ``kvframe compare`` compares: runs from a sweep database or from run directories.

Both sources become :class:`Entry` objects with the same shape: the run's
settings (``config``), its ``metrics.json`` and a way to read one per-request
column (for latency CDFs), so that the table and the plots never care where a
run came from.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from kvframe.config import ConfigError

__all__ = ["Coverage", "Entry", "derived_metrics", "load_entries", "typed_row", "varying_keys"]

# Engine settings a run directory's metrics.json records that a comparison may be about.
_RUN_KEYS = (
    "scheduling",
    "gpu_eviction",
    "offload",
    "eviction",
    "reuse_filter",
    "num_gpu_blocks",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "preset",
    "enable_prefix_caching",
    # A fleet's (kvframe.fleet); a single engine's metrics.json has none of them.
    "replicas",
    "router",
    "kv_event_delay",
    "load_report_interval",
)


@attrs.frozen(slots=True)
class Coverage:
    """How many requests an entry's metrics cover, when a comparison narrowed them.

    Why: a run that ignored some requests (a prompt longer than its pool) reports
    figures over fewer, different requests than a run that served them all;
    comparing those figures compares workloads, not policies.
    """

    compared: int
    """Requests every run of the group served: the ones these metrics cover."""
    total: int
    """Requests of the workload."""
    excluded_here: int
    """Of the excluded requests, how many this run itself ignored or left unfinished."""


@attrs.frozen(slots=True)
class Entry:
    """One run to compare."""

    name: str
    """Where it came from: a cell key or a directory."""
    config: Mapping[str, Any]
    status: str
    metrics: Mapping[str, Any] | None
    error: str | None
    wall_seconds: float | None
    column: Callable[[str], list[float]] = attrs.field(repr=False, eq=False)
    """Reads one ``requests.csv`` column (values that are set)."""
    rows: Callable[[], list[dict[str, Any]]] = attrs.field(repr=False, eq=False, default=lambda: [])
    """Reads every per-request row (``requests.csv`` columns to typed values)."""
    coverage: Coverage | None = None
    """Set when the metrics were narrowed to the requests every compared run served."""

    def label(self, keys: Sequence[str]) -> str:
        """The values of ``keys`` (the settings that vary), the way a legend shows them."""
        parts = [_short(k, self.config.get(k)) for k in keys]
        return ", ".join(p for p in parts if p) or self.name

    def value(self, metric: str) -> float | None:
        """A counter, ``DIST.STAT`` of a distribution, or a :func:`derived_metrics` name."""
        if self.metrics is None:
            return None
        counters = self.metrics.get("counters") or {}
        if metric in counters:
            return counters[metric]
        derived = derived_metrics(self.metrics)
        if metric in derived:
            return derived[metric]
        name, _, stat = metric.rpartition(".")
        dist = (self.metrics.get("distributions") or {}).get(name)
        return None if not dist else dist.get(stat)


_UNSET_LABELS = {
    "gpu_eviction": "GPU: vLLM LRU",
    "offload": "no CPU tier",
    "eviction": "",
    "reuse_filter": "",
}
_SET_LABELS = {
    "gpu_eviction": "GPU: {}",
    "offload": "tier {}",
    "eviction": "tier evicts {}",
    "scheduler": "{}",
    "scheduling": "{}",
}


def _short(key: str, value: Any) -> str:
    """A legend-friendly rendering of one setting."""
    if value is None:
        return _UNSET_LABELS.get(key, "")
    if key == "workload":
        return Path(str(value)).name.removesuffix(".gz").removesuffix(".jsonl")
    if key == "generate":  # a generated workload's options: its name says enough in a legend
        return ""
    return _SET_LABELS.get(key, key + "={}").format(value)


def derived_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Figures a comparison needs that ``metrics.json`` does not spell out.

    ``total_hit_rate``: prompt tokens served from any cache (the GPU prefix cache
    plus what an offload tier supplied beyond it) over prompt tokens looked up --
    the y axis of a miss-ratio curve that is fair to runs with a CPU tier.
    """
    c = metrics.get("counters") or {}
    queries = c.get("prefix_cache_queries") or 0
    # ``external_*`` is the current name; ``connector_*`` the one older files carry.
    external = c.get("external_prefix_cache_hits", c.get("connector_prefix_cache_hits"))
    hits = (c.get("prefix_cache_hits") or 0) + (external or 0)
    out = {"total_hit_rate": hits / queries if queries else 0.0}
    if "num_gpu_blocks" in c:
        out["num_gpu_blocks"] = c["num_gpu_blocks"]
    return out


def varying_keys(entries: Sequence[Entry]) -> list[str]:
    """Config keys whose value differs between entries: what tells them apart."""
    keys = sorted({k for e in entries for k in e.config})
    return [
        k for k in keys if len({json.dumps(e.config.get(k), sort_keys=True) for e in entries}) > 1
    ]


def _from_db(path: Path) -> list[Entry]:
    from kvframe.sweep.store import ResultStore

    store = ResultStore(path, create=False)
    entries = []
    for cell in store.cells():
        key = cell["key"]

        def column(name: str, key: str = key) -> list[float]:
            reader = ResultStore(path, create=False)
            try:
                return reader.request_column(key, name)
            finally:
                reader.close()

        def rows(key: str = key) -> list[dict[str, Any]]:
            reader = ResultStore(path, create=False)
            try:
                return reader.request_rows(key)
            finally:
                reader.close()

        entries.append(
            Entry(
                key,
                cell["config"],
                cell["status"],
                cell["metrics"],
                cell["error"],
                cell["wall_seconds"],
                column,
                rows,
            )
        )
    store.close()
    return entries


def _from_run_dir(path: Path) -> Entry:
    metrics_file = path / "metrics.json"
    try:
        metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            "not a run directory (no metrics.json) nor a sweep database", origin=str(path)
        ) from None
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"cannot read metrics.json: {err}", origin=str(path)) from None
    meta = metrics.get("metadata") or {}
    config = dict(meta.get("sweep_cell") or {})
    if not config:
        engine = meta.get("engine") or {}
        config = {k: engine.get(k) for k in _RUN_KEYS if k in engine}
        config["workload"] = (meta.get("workload") or {}).get("name")
        if "scheduling" in config:
            config["scheduler"] = config.pop("scheduling")
    # What produced the numbers: a torch run's times may be measured, a sim run's are
    # the cost model's; a comparison that mixes them must show it.
    config.setdefault("executor", (meta.get("engine") or {}).get("executor", "sim"))
    config.setdefault("clock", meta.get("clock", "virtual"))

    def column(name: str) -> list[float]:
        csv_file = path / "requests.csv"
        if not csv_file.is_file():
            return []
        with open(csv_file, newline="", encoding="utf-8") as handle:
            return [float(row[name]) for row in csv.DictReader(handle) if row.get(name)]

    def rows() -> list[dict[str, Any]]:
        csv_file = path / "requests.csv"
        if not csv_file.is_file():
            return []
        with open(csv_file, newline="", encoding="utf-8") as handle:
            return [typed_row(row) for row in csv.DictReader(handle)]

    status = "partial" if metrics.get("partial") else "done"
    wall = (metrics.get("counters") or {}).get("wall_clock_seconds")
    return Entry(str(path), config, status, metrics, None, wall, column, rows)


def typed_row(row: Mapping[str, str]) -> dict[str, Any]:
    """A ``requests.csv`` row with its values typed as
    :class:`~kvframe.engine.metrics.RequestMetrics` has them (empty cells are ``None``)."""
    out: dict[str, Any] = {}
    for name, text in row.items():
        if text is None or text == "":
            out[name] = None
        elif name in ("request_id", "job_id", "finish_status"):
            out[name] = text
        elif name == "is_last_turn":
            out[name] = text == "True"
        elif name.startswith("num_") or name == "turn":
            out[name] = int(text)
        else:
            out[name] = float(text)
    return out


def load_entries(sources: Iterable[str | Path]) -> list[Entry]:
    """Entries from each source: an SQLite sweep database, or a run directory.

    :raises ConfigError: for a source that is neither, naming it.
    """
    entries: list[Entry] = []
    for source in sources:
        path = Path(source)
        if path.is_file():
            entries.extend(_from_db(path))
        elif path.is_dir():
            entries.append(_from_run_dir(path))
        else:
            raise ConfigError("no such file or directory", origin=str(path))
    if not entries:
        raise ConfigError("nothing to compare: the sources hold no runs")
    return entries
