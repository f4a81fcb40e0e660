"""``SWEEP.toml``: what a sweep declares, checked and expanded into cells.

A sweep file has four tables, all optional except that at least one cell must
come out::

    [sweep]                      # how to run: results database, workers
    db = "eviction.sqlite"       # relative to the sweep file (default: <stem>.sqlite)
    jobs = 2

    [base]                       # settings every cell shares
    workload = "../shared/data/mooncake/conversation_trace.jsonl"
    limit = 500

    [grid]                       # the cartesian product of these lists
    gpu_eviction = ["lru", "arc"]
    num_gpu_blocks = [2000, 4000]

    [[cells]]                    # explicit cells, each on top of [base] (and crossed with [grid])

A cell's keys are the ones ``kvframe run`` takes: ``workload`` (a file), its
reading options (``format``, ``limit``, ``skip_bad_lines``), ``rate_scale``
(arrivals come that many times faster), the plugin keys of ``kvframe.toml``
(``scheduler``, ``eviction``, ``offload``, ``reuse_filter``, ``tracer``, and a
fleet's ``router``) and every engine setting (``num_gpu_blocks``, ``gpu_eviction``,
``preset``, ``replicas``, ``kv_event_delay``, ...). A cell with ``replicas`` runs a
fleet (:mod:`kvframe.fleet`).
The string ``"none"`` for a plugin key or ``gpu_eviction`` means "not selected", so that a grid can
cross "with and without a CPU tier".

Everything is checked here, before any cell runs: unknown keys (with a
suggestion), value types, plugin config-string syntax, an empty grid. Whether a
named plugin is installed and accepts its options is *not* checked here: that is
the cell's business, and a cell that fails is recorded as failed while the
others go on.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from kvframe.config import ConfigError, config_from_mapping, suggest
from kvframe.domain.fidelity import fidelity_for
from kvframe.engine.config import ENGINE_KEYS
from kvframe.sweep.repeats import GENERATORS, check_generated

__all__ = [
    "CELL_KEYS",
    "PLUGIN_KEYS",
    "Cell",
    "SweepSpec",
    "cell_hash",
    "load_sweep",
    "parse_sweep",
]

PLUGIN_KEYS = (
    "scheduler",
    "scheduling",
    "eviction",
    "offload",
    "reuse_filter",
    "tracer",
    "router",
    "routing",
)
"""Plugin selection keys, as in ``kvframe.toml``."""

WORKLOAD_KEYS = (
    "workload",
    "format",
    "limit",
    "skip_bad_lines",
    "sort_arrivals",
    "rate_scale",
    "seed",
    "jitter",
    "generate",
)
"""How a cell reads (or generates: :mod:`kvframe.sweep.repeats`) its workload."""

CELL_KEYS: tuple[str, ...] = tuple(dict.fromkeys((*WORKLOAD_KEYS, *PLUGIN_KEYS, *ENGINE_KEYS)))
"""Every key a cell (``[base]``, ``[grid]``, ``[[cells]]``) may set."""

SWEEP_KEYS = ("name", "db", "jobs")
"""Keys of the ``[sweep]`` table."""

TOP_KEYS = ("sweep", "base", "grid", "cells")

NONE = "none"
"""A plugin key (or ``gpu_eviction``) set to this string selects no plugin of that kind."""

OPTIONAL_KEYS = (*PLUGIN_KEYS, "gpu_eviction")
"""Keys that ``"none"`` clears."""


@attrs.frozen(slots=True)
class Cell:
    """One run of a sweep: its full settings and the hash that keys it in the database."""

    index: int
    settings: Mapping[str, Any]
    """Cell keys to values (workload path resolved), JSON-ready."""
    key: str
    """:func:`cell_hash` of :attr:`settings`."""

    def label(self) -> str:
        """A short human name: the settings that vary are chosen by the caller; this is all."""
        return ", ".join(f"{k}={v}" for k, v in self.settings.items() if k != "workload")


@attrs.frozen(slots=True)
class SweepSpec:
    """A checked sweep: its cells in declaration order and how to run them."""

    name: str
    path: Path | None
    db: Path
    jobs: int | None
    cells: tuple[Cell, ...]
    varying: tuple[str, ...]
    """Keys whose value differs between cells (what a comparison is about)."""


def cell_hash(settings: Mapping[str, Any]) -> str:
    """A stable hash of a cell's full configuration (sorted-key JSON, SHA-256, 16 hex digits).

    Why a hash: the database keys results by *what was run*, not by position in
    the file, so reordering or extending a sweep keeps its finished cells.
    """
    text = json.dumps(dict(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _where(path: Path | None, table: str, key: str | None = None) -> str:
    place = str(path) if path is not None else "sweep"
    return f"{place}, [{table}]" + (f" key {key!r}" if key else "")


def _check_keys(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in allowed:
            close = suggest(key, allowed)
            hint = f"; did you mean {close!r}?" if close else ""
            raise ConfigError(
                f"unknown key {key!r}{hint}",
                origin=where,
                hints=["allowed: " + ", ".join(allowed)],
            )


def _check_value(key: str, value: Any, where: str) -> None:
    """Types and config-string syntax, so that typos fail before any cell runs."""
    if key == "workload":
        if not isinstance(value, str) or not value:
            raise ConfigError(f"workload must be a file path, got {value!r}", origin=where)
    elif key in ("limit",):
        if type(value) is not int or value < 1:
            raise ConfigError(f"{key} must be an integer >= 1, got {value!r}", origin=where)
    elif key == "rate_scale":
        if type(value) not in (int, float) or not value > 0:
            raise ConfigError(f"rate_scale must be a number > 0, got {value!r}", origin=where)
    elif key in ("skip_bad_lines", "sort_arrivals"):
        if type(value) is not bool:
            raise ConfigError(f"{key} must be true or false, got {value!r}", origin=where)
    elif key == "seed":
        if type(value) is not int or value < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {value!r}", origin=where)
    elif key == "jitter":
        if type(value) not in (int, float) or not value >= 0:
            raise ConfigError(
                f"jitter must be a number of seconds >= 0, got {value!r}", origin=where
            )
    elif key == "generate":
        if not isinstance(value, dict):
            raise ConfigError(
                f"generate must be a table of generator options, got {value!r}", origin=where
            )
    elif key == "vllm":
        # A fidelity target every cell would reject: say so before any cell runs.
        if not isinstance(value, str):
            raise ConfigError(
                f'vllm must be a release as a string ("0.19.1", "0.33"), got {value!r}',
                origin=where,
            )
        try:
            fidelity_for(value)
        except ValueError as err:
            raise ConfigError(str(err), origin=where) from None
    elif key in OPTIONAL_KEYS and value != NONE:
        kind = "eviction" if key == "gpu_eviction" else key
        config_from_mapping({kind: value}, origin=where)  # raises ConfigError on bad syntax


def _resolve_workload(value: str, base_dir: Path) -> str:
    """A relative path is relative to the sweep file; a name that is no file passes through
    (bundled trace names such as ``mooncake:conversation`` are resolved by the reader)."""
    if value in GENERATORS:
        return value
    path = Path(value).expanduser()
    if not path.is_absolute():
        candidate = base_dir / path
        if candidate.exists() or os.sep in value or value.endswith((".jsonl", ".gz")):
            return os.path.normpath(candidate)
    return value


def parse_sweep(data: Mapping[str, Any], *, path: Path | None = None) -> SweepSpec:
    """Check parsed TOML and expand it into cells.

    :raises ConfigError: naming the file, table and key of the first problem.
    """
    sweep, base, grid, explicit = _tables(data, path)
    _check_table_values(base, grid, explicit, path)

    jobs = sweep.get("jobs")
    if jobs is not None and (type(jobs) is not int or jobs < 1):
        raise ConfigError(
            f"jobs must be an integer >= 1, got {jobs!r}", origin=_where(path, "sweep", "jobs")
        )
    base_dir = path.parent if path is not None else Path.cwd()
    name = str(sweep.get("name") or (path.stem if path else "sweep"))
    db = Path(sweep.get("db") or f"{name}.sqlite")
    if not db.is_absolute():
        db = base_dir / db

    cells = _expand_cells(base, grid, explicit, path, base_dir)
    varying = tuple(
        k
        for k in sorted({k for c in cells for k in c.settings})
        if len({json.dumps(c.settings.get(k)) for c in cells}) > 1
    )
    return SweepSpec(name, path, db, jobs, tuple(cells), varying)


def _tables(
    data: Mapping[str, Any], path: Path | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[Any]]:
    """The ``[sweep]``, ``[base]``, ``[grid]`` and ``[[cells]]`` tables, each of the right
    shape and with known keys, so the value checks after this can trust their types."""
    _check_keys(data, TOP_KEYS, str(path) if path else "sweep")
    sweep = data.get("sweep", {})
    base = data.get("base", {})
    grid = data.get("grid", {})
    explicit = data.get("cells", [])
    for table, value, kind in (
        ("sweep", sweep, dict),
        ("base", base, dict),
        ("grid", grid, dict),
        ("cells", explicit, list),
    ):
        if not isinstance(value, kind):
            raise ConfigError(
                f"[{table}] must be a {'table' if kind is dict else 'list of tables ([[cells]])'}",
                origin=_where(path, table),
            )
    _check_keys(sweep, SWEEP_KEYS, _where(path, "sweep"))
    _check_keys(base, CELL_KEYS, _where(path, "base"))
    _check_keys(grid, CELL_KEYS, _where(path, "grid"))
    return sweep, base, grid, explicit


def _check_table_values(
    base: dict[str, Any], grid: dict[str, Any], explicit: list[Any], path: Path | None
) -> None:
    """Check every value where it is written, so an error names its table and key
    rather than the expanded cell it ends up in."""
    for key, value in base.items():
        _check_value(key, value, _where(path, "base", key))
    for key, values in grid.items():
        where = _where(path, "grid", key)
        if not isinstance(values, list):
            raise ConfigError(
                f"a grid key takes a list of values, got {values!r}",
                origin=where,
                hints=[f"for one value for every cell, put {key} in [base]"],
            )
        if not values:
            raise ConfigError("empty list: the grid would have no cells", origin=where)
        for value in values:
            _check_value(key, value, where)
    for i, cell in enumerate(explicit):
        where = f"{path or 'sweep'}, [[cells]] #{i + 1}"
        if not isinstance(cell, dict):
            raise ConfigError("each [[cells]] entry must be a table", origin=where)
        _check_keys(cell, CELL_KEYS, where)
        for key, value in cell.items():
            _check_value(key, value, f"{where} key {key!r}")


def _expand_cells(
    base: dict[str, Any],
    grid: dict[str, Any],
    explicit: list[Any],
    path: Path | None,
    base_dir: Path,
) -> list[Cell]:
    """Every explicit cell crossed with the grid, over ``[base]``; two cells that are the
    same run are an error (the second would only repeat the first)."""
    combos = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    rows = [{**base, **cell, **combo} for cell in (explicit or [{}]) for combo in combos]
    if not rows or (not grid and not explicit):
        raise ConfigError(
            "the sweep has no cells: give a [grid] of lists or [[cells]] entries",
            origin=str(path) if path else "sweep",
        )
    cells: list[Cell] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        where = f"{path or 'sweep'}, cell #{i + 1}"
        settings = _cell_settings(row, where, base_dir)
        key = cell_hash(settings)
        if key in seen:
            raise ConfigError(
                f"cell #{i + 1} is the same run as cell #{seen[key] + 1}", origin=where
            )
        seen[key] = i
        cells.append(Cell(i, settings, key))
    return cells


def _cell_settings(row: dict[str, Any], where: str, base_dir: Path) -> dict[str, Any]:
    """One merged row as a cell's settings: ``none`` optional keys dropped, ``scheduling``
    spelled ``scheduler``, the workload path resolved, keys sorted (so the hash is stable)."""
    if "workload" not in row:
        raise ConfigError("no workload: set 'workload' in [base], [grid] or the cell", origin=where)
    if "scheduler" in row and "scheduling" in row:
        raise ConfigError("'scheduler' and 'scheduling' are the same key; give one", origin=where)
    settings = {k: v for k, v in row.items() if v != NONE or k not in OPTIONAL_KEYS}
    if "scheduling" in settings:
        settings["scheduler"] = settings.pop("scheduling")
    settings["workload"] = _resolve_workload(settings["workload"], base_dir)
    settings = dict(sorted(settings.items()))
    check_generated(settings, where)
    return settings


def load_sweep(path: str | os.PathLike[str]) -> SweepSpec:
    """Read and check a ``SWEEP.toml``.

    :raises ConfigError: unreadable file, invalid TOML, or any problem :func:`parse_sweep` finds.
    """
    import tomllib

    file = Path(path)
    try:
        with open(file, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"cannot read sweep file: {err.strerror}", origin=str(file)) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML: {err}", origin=str(file)) from None
    return parse_sweep(data, path=file)
