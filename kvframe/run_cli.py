"""``kvframe run`` (replay a workload) and ``kvframe gen`` (write a synthetic one).

``run`` reads ``kvframe.toml`` and the flags into an
:class:`~kvframe.engine.EngineConfig`, replays the trace with a live progress
line on stderr (only on a terminal), prints the summary table on stdout and
writes ``metrics.json`` and ``requests.csv`` to the output directory. Ctrl-C
stops the run cleanly: what was measured is still written, marked partial, and
the exit status is 130 (the shell's convention for SIGINT).

Exit codes: 0 success, 1 the engine stalled, 2 bad trace, configuration or
usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvframe.config import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvframe.cli import Context
    from kvframe.engine import RunResult

__all__ = ["GENERATORS", "add_gen_command", "add_run_command"]

EXIT_OK = 0
EXIT_STALLED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Engine settings that have a flag; their ``dest`` is the engine key.
_ENGINE_FLAGS = (
    "preset",
    "num_gpu_blocks",
    "kv_memory",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "long_prefill_token_threshold",
    "enable_prefix_caching",
    "reserve_full_sequence",
    "gpu_eviction",
    "seed",
    "offload_bandwidth",
    "executor",
    "cost_model",
)


# ==========================================================================
# kvframe run
# ==========================================================================


def add_run_command(subparsers: Any) -> None:
    from kvframe.cli import add_selection_arguments

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

    engine = parser.add_argument_group(
        "engine", "override kvframe.toml's engine settings of the same name"
    )
    engine.add_argument("--preset", metavar="NAME", help="cost-model preset (model + GPU)")
    pool = engine.add_mutually_exclusive_group()
    pool.add_argument(
        "--num-gpu-blocks", type=int, metavar="N", help="GPU KV blocks (including the null block)"
    )
    pool.add_argument(
        "--kv-memory",
        metavar="SIZE",
        help="GPU memory for KV cache, e.g. 40GiB (blocks from the preset's model shape)",
    )
    engine.add_argument("--block-size", type=int, metavar="N", help="tokens per KV block")
    engine.add_argument("--max-num-seqs", type=int, metavar="N", help="max running requests")
    engine.add_argument(
        "--max-num-batched-tokens", type=int, metavar="N", help="token budget per step"
    )
    engine.add_argument("--max-model-len", type=int, metavar="N", help="context length limit")
    engine.add_argument(
        "--long-prefill-token-threshold",
        type=int,
        metavar="N",
        help="cap on tokens one request gets per step (0: none)",
    )
    engine.add_argument(
        "--no-prefix-caching",
        dest="enable_prefix_caching",
        action="store_const",
        const=False,
        default=None,
        help="turn the GPU prefix cache off",
    )
    engine.add_argument(
        "--reserve-full-sequence",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="admit a request only if its whole prompt fits the free blocks "
        "(vLLM's scheduler_reserve_full_isl; default: on)",
    )
    engine.add_argument(
        "--gpu-eviction",
        metavar="SPEC",
        help="eviction policy ordering the GPU prefix cache (default: vLLM's LRU free queue)",
    )
    engine.add_argument("--seed", type=int, metavar="N", help="block-hash seed")
    engine.add_argument(
        "--executor",
        metavar="SPEC",
        help="sim (default: cost model, no tensors) or torch[:preset=tiny,dtype=float32,"
        "device=cpu,...]: a real Llama decoder on paged KV; writes outputs.jsonl",
    )
    engine.add_argument(
        "--cost-model",
        metavar="FILE",
        help="cost-model file (from kvframe calibrate) replacing the preset's step times",
    )
    engine.add_argument(
        "--offload-bandwidth",
        metavar="SIZE",
        help="device <-> host bytes per second for offload transfers, e.g. 25GB "
        "(default: the preset's PCIe figure)",
    )

    inputs = parser.add_argument_group("input and output")
    inputs.add_argument("--limit", type=int, metavar="N", help="replay only the first N requests")
    inputs.add_argument(
        "--skip-bad-lines", action="store_true", help="skip malformed trace lines (and count them)"
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
        help="directory for metrics.json and requests.csv (default: runs/<trace>-<date>-<time>)",
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


def _engine_config(args: argparse.Namespace) -> Any:
    """Merge kvframe.toml and the flags into an EngineConfig, checking the plugin kinds."""
    from kvframe.cli import load_selection
    from kvframe.engine import EngineConfig

    selection = load_selection(args, _ENGINE_FLAGS)
    if selection.offload is None and selection.eviction is not None:
        raise ConfigError(
            "the eviction policy selects how the offload tier evicts, "
            "but no offload tier is selected",
            text=selection.eviction.source,
            origin=selection.eviction.origin,
            hints=[
                "for the order in which the GPU prefix cache evicts, use "
                f"--gpu-eviction {selection.eviction.source or 'NAME'} "
                "(or gpu_eviction in kvframe.toml)",
                "to add a CPU tier: --offload cpu:capacity=8GiB",
            ],
        )
    if selection.offload is None and selection.reuse_filter is not None:
        raise ConfigError(
            "a reuse filter decides what an offload tier stores, but no offload tier is selected",
            text=selection.reuse_filter.source,
            origin=selection.reuse_filter.origin,
        )
    fields: dict[str, Any] = {
        "tracers": selection.tracer,
        "offload": selection.offload,
        "eviction": selection.eviction,
        "reuse_filter": selection.reuse_filter,
    }
    if selection.scheduling is not None:
        fields["scheduling"] = selection.scheduling
    return EngineConfig.from_settings(selection.engine, origins=selection.origins, **fields)


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


def run_command(args: argparse.Namespace, ctx: Context) -> int:
    """The ``run`` handler: see the module docstring for exit codes."""
    from kvframe.engine import Engine, EngineStalled
    from kvframe.progress import ProgressLine
    from kvframe.workloads import WorkloadError, load_workload

    config = _engine_config(args)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    try:
        workload = load_workload(
            args.trace, format=args.format, limit=args.limit, skip_bad_lines=args.skip_bad_lines
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

    engine = Engine.from_config(config, ctx.registry)
    progress = ProgressLine(sys.stderr, enabled=args.progress)
    try:
        result = engine.run(workload, progress=progress if progress.enabled else None)
    except EngineStalled as err:
        progress.close()
        print(f"kvframe run: error: {err}", file=sys.stderr)
        return EXIT_STALLED
    progress.close()

    out_dir = Path(args.out) if args.out else _default_out_dir(args.trace)
    _write_outputs(result, out_dir)
    _write_executor_outputs(engine, out_dir)
    _report(result, out_dir, ctx, as_json=args.json)
    return EXIT_INTERRUPTED if result.partial else EXIT_OK


def _write_outputs(result: RunResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    result.summary.write_json(out_dir / "metrics.json")
    result.summary.write_csv(out_dir / "requests.csv")


def _write_executor_outputs(engine: Any, out_dir: Path) -> None:
    """The torch executor's generated tokens (outputs.jsonl) and measured steps (steps.csv)."""
    outputs = getattr(engine.executor, "outputs", None)
    if outputs is None:
        return
    from kvframe.executors.torch.outputs import OUTPUTS_FILE, write_outputs

    write_outputs(out_dir / OUTPUTS_FILE, outputs)
    with (out_dir / "steps.csv").open("w") as f:
        f.write("step,prefill_tokens,decode_seqs,context_tokens,virtual_s,wall_s\n")
        for i, s in enumerate(engine.executor.steps, 1):
            f.write(f"{i},{s.prefill},{s.decode},{s.context},{s.virtual_s!r},{s.wall_s!r}\n")


def _bytes(n: float) -> str:
    """``12.3 GiB``: bytes for a person."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _report(result: RunResult, out_dir: Path, ctx: Context, *, as_json: bool) -> None:
    summary = result.summary
    where = f"wrote {out_dir / 'metrics.json'} and {out_dir / 'requests.csv'}"
    if as_json:
        ctx.print(json.dumps(summary.to_dict(), indent=2, allow_nan=False))
        print(where, file=sys.stderr)
        return
    ctx.print(summary.render_table())
    counters = summary.counters
    notes = []
    if counters.get("num_requests_ignored"):
        notes.append(
            f"{counters['num_requests_ignored']} requests ignored: their prompt exceeds "
            "max_model_len or they could never fit the GPU pool"
        )
    if "offload_bytes_stored" in counters:
        notes.append(
            "offload tier: {hit} hit tokens, {stored} stored / {loaded} loaded, "
            "{evicted} blocks evicted, {time:.3f} s of transfers".format(
                hit=counters.get("offload_hit_tokens", 0),
                stored=_bytes(counters["offload_bytes_stored"]),
                loaded=_bytes(counters.get("offload_bytes_loaded", 0)),
                evicted=counters.get("offload_evicted_blocks", 0),
                time=counters.get("offload_transfer_time_s", 0.0),
            )
        )
    if counters.get("num_skipped_lines"):
        notes.append(f"{counters['num_skipped_lines']} malformed trace lines skipped")
    if result.partial:
        notes.append(
            f"interrupted: {counters.get('num_requests_unfinished', 0)} requests unfinished, "
            f"{counters.get('num_requests_not_arrived', 0)} not yet arrived"
        )
    if notes:
        ctx.print("")
        for note in notes:
            ctx.print(f"note: {note}")
    ctx.print("")
    ctx.print(where)


# ==========================================================================
# kvframe gen
# ==========================================================================


def add_chat_generator(generators: Any) -> None:
    """``kvframe gen chat``: the shared-prefix chat workload of kvframe.workloads.chat."""
    parser = generators.add_parser(
        "chat",
        help="shared-prefix chat: a few system prompts, Poisson arrivals",
        description="Write a seeded shared-prefix chat workload as kvframe JSONL "
        "(see docs/workloads.md). Length distributions: N, fixed:value=N, "
        "uniform:low=A,high=B or lognormal:median=M,sigma=S[,min=A,max=B].",
    )
    parser.add_argument("--out", required=True, metavar="FILE", help="output file ('-': stdout)")
    parser.add_argument("--requests", type=int, metavar="N", help="number of requests")
    parser.add_argument("--seed", type=int, metavar="S", help="random seed")
    parser.add_argument(
        "--rate", metavar="R", help="Poisson arrivals per second ('none': all at start)"
    )
    parser.add_argument("--num-system-prompts", type=int, metavar="K")
    parser.add_argument("--system-prompt-length", metavar="DIST")
    parser.add_argument("--user-prompt-length", metavar="DIST")
    parser.add_argument("--output-length", metavar="DIST")
    parser.add_argument(
        "--shared-fraction", type=float, metavar="F", help="fraction using a shared system prompt"
    )
    parser.add_argument(
        "--prefix-popularity", type=float, metavar="S", help="Zipf exponent over system prompts"
    )
    parser.add_argument("--start-time", type=float, metavar="T", help="first arrival, seconds")
    parser.set_defaults(handler=_gen_chat)


def add_agentic_generator(generators: Any) -> None:
    """``kvframe gen agentic``: multi-turn agent jobs (kvframe.workloads.agentic)."""
    from kvframe.workloads.agentic import TOOL_MIXES

    parser = generators.add_parser(
        "agentic",
        help="multi-turn agent jobs with tool calls between turns",
        description="Write seeded multi-turn agent jobs as kvframe JSONL: each turn's "
        "prompt extends the previous turn's, and the next turn arrives a tool duration "
        "after the previous one finishes (closed loop, see docs/continuum.md). "
        "Length distributions as for 'gen chat'.",
    )
    parser.add_argument("--out", required=True, metavar="FILE", help="output file ('-': stdout)")
    parser.add_argument("--jobs", type=int, metavar="N", help="number of jobs")
    parser.add_argument("--seed", type=int, metavar="S", help="random seed")
    parser.add_argument(
        "--rate", metavar="R", help="Poisson job arrivals per second ('none': all at start)"
    )
    parser.add_argument("--turns", metavar="DIST", help="turns per job")
    parser.add_argument("--num-system-prompts", type=int, metavar="K")
    parser.add_argument("--system-prompt-length", metavar="DIST")
    parser.add_argument("--task-length", metavar="DIST")
    parser.add_argument("--output-length", metavar="DIST")
    parser.add_argument(
        "--tools", choices=sorted(TOOL_MIXES), help="tool mix (duration distributions)"
    )
    parser.add_argument(
        "--tool-time-scale", type=float, metavar="X", help="multiply every tool duration by X"
    )
    parser.add_argument("--max-context-tokens", type=int, metavar="N")
    parser.set_defaults(handler=_gen_agentic)


def _gen_agentic(args: argparse.Namespace, ctx: Context) -> int:
    from kvframe.workloads.agentic import AgenticConfig, write_agentic_jsonl

    options: dict[str, Any] = {
        "num_jobs": args.jobs,
        "seed": args.seed,
        "num_turns": args.turns,
        "num_system_prompts": args.num_system_prompts,
        "system_prompt_length": args.system_prompt_length,
        "task_length": args.task_length,
        "output_length": args.output_length,
        "tools": args.tools,
        "tool_time_scale": args.tool_time_scale,
        "max_context_tokens": args.max_context_tokens,
    }
    options = {k: v for k, v in options.items() if v is not None}
    if args.rate is not None:
        options["rate"] = parse_rate(args.rate)
    try:
        config = AgenticConfig(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err), origin="kvframe gen agentic") from None
    return write_generated(args.out, config, write_agentic_jsonl, ctx)


GENERATORS: list[Any] = [add_chat_generator, add_agentic_generator]
"""Functions that each add one ``kvframe gen`` generator; later issues append theirs."""


def add_gen_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gen",
        help="write a synthetic workload",
        description="Generate a synthetic workload as kvframe JSONL.",
    )
    generators = parser.add_subparsers(dest="generator", metavar="GENERATOR", required=True)
    for add in GENERATORS:
        add(generators)


def _gen_chat(args: argparse.Namespace, ctx: Context) -> int:
    from kvframe.workloads.chat import ChatConfig, write_chat_jsonl

    options: dict[str, Any] = {
        "num_requests": args.requests,
        "seed": args.seed,
        "num_system_prompts": args.num_system_prompts,
        "system_prompt_length": args.system_prompt_length,
        "user_prompt_length": args.user_prompt_length,
        "output_length": args.output_length,
        "shared_fraction": args.shared_fraction,
        "prefix_popularity": args.prefix_popularity,
        "start_time": args.start_time,
    }
    options = {k: v for k, v in options.items() if v is not None}
    if args.rate is not None:
        options["rate"] = parse_rate(args.rate)
    try:
        config = ChatConfig(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err), origin="kvframe gen chat") from None
    return write_generated(args.out, config, write_chat_jsonl, ctx)


def parse_rate(text: str) -> float | None:
    """``--rate``: arrivals per second, or ``none`` for everything at the start."""
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"expected a number or 'none', got {text!r}", origin="--rate") from None


def write_generated(out: str, config: Any, write: Callable[[Any, Any], int], ctx: Context) -> int:
    """Write a generated workload to ``out`` (a path, or ``-`` for stdout)."""
    if out == "-":
        write(ctx.stdout, config)
    else:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        count = write(path, config)
        print(f"wrote {count} requests to {path}", file=sys.stderr)
    return EXIT_OK
