"""``kvframe sweep``: a grid of ordinary runs, in worker processes or on Ray, into SQLite.

* :mod:`kvframe.sweep.spec` -- ``SWEEP.toml``, checked and expanded into cells;
* :mod:`kvframe.sweep.cell` -- one cell: the engine ``kvframe run`` uses, errors caught;
* :mod:`kvframe.sweep.store` -- the results database (cells, metrics, requests);
* :mod:`kvframe.sweep.runner` -- worker processes, Ray, the loop, Ctrl-C;
* :mod:`kvframe.cli.cmd_sweep` -- the subcommand.

From Python::

    from kvframe.sweep import LocalBackend, ResultStore, load_sweep, run_sweep

    spec = load_sweep("eviction.toml")
    store = ResultStore(spec.db)
    report = run_sweep(spec, store, LocalBackend(jobs=2))
"""

from __future__ import annotations

from kvframe.sweep.cell import CellOutcome, run_cell
from kvframe.sweep.runner import LocalBackend, RayBackend, SweepReport, run_sweep
from kvframe.sweep.spec import Cell, SweepSpec, load_sweep, parse_sweep
from kvframe.sweep.store import SCHEMA_VERSION, ResultStore

__all__ = [
    "SCHEMA_VERSION",
    "Cell",
    "CellOutcome",
    "LocalBackend",
    "RayBackend",
    "ResultStore",
    "SweepReport",
    "SweepSpec",
    "load_sweep",
    "parse_sweep",
    "run_cell",
    "run_sweep",
]
