"""Sweeps in worker processes and on Ray: results stored, failures isolated, resume, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kvframe.cli import main
from kvframe.config import ConfigError
from kvframe.sweep import SCHEMA_VERSION, LocalBackend, ResultStore, load_sweep, run_sweep
from kvframe.sweep.cell import build_engine_config, load_cell_workload

SWEEP = """
[sweep]
db = "results.sqlite"
[base]
workload = "chat.jsonl"
[grid]
num_gpu_blocks = [48, 96]
[[cells]]
scheduler = "fcfs"
[[cells]]
scheduler = "priority"
[[cells]]
scheduler = "no-such-policy"
"""

CRASH = '''
import os
from kvframe.contract.bases import Tracer

class Crash(Tracer):
    """Kills its process on the first step: a plugin that takes its worker down."""

    def on_step_snapshot(self, snapshot):
        os._exit(7)
'''


def _cells(db: Path) -> dict[str, tuple[str, str | None, float]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT key, status, error, started FROM cells").fetchall()
    return {key: (status, error, started) for key, status, error, started in rows}


def test_sweep_stores_every_cell_and_records_the_failing_ones(write_sweep, capsys) -> None:
    path = write_sweep(SWEEP)
    spec = load_sweep(path)
    assert main(["sweep", str(path), "--jobs", "2", "--no-progress"]) == 1
    out = capsys.readouterr().out
    cells = _cells(spec.db)
    assert set(cells) == {c.key for c in spec.cells}
    by_scheduler: dict[str, list[str]] = {}
    for cell in spec.cells:
        by_scheduler.setdefault(cell.settings["scheduler"], []).append(cells[cell.key][0])
    assert by_scheduler == {
        "fcfs": ["done", "done"],
        "priority": ["done", "done"],
        "no-such-policy": ["failed", "failed"],
    }
    failed = [cells[c.key][1] for c in spec.cells if c.settings["scheduler"] == "no-such-policy"]
    assert all("unknown scheduling policy 'no-such-policy'" in (e or "") for e in failed)
    assert out.count("failed cell") == 2

    # A stored cell holds what a bare run of the same settings produces.
    cell = spec.cells[1]
    from kvframe.engine import Engine

    bare = Engine.from_config(build_engine_config(cell.settings)).run(
        load_cell_workload(cell.settings)
    )
    with sqlite3.connect(spec.db) as conn:
        metrics = json.loads(
            conn.execute("SELECT metrics FROM cells WHERE key=?", (cell.key,)).fetchone()[0]
        )
        hits = conn.execute(
            "SELECT value FROM metrics WHERE cell=? AND name='prefix_cache_hits'", (cell.key,)
        ).fetchone()[0]
        ttft_p50 = conn.execute(
            "SELECT value FROM metrics WHERE cell=? AND name='time_to_first_token_seconds.p50'",
            (cell.key,),
        ).fetchone()[0]
        (rows,) = conn.execute("SELECT COUNT(*) FROM requests WHERE cell=?", (cell.key,)).fetchone()
        version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    counters = bare.summary.counters
    assert metrics["counters"]["num_steps"] == counters["num_steps"]
    assert hits == counters["prefix_cache_hits"]
    assert ttft_p50 == pytest.approx(bare.summary.distributions["time_to_first_token_seconds"].p50)
    assert rows == len(bare.summary.requests) == 40
    assert version == str(SCHEMA_VERSION)


def test_interrupted_sweep_keeps_finished_cells_and_resumes_without_rerunning(
    write_sweep, capsys
) -> None:
    path = write_sweep(SWEEP.replace('"no-such-policy"', '"fcfs:unknown_option=1"'))
    spec = load_sweep(path)

    class InterruptAfterTwo(LocalBackend):
        """Ctrl-C arrives once two cells have been stored."""

        seen = 0

        def wait(self, timeout: float):  # type: ignore[override]
            if self.seen >= 2:
                raise KeyboardInterrupt
            done = super().wait(timeout)
            self.seen += len(done)
            return done

    store = ResultStore(spec.db)
    report = run_sweep(spec, store, InterruptAfterTwo(jobs=2))
    store.close()
    assert report.interrupted
    first = _cells(spec.db)
    assert 2 <= len(first) < len(spec.cells)

    assert main(["sweep", str(path), "--jobs", "2", "--no-progress"]) == 1
    out = capsys.readouterr().out
    second = _cells(spec.db)
    assert set(second) == {c.key for c in spec.cells}
    # finished cells were not run again: same start time, and the summary says so
    assert all(second[key] == first[key] for key in first)
    assert f"{len(first)} already stored" in out

    # A third run has nothing left to do; --retry-failed re-runs only the failed cells.
    assert main(["sweep", str(path), "--no-progress"]) == 1
    assert f"0 cells run, {len(spec.cells)} already stored" in capsys.readouterr().out
    assert main(["sweep", str(path), "--no-progress", "--retry-failed"]) == 1
    assert "2 failed" in capsys.readouterr().out


def test_a_plugin_that_kills_its_worker_fails_only_its_cell(write_sweep, write_module) -> None:
    write_module("kvframe_crash_tracer", CRASH)
    path = write_sweep(
        """
        [sweep]
        db = "results.sqlite"
        [base]
        workload = "chat.jsonl"
        num_gpu_blocks = 96
        [grid]
        tracer = ["none", "kvframe_crash_tracer:Crash"]
        """.replace("        ", "")
    )
    spec = load_sweep(path)
    store = ResultStore(spec.db)
    report = run_sweep(spec, store, LocalBackend(jobs=2))
    store.close()
    assert (report.done, report.failed) == (1, 1)
    cells = _cells(spec.db)
    assert cells[spec.cells[0].key][0] == "done"
    status, error, _ = cells[spec.cells[1].key]
    assert status == "failed" and "worker process died (exit code 7)" in (error or "")


def test_a_database_of_another_schema_version_is_refused_before_any_cell(
    write_sweep, capsys
) -> None:
    path = write_sweep(SWEEP)
    db = path.parent / "results.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '0')")
    assert main(["sweep", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "schema version 0" in err and f"version {SCHEMA_VERSION}" in err and str(db) in err
    with sqlite3.connect(db) as conn:
        assert "cells" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


def test_an_unreachable_ray_address_fails_before_anything_is_written(write_sweep, capsys) -> None:
    path = write_sweep(SWEEP)
    assert main(["sweep", str(path), "--ray", "127.0.0.1:9"]) == 2
    assert "cannot reach the Ray cluster at 127.0.0.1:9" in capsys.readouterr().err
    assert not (path.parent / "results.sqlite").exists()
    with pytest.raises(ConfigError, match="HOST:PORT"):
        from kvframe.sweep.runner import check_ray_address

        check_ray_address("no-port-here")


@pytest.mark.slow
def test_the_same_sweep_runs_on_a_local_ray_instance(write_sweep) -> None:
    pytest.importorskip("ray")
    from kvframe.sweep import RayBackend

    path = write_sweep(SWEEP)
    spec = load_sweep(path)
    store = ResultStore(spec.db)
    backend = RayBackend(None, 2)
    try:
        report = run_sweep(spec, store, backend)
    finally:
        backend.stop()
        store.close()
    assert (report.done, report.failed) == (4, 2)
    local_db = path.parent / "local.sqlite"
    assert main(["sweep", str(path), "--db", str(local_db), "--no-progress"]) == 1
    ray_cells, local_cells = ResultStore(spec.db).cells(), ResultStore(local_db).cells()
    assert [c["status"] for c in ray_cells] == [c["status"] for c in local_cells]
    # the engine is deterministic: Ray cells hold the very numbers local workers produce
    for ray_cell, local_cell in zip(ray_cells, local_cells, strict=True):
        if ray_cell["status"] == "done":
            assert (
                ray_cell["metrics"]["counters"]["num_steps"]
                == (local_cell["metrics"]["counters"]["num_steps"])
            )
            assert ray_cell["metrics"]["distributions"] == local_cell["metrics"]["distributions"]


SHARED = """
[sweep]
db = "shared.sqlite"
[base]
workload = "chat.jsonl"
[grid]
num_gpu_blocks = [48, 96]
rate_scale = [1, 2]
"""


def test_cells_reading_the_same_workload_share_one_read_in_the_parent(
    write_sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent reads a workload once for all its cells, and sharing changes no result."""
    import kvframe.sweep.runner as runner

    reads: list[tuple[object, ...]] = []
    real_read = runner.read_workload

    def counting_read(settings):  # type: ignore[no-untyped-def]
        reads.append(runner.workload_key(settings))
        return real_read(settings)

    monkeypatch.setattr(runner, "read_workload", counting_read)
    spec = load_sweep(write_sweep(SHARED))
    store = ResultStore(spec.db)
    report = run_sweep(spec, store, LocalBackend(jobs=1))
    stored = {c["key"]: c for c in store.cells()}
    store.close()
    assert report.done == 4 and report.failed == 0
    assert len(reads) == 1  # four cells, one read (forked cells cannot add to this list)

    from kvframe.engine import Engine

    for cell in spec.cells:  # rate_scale still applies per cell, on a copy
        bare = Engine.from_config(build_engine_config(cell.settings)).run(
            load_cell_workload(cell.settings)
        )
        counters = stored[cell.key]["metrics"]["counters"]
        assert counters["num_steps"] == bare.summary.counters["num_steps"]
        assert counters["simulated_duration_seconds"] == pytest.approx(
            bare.summary.counters["simulated_duration_seconds"]
        )

    reads.clear()
    store = ResultStore(Path(spec.db).with_name("unshared.sqlite"))
    assert run_sweep(spec, store, LocalBackend(jobs=1, share_workloads=0)).done == 4
    store.close()
    assert reads == []  # each cell read its own, in its own process


def test_a_workload_the_parent_cannot_read_fails_only_its_cells(write_sweep, capsys) -> None:
    path = write_sweep(SHARED.replace('workload = "chat.jsonl"', 'workload = "gone.jsonl"'))
    (path.parent / "gone.jsonl").write_text('{"not": "a request"}\n', encoding="utf-8")
    spec = load_sweep(path)
    (path.parent / "gone.jsonl").unlink()  # vanishes between the check and the run
    store = ResultStore(spec.db)
    report = run_sweep(spec, store, LocalBackend(jobs=2))
    cells = store.cells()
    store.close()
    assert report.failed == 4 and report.done == 0
    assert all("gone.jsonl" in (c["error"] or "") for c in cells)


def test_the_parent_scans_the_plugins_once_before_forking(
    write_sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each forked cell inherits the entry-point scan instead of repeating it (~50 ms)."""
    import kvframe.host.registry as plugins

    calls: list[int] = []
    real = plugins.get_registry

    def spy():  # type: ignore[no-untyped-def]
        calls.append(1)
        return real()

    monkeypatch.setattr(plugins, "get_registry", spy)
    spec = load_sweep(write_sweep(SHARED))
    store = ResultStore(spec.db)
    assert run_sweep(spec, store, LocalBackend(jobs=2)).done == 4
    store.close()
    assert len(calls) == 1  # in this process: once, before the first fork


def test_the_next_cell_starts_before_a_finished_one_is_stored(write_sweep) -> None:
    """Storing a cell (its SQLite transaction) overlaps the next cell's run."""
    from kvframe.sweep import CellOutcome

    events: list[str] = []

    class Instant:
        jobs = 1

        def __init__(self) -> None:
            self._running: list[str] = []

        def submit(self, cell) -> None:  # type: ignore[no-untyped-def]
            events.append(f"start {cell.index}")
            self._running.append(cell.key)

        def wait(self, timeout: float) -> list[CellOutcome]:
            done, self._running = self._running, []
            return [CellOutcome(key, "failed", 0.0, 0.0, error="x") for key in done]

        def running(self) -> int:
            return len(self._running)

        def stop(self) -> None:
            pass

    class Logged(ResultStore):
        def record(self, index, config, outcome) -> None:  # type: ignore[no-untyped-def]
            events.append(f"store {index}")
            super().record(index, config, outcome)

    spec = load_sweep(write_sweep(SHARED))
    store = Logged(spec.db)
    run_sweep(spec, store, Instant())
    store.close()
    assert events == ["start 0", "start 1", "store 0", "start 2", "store 1", "start 3", "store 2",
                      "store 3"]  # fmt: skip


def test_off_a_terminal_the_sweep_prints_plain_progress_lines(write_sweep, capsys, monkeypatch):
    # CI logs and pipes: no live bar, but a line every log_interval seconds
    # (here every update), so a long sweep is not silent until its end.
    from kvframe.cli.cmd_sweep import _Display

    monkeypatch.setattr(_Display, "log_interval", 0.0)
    path = write_sweep(SWEEP)
    total = len(load_sweep(path).cells)
    assert main(["sweep", str(path), "--jobs", "1"]) == 1  # capsys: stderr is no terminal
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sweep: ")]
    assert lines, "no progress line"
    assert lines[-1].startswith(f"sweep: {total}/{total} cells  running 0  failed 2  ")
    assert "\x1b[" not in "".join(lines)
    assert main(["sweep", str(path), "--retry-failed", "--no-progress"]) == 1
    assert "sweep: " not in capsys.readouterr().err


def test_progress_line_text() -> None:
    from kvframe.cli.cmd_sweep import _Display

    counts = {"done": 3, "failed": 1, "running": 2, "todo": 4, "total": 8}
    assert _Display.line(counts, 40.0) == (
        "sweep: 4/8 cells  running 2  failed 1  0:00:40  ETA 0:00:40"
    )


TYPO = """
[sweep]
db = "results.sqlite"
[base]
workload = "chat.jsonl"
[[cells]]
gpu_eviction = "lru"
[[cells]]
gpu_eviction = "arc:varient=paper"
"""


def test_a_fixed_typo_leaves_a_stale_failed_cell_that_no_longer_fails_the_sweep(
    write_sweep, capsys
) -> None:
    path = write_sweep(TYPO)
    assert main(["sweep", str(path), "--jobs", "1", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "failed cell #2" in out and "varient" in out
    (typo,) = [c.key for c in load_sweep(path).cells if "varient" in c.settings["gpu_eviction"]]

    # The typo fixed, and a new failing cell put first: as it was, every re-run printed
    # "failed cell #2 ... 'varient'" (now naming the fixed cell) and exited 1.
    fixed = TYPO.replace("varient", "variant").replace(
        "[[cells]]", '[[cells]]\nscheduler = "fcfs:nope=1"\n[[cells]]', 1
    )
    path.write_text(fixed, encoding="utf-8")
    spec = load_sweep(path)
    assert main(["sweep", str(path), "--jobs", "1", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "failed cell #1" in out and "nope" in out and "failed cell #2" not in out
    assert "1 stale failed cell no longer in" in out and typo in out and "varient" in out
    with sqlite3.connect(spec.db) as conn:
        idx = dict(conn.execute("SELECT key, idx FROM cells").fetchall())
    assert {c.key: idx[c.key] for c in spec.cells} == {c.key: c.index for c in spec.cells}

    # Without the new failing cell, the sweep succeeds; the stale cells are still listed,
    # also by --retry-failed (which does not re-run it: it is no longer in the file).
    path.write_text(TYPO.replace("varient", "variant"), encoding="utf-8")
    for flags in ([], ["--retry-failed"]):
        assert main(["sweep", str(path), "--no-progress", *flags]) == 0
        out = capsys.readouterr().out
        assert "2 stale failed cells" in out and typo in out and "failed cell #" not in out
    assert "0 cells run" in out


def test_a_second_sweep_on_the_same_database_is_refused_before_any_cell(
    write_sweep, capsys
) -> None:
    path = write_sweep(TYPO.replace("varient", "variant"))
    spec = load_sweep(path)
    first = ResultStore(spec.db)  # a sweep writing to the database: it holds the lock
    try:
        assert main(["sweep", str(path), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "another kvframe sweep is writing to this results database" in err
        assert f"pid {os.getpid()}" in err
        assert first.finished_keys() == set()  # the second ran nothing
    finally:
        first.close()
    assert main(["sweep", str(path), "--no-progress"]) == 0  # the lock went with the first
    assert "2 cells run" in capsys.readouterr().out
    assert main(["sweep", str(path), "--no-progress"]) == 0
    assert "0 cells run, 2 already stored" in capsys.readouterr().out


def test_two_sweep_processes_on_one_database_never_run_a_cell_twice(write_sweep) -> None:
    """Started together, one runs the cells and the other is refused, or finds them stored."""
    path = write_sweep(SWEEP.replace('"no-such-policy"', '"fcfs"\nmax_num_seqs = 1'))
    argv = [sys.executable, "-m", "kvframe.cli", "sweep", str(path), "-j", "1", "--no-progress"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]  # fmt: skip
    results = [(p.wait(120), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    total = len(load_sweep(path).cells)
    ran = sum(int(m.group(1)) for _, out, _ in results
              if (m := re.search(r"(\d+) cells? run", out)))  # fmt: skip
    assert ran == total, results
    assert codes in ([0, 0], [0, 2]), results
    if codes == [0, 2]:
        assert any("another kvframe sweep" in err for _, _, err in results)


def test_sigterm_stops_a_sweep_keeping_stored_cells_and_exits_143(
    write_sweep, capsys, monkeypatch
) -> None:
    path = write_sweep(SWEEP.replace('"no-such-policy"', '"fcfs:unknown_option=1"'))
    spec = load_sweep(path)
    seen = 0
    real_wait = LocalBackend.wait

    def wait(self, timeout):
        nonlocal seen
        if seen >= 2:
            os.kill(os.getpid(), signal.SIGTERM)
        done = real_wait(self, timeout)
        seen += len(done)
        return done

    monkeypatch.setattr(LocalBackend, "wait", wait)
    assert main(["sweep", str(path), "--jobs", "1", "--no-progress"]) == 143
    captured = capsys.readouterr()
    assert "terminated (SIGTERM); finished cells are saved" in captured.err
    stored = _cells(spec.db)
    assert 2 <= len(stored) < len(spec.cells)
    assert all(status == "done" for status, _, _ in stored.values())  # none died of it
