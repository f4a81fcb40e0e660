"""``kvframe calibrate``: fit the sim's cost model to measured step times.

``calibrate`` times the torch executor over a grid of step shapes, fits the
sim's cost model (:mod:`kvframe.calibrate.torch_timing`) and writes a
cost-model file for ``kvframe run --cost-model FILE``; with ``--check`` it
also replays a held-out workload both ways and reports the errors.
``calibrate --from-steps FILE.csv`` instead fits step times measured on any
engine (:mod:`kvframe.calibrate`), without torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import attrs

from kvframe.config import ConfigError
from kvframe.domain.transfers import BLOCK_LAYOUTS

__all__ = ["add_calibrate_command"]


def add_calibrate_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="fit the sim's cost model to the torch executor's measured step times",
        description="Time the torch executor over a grid of batch shapes (prefill tokens, "
        "decode requests, context lengths), fit the sim cost model's coefficients and "
        "write a cost-model file that `kvframe run --cost-model FILE` accepts.",
    )
    _add_torch_timing_arguments(parser)
    parser.add_argument(
        "--form",
        choices=("extended", "linear", "overlap", "additive"),
        default=None,
        help="cost-model terms to fit. Timing the torch executor: extended (default; adds "
        "per-prefill-request and prefill-attention-pair terms) or linear (the four roofline "
        "terms only). With --from-steps: overlap (default; compute and bandwidth overlapped, "
        "see docs/cost-model.md) or additive",
    )
    _add_from_steps_arguments(parser)
    parser.add_argument(
        "--out", default="cost-model.json", metavar="FILE", help="(default: cost-model.json)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="also replay a held-out workload on the torch executor and the calibrated sim "
        "and report per-step, duration and mean-TTFT errors",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        metavar="N",
        help="measurement rounds (default 3; 1 on a slow model): each times a share of the "
        "grid, replays the training workload and, with --check, the held-out one; a training "
        "step's time is its median over the rounds, and the sim is compared with the held-out "
        "replay of median duration",
    )
    parser.set_defaults(handler=_calibrate)


def _add_torch_timing_arguments(parser: Any) -> None:
    """The options of timing the torch executor (the default mode)."""
    parser.add_argument(
        "--executor",
        default="torch:preset=small",
        metavar="SPEC",
        help="the torch executor to time (default: torch:preset=small)",
    )
    parser.add_argument("--block-size", type=int, default=16, metavar="N")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        metavar="N",
        help="timings per grid shape, spread over the --runs rounds (default 5)",
    )
    parser.add_argument(
        "--clock",
        choices=("auto", "cpu", "wall"),
        default="auto",
        help="what to measure: cpu (the forward pass's CPU time on its one thread: other "
        "processes' time slices do not count, their cache contention still does), wall, or "
        "auto (default): cpu on a CPU device with threads=1, wall otherwise (CUDA, several "
        "threads)",
    )


def _add_from_steps_arguments(parser: Any) -> None:
    """The options of ``--from-steps``: fitting step times measured elsewhere."""
    steps = parser.add_argument_group(
        "fitting step times measured elsewhere (no torch executor is run)"
    )
    steps.add_argument(
        "--from-steps",
        metavar="FILE.csv",
        help="per-step timings of a real engine (columns kind, prefill_tokens, cached_tokens, "
        "decode_seqs, context_tokens_per_seq, median_s; see docs/cost-model.md)",
    )
    steps.add_argument(
        "--base-preset",
        default="llama3.1-8b-h200",
        metavar="NAME",
        help="preset supplying the model shape, KV memory and (without --copies) the "
        "transfer model (default: llama3.1-8b-h200)",
    )
    steps.add_argument(
        "--copies",
        metavar="FILE.csv",
        help="copy bandwidths by chunk size (chunk_KiB, dir, memcpy_GBps, contig_GBps) to fit "
        "the transfer model's per-copy cost and bandwidth",
    )
    steps.add_argument(
        "--layout",
        choices=BLOCK_LAYOUTS,
        default=None,
        help="KV block layout the transfers assume (default: the base preset's)",
    )
    steps.add_argument("--name", metavar="NAME", help="the preset's name (default: from --out)")


def _calibrate(args: argparse.Namespace, ctx: Any) -> int:
    if args.from_steps is not None:
        from kvframe.cli.calibrate_steps import calibrate_from_steps

        return calibrate_from_steps(args)
    options = _torch_options(args)
    from kvframe.calibrate.replay import compare
    from kvframe.calibrate.torch_timing import LINEAR_TERMS, TERMS, fit_cost_model

    measured = _measure(args, options)
    terms = TERMS if args.form == "extended" else LINEAR_TERMS
    cost_model, stats = fit_cost_model(
        measured.samples, transfer_bytes_per_s=measured.bandwidth, terms=terms
    )
    _write(args, options, measured, cost_model, stats)
    print(json.dumps({"cost_model": _asdict(cost_model), "fit": stats}, indent=2))
    if measured.held_out is not None:
        check = compare(
            args.out,
            measured.checks,
            measured.held_out,
            clock=measured.clock,
            **_replay_settings(args),
        )
        out = Path(args.out)
        data = json.loads(out.read_text())
        data["calibration"]["held_out"] = check
        out.write_text(json.dumps(data, indent=2) + "\n")
        print(json.dumps({"held_out": check}, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _replay_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The engine settings of the training and held-out replays."""
    return {"block_size": args.block_size, "max_num_batched_tokens": 512}


def _torch_options(args: argparse.Namespace) -> Any:
    """The torch executor's options, after checking every flag that timing it takes."""
    for flag in ("copies", "layout", "name"):
        if getattr(args, flag) is not None:
            raise ConfigError(f"--{flag} needs --from-steps")
    if args.form is None:
        args.form = "extended"
    if args.form not in ("extended", "linear"):
        raise ConfigError(
            f"{args.form} fits step times from a file: use it with --from-steps",
            origin="--form",
        )
    from kvframe.executors.torch.options import check_cpu_clock, parse_executor

    try:
        _name, options = parse_executor(args.executor)
    except ValueError as err:
        raise ConfigError(str(err), origin="--executor") from None
    if options is None:
        raise ConfigError("calibrate times the torch executor: use --executor torch[:...]")
    if args.repeats < 1 or args.block_size < 1 or args.runs < 1:
        raise ConfigError("--repeats, --block-size and --runs must be >= 1")
    if args.clock == "cpu":
        try:
            check_cpu_clock(options.device.partition(":")[0], options.threads)
        except ValueError as err:
            raise ConfigError(str(err), origin="--clock") from None
    return options


@attrs.frozen
class _Measured:
    """What timing the torch executor gave: the fit's samples and what checks it."""

    plan: Any
    clock: str
    bandwidth: float
    samples: list[Any]
    checks: Any
    held_out: Any


def _measure(args: argparse.Namespace, options: Any) -> _Measured:
    """Time the grid and the training replays (and the held-out one with ``--check``)."""
    from kvframe.calibrate.replay import engine_samples, held_out_workload, measure_interleaved
    from kvframe.calibrate.torch_timing import default_clock, grid_steps, measure_copy_bandwidth
    from kvframe.executors.torch.build import plan_model

    try:
        plan = plan_model(options)
        num_blocks = max(2, options.kv_memory // plan.kv_bytes_per_block(args.block_size))
        model = plan.build(num_blocks, args.block_size)
    except ValueError as err:
        raise ConfigError(str(err), origin="--executor") from None
    clock = default_clock(plan.device.type, options.threads) if args.clock == "auto" else args.clock
    print(f"timing {plan.describe()} on {plan.device}, clock={clock} ...", file=sys.stderr)
    bandwidth = measure_copy_bandwidth(model)
    held_out = held_out_workload() if args.check else None
    try:
        grid = grid_steps(model)
    except ValueError as err:
        raise ConfigError(str(err), origin="--executor") from None
    samples, training, checks = measure_interleaved(
        model,
        grid,
        args.executor,
        held_out_workload(seed=1),
        held_out,
        runs=args.runs,
        repeats=args.repeats,
        clock=clock,
        **_replay_settings(args),
    )
    del model
    samples += engine_samples(training, clock)
    return _Measured(plan, clock, bandwidth, samples, checks, held_out)


def _model_shape(plan: Any, options: Any) -> Any:
    """The timed model's shape, as a cost-model file records it."""
    from kvframe.domain.costs import ModelShape
    from kvframe.executors.presets import llama_num_params

    c = plan.config
    element = plan.kv_bytes_per_token() // (c.num_layers * 2 * c.num_kv_heads * c.head_dim)
    return ModelShape(
        name=f"torch-{_model_name(options)}",
        num_layers=c.num_layers,
        num_kv_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        dtype_bytes=element,
        num_params=llama_num_params(
            vocab_size=c.vocab_size,
            hidden_size=c.hidden_size,
            intermediate_size=c.intermediate_size,
            num_layers=c.num_layers,
            num_heads=c.num_heads,
            num_kv_heads=c.num_kv_heads,
            tie_word_embeddings=c.tie_word_embeddings,
        ),
        weight_dtype_bytes=element,
        hidden_size=c.hidden_size,
    )


def _write(
    args: argparse.Namespace, options: Any, measured: _Measured, cost_model: Any, stats: Any
) -> None:
    """The cost-model file, with how it was calibrated and every sample it was fitted to."""
    from kvframe.calibrate.torch_timing import Sample
    from kvframe.executors.cost_model_file import write_cost_model_file

    plan, clock = measured.plan, measured.clock
    shape = _model_shape(plan, options)
    calibration: dict[str, Any] = {
        "executor": args.executor,
        "block_size": args.block_size,
        "repeats": args.repeats,
        "runs": args.runs,
        "clock": clock,
        "threads": options.threads,
        "form": args.form,
        "fit": stats,
        "sample_fields": [f.name for f in attrs.fields(Sample)],
        "samples": [list(attrs.astuple(s)) for s in measured.samples],
    }
    write_cost_model_file(
        args.out,
        name=f"calibrated-{shape.name}-{plan.device.type}",
        description=f"fitted by kvframe calibrate to {args.executor} on {plan.device} "
        f"(clock={clock}: predicts "
        + (
            "the forward pass's CPU time on one thread, i.e. its wall time on an idle machine)"
            if clock == "cpu"
            else "measured wall time)"
        ),
        shape=shape,
        device=str(plan.device),
        kv_memory_bytes=float(options.kv_memory),
        cost_model=cost_model,
        calibration=calibration,
    )


def _model_name(options: Any) -> str:
    """What was timed, for the preset's name: the named model, a file's stem, or the preset
    (``custom`` when architecture keys changed it: the preset's name would say the wrong size)."""
    if options.model is not None:
        return Path(options.model).stem if "/" in options.model else options.model
    if options.checkpoint is not None:
        return "checkpoint"
    return "custom" if options.arch else options.preset


def _asdict(value: Any) -> dict[str, Any]:
    return attrs.asdict(value)
