"""``kvframe run``: replay a workload.

``run`` reads ``kvframe.toml`` and the flags into an
:class:`~kvframe.engine.EngineConfig`, replays the trace with progress on
stderr (a live line on a terminal; elsewhere a plain line every 10 s), prints
the summary table on stdout and writes ``metrics.json`` and ``requests.csv``
to the output directory. Ctrl-C
or SIGTERM (``timeout``, Slurm) stops the run cleanly: what was measured is
still written, marked partial (``metadata.interrupted_by`` says which), and the
exit status is the shell's convention, 130 for SIGINT and 143 for SIGTERM.

The output directory is created and checked before the replay, and an earlier
run in it is never overwritten without ``--force``. A directory holds one run:
``--force`` removes every file an earlier run wrote there (so no stale
``outputs.jsonl`` outlives the run it came from) and refuses a directory that
holds files ``kvframe run`` did not write. Every file of a run carries its run
id (``metadata.run_id`` in ``metrics.json``, ``run_id`` in ``outputs.jsonl``
and ``steps.csv``), so that ``outputs-diff`` can tell files of different runs
apart. If writing still fails, the summary is printed with a one-line error.

An engine stall (a scheduling policy that never admits some requests, see
:class:`~kvframe.engine.EngineStalled`) is kept the same way: the requests that
finished are written, marked partial (``metadata.stalled`` holds the reason),
the summary says so, and the exit status is 1.

Exit codes: 0 success; 1 the run produced no usable result (the engine
stalled -- partial results written --, every request was ignored, or the results
could not be written); 2 bad trace, configuration or usage; 130 interrupted
(Ctrl-C); 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STALLED,
    EXIT_USAGE,
    Context,
    add_engine_arguments,
    add_selection_arguments,
    config_file,
    engine_config,
)
from kvframe.config import ConfigError

if TYPE_CHECKING:
    from kvframe.engine import Engine
    from kvframe.engine.engine import RunResult
    from kvframe.engine.interrupt import Interrupts
    from kvframe.engine.metrics import MetricsSummary
    from kvframe.fleet import FleetResult
    from kvframe.workloads import Workload

__all__ = [
    "OUTPUT_FILES",
    "RUN_FILES",
    "add_run_command",
    "nothing_ran",
    "prepare_out_dir",
    "run_command",
]


def add_run_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="replay a workload through the scheduler and KV cache",
        description="Replay a Mooncake or kvframe JSONL trace on a virtual clock with the "
        "selected plugins, print a summary and write metrics.json and requests.csv.",
    )
    parser.add_argument(
        "trace",
        metavar="TRACE",
        help="workload file (.jsonl or .jsonl.gz), or a bundled workload such as "
        "mooncake:conversation (`kvframe workloads` lists them)",
    )
    add_selection_arguments(parser)

    add_engine_arguments(parser)
    _add_processes_argument(parser)

    inputs = parser.add_argument_group("input and output")
    inputs.add_argument("--limit", type=int, metavar="N", help="replay only the first N requests")
    inputs.add_argument(
        "--skip-bad-lines", action="store_true", help="skip malformed trace lines (and count them)"
    )
    parser.add_argument(
        "--sort-arrivals",
        action="store_true",
        help="sort requests by arrival (stably) instead of refusing a trace whose arrivals "
        "go backwards",
    )
    inputs.add_argument(
        "--format",
        choices=("auto", "mooncake", "kvframe"),
        default="auto",
        help="trace format (default: detected)",
    )
    inputs.add_argument(
        "--out",
        metavar="DIR",
        help="directory for metrics.json and requests.csv (default: runs/<trace>-<date>-<time>); "
        "created and checked before the run",
    )
    inputs.add_argument(
        "--force",
        action="store_true",
        help="overwrite the results of an earlier run in --out (refused otherwise)",
    )
    inputs.add_argument(
        "--json", action="store_true", help="print metrics.json on stdout instead of the table"
    )
    inputs.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live progress line on stderr (default: when stderr is a terminal)",
    )
    parser.set_defaults(handler=run_command)


def _default_out_dir(trace: str) -> Path:
    name = Path(trace).name.replace(":", "-")  # bundled names: mooncake-conversation
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{name}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def _add_processes_argument(parser: argparse.ArgumentParser) -> None:
    """``--processes N``: a fleet's replicas in parallel (:mod:`kvframe.fleet.parallel`)."""
    parser.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="run a fleet's replicas in N parallel processes, with results identical to one "
        "process (routers that read no replica state: round-robin, random, prefix-affinity)",
    )


def run_command(args: argparse.Namespace, ctx: Context) -> int:
    """The ``run`` handler: see the module docstring for exit codes."""
    from kvframe.cli.progress import ProgressLine
    from kvframe.engine import Engine, EngineStalled
    from kvframe.engine.interrupt import sigterm_as_interrupt

    config = engine_config(args)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    workload = _load_workload(args)
    if isinstance(workload, int):
        return workload

    # Checked before the replay, so a bad --out costs nothing already computed.
    out_dir = Path(args.out) if args.out else _default_out_dir(args.trace)
    created = prepare_out_dir(out_dir, force=args.force)
    run_id = uuid.uuid4().hex
    if args.processes is not None and not config.is_fleet:
        raise ConfigError("--processes runs a fleet's replicas in parallel: give --replicas N")
    if config.is_fleet:
        return _run_fleet(args, ctx, config, workload, out_dir, created, run_id)
    try:
        engine = Engine.from_config(config, ctx.registry)
    except BaseException:
        if created:
            _remove_if_empty(out_dir)
        raise
    progress = ProgressLine(sys.stderr, enabled=args.progress)
    with sigterm_as_interrupt() as interrupts:
        try:
            result = engine.run(workload, progress=progress if progress.enabled else None)
        except EngineStalled as err:
            progress.close()
            if err.result is None:
                print(f"kvframe run: error: {err}", file=sys.stderr)
                return EXIT_STALLED
            result = err.result  # written like an interrupt's: see _save_and_report
        else:
            progress.close()

    return _save_and_report(args, ctx, engine, result, interrupts, out_dir, run_id)


def _run_fleet(
    args: argparse.Namespace,
    ctx: Context,
    config: Any,
    workload: Workload,
    out_dir: Path,
    created: bool,
    run_id: str,
) -> int:
    """``--replicas N --router SPEC``: the fleet's replay (:mod:`kvframe.fleet`), its
    summary and per-replica table, the same files as a single engine's."""
    from kvframe.engine import EngineStalled
    from kvframe.engine.interrupt import sigterm_as_interrupt
    from kvframe.fleet import Fleet, RoutingError

    try:
        fleet = Fleet.from_config(config, registry=ctx.registry)
    except ValueError as err:
        if created:
            _remove_if_empty(out_dir)
        raise ConfigError(str(err), origin="--replicas") from None
    except BaseException:
        if created:
            _remove_if_empty(out_dir)
        raise
    if args.processes is not None:
        from kvframe.fleet.parallel import parallel_problem

        problem = parallel_problem(fleet, workload.requests)
        if problem is not None or args.processes < 1:
            if created:
                _remove_if_empty(out_dir)
            problem = problem or f"N must be >= 1, got {args.processes}"
            raise ConfigError(
                f"cannot run the replicas in parallel: {problem}", origin="--processes"
            )
    error = None
    with sigterm_as_interrupt() as interrupts:
        try:
            result = _replay_fleet(fleet, workload, args.processes)
        except EngineStalled as err:  # written like an interrupt's: see _save_and_report
            if err.result is None:
                print(f"kvframe run: error: {err}", file=sys.stderr)
                return EXIT_STALLED
            result = err.result
        except RoutingError as err:
            assert err.result is not None
            result, error = err.result, str(err)
    status = _save_and_report(args, ctx, None, result, interrupts, out_dir, run_id)
    if error is not None:
        print(f"kvframe run: error: {error} (partial results written)", file=sys.stderr)
        return EXIT_FAILED
    return status


def _replay_fleet(fleet: Any, workload: Workload, processes: int | None) -> Any:
    """``fleet.run(workload)``, or with ``--processes N`` the same run with its replicas in
    parallel processes (:mod:`kvframe.fleet.parallel`), refused with the reason if the
    router or the workload does not allow it."""
    if processes is None:
        return fleet.run(workload)
    from kvframe.fleet.parallel import run_parallel

    return run_parallel(fleet, workload, processes=processes)


def _load_workload(args: argparse.Namespace) -> Workload | int:
    """The workload ``--trace`` names, or the exit status after printing why it can't be read."""
    from kvframe.workloads import WorkloadError, load_workload

    try:
        return load_workload(
            args.trace,
            format=args.format,
            limit=args.limit,
            skip_bad_lines=args.skip_bad_lines,
            sort_arrivals=args.sort_arrivals,
        )
    except FileNotFoundError as err:  # WorkloadNotFoundError words it, did-you-mean included
        print(f"kvframe run: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (WorkloadError, OSError, EOFError) as err:
        print(f"kvframe run: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kvframe run: interrupted while reading the trace", file=sys.stderr)
        return EXIT_INTERRUPTED


def _save_and_report(
    args: argparse.Namespace,
    ctx: Context,
    engine: Engine | None,
    result: RunResult | FleetResult,
    interrupts: Interrupts,
    out_dir: Path,
    run_id: str,
) -> int:
    """Write the results, print the summary, and choose the exit status.

    The summary is printed even when writing fails, so a finished replay is never lost.
    """
    source = config_file(args)
    stalled = result.summary.metadata.get("stalled")
    summary = attrs.evolve(
        result.summary,
        metadata={
            **result.summary.metadata,
            "config_file": None if source is None else str(Path(source).resolve()),
            "run_id": run_id,
            **(
                {"interrupted_by": interrupts.received or "SIGINT"}
                if result.partial and not stalled and not getattr(result, "error", None)
                else {}
            ),
        },
    )
    try:
        _write_outputs(summary, out_dir)
        if engine is not None:
            _write_executor_outputs(engine, out_dir, run_id)
    except OSError as err:
        _report(summary, None, ctx, as_json=args.json, config_source=source)
        print(
            f"kvframe run: error: could not write the results to {out_dir}: {err.strerror or err}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    _report(summary, out_dir, ctx, as_json=args.json, config_source=source)
    if stalled:
        print(
            f"kvframe run: error: {stalled}\nkvframe run: the results up to the stall are "
            f"written to {out_dir}, marked partial (metadata.stalled)",
            file=sys.stderr,
        )
        return EXIT_STALLED
    if result.partial:
        return interrupts.exit_status
    reason = nothing_ran(summary.counters)
    if reason is not None:
        print(f"kvframe run: error: {reason}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def nothing_ran(counters: Mapping[str, Any]) -> str | None:
    """Why no request could run, or ``None`` when some did.

    A run in which every request was ignored measured nothing; its table of
    zeros must not pass for a result (exit status 1).
    """
    arrived = counters.get("num_requests", 0)
    ignored = counters.get("num_requests_ignored", 0)
    if arrived == 0:
        return "the trace has no requests"
    if counters.get("num_requests_finished", 0) or ignored < arrived:
        return None
    return (
        f"no request could run: all {arrived} were ignored because their prompt exceeds "
        f"max_model_len or they could never fit the GPU pool "
        f"({counters.get('num_gpu_blocks', '?')} blocks); raise --max-model-len, "
        "--num-gpu-blocks or --kv-memory"
    )


def prepare_out_dir(out_dir: Path, *, force: bool) -> bool:
    """Create ``out_dir`` and check that results can be written there, before the run.

    An existing run (any of :data:`RUN_FILES` present) is refused unless
    ``force``: an explicit ``--out`` naming an old run is more often a slip than
    a wish, and the old results cannot be recovered once replaced. With
    ``force`` the old run's files are removed -- all of them, so that a file
    this run does not write (a torch run's ``outputs.jsonl`` under a
    simulated run) cannot pass for part of it -- and a directory that also
    holds other files is refused: ``--force`` replaces a run, never someone's
    files. Returns whether the directory was created here.

    :raises ConfigError: naming the directory and what is wrong with it.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir} exists and is not a directory", origin="--out")
    existing = [name for name in RUN_FILES if (out_dir / name).exists()]
    if existing and not force:
        raise ConfigError(
            f"{out_dir} already holds a run ({', '.join(existing)}); it would be overwritten",
            origin="--out",
            hints=["pass --force to replace it, or choose another --out"],
        )
    if existing:
        foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in RUN_FILES)
        if foreign:
            shown = ", ".join(foreign[:5]) + (
                f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            )
            raise ConfigError(
                f"{out_dir} holds an earlier run and files kvframe run did not write ({shown}); "
                "--force replaces a run directory, it does not delete other files",
                origin="--out",
                hints=["choose another --out, or move those files away"],
            )
        for name in existing:
            (out_dir / name).unlink()
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as err:
        blocker = next((p for p in out_dir.parents if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file" if blocker is not None else (err.strerror or str(err))
        raise ConfigError(f"cannot write results to {out_dir}: {why}", origin="--out") from None
    return created


def _remove_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


OUTPUT_FILES = ("metrics.json", "requests.csv")
"""What every ``run`` writes into its output directory."""

RUN_FILES = (*OUTPUT_FILES, "outputs.jsonl", "steps.csv")
"""Every file a ``run`` may write there (the last two: ``--executor torch``)."""


def _write_outputs(summary: MetricsSummary, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary.write_json(out_dir / "metrics.json")
    summary.write_csv(out_dir / "requests.csv")


def _write_executor_outputs(engine: Any, out_dir: Path, run_id: str) -> None:
    """The torch executor's generated tokens (outputs.jsonl) and measured steps (steps.csv)."""
    outputs = getattr(engine.executor, "outputs", None)
    if outputs is None:
        return
    from kvframe.executors.torch.outputs import OUTPUTS_FILE, write_outputs

    write_outputs(out_dir / OUTPUTS_FILE, outputs, engine.executor.decoded_outputs(), run_id=run_id)
    with (out_dir / "steps.csv").open("w") as f:
        f.write(
            "step,prefill_tokens,decode_seqs,context_tokens,virtual_s,wall_s,"
            "cpu_s,prefill_seqs,prefill_pairs,run_id\n"
        )
        for i, s in enumerate(engine.executor.steps, 1):
            f.write(
                f"{i},{s.prefill},{s.decode},{s.context},{s.virtual_s!r},{s.wall_s!r},"
                f"{s.cpu_s!r},{s.prefill_seqs},{s.prefill_pairs},{run_id}\n"
            )


def _bytes(n: float) -> str:
    """``12.3 GiB``: bytes for a person."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _report(
    summary: MetricsSummary,
    out_dir: Path | None,
    ctx: Context,
    *,
    as_json: bool,
    config_source: str | None,
) -> None:
    """Print the summary; ``out_dir`` ``None``: the results could not be written."""
    where = (
        f"wrote {out_dir / 'metrics.json'} and {out_dir / 'requests.csv'}"
        if out_dir is not None
        else None
    )
    if as_json:
        ctx.print(json.dumps(summary.to_dict(), indent=2, allow_nan=False))
        if where:
            print(where, file=sys.stderr)
        return
    from kvframe.console import emit
    from kvframe.engine.describe import describe_configuration, describe_core

    emit(ctx.stdout, *summary.tables())
    if summary.metadata.get("fleet"):
        from kvframe.fleet.metrics import replica_table

        emit(ctx.stdout, "", replica_table(summary))
        if summary.metadata["fleet"].get("disagg"):
            from kvframe.fleet.disagg import disagg_table

            emit(ctx.stdout, "", disagg_table(summary))
    ctx.print("")
    metadata = summary.metadata
    for line in describe_configuration(
        metadata.get("engine", {}), config_source, metadata.get("clock", "virtual")
    ):
        ctx.print(line)
    ctx.print(describe_core(metadata))
    notes = _notes(summary)
    if notes:
        ctx.print("")
        for note in notes:
            ctx.print(f"note: {note}")
    if where:
        ctx.print("")
        ctx.print(where)


def _tier_note(counters: Mapping[str, Any], metadata: Mapping[str, Any]) -> str:
    """The tier's traffic in one line whose numbers add up: hit tokens for new and for
    preempted requests, and the loaded bytes as tokens of KV (issue 50: a tier serving
    only preempted requests read "0 hit tokens ... 1.8 GiB loaded")."""
    hit = counters.get("offload_hit_tokens", 0)
    new = counters.get("offload_hit_tokens_new", hit)
    preempted = counters.get("offload_hit_tokens_preempted", 0)
    loaded = counters.get("offload_bytes_loaded", 0)
    per_token = (metadata.get("preset") or {}).get("kv_bytes_per_token")
    as_tokens = f" ({loaded / per_token:,.0f} tokens of KV)" if per_token else ""
    return (
        f"offload tier: {hit:,} hit tokens ({new:,} for new requests + {preempted:,} for "
        f"preempted ones), {_bytes(counters['offload_bytes_stored'])} stored / "
        f"{_bytes(loaded)} loaded{as_tokens}, "
        f"{counters.get('offload_evicted_blocks', 0):,} blocks evicted, "
        f"{counters.get('offload_transfer_time_s', 0.0):.3f} s of transfers"
    )


def _notes(summary: MetricsSummary) -> list[str]:
    """The footnotes a reader needs to read the tables right: ignored requests, the
    offload tier's traffic, skipped trace lines, and what an interrupt left undone."""
    from kvframe.console import counted

    counters = summary.counters
    notes: list[str] = []
    if counters.get("num_requests_ignored"):
        notes.append(
            f"{counted(counters['num_requests_ignored'], 'request')} ignored: their prompt exceeds "
            "max_model_len or they could never fit the GPU pool; they are in no latency "
            "or token figure"
        )
    if "offload_bytes_stored" in counters:
        notes.append(_tier_note(counters, summary.metadata))
    if counters.get("num_skipped_lines"):
        notes.append(f"{counters['num_skipped_lines']} malformed trace lines skipped")
    if summary.partial and summary.metadata.get("stalled"):
        notes.append(
            f"stalled: {counters.get('num_requests_unfinished', 0)} requests could never be "
            f"scheduled or finished, {counters.get('num_requests_not_arrived', 0)} not yet "
            "arrived; the figures cover the requests that finished before the stall"
        )
    elif summary.partial:
        cause = summary.metadata.get("interrupted_by")
        notes.append(
            f"interrupted{f' ({cause})' if cause else ''}: "
            f"{counters.get('num_requests_unfinished', 0)} requests unfinished, "
            f"{counters.get('num_requests_not_arrived', 0)} not yet arrived"
        )
    return notes
