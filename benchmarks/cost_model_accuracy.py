"""Every measured H200 step shape, predicted vs measured, as a Markdown table.

    .venv/bin/python benchmarks/cost_model_accuracy.py          # a few seconds
    .venv/bin/python benchmarks/cost_model_accuracy.py --steps gpu_check_steps.csv

Columns: the shape; the measured median; the derived ``llama3.1-8b-h200``
preset; the fitted ``llama3.1-8b-h200-measured`` preset (in-sample) and the
same form fitted to the other 36 shapes (leave-one-out); and for reference the
additive form with the old efficiency factors and H200 peaks. Ratios are
predicted / measured. This is the table in docs/cost-model.md ("Accuracy").

``--steps FILE`` reads another step-times CSV (e.g. the one
``gpu_check_cost_model.py`` writes); leave-one-out is then of the shipped
shapes' fit (the measured preset) and reported as n/a.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from kvframe.calibrate.fit import leave_one_out
from kvframe.calibrate.steps import predict, read_step_timings
from kvframe.executors.catalog import get_preset
from kvframe.executors.presets import (
    EFFICIENCY_ADDITIVE,
    H200_SXM,
    LLAMA_3_1_8B,
    derive_cost_model,
)

DATA = Path(__file__).resolve().parents[1] / "kvframe/data/gpu/h200-llama3.1-8b"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=Path, default=None, help="another step-times CSV")
    args = parser.parse_args()
    steps = read_step_timings(args.steps or DATA / "step_times.csv")
    derived = get_preset("llama3.1-8b-h200").cost_model
    measured = get_preset("llama3.1-8b-h200-measured").cost_model
    old = derive_cost_model(LLAMA_3_1_8B, H200_SXM, efficiency=EFFICIENCY_ADDITIVE, form="additive")
    loo = (
        leave_one_out(steps, transfer=measured)
        if args.steps is None
        else [float("nan")] * len(steps)
    )
    print(
        "| kind | new tokens | cached | decodes | context each | measured ms "
        "| derived h200 | ratio | measured preset | ratio | leave-one-out ratio "
        "| old additive ratio |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    columns: dict[str, list[float]] = {"derived": [], "measured": [], "loo": [], "old": []}
    for step, loo_error in zip(steps, loo, strict=True):
        d = predict(derived, step)
        m = predict(measured, step)
        o = predict(old, step)
        ratios = {"derived": d / step.seconds, "measured": m / step.seconds,
                  "loo": 1 + loo_error, "old": o / step.seconds}  # fmt: skip
        for key, value in ratios.items():
            if value == value:  # not NaN: leave-one-out is n/a for another file
                columns[key].append(abs(value - 1))
        print(
            f"| {step.kind} | {step.prefill_tokens} | {step.cached_tokens} | {step.decode_seqs} "
            f"| {step.context_tokens_per_seq} | {step.seconds * 1e3:.1f} | {d * 1e3:.1f} "
            f"| {ratios['derived']:.2f} | {m * 1e3:.1f} | {ratios['measured']:.2f} "
            f"| {ratios['loo']:.2f} | {ratios['old']:.2f} |"
        )
    print()
    for key, values in columns.items():
        if values:
            print(f"{key:9s} median |error| {statistics.median(values):.3f}  max {max(values):.3f}")


if __name__ == "__main__":
    main()
