"""The sweep results database: SQLite (stdlib), one file, queryable with plain SQL.

Tables (schema version :data:`SCHEMA_VERSION`, kept in ``meta``):

* ``cells`` -- one row per cell, keyed by the hash of its full configuration:
  ``config`` (JSON), ``status`` (``done``, ``partial``, ``failed``), ``error``,
  ``started`` (Unix time), ``wall_seconds`` and ``metrics`` (``metrics.json``);
* ``metrics`` -- every summary metric of every cell as ``(cell, name, value)``:
  counters by name, distributions as ``NAME.mean``, ``NAME.p50``, ...;
* ``requests`` -- one row per request per cell, the columns of ``requests.csv``.

Why commit per cell: a sweep interrupted at any point keeps every cell that
finished, and the next ``kvframe sweep`` skips them (``finished_keys``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kvframe.config import ConfigError
from kvframe.engine.metrics import CSV_COLUMNS as _REQUEST_COLUMNS
from kvframe.sweep.lock import DatabaseLock

__all__ = ["SCHEMA_VERSION", "ResultStore", "flatten_metrics"]

SCHEMA_VERSION = 1


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    key TEXT PRIMARY KEY, idx INTEGER, config TEXT NOT NULL, status TEXT NOT NULL,
    error TEXT, started REAL, wall_seconds REAL, metrics TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    cell TEXT NOT NULL REFERENCES cells(key), name TEXT NOT NULL, value REAL,
    PRIMARY KEY (cell, name)
);
CREATE TABLE IF NOT EXISTS requests (
    cell TEXT NOT NULL REFERENCES cells(key), {", ".join(_REQUEST_COLUMNS)}
);
CREATE INDEX IF NOT EXISTS requests_cell ON requests(cell);
"""


def flatten_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Counters by name and distribution statistics as ``NAME.STAT``, numbers only."""
    flat: dict[str, float] = {}
    for name, value in (metrics.get("counters") or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            flat[name] = value
    for name, dist in (metrics.get("distributions") or {}).items():
        for stat, value in (dist or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                flat[f"{name}.{stat}"] = value
    return flat


class ResultStore:
    """An open results database; one writer (the sweep's main process).

    Opened with ``create`` (to write) it holds the database's lock
    (:class:`~kvframe.sweep.lock.DatabaseLock`) until :meth:`close`, so a second
    writer is refused instead of running the same cells again; readers
    (``create=False``) take no lock.
    """

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        self._lock: DatabaseLock | None = None
        if not create and not self.path.is_file():
            raise ConfigError("no such results database", origin=str(self.path))
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock = DatabaseLock(self.path)
            self._lock.acquire()
        try:
            self._open(create)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _open(self, create: bool) -> None:
        try:
            self.db = sqlite3.connect(self.path)
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as err:
            raise ConfigError(
                f"not a kvframe results database: {err}", origin=str(self.path)
            ) from None
        if tables and "meta" not in tables:
            self.db.close()
            raise ConfigError(
                "not a kvframe results database (no 'meta' table)", origin=str(self.path)
            )
        if "meta" in tables:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            found = row[0] if row else "missing"
            if found != str(SCHEMA_VERSION):
                self.db.close()
                raise ConfigError(
                    f"results database has schema version {found}, this kvframe writes "
                    f"version {SCHEMA_VERSION}",
                    origin=str(self.path),
                    hints=["use another 'db' (or --db), or move this file away to start afresh"],
                )
        elif create:
            with self.db:
                self.db.executescript(_SCHEMA)
                self.db.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
        else:
            self.db.close()
            raise ConfigError("empty results database", origin=str(self.path))

    def close(self) -> None:
        self.db.close()
        self._release()

    def renumber(self, cells: Iterable[Any]) -> None:
        """Store each current cell's position in the sweep file (``idx``), so that the
        numbers messages print (``#N``, ``idx`` + 1) are the database's even after the
        file was reordered or edited."""
        with self.db:
            self.db.executemany(
                "UPDATE cells SET idx=? WHERE key=?", ((c.index, c.key) for c in cells)
            )

    def forget_failed(self, keys: Iterable[str] | None = None) -> int:
        """Drop failed cells (of ``keys`` only, when given) so that they run again."""
        wanted = None if keys is None else set(keys)
        with self.db:
            failed = [r[0] for r in self.db.execute("SELECT key FROM cells WHERE status='failed'")]
            chosen = [k for k in failed if wanted is None or k in wanted]
            for key in chosen:
                self._delete(key)
        return len(chosen)

    def finished_keys(self) -> set[str]:
        """Cells that need no re-run: done or failed (a failed cell is re-run by --retry-failed)."""
        return {r[0] for r in self.db.execute("SELECT key FROM cells")}

    def _delete(self, key: str) -> None:
        for table, column in (("requests", "cell"), ("metrics", "cell"), ("cells", "key")):
            self.db.execute(f"DELETE FROM {table} WHERE {column}=?", (key,))

    def record(self, index: int, config: Mapping[str, Any], outcome: Any) -> None:
        """Store one cell's outcome in one transaction (committed on return)."""
        metrics = outcome.metrics
        with self.db:
            self._delete(outcome.key)
            self.db.execute(
                "INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    outcome.key,
                    index,
                    json.dumps(dict(config), sort_keys=True),
                    outcome.status,
                    outcome.error,
                    outcome.started,
                    outcome.wall_seconds,
                    None if metrics is None else json.dumps(metrics),
                ),
            )
            if metrics is not None:
                self.db.executemany(
                    "INSERT INTO metrics VALUES (?, ?, ?)",
                    ((outcome.key, k, v) for k, v in flatten_metrics(metrics).items()),
                )
            self.db.executemany(
                f"INSERT INTO requests VALUES (?, {', '.join('?' * len(_REQUEST_COLUMNS))})",
                ((outcome.key, *row) for row in outcome.requests),
            )

    def cells(self) -> list[dict[str, Any]]:
        """Every stored cell in sweep order: ``key``, ``config``, ``status``, ``metrics``, ..."""
        rows = self.db.execute(
            "SELECT key, idx, config, status, error, started, wall_seconds, metrics "
            "FROM cells ORDER BY idx, key"
        )
        return [
            {
                "key": key,
                "index": idx,
                "config": json.loads(config),
                "status": status,
                "error": error,
                "started": started,
                "wall_seconds": wall,
                "metrics": json.loads(metrics) if metrics else None,
            }
            for key, idx, config, status, error, started, wall, metrics in rows
        ]

    def request_rows(self, key: str) -> list[dict[str, Any]]:
        """Every request row of a cell, as ``requests.csv`` columns to values."""
        rows = self.db.execute(
            f"SELECT {', '.join(_REQUEST_COLUMNS)} FROM requests WHERE cell=? ORDER BY rowid",
            (key,),
        )
        return [dict(zip(_REQUEST_COLUMNS, row, strict=True)) for row in rows]

    def request_column(self, key: str, column: str) -> list[float]:
        """One latency column of a cell's requests, the requests that reached it."""
        if column not in _REQUEST_COLUMNS:
            raise ValueError(f"unknown request column {column!r}")
        return [
            r[0]
            for r in self.db.execute(
                f"SELECT {column} FROM requests WHERE cell=? AND {column} IS NOT NULL", (key,)
            )
        ]


def request_columns() -> Iterable[str]:
    return _REQUEST_COLUMNS
