"""``kvframe.compare(...)``, ``kvframe.sweep(...)``: many runs as one DataFrame.

The rows are ``kvframe compare --csv``'s: one per run, its settings, status and
every metric (``metrics.json`` flattened: counters, ``DIST.STAT`` and the derived
figures), read from sweep databases and run directories alike, narrowed to the
requests every run of a workload served unless ``all_requests`` (the CLI's rule).
:func:`requests` is the per-request table of the same runs, stacked.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvframe.api.frames import data_frame, pandas
from kvframe.config import ConfigError

if TYPE_CHECKING:
    from kvframe.compare.load import Entry
    from kvframe.sweep.spec import SweepSpec

__all__ = ["compare", "requests", "sweep"]

Source = str | os.PathLike[str]

_RUN_COLUMNS = ("status", "error", "wall_seconds", "requests_compared", "requests_total")


def _entries(sources: Sequence[Source], all_requests: bool, what: str) -> list[Entry]:
    from kvframe.compare.common import on_common_requests
    from kvframe.compare.load import load_entries

    if not sources:
        raise ConfigError(f"{what} needs at least one sweep database or run directory")
    entries = load_entries([Path(s) for s in sources])
    return entries if all_requests else on_common_requests(entries)


def _settings_keys(entries: Sequence[Entry]) -> list[str]:
    """Every setting any run has, in name order (a column each)."""
    return sorted({key for entry in entries for key in entry.config})


def compare(*sources: Source, all_requests: bool = False) -> Any:
    """One row per run of ``sources`` (sweep databases, run directories): ``name``, every
    setting, ``status``, ``error``, ``wall_seconds``, ``requests_compared`` /
    ``requests_total`` (set when figures were narrowed to common requests), then every
    metric -- the rows of ``kvframe compare --csv``, as a pandas DataFrame.

    ::

        runs = kvframe.compare("results/eviction.sqlite")
        runs.pivot_table(index="num_gpu_blocks", columns="gpu_eviction",
                         values="time_to_first_token_seconds.mean")
    """
    from kvframe.compare.table import flat_metrics

    pandas("kvframe.compare(...)")  # before reading anything: the error names the extra
    entries = _entries(sources, all_requests, "kvframe.compare(...)")
    keys = _settings_keys(entries)
    records = []
    for entry in entries:
        record: dict[str, Any] = {"name": entry.name}
        record.update({key: _cell(entry.config.get(key)) for key in keys})
        coverage = entry.coverage
        record.update(
            status=entry.status,
            error=entry.error,
            wall_seconds=entry.wall_seconds,
            requests_compared=None if coverage is None else coverage.compared,
            requests_total=None if coverage is None else coverage.total,
        )
        record.update(flat_metrics(entry))
        records.append(record)
    columns = _columns(records)
    return data_frame("kvframe.compare(...)", columns, order=["name", *keys, *_RUN_COLUMNS])


def requests(*sources: Source, all_requests: bool = True) -> Any:
    """Every request of every run of ``sources``, stacked: ``run`` (the run's name), its
    settings, then the ``requests.csv`` columns -- a latency CDF per setting is one
    ``groupby`` away.

    :param all_requests: ``False`` keeps, per workload, only the requests every run
        served (what :func:`compare`'s figures cover by default).
    """
    pandas("kvframe.api.requests(...)")
    entries = _entries(sources, True, "kvframe.api.requests(...)")
    keep = None if all_requests else _common_ids(entries)
    keys = _settings_keys(entries)
    records = []
    for i, entry in enumerate(entries):
        settings = {key: _cell(entry.config.get(key)) for key in keys}
        for row in entry.rows():
            if keep is None or row.get("request_id") in keep[i]:
                records.append({"run": entry.name, **settings, **row})
    return data_frame("kvframe.api.requests(...)", _columns(records), order=["run", *keys])


def _common_ids(entries: Sequence[Entry]) -> list[set[str]]:
    """Per entry, the request ids :func:`compare` narrows its figures to (all, if none)."""
    from kvframe.compare.common import on_common_requests

    narrowed = on_common_requests(entries)
    out = []
    for entry, narrow in zip(entries, narrowed, strict=True):
        ids = {row["request_id"] for row in narrow.rows()}
        out.append(ids if ids else {row["request_id"] for row in entry.rows()})
    return out


def sweep(
    spec: Source | SweepSpec,
    *,
    jobs: int | None = None,
    db: Source | None = None,
    retry_failed: bool = False,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    all_requests: bool = False,
) -> Any:
    """Run a sweep file's missing cells, as ``kvframe sweep`` does, and return its cells
    as :func:`compare` rows, in the file's order (``cell`` is the number the CLI prints).

    Cells already in the database are not run again (so calling it twice resumes); a
    failed cell is a row with ``status`` ``failed`` and its ``error``. Cells run in
    worker processes (``jobs``, default the file's ``jobs`` or one per core).

    :raises ConfigError: for a bad sweep file, naming the file and key.
    """
    from kvframe.sweep.runner import LocalBackend, run_sweep
    from kvframe.sweep.spec import SweepSpec, load_sweep
    from kvframe.sweep.store import ResultStore

    pandas("kvframe.sweep(...)")
    loaded = spec if isinstance(spec, SweepSpec) else load_sweep(os.fspath(spec))
    if jobs is not None and jobs < 1:
        raise ConfigError(f"jobs must be >= 1, got {jobs}", origin="kvframe.sweep()")
    path = Path(db) if db is not None else loaded.db
    store = ResultStore(path)
    try:
        store.renumber(loaded.cells)
        if retry_failed:
            store.forget_failed({cell.key for cell in loaded.cells})
        backend = LocalBackend(jobs or loaded.jobs or os.cpu_count() or 1)
        run_sweep(loaded, store, backend, on_update=on_update)
    finally:
        store.close()
    frame = compare(path, all_requests=all_requests)
    order = {cell.key: cell.index + 1 for cell in loaded.cells}
    frame = frame[frame["name"].isin(order)].copy()
    frame.insert(0, "cell", frame["name"].map(order))
    return frame.sort_values("cell").reset_index(drop=True)


def _cell(value: Any) -> Any:
    """A setting as a DataFrame cell: tables (a ``generate`` spec) as their repr."""
    return repr(dict(value)) if isinstance(value, Mapping) else value


def _columns(records: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Records to columns; a key a record lacks is ``None`` there."""
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record))
    return {name: [record.get(name) for record in records] for name in names}
