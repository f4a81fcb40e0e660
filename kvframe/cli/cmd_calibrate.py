"""``kvframe calibrate``: fit the sim's cost model to the torch executor.

``calibrate`` times the torch executor over a grid of step shapes, fits the
sim's cost model (:mod:`kvframe.calibrate.fit`) and writes a
cost-model file for ``kvframe run --cost-model FILE``; with ``--check`` it
also replays a held-out workload both ways and reports the errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import attrs

from kvframe.config import ConfigError

__all__ = ["add_calibrate_command"]


def add_calibrate_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="fit the sim's cost model to the torch executor's measured step times",
        description="Time the torch executor over a grid of batch shapes (prefill tokens, "
        "decode requests, context lengths), fit the sim cost model's coefficients and "
        "write a cost-model file that `kvframe run --cost-model FILE` accepts.",
    )
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
    parser.add_argument(
        "--form",
        choices=("extended", "linear"),
        default="extended",
        help="cost-model terms to fit: extended (default; adds per-prefill-request and "
        "prefill-attention-pair terms) or linear (the four roofline terms only)",
    )
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


def _calibrate(args: argparse.Namespace, ctx: Any) -> int:
    from kvframe.executors.torch.options import parse_executor

    try:
        _name, options = parse_executor(args.executor)
    except ValueError as err:
        raise ConfigError(str(err), origin="--executor") from None
    if options is None:
        raise ConfigError("calibrate times the torch executor: use --executor torch[:...]")
    if args.repeats < 1 or args.block_size < 1 or args.runs < 1:
        raise ConfigError("--repeats, --block-size and --runs must be >= 1")
    from kvframe.executors.torch.options import check_cpu_clock

    if args.clock == "cpu":
        try:
            check_cpu_clock(options.device.partition(":")[0], options.threads)
        except ValueError as err:
            raise ConfigError(str(err), origin="--clock") from None
    from kvframe.calibrate.fit import (
        LINEAR_TERMS,
        TERMS,
        Sample,
        default_clock,
        fit_cost_model,
        grid_steps,
        measure_copy_bandwidth,
    )
    from kvframe.calibrate.replay import (
        compare,
        engine_samples,
        held_out_workload,
        measure_interleaved,
    )
    from kvframe.domain.costs import ModelShape
    from kvframe.executors.cost_model_file import write_cost_model_file
    from kvframe.executors.presets import llama_num_params
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
    settings: dict[str, Any] = {"block_size": args.block_size, "max_num_batched_tokens": 512}
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
        **settings,
    )
    del model
    samples += engine_samples(training, clock)
    terms = TERMS if args.form == "extended" else LINEAR_TERMS
    cost_model, stats = fit_cost_model(samples, transfer_bytes_per_s=bandwidth, terms=terms)
    c = plan.config
    element = plan.kv_bytes_per_token() // (c.num_layers * 2 * c.num_kv_heads * c.head_dim)
    shape = ModelShape(
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
        "samples": [list(attrs.astuple(s)) for s in samples],
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
    print(json.dumps({"cost_model": _asdict(cost_model), "fit": stats}, indent=2))
    if held_out is not None:
        check = compare(args.out, checks, held_out, clock=clock, **settings)
        calibration["held_out"] = check
        out = Path(args.out)
        data = json.loads(out.read_text())
        data["calibration"]["held_out"] = check
        out.write_text(json.dumps(data, indent=2) + "\n")
        print(json.dumps({"held_out": check}, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


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
