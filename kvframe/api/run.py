"""``kvframe.run(...)``: one run from Python, its results as tables.

The same run ``kvframe run`` makes: the trace and workload options are the CLI's
(``limit``, ``format``, ``skip_bad_lines``, ``sort_arrivals``), the configuration
is ``kvframe.toml`` (read from the working directory when present, as the CLI
does; ``config=`` names another, gives a mapping, or ``False`` reads none) merged
with keyword settings -- every ``kvframe.toml`` key (``scheduler``, ``eviction``,
``offload``, ``tracer``, ``num_gpu_blocks``, ``kv_memory``, ``vllm``,
``async_scheduling``, ...), with the CLI's config strings as values. One
selection gives one engine and one error everywhere
(:meth:`EngineConfig.from_selection <kvframe.engine.EngineConfig.from_selection>`).
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.api.frames import data_frame, has_parquet, write_parquet
from kvframe.config import (
    ConfigError,
    UserConfig,
    config_from_mapping,
    find_config_file,
    load_config,
    merge,
)

if TYPE_CHECKING:
    from kvframe.engine import EngineConfig, RunProgress, RunResult
    from kvframe.engine.metrics import MetricsSummary
    from kvframe.engine.steplog import StepLog
    from kvframe.workloads import Workload
    from kvframe.workloads.spec import RequestSpec

__all__ = ["SAVED_FILES", "Result", "run", "selection"]

SAVED_FILES = (
    "metrics.json",
    "requests.csv",
    "engine_steps.csv",
    "requests.parquet",
    "engine_steps.parquet",
)
"""What :meth:`Result.save` may write: ``kvframe run``'s two files, the steps, and the
two tables again as Parquet when pyarrow is installed."""

_WHERE = "kvframe.run()"


def selection(
    config: str | os.PathLike[str] | Mapping[str, Any] | bool | None,
    settings: Mapping[str, Any],
    *,
    where: str = _WHERE,
) -> tuple[UserConfig, str | None]:
    """The merged selection and the config file read (``None``: none), as the CLI merges
    ``kvframe.toml`` and its flags: keyword ``settings`` win key by key.

    :param config: ``None`` reads ``./kvframe.toml`` when present (the CLI's default);
        ``False`` reads nothing (``--no-config``); a path reads that file; a mapping is
        used as a parsed ``kvframe.toml``.
    """
    source: str | None = None
    if isinstance(config, Mapping):
        base = config_from_mapping(config, origin=f"{where} config")
    elif config is True:
        raise ConfigError("config=True names no file; pass a path, a mapping, False or None")
    else:
        if config is None:
            found = find_config_file()
            source = None if found is None else str(found.resolve())
        elif config is not False:
            source = str(Path(config).resolve())
        base = load_config(source) if source is not None else UserConfig()
    return merge(base, config_from_mapping(dict(settings), origin=where)), source


@attrs.define(slots=True)
class Result:
    """What :func:`run` returns: the summary, and the requests and steps as DataFrames.

    ``summary`` is the :class:`~kvframe.engine.metrics.MetricsSummary` behind
    ``kvframe run``'s table and ``metrics.json``; :meth:`table` prints what the CLI
    prints. The DataFrames are built on first access (pandas: the ``frames`` extra).
    """

    summary: MetricsSummary
    config: EngineConfig
    step_log: StepLog | None = attrs.field(default=None, repr=False)
    _frames: dict[str, Any] = attrs.field(factory=dict, repr=False, init=False)

    # -- the summary ------------------------------------------------------------

    @property
    def partial(self) -> bool:
        """The run stopped early: interrupted (Ctrl-C) or stalled (see :attr:`stalled`)."""
        return self.summary.partial

    @property
    def stalled(self) -> str | None:
        """Why the engine stalled (``metadata.stalled``), or ``None``."""
        return self.summary.metadata.get("stalled")

    @property
    def counters(self) -> dict[str, int | float]:
        """``metrics.json``'s counters: ``num_steps``, ``prefix_cache_hits``, ..."""
        return dict(self.summary.counters)

    @property
    def metadata(self) -> dict[str, Any]:
        """``metrics.json``'s metadata: the engine settings, preset, workload, core, clock."""
        return dict(self.summary.metadata)

    @property
    def metrics(self) -> dict[str, Any]:
        """``metrics.json`` itself, as a dict."""
        return self.summary.to_dict()

    def table(self) -> str:
        """The summary as ``kvframe run`` prints it (plain text): the counters, the latency
        percentiles, what ran (configuration, vLLM target and mode, core) and the clock."""
        from kvframe.engine.describe import describe_configuration, describe_core

        meta = self.summary.metadata
        lines = [self.summary.render_table(), ""]
        lines += describe_configuration(
            meta.get("engine", {}), meta.get("config_file"), meta.get("clock", "virtual")
        )
        lines.append(describe_core(meta))
        if self.stalled:
            lines += ["", f"note: stalled: {self.stalled}"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        c = self.summary.counters
        state = " (PARTIAL)" if self.partial else ""
        return (
            f"<kvframe.Result{state}: {c.get('num_requests_finished', 0):,} of "
            f"{c.get('num_requests', 0):,} requests finished, {c.get('num_steps', 0):,} steps; "
            ".table() prints the summary, .requests and .steps are DataFrames>"
        )

    # -- the tables ---------------------------------------------------------------

    @property
    def requests(self) -> Any:
        """One row per request: the columns of ``requests.csv`` (empty times are NaN)."""
        if "requests" not in self._frames:
            from kvframe.engine.metrics import CSV_COLUMNS

            rows = self.summary.requests
            columns = {name: [getattr(r, name) for r in rows] for name in CSV_COLUMNS}
            self._frames["requests"] = data_frame("kvframe.run(...).requests", columns)
        return self._frames["requests"]

    @property
    def steps(self) -> Any:
        """One row per engine step that ran a forward pass
        (:data:`~kvframe.engine.steplog.STEP_COLUMNS`); empty when ``record_steps=False``."""
        if "steps" not in self._frames:
            from kvframe.engine.steplog import STEP_COLUMNS, StepLog

            log = self.step_log if self.step_log is not None else StepLog()
            self._frames["steps"] = data_frame(
                "kvframe.run(...).steps", log.columns(), order=STEP_COLUMNS
            )
        return self._frames["steps"]

    @property
    def latency(self) -> Any:
        """The latency percentiles of the summary's second table: one row per latency."""
        if "latency" not in self._frames:
            shown = {n: d for n, d in self.summary.distributions.items() if d is not None}
            stats = ("count", "mean", "p50", "p90", "p99", "max")
            columns: dict[str, list[Any]] = {"latency": list(shown)}
            columns.update({s: [getattr(d, s) for d in shown.values()] for s in stats})
            frame = data_frame("kvframe.run(...).latency", columns)
            self._frames["latency"] = frame.set_index("latency")
        return self._frames["latency"]

    # -- files --------------------------------------------------------------------

    def save(self, out: str | os.PathLike[str], *, force: bool = False) -> Path:
        """Write the run to ``out``: ``metrics.json`` and ``requests.csv`` as ``kvframe run``
        writes them (so ``kvframe compare`` reads the directory), ``engine_steps.csv``, and
        with pyarrow installed ``requests.parquet`` and ``engine_steps.parquet``: files any
        Parquet or CSV reader opens without kvframe.

        :raises ConfigError: when ``out`` already holds a run and ``force`` is false.
        """
        path = Path(out)
        existing = _earlier_run(path, force=force)
        path.mkdir(parents=True, exist_ok=True)
        for name in existing:
            (path / name).unlink()
        self.summary.write_json(path / "metrics.json")
        self.summary.write_csv(path / "requests.csv")
        self._write_steps_csv(path / "engine_steps.csv")
        if has_parquet():
            write_parquet(self.requests, path / "requests.parquet")
            write_parquet(self.steps, path / "engine_steps.parquet")
        return path

    def _write_steps_csv(self, path: Path) -> None:
        from kvframe.engine.steplog import STEP_COLUMNS

        with path.open("w", encoding="utf-8") as out:
            out.write(",".join(STEP_COLUMNS) + "\n")
            if self.step_log is not None:
                for row in self.step_log.rows():
                    out.write(",".join(repr(v) for v in row) + "\n")


def _earlier_run(path: Path, *, force: bool) -> list[str]:
    """The files of an earlier run in ``path`` (to replace with ``force``).

    :raises ConfigError: when there are some and ``force`` is false.
    """
    existing = [n for n in SAVED_FILES if (path / n).exists()]
    if existing and not force:
        raise ConfigError(
            f"{path} already holds a run ({', '.join(existing)}); it would be overwritten",
            origin="out",
            hints=["pass force=True to replace it, or choose another directory"],
        )
    return existing


def run(
    trace: str | os.PathLike[str] | Workload | Sequence[RequestSpec],
    *,
    config: str | os.PathLike[str] | Mapping[str, Any] | bool | None = None,
    limit: int | None = None,
    format: str = "auto",
    skip_bad_lines: bool = False,
    sort_arrivals: bool = False,
    record_steps: bool = True,
    progress: Callable[[RunProgress], Any] | None = None,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    **settings: Any,
) -> Result:
    """Replay ``trace`` as ``kvframe run`` does and return its :class:`Result`.

    ::

        import kvframe

        result = kvframe.run("mooncake:conversation", limit=2000, scheduler="sjf")
        print(result.table())          # the summary kvframe run prints
        result.requests.describe()     # one row per request (pandas)
        result.steps.plot(x="start_seconds", y="num_computed_tokens")

    :param trace: a bundled workload (``mooncake:conversation``), a trace file, or
        a :class:`~kvframe.workloads.Workload` / list of request specs already built.
    :param config: ``kvframe.toml`` to read (see :func:`selection`).
    :param record_steps: keep every step for :attr:`Result.steps` (``False`` saves its
        memory, about 32 bytes a step).
    :param progress: called after every step with a live
        :class:`~kvframe.engine.RunProgress` (it should throttle itself).
    :param out: also :meth:`Result.save` the run there (``force``: replace a run).
    :param settings: ``kvframe.toml`` keys: plugin selections as config strings
        (``scheduler="priority"``, ``eviction="arc:variant=paper"``) and engine
        settings (``num_gpu_blocks=8000``, ``kv_memory="40GiB"``, ``vllm="0.33"``).
    :raises ConfigError: for a bad setting, naming it, with a did-you-mean; the same
        errors the CLI gives, and before any replay.

    An interrupt (Ctrl-C, a notebook's "interrupt kernel") or an engine stall ends the
    run early with a partial result (:attr:`Result.partial`; a stall also warns and
    says why in :attr:`Result.stalled`), as ``kvframe run`` keeps them.
    """
    from kvframe.engine import Engine, EngineConfig

    chosen, source = selection(config, settings)
    engine_config = EngineConfig.from_selection(chosen)
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}", origin=_WHERE)
    if out is not None:  # checked before the replay, as kvframe run checks --out
        _earlier_run(Path(out), force=force)
    workload = _workload(trace, limit, format, skip_bad_lines, sort_arrivals)
    engine = Engine.from_config(engine_config)
    built = not isinstance(trace, str | os.PathLike)  # load_workload already applied the limit
    outcome = _replay(engine, workload, limit if built else None, progress, record_steps)
    result = _result(outcome, engine.config, source)
    if out is not None:
        result.save(out, force=force)
    return result


def _replay(
    engine: Any,
    workload: Any,
    limit: int | None,
    progress: Callable[[RunProgress], Any] | None,
    record_steps: bool,
) -> RunResult:
    """``engine.run``; a stall's partial result is returned with a ``RuntimeWarning``
    (``kvframe run`` writes it and exits 1; a notebook keeps it)."""
    from kvframe.engine import EngineStalled

    try:
        return engine.run(workload, limit=limit, progress=progress, record_steps=record_steps)
    except EngineStalled as err:
        if err.result is None:
            raise
        warnings.warn(f"{err}; the result is partial", RuntimeWarning, stacklevel=3)
        return err.result


def _workload(
    trace: Any, limit: int | None, format: str, skip_bad_lines: bool, sort_arrivals: bool
) -> Any:
    """The workload ``trace`` names, read as ``kvframe run`` reads it; a built one as is."""
    if not isinstance(trace, str | os.PathLike):
        return trace if hasattr(trace, "requests") else list(trace)
    from kvframe.workloads import load_workload

    return load_workload(
        os.fspath(trace),
        format=format,
        limit=limit,
        skip_bad_lines=skip_bad_lines,
        sort_arrivals=sort_arrivals,
    )


def _result(outcome: RunResult, config: EngineConfig, source: str | None) -> Result:
    """The engine's result with the metadata ``kvframe run`` adds (config file, run id)."""
    summary = attrs.evolve(
        outcome.summary,
        metadata={
            **outcome.summary.metadata,
            "config_file": source,
            "run_id": uuid.uuid4().hex,
            **(
                {"interrupted_by": "KeyboardInterrupt"}
                if outcome.partial and "stalled" not in outcome.summary.metadata
                else {}
            ),
        },
    )
    return Result(summary, config, outcome.steps)
