"""Run one sweep cell: the same engine ``kvframe run`` uses, through its public API.

:func:`run_cell` never raises for a problem of the cell itself (a plugin that is
not installed, options it rejects, a stalled engine, a plugin that crashes):
it returns a failed :class:`CellOutcome` with the error text, so that a worker
can report it and the sweep goes on. Everything it returns is plain data
(picklable for worker processes and Ray).
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Mapping
from typing import Any

import attrs

from kvframe.sweep.repeats import GENERATORS, apply_jitter, generate_workload
from kvframe.sweep.spec import WORKLOAD_KEYS

__all__ = [
    "CellOutcome",
    "build_engine_config",
    "load_cell_workload",
    "read_workload",
    "run_cell",
    "workload_key",
]


@attrs.frozen(slots=True)
class CellOutcome:
    """What a cell produced: ``status`` is ``done``, ``partial`` or ``failed``."""

    key: str
    status: str
    started: float
    """Unix time the cell started."""
    wall_seconds: float
    """Wall-clock seconds of the whole cell: reading the workload, the run, the summary."""
    metrics: Mapping[str, Any] | None = None
    """``metrics.json`` as a dict (counters, distributions, metadata)."""
    requests: tuple[tuple[Any, ...], ...] = ()
    """Per-request rows in :data:`kvframe.engine.metrics.CSV_COLUMNS` order."""
    error: str | None = None


def build_engine_config(settings: Mapping[str, Any]) -> Any:
    """The :class:`~kvframe.engine.EngineConfig` of a cell, as ``kvframe run`` builds it
    from ``kvframe.toml``: plugin keys as config strings, the rest as engine settings."""
    from kvframe.config import config_from_mapping
    from kvframe.engine import EngineConfig

    # ``seed`` is both the repeat key and the engine's (block-hash) seed, as it was
    # before it drew workloads: sweeps that set it keep their engine settings.
    values = {k: v for k, v in settings.items() if k not in WORKLOAD_KEYS or k == "seed"}
    return EngineConfig.from_selection(config_from_mapping(values, origin="cell"))


def workload_key(settings: Mapping[str, Any]) -> tuple[Any, ...]:
    """What identifies a cell's workload as read from disk (before ``rate_scale``).

    Cells with equal keys read the same requests, so a worker process may read
    them once for all of them (:class:`~kvframe.sweep.runner.LocalBackend` does).
    """
    generated = settings["workload"] in GENERATORS
    return (
        settings["workload"],
        settings.get("format", "auto"),
        settings.get("limit"),
        settings.get("skip_bad_lines", False),
        settings.get("sort_arrivals", False),
        json.dumps(settings.get("generate"), sort_keys=True) if generated else None,
        settings.get("seed", 0) if generated else None,
    )


def read_workload(settings: Mapping[str, Any]) -> Any:
    """The cell's workload as stored or generated (no ``rate_scale``, no ``jitter``):
    see :func:`workload_key`."""
    from kvframe.workloads import load_workload

    if settings["workload"] in GENERATORS:
        return generate_workload(settings)
    return load_workload(
        settings["workload"],
        format=settings.get("format", "auto"),
        limit=settings.get("limit"),
        skip_bad_lines=settings.get("skip_bad_lines", False),
        sort_arrivals=settings.get("sort_arrivals", False),
    )


def load_cell_workload(settings: Mapping[str, Any], workload: Any = None) -> Any:
    """The cell's workload; ``jitter`` moves each arrival (seeded by ``seed``), then
    ``rate_scale`` divides every arrival time (open-loop load).

    :param workload: :func:`read_workload` of these settings, already read (a
        worker shares one between cells); read here when ``None``. It is not
        modified: a scaled copy is returned.
    """

    if workload is None:
        workload = read_workload(settings)
    if settings.get("jitter"):
        workload = apply_jitter(workload, settings["jitter"], settings.get("seed", 0))
    scale = settings.get("rate_scale")
    if scale is None or scale == 1:
        return workload
    specs = [attrs.evolve(s, arrival_time=s.arrival_time / scale) for s in workload]
    return attrs.evolve(workload, requests=specs)


def run_cell(key: str, settings: Mapping[str, Any], workload: Any = None) -> CellOutcome:
    """Run one cell to completion; any exception becomes a failed outcome with its traceback.

    :param workload: the cell's :func:`read_workload`, when the caller already has it.
    """
    started = time.time()
    clock = time.perf_counter()
    try:
        from kvframe.engine import Engine
        from kvframe.engine.metrics import CSV_COLUMNS

        config = build_engine_config(settings)
        if config.is_fleet:
            from kvframe.fleet import Fleet

            result = Fleet.from_config(config).run(load_cell_workload(settings, workload))
        else:
            result = Engine.from_config(config).run(load_cell_workload(settings, workload))
        summary = result.summary
        metrics = summary.to_dict()
        metrics.setdefault("metadata", {})["sweep_cell"] = dict(settings)
        rows = tuple(tuple(getattr(r, c) for c in CSV_COLUMNS) for r in summary.requests)
        return CellOutcome(
            key,
            "partial" if result.partial else "done",
            started,
            time.perf_counter() - clock,
            metrics,
            rows,
        )
    except Exception as err:  # the cell's own failure: record it, let the sweep go on
        text = f"{type(err).__name__}: {err}"
        tb = traceback.format_exc(limit=-6)
        return CellOutcome(
            key, "failed", started, time.perf_counter() - clock, error=f"{text}\n\n{tb}"
        )
