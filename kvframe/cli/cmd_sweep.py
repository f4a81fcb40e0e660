"""``kvframe sweep SWEEP.toml``: run a grid of runs into a results database.

Exit codes: 0 every cell of the file done (now or before), 1 some cell of the
file failed (its error is in the database and printed), 2 bad sweep file,
database or Ray address, or another sweep writing to the database (before any
cell runs), 130 interrupted by Ctrl-C, 143 by SIGTERM (finished cells are kept;
run again to resume).

A failed cell the file no longer has (a typo since fixed) is *stale*: it is
listed as such, without a number, and does not fail the sweep; cells are
numbered by their place in the file (``#N``, the database's ``idx`` + 1).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvframe.cli.common import Context

__all__ = ["add_sweep_command"]

EXIT_OK = 0
EXIT_FAILED_CELLS = 1
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def add_sweep_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a grid of runs (workloads x policies x knobs) into a results database",
        description="Run every cell of SWEEP.toml (see docs/sweeps.md) in worker processes "
        "or on Ray, storing each in an SQLite database; cells already stored are skipped, "
        "so running the same sweep again resumes it.",
    )
    parser.add_argument("sweep", metavar="SWEEP.toml", help="the sweep file")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and exit")
    parser.add_argument(
        "--jobs", "-j", type=int, metavar="N", help="cells at once (default: one per core)"
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run cells on Ray (pip install 'kvframe[ray]'): the cluster at ADDRESS "
        "(HOST:PORT), or a local Ray instance without ADDRESS",
    )
    parser.add_argument("--db", metavar="PATH", help="results database (default: the file's 'db')")
    parser.add_argument(
        "--retry-failed", action="store_true", help="run failed cells again instead of skipping"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live progress on stderr (default: when stderr is a terminal; otherwise a plain "
        "line every 10 s)",
    )
    parser.set_defaults(handler=sweep_command)


def _dry_run(spec: Any, done: set[str], ctx: Context) -> None:
    from kvframe.console import emit, new_table

    shown = spec.varying or ("workload",)
    table = new_table(
        "#",
        "key",
        "stored",
        *shown,
        title=f"sweep {spec.name}: {len(spec.cells)} cells -> {spec.db}",
    )
    table.columns[0].justify = "right"
    for cell in spec.cells:
        table.add_row(
            str(cell.index + 1),
            cell.key,
            "yes" if cell.key in done else "",
            *(str(cell.settings.get(k, "-")) for k in shown),
        )
    emit(ctx.stdout, table)


def sweep_command(args: argparse.Namespace, ctx: Context) -> int:
    from kvframe.config import ConfigError
    from kvframe.sweep.runner import LocalBackend, RayBackend, check_ray_address, run_sweep
    from kvframe.sweep.spec import load_sweep
    from kvframe.sweep.store import ResultStore

    spec = load_sweep(args.sweep)
    db = Path(args.db) if args.db else spec.db
    if args.jobs is not None and args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    if args.dry_run:
        done: set[str] = set()
        if db.is_file():
            store = ResultStore(db, create=False)
            done = store.finished_keys()
            store.close()
        _dry_run(spec, done, ctx)
        return EXIT_OK

    # Every check that can fail runs before the database is touched and any cell starts:
    # Ray importable and its address answering, then the database's schema version.
    if args.ray:
        check_ray_address(args.ray)
    if args.ray is not None and importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "Ray is not installed", origin="--ray", hints=["pip install 'kvframe[ray]'"]
        )
    store = ResultStore(db)
    try:
        current = {cell.key for cell in spec.cells}
        store.renumber(spec.cells)
        if args.retry_failed:
            store.forget_failed(current)
        jobs = args.jobs or spec.jobs
        if args.ray is not None:
            backend: Any = RayBackend(args.ray or None, jobs)
        else:
            backend = LocalBackend(jobs or os.cpu_count() or 1)
        if args.progress is None:
            mode = "live" if sys.stderr.isatty() else "lines"
        else:
            mode = "live" if args.progress else "off"
        with _Display(mode, len(spec.cells)) as display:
            report = run_sweep(spec, store, backend, on_update=display.update)
        if args.ray is not None:
            backend.stop()
        all_failed = [c for c in store.cells() if c["status"] == "failed"]
    finally:
        store.close()
    from kvframe.console import counted

    failed = [c for c in all_failed if c["key"] in current]
    stale = [c for c in all_failed if c["key"] not in current]
    ctx.print(
        f"sweep {spec.name}: {counted(report.done, 'cell')} run, {report.skipped} already "
        f"stored, {report.failed} failed, {report.wall_seconds:.1f} s -> {db}"
    )
    for cell in failed:
        ctx.print(f"  failed cell #{cell['index'] + 1} ({cell['key']}): {_first_line(cell)}")
    if stale:
        ctx.print(
            f"  {counted(len(stale), 'stale failed cell')} no longer in {args.sweep} "
            "(kept in the database, not counted):"
        )
    for cell in stale:
        settings = ", ".join(
            f"{k}={v}" for k, v in sorted(cell["config"].items()) if k != "workload"
        )
        ctx.print(f"    {cell['key']} ({settings}): {_first_line(cell)}")
    if report.interrupted:
        return EXIT_TERMINATED if report.signal == "SIGTERM" else EXIT_INTERRUPTED
    return EXIT_FAILED_CELLS if failed else EXIT_OK


def _first_line(cell: dict[str, Any]) -> str:
    return (cell["error"] or "").splitlines()[0] if cell["error"] else "?"


class _Display:
    """Progress on stderr: cells done / running / failed and an ETA.

    ``mode`` ``live``: a rich progress bar, refreshed by the sweep loop (no
    refresh thread, so that forking workers never copies a thread mid-write).
    ``lines``: a plain line every :attr:`log_interval` seconds, for logs and CI,
    where a sweep of many minutes would otherwise print nothing until its end
    (the same rule as ``kvframe run``'s progress). ``off``: nothing.
    """

    log_interval = 10.0

    def __init__(self, mode: str, total: int, stream: Any = None) -> None:
        self.mode = mode
        self._stream = stream if stream is not None else sys.stderr
        self._progress: Any = None
        self._task: Any = None
        self._total = total
        self._started = time.perf_counter()
        self._last_line = self._started

    def __enter__(self) -> _Display:
        if self.mode == "live":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("sweep"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
                auto_refresh=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("sweep", total=self._total, detail="")
        return self

    def update(self, counts: dict[str, Any]) -> None:
        if self.mode == "lines":
            now = time.perf_counter()
            if now - self._last_line >= self.log_interval:
                self._last_line = now
                self._stream.write(self.line(counts, now - self._started) + "\n")
                self._stream.flush()
            return
        if self._progress is None:
            return
        finished = counts["done"] + counts["failed"]
        self._progress.update(
            self._task,
            total=counts["total"],
            completed=finished,
            detail=f"running {counts['running']}, failed {counts['failed']}",
        )
        self._progress.refresh()

    @staticmethod
    def line(counts: dict[str, Any], elapsed: float) -> str:
        """``sweep: 12/54 cells  running 2  failed 0  0:00:35  ETA 0:02:03``."""
        from kvframe.cli.progress import eta_text, format_duration

        finished = counts["done"] + counts["failed"]
        total = counts["total"]
        return (
            f"sweep: {finished:,}/{total:,} cells  running {counts['running']}  "
            f"failed {counts['failed']}  {format_duration(elapsed)}  "
            f"ETA {eta_text(finished, total, elapsed)}"
        )

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
