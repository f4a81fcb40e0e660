"""Run a sweep's cells in worker processes or on Ray, storing each outcome as it arrives.

Why a fresh process per cell (forked, so it costs milliseconds, not an import):
isolation. A cell whose plugin raises is caught inside :func:`run_cell`; a cell
whose plugin kills its process (a segfault, ``os._exit``) only takes that
process down, and the parent records "worker process died" for that cell while
the others go on. A shared pool would break for every cell at once.

What a cell costs beyond its run, and why it is small (``benchmarks/sweep_scaling.py``):

* the parent does, once, what every ``kvframe run`` does at start-up -- the
  engine's imports and the plugin entry-point scan (about 50 ms, as long as a
  whole 40-request cell) -- before it forks, so each cell inherits them;
* the parent reads each distinct workload once (:func:`~kvframe.sweep.cell.workload_key`)
  and the forked cells share it copy-on-write: a cell may not modify it, and
  being a separate process it could not harm the next cell if it did;
* the parent's objects are out of the garbage collector's reach in each forked
  cell (:func:`gc.freeze` around the fork), so a cell's collections do not
  copy the pages it shares with the parent;
* the next cell is started before the finished one is stored, so the SQLite
  transaction (cells, metrics and per-request rows, one ``executemany`` each)
  overlaps a running cell instead of delaying it.

With the ``spawn`` start method (no ``fork``) none of this is inherited and each
cell starts cold, as a separate ``kvframe run`` would.

Ctrl-C and SIGTERM: workers ignore both, so the parent alone decides (a
``timeout`` or Slurm signals the whole process group; a worker that died of it
would be recorded as a failed cell). The parent stops the running cells (they
are not stored, so the next sweep runs them again) and keeps every cell already
stored, each committed in its own transaction.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import attrs

from kvframe.config import ConfigError
from kvframe.sweep.cell import CellOutcome, read_workload, run_cell, workload_key
from kvframe.sweep.spec import Cell, SweepSpec
from kvframe.sweep.store import ResultStore

__all__ = ["LocalBackend", "RayBackend", "SweepReport", "check_ray_address", "run_sweep"]


class Backend(Protocol):
    jobs: int

    def submit(self, cell: Cell) -> None: ...

    def wait(self, timeout: float) -> list[CellOutcome]: ...

    def running(self) -> int: ...

    def stop(self) -> None: ...


# -- local worker processes ---------------------------------------------------


def _child(conn: Any, key: str, settings: dict[str, Any], workload: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # and SIGTERM (it stops us with SIGKILL)
    outcome = run_cell(key, settings, workload)
    conn.send(outcome)
    conn.close()


class LocalBackend:
    """One forked process per cell, at most ``jobs`` at a time.

    :param share_workloads: how many distinct workloads the parent keeps read
        for the cells it forks (most recently used first); ``0`` lets every
        cell read its own.
    """

    def __init__(self, jobs: int, *, share_workloads: int = 2) -> None:
        import multiprocessing as mp

        self.jobs = jobs
        methods = mp.get_all_start_methods()
        self._fork = "fork" in methods
        self._ctx = mp.get_context("fork" if self._fork else "spawn")
        self._running: dict[str, tuple[Any, Any, float]] = {}
        self._share = share_workloads if self._fork else 0
        self._workloads: dict[tuple[Any, ...], Any] = {}
        self._warm = not self._fork

    def _warm_up(self) -> None:
        """Do once, in the parent, the start-up every cell would otherwise repeat."""
        self._warm = True
        import importlib

        from kvframe.host.registry import get_registry

        # The engine, executors and metrics, and what a run imports on first use
        # (the executor-string parser, which does not import torch).
        for module in ("kvframe.engine", "kvframe.executors.torch.options"):
            importlib.import_module(module)

        get_registry().entries()  # the entry-point scan, and each plugin's import

    def _workload(self, settings: dict[str, Any]) -> Any:
        """The cell's workload read once per :func:`workload_key`; ``None``: the cell reads it.

        A workload that cannot be read is left to the cell, whose error then
        names it; the parent never fails for a cell's sake.
        """
        if not self._share:
            return None
        key = workload_key(settings)
        if key in self._workloads:
            self._workloads[key] = self._workloads.pop(key)  # most recently used last
            return self._workloads[key]
        try:
            workload = read_workload(settings)
        except Exception:
            return None
        self._workloads[key] = workload
        while len(self._workloads) > self._share:
            del self._workloads[next(iter(self._workloads))]
        return workload

    def submit(self, cell: Cell) -> None:
        if not self._warm:
            self._warm_up()
        settings = dict(cell.settings)
        receive, send = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=_child,
            args=(send, cell.key, settings, self._workload(settings)),
            daemon=True,
        )
        if self._fork:
            # The parent's objects go to the permanent generation for the fork, so
            # that the child's garbage collector never writes to their pages (each
            # collection would otherwise copy pages it shares with the parent:
            # measured ~4 ms of a 65 ms cell); the parent takes them back at once.
            gc.freeze()
        try:
            process.start()
        finally:
            if self._fork:
                gc.unfreeze()
        send.close()
        self._running[cell.key] = (process, receive, time.time())

    def running(self) -> int:
        return len(self._running)

    def wait(self, timeout: float) -> list[CellOutcome]:
        from multiprocessing.connection import wait

        if not self._running:
            return []
        handles: dict[Any, str] = {}
        for key, (process, conn, _) in self._running.items():
            handles[conn] = key
            handles[process.sentinel] = key
        ready = wait(list(handles), timeout)
        done: list[CellOutcome] = []
        for key in dict.fromkeys(handles[h] for h in ready):
            process, conn, started = self._running.pop(key)
            outcome: CellOutcome | None = None
            try:
                if conn.poll():
                    outcome = conn.recv()
            except (EOFError, OSError):
                outcome = None
            process.join()
            conn.close()
            if outcome is None:
                outcome = CellOutcome(
                    key,
                    "failed",
                    started,
                    time.time() - started,
                    error=f"worker process died (exit code {process.exitcode}) "
                    "without reporting a result",
                )
            done.append(outcome)
        return done

    def stop(self) -> None:
        for process, _conn, _ in self._running.values():
            process.kill()  # workers ignore SIGTERM
        for process, conn, _ in self._running.values():
            process.join(5)
            conn.close()
        self._running.clear()


# -- Ray ------------------------------------------------------------------------


def check_ray_address(address: str) -> None:
    """Fail fast, before any cell runs, when ``HOST:PORT`` does not answer.

    ``ray.init`` on a dead address retries for a long time; a TCP connect with a
    short timeout gives the user a clear error at once.
    """
    if address in ("auto", "local"):
        return
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host:
        raise ConfigError(f"expected a Ray address HOST:PORT, got {address!r}", origin="--ray")
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            pass
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"cannot reach the Ray cluster at {address}: {err}",
            origin="--ray",
            hints=["start one with 'ray start --head', or omit ADDRESS for a local Ray instance"],
        ) from None


class RayBackend:
    """Cells as Ray tasks (one CPU each); ``address=None`` starts a local Ray instance."""

    def __init__(self, address: str | None, jobs: int | None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError(
                "Ray is not installed", origin="--ray", hints=["pip install 'kvframe[ray]'"]
            ) from None
        if address is not None:
            check_ray_address(address)
        self._ray = ray
        self._own = not ray.is_initialized()
        if self._own:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address is None:
                kwargs["num_cpus"] = jobs or os.cpu_count() or 1
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise ConfigError(
                    f"cannot connect to Ray at {address}: {err}", origin="--ray"
                ) from None
        self.jobs = jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._task = ray.remote(num_cpus=1, max_retries=0)(run_cell)
        self._running: dict[Any, tuple[str, float]] = {}

    def submit(self, cell: Cell) -> None:
        ref = self._task.remote(cell.key, dict(cell.settings))
        self._running[ref] = (cell.key, time.time())

    def running(self) -> int:
        return len(self._running)

    def wait(self, timeout: float) -> list[CellOutcome]:
        if not self._running:
            return []
        ready, _ = self._ray.wait(list(self._running), num_returns=1, timeout=timeout)
        done = []
        for ref in ready:
            key, started = self._running.pop(ref)
            try:
                done.append(self._ray.get(ref))
            except Exception as err:  # the task's worker died: that cell failed
                done.append(
                    CellOutcome(key, "failed", started, time.time() - started, error=str(err))
                )
        return done

    def stop(self) -> None:
        for ref in self._running:
            self._ray.cancel(ref, force=True)
        self._running.clear()
        if self._own:
            self._ray.shutdown()


# -- the loop ---------------------------------------------------------------------


@attrs.frozen(slots=True)
class SweepReport:
    total: int
    skipped: int
    done: int
    failed: int
    interrupted: bool
    wall_seconds: float
    signal: str | None = None
    """``"SIGINT"`` or ``"SIGTERM"`` when interrupted."""


def run_sweep(
    spec: SweepSpec,
    store: ResultStore,
    backend: Backend,
    *,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    cells: Iterable[Cell] | None = None,
) -> SweepReport:
    """Run the cells the database does not have yet; store each as it finishes.

    :param on_update: called with counts (``done``, ``failed``, ``running``,
        ``todo``, ``total``, ``last``) after every change, for a progress display.
    :raises KeyboardInterrupt: never: Ctrl-C or SIGTERM stops the running cells
        and the report says ``interrupted`` (and which signal).
    """
    from kvframe.engine.interrupt import sigterm_as_interrupt

    started = time.perf_counter()
    finished = store.finished_keys()
    chosen = list(cells if cells is not None else spec.cells)
    pending = [c for c in chosen if c.key not in finished]
    by_key = {c.key: c for c in pending}
    skipped = len(chosen) - len(pending)
    counts = {"done": 0, "failed": 0, "running": 0, "todo": len(pending), "total": len(pending)}
    queue = list(reversed(pending))
    interrupted = False

    def update(last: CellOutcome | None = None) -> None:
        counts["running"] = backend.running()
        if on_update is not None:
            on_update({**counts, "last": last})

    with sigterm_as_interrupt() as interrupts:
        try:
            _loop(store, backend, queue, by_key, counts, update, on_update is not None)
        except KeyboardInterrupt:
            interrupted = True
            backend.stop()
            cause = "terminated (SIGTERM)" if interrupts.received else "interrupted"
            print(f"kvframe sweep: {cause}; finished cells are saved", file=sys.stderr)
    return SweepReport(
        len(chosen),
        skipped,
        counts["done"],
        counts["failed"],
        interrupted,
        time.perf_counter() - started,
        (interrupts.received or "SIGINT") if interrupted else None,
    )


def _loop(
    store: ResultStore,
    backend: Backend,
    queue: list[Cell],
    by_key: dict[str, Cell],
    counts: dict[str, int],
    update: Callable[..., None],
    live: bool,
) -> None:
    """Submit, wait, store: until the queue is empty and no cell runs."""
    update()

    def fill() -> None:
        while queue and backend.running() < backend.jobs:
            backend.submit(queue.pop())
            update()

    while queue or backend.running():
        fill()
        finished_now = backend.wait(0.25)
        fill()  # the next cells run while the finished ones are stored
        for outcome in finished_now:
            cell = by_key[outcome.key]
            store.record(cell.index, cell.settings, outcome)
            counts["todo"] -= 1
            counts["failed" if outcome.status == "failed" else "done"] += 1
            update(outcome)
        if live:
            update()
