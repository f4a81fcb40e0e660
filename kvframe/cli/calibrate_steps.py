"""``kvframe calibrate --from-steps FILE.csv``: a preset from another engine's step times.

Reads the step timings (:mod:`kvframe.calibrate.steps`), fits the step
coefficients (:mod:`kvframe.calibrate.fit`), optionally the transfer model
to a copy table (:mod:`kvframe.calibrate.copies`), and writes a cost-model
file for ``kvframe run --cost-model FILE``, with the fit's errors per step
kind, in-sample and leave-one-out. The model shape and KV memory come from
``--base-preset``: the file must describe the model the steps were timed on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import attrs

from kvframe.config import ConfigError

__all__ = ["calibrate_from_steps"]


def calibrate_from_steps(args: argparse.Namespace) -> int:
    from kvframe.calibrate.fit import error_summary, fit_step_model, leave_one_out
    from kvframe.calibrate.steps import predict, read_step_timings
    from kvframe.executors.catalog import get_preset
    from kvframe.executors.cost_model_file import write_cost_model_file

    form = args.form or "overlap"
    if form not in ("overlap", "additive"):
        raise ConfigError(
            f"{form} is a form for timing the torch executor; with --from-steps use overlap "
            "or additive",
            origin="--form",
        )
    try:
        base = get_preset(args.base_preset)
    except ValueError as err:
        raise ConfigError(str(err), origin="--base-preset") from None
    try:
        steps = read_step_timings(args.from_steps)
    except ValueError as err:
        raise ConfigError(str(err), origin="--from-steps") from None
    calibration: dict[str, Any] = {
        "from_steps": Path(args.from_steps).name,
        "base_preset": base.name,
        "form": form,
    }
    transfer = _transfer_model(args, base.cost_model, calibration)
    if args.layout is not None:
        transfer = attrs.evolve(transfer, transfer_layout=args.layout)
    print(f"fitting {form} form to {len(steps)} steps of {args.from_steps} ...", file=sys.stderr)
    model = fit_step_model(steps, form=form, transfer=transfer)
    fit_errors = [predict(model, s) / s.seconds - 1 for s in steps]
    calibration["fit"] = error_summary(steps, fit_errors)
    calibration["leave_one_out"] = error_summary(
        steps, leave_one_out(steps, form=form, transfer=transfer)
    )
    name = args.name or Path(args.out).stem
    write_cost_model_file(
        args.out,
        name=name,
        description=f"{base.shape.name}: step times fitted by kvframe calibrate --from-steps "
        f"to {Path(args.from_steps).name} ({form} form); shape and KV memory of {base.name}",
        shape=base.shape,
        device=base.gpu.name,
        kv_memory_bytes=base.kv_memory_bytes,
        cost_model=model,
        calibration=calibration,
    )
    print(
        json.dumps(
            {
                "cost_model": attrs.asdict(model),
                "fit": calibration["fit"]["all"],
                "leave_one_out": calibration["leave_one_out"]["all"],
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _transfer_model(args: argparse.Namespace, transfer: Any, calibration: dict[str, Any]) -> Any:
    """The base preset's cost model with the transfer model fitted to ``--copies``, if
    given (recorded in ``calibration``)."""
    from kvframe.calibrate.copies import fit_transfer, read_copy_table

    if args.copies is None:
        return transfer
    try:
        fitted = fit_transfer(read_copy_table(args.copies))
    except ValueError as err:
        raise ConfigError(str(err), origin="--copies") from None
    calibration["copies"] = {
        "file": Path(args.copies).name,
        "per_chunk_s": fitted.per_chunk_s,
        "bytes_per_s": fitted.bytes_per_s,
    }
    return attrs.evolve(
        transfer,
        transfer_bytes_per_s=fitted.bytes_per_s,
        transfer_per_chunk_s=fitted.per_chunk_s,
        transfer_latency_s=0.0,
    )
