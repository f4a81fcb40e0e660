"""``kvframe analyze TRACE``: how much of a trace a prefix cache could serve, at what size.

Prints the ceiling (unlimited cache), the reuse profile and a table of hit
rates by cache size for each eviction policy and the optimal bound; ``--json``
/ ``--csv`` print the same as data, ``--plot FILE`` also draws the curves.
Never imports the engine: the analysis is :mod:`kvframe.analyze`. Exit codes:
0, 2 for a usage error, 1 when a policy broke the eviction contract (the
other curves are still printed; the error names the policy, the request and
the call).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvframe.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from kvframe.config import ConfigError

if TYPE_CHECKING:
    from kvframe.cli.common import Context

__all__ = ["add_analyze_command", "parse_sizes"]

_SUFFIXES = {"k": 1_000, "m": 1_000_000}


def add_analyze_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="prefix-cache hit rate by cache size: every policy, the optimal bound, the ceiling",
        description="Replay a trace's prompts through a prefix cache with vLLM's block "
        "hashing, every request served at its arrival (no scheduler: use `kvframe sweep` "
        "when queueing matters), and print the ceiling, the reuse profile and hit-rate "
        "curves over cache size for each eviction policy and the optimal bound.",
    )
    parser.add_argument("trace", help="a Mooncake or kvframe JSONL file, or a bundled name")
    parser.add_argument(
        "--policy",
        action="append",
        metavar="SPEC",
        help="an eviction policy config string (repeatable; default: every installed "
        "policy and each choice of its options, e.g. arc and arc:variant=paper)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        help="tokens per block (default: the trace's own, 512 for Mooncake traces, else 16)",
    )
    parser.add_argument(
        "--sizes",
        metavar="LIST",
        help="cache sizes in blocks, comma separated, k/M suffixes allowed (default: "
        "14 sizes, log spaced, up to the trace's footprint)",
    )
    parser.add_argument(
        "--sample-rate",
        default="auto",
        help="fraction of requests every policy curve is computed on (spatial sampling, "
        "lru included so that the curves compare; each sampled curve states its error; "
        "default auto: all of a trace up to 60,000 block lookups)",
    )
    parser.add_argument(
        "--exact-lru",
        action="store_true",
        help="keep lru exact beside sampled curves (mixes exact and sampled: a warning "
        "says so; the default samples lru with the others and shows exact lru as a reference)",
    )
    _add_trace_and_output_options(parser)
    parser.set_defaults(handler=analyze_command)


def _add_trace_and_output_options(parser: Any) -> None:
    """How the trace is read and counted, and what is printed or drawn."""
    parser.add_argument(
        "--metric",
        choices=("tokens", "blocks"),
        default="tokens",
        help="tokens: vLLM's prefix-cache hit rate (default); blocks: hit blocks / "
        "looked-up blocks with no last-token rule, as other Mooncake replays count",
    )
    parser.add_argument(
        "--partial-blocks",
        action="store_true",
        help="a prompt's partial last block takes a cache slot until evicted, as in vLLM's "
        "default GPU pool (default: full blocks only, as kvframe's policy-ordered GPU pool "
        "and offload tiers)",
    )
    parser.add_argument("--limit", type=int, help="read only the first N requests")
    parser.add_argument(
        "--model",
        metavar="NAME",
        help="the model served (a preset or a config.json): a hybrid one, whose KV cache "
        "vLLM keeps in several groups, is refused (the analysis replays one group)",
    )
    parser.add_argument(
        "--vllm", default="0.19.1", help="the vLLM release deciding --model's groups"
    )
    parser.add_argument(
        "--no-optimal", action="store_true", help="skip the optimal bound (Belady's MIN)"
    )
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the analysis as JSON")
    fmt.add_argument("--csv", action="store_true", help="print the curves as CSV rows")
    parser.add_argument(
        "--plot", metavar="FILE", help="also draw the curves into FILE (.png, .svg; matplotlib)"
    )


def parse_sizes(text: str) -> list[int]:
    """``"1k,10k,30000"`` -> ``[1000, 10000, 30000]``."""
    sizes = []
    for part in text.split(","):
        word = part.strip().lower()
        scale = _SUFFIXES.get(word[-1:], 1)
        number = word[:-1] if scale != 1 else word
        try:
            value = round(float(number) * scale)
        except ValueError:
            raise ConfigError(
                f"--sizes: {part.strip()!r} is not a number of blocks (e.g. 1000, 10k, 1.5M)"
            ) from None
        if value < 1:
            raise ConfigError(f"--sizes: {part.strip()!r} must be at least one block")
        sizes.append(value)
    return sizes


def _sample_rate(text: str) -> float | str:
    if text == "auto":
        return text
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0 < rate <= 1:
        raise ConfigError(f"--sample-rate must be 'auto' or in (0, 1], got {text!r}")
    return rate


def _refuse_hybrid(model: str, vllm: str) -> None:
    """Refuse a model whose KV cache vLLM keeps in several groups, naming why.

    The analysis replays one prefix cache of full blocks. In a hybrid model a hit must
    hold in every group at once and a sliding-window group keeps only its window's
    blocks (Mamba: one state per request), so its curves would say nothing true.
    """
    from kvframe.models import ModelConfigError, kv_cache_config_for, load_model

    try:
        arch = load_model(model)
        groups = kv_cache_config_for(arch, 2**40, 16, vllm).groups
    except (ModelConfigError, ValueError) as error:
        raise ConfigError(str(error), origin="--model") from None
    if len(groups) > 1:
        kinds = ", ".join(sorted({type(g.spec).__name__ for g in groups}))
        raise ConfigError(
            f"{arch.name} is a hybrid model: vLLM {vllm} keeps its KV cache in "
            f"{len(groups)} groups ({kinds}). kvframe analyze replays one group of full "
            "blocks; a hybrid prefix hit must hold in every group at once and a "
            "sliding-window or Mamba group keeps only its last blocks, which it does "
            "not model. Analyze a full-attention model, or simulate with kvframe run.",
            origin="--model",
        )


def analyze_command(args: argparse.Namespace, ctx: Context) -> int:
    from kvframe.analyze import analyze_trace, auto_block_size, build_block_trace
    from kvframe.analyze.analysis import default_policy_specs
    from kvframe.workloads import WorkloadError, load_workload

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    if args.block_size is not None and args.block_size < 1:
        raise ConfigError(f"--block-size must be >= 1, got {args.block_size}")
    if args.model is not None:
        _refuse_hybrid(args.model, args.vllm)
    sizes = parse_sizes(args.sizes) if args.sizes else None
    rate = _sample_rate(args.sample_rate)
    registry = ctx.registry
    policies = args.policy or default_policy_specs(registry)
    for spec in policies:
        registry.resolve("eviction", spec)  # a bad name fails now, with what is installed
    if args.plot:
        _check_plot_target(Path(args.plot))
    try:
        workload = load_workload(args.trace, limit=args.limit)
    except (WorkloadError, OSError, EOFError) as err:
        print(f"kvframe analyze: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    block_size = args.block_size or auto_block_size(workload)
    trace = build_block_trace(
        workload.requests,
        block_size,
        name=args.trace,
        metric=args.metric,
        partial_blocks=args.partial_blocks,
    )
    result = analyze_trace(
        trace,
        policies=policies,
        registry=registry,
        sizes=sizes,
        sample_rate=rate,
        optimal=not args.no_optimal,
        metric=args.metric,
        lru_exact=args.exact_lru,
    )
    written = _show(args, ctx, result)
    if written is not None:
        return written
    for error in result.errors:
        print(f"kvframe analyze: error: {error}; its curve is left out", file=sys.stderr)
    return EXIT_FAILED if result.errors else EXIT_OK


def _show(args: argparse.Namespace, ctx: Context, result: Any) -> int | None:
    """Print the result as asked (table, JSON or CSV) and draw the figure; an exit code
    only when the figure cannot be drawn."""
    from kvframe.analyze.report import (
        above_bound_warnings,
        curve_table,
        mixing_warnings,
        plot_curves,
        summary_lines,
        to_csv,
        to_json,
    )

    if args.json or args.csv:
        if args.json:
            ctx.print(to_json(result))
        else:
            ctx.stdout.write(to_csv(result))
        # The table's header says these; data on stdout must not hide them.
        for line in mixing_warnings(result) + above_bound_warnings(result):
            print(f"kvframe analyze: {line}", file=sys.stderr)
    else:
        from kvframe.console import emit

        ctx.print("\n".join(summary_lines(result)))
        ctx.print()
        emit(ctx.stdout, curve_table(result))
    if args.plot:
        try:
            written = plot_curves(result, args.plot)
        except ImportError:
            print(
                "kvframe analyze: error: --plot needs matplotlib (pip install 'kvframe[plot]'); "
                "the table above is complete",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(f"kvframe analyze: wrote {written}", file=sys.stderr)
    return None


def _check_plot_target(path: Path) -> None:
    """Fail before the analysis, not after it, when the figure cannot be written."""
    if path.suffix.lower() not in {".png", ".svg", ".pdf"}:
        raise ConfigError(f"--plot {path}: the file must end in .png, .svg or .pdf")
    if not path.parent.exists() and str(path.parent) not in ("", "."):
        raise ConfigError(f"--plot {path}: the folder {path.parent} does not exist")
