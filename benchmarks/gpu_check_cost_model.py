"""Re-measure a handful of H200 step shapes and print predicted vs measured.

    python benchmarks/gpu_check_cost_model.py            # on a CUDA GPU: about 1-2 minutes
    python benchmarks/gpu_check_cost_model.py --tiny     # a 2-layer toy on CPU (dry run)

Uses the model and timing of the measurement that produced the shipped data
(``benchmarks/gpu_measurements/measure_steps.py``: Llama-3.1-8B shape,
random bf16 weights, eager prefill, CUDA-graphed decode) on 7 of its 37
shapes, and prints for each the new median, the shipped median, and the
predictions of ``llama3.1-8b-h200`` (derived) and ``llama3.1-8b-h200-measured``
(fitted) as ratios to the new median. On an H200 the new and shipped medians
should agree within a few percent, and the ratios should match the accuracy
table of docs/cost-model.md; on another GPU the ratios say how far the H200
presets are from it.

Needs torch. The predictions need kvframe importable (``PYTHONPATH=.`` in the
repository and its dependencies attrs, pluggy, structlog, rich); where they
are missing, the script still measures, prints the times, and writes them as a
step-times CSV (``--out``, default ``$OUT/gpu_check_steps.csv`` or
``gpu_check_steps.csv``) for ``benchmarks/cost_model_accuracy.py --steps FILE``
to compare on any machine.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import statistics
import sys
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parents[1] / "kvframe/data/gpu/h200-llama3.1-8b"
SHAPES = (  # kind, new tokens, cached, decodes, context each
    ("prefill", 2048, 0, 0, 0),
    ("prefill", 512, 4096, 0, 0),
    ("prefill", 2048, 16384, 0, 0),
    ("decode", 0, 0, 1, 512),
    ("decode", 0, 0, 256, 512),
    ("decode", 0, 0, 64, 2048),
    ("mixed", 2048, 0, 32, 2048),
)


def _measurement_module():
    spec = importlib.util.spec_from_file_location(
        "measure_steps", Path(__file__).resolve().parent / "gpu_measurements" / "measure_steps.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def time_shape(ms, model, shape, repeats: int) -> float:
    kind, new, cached, batch, ctx = shape
    device, dtype, hidden = model.device, model.dtype, model.cfg["hidden"]
    if kind == "prefill":
        kv = ms.kv_alloc(model, 1, cached + new)
        x = torch.randn(new, hidden, device=device, dtype=dtype)
        times = ms.timed(lambda: model.forward(x, kv, cached, None, None, 0), device, repeats)
    elif kind == "decode":
        kv = ms.kv_alloc(model, batch, ctx + 1)
        x = torch.randn(batch, hidden, device=device, dtype=dtype)
        fn = lambda: model.forward(None, None, 0, x, kv, ctx)  # noqa: E731
        if device.type == "cuda":
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    fn()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            fn = graph.replay
        times = ms.timed(fn, device, repeats)
    else:
        kvp = ms.kv_alloc(model, 1, new)
        kvd = ms.kv_alloc(model, batch, ctx + 1)
        xp = torch.randn(new, hidden, device=device, dtype=dtype)
        xd = torch.randn(batch, hidden, device=device, dtype=dtype)
        times = ms.timed(lambda: model.forward(xp, kvp, 0, xd, kvd, ctx), device, repeats)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return statistics.median(times)


def _predictors():
    """``(shipped medians by shape, predict(preset, row) -> seconds)``, or ``None``
    where kvframe cannot be imported here."""
    try:
        from kvframe.calibrate.steps import MeasuredStep, predict, read_step_timings
        from kvframe.executors.catalog import get_preset
    except ImportError as err:
        print(f"kvframe not importable ({err}): measuring only", file=sys.stderr)
        return None
    shipped = {
        (s.kind, s.prefill_tokens, s.cached_tokens, s.decode_seqs, s.context_tokens_per_seq): s
        for s in read_step_timings(DATA / "step_times.csv")
    }
    presets = [get_preset(n).cost_model for n in ("llama3.1-8b-h200", "llama3.1-8b-h200-measured")]

    def ratios(shape, seconds):
        kind, new, cached, batch, ctx = shape
        step = MeasuredStep(
            kind=kind,
            prefill_tokens=new,
            cached_tokens=cached,
            decode_seqs=batch,
            context_tokens_per_seq=ctx,
            seconds=seconds,
        )
        return [predict(model, step) / seconds for model in presets]

    return shipped, ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="2-layer toy on CPU (dry run)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", help="step-times CSV to write (default: see the docstring)")
    args = parser.parse_args()
    ms = _measurement_module()
    cuda = torch.cuda.is_available() and not args.tiny
    if not cuda and not args.tiny:
        print("no CUDA device: pass --tiny for a dry run on CPU", file=sys.stderr)
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    cfg = ms.LLAMA8B if cuda else ms.TINY
    model = ms.Model(cfg, device, torch.bfloat16 if cuda else torch.float32)
    name = torch.cuda.get_device_name(0) if cuda else "cpu (tiny: ratios meaningless)"
    predictors = _predictors()
    print(f"device: {name}, torch {torch.__version__}")
    print(f"{'shape':32s} {'now ms':>8s} {'H200 ms':>8s} {'now/H200':>8s} "
          f"{'derived/now':>11s} {'measured/now':>12s}")  # fmt: skip
    rows = []
    with torch.inference_mode():
        for shape in SHAPES:
            if not cuda:
                shape = (shape[0], min(shape[1], 64), min(shape[2], 64), min(shape[3], 4),
                         min(shape[4], 64))  # fmt: skip
            seconds = time_shape(ms, model, shape, args.repeats)
            rows.append((*shape, seconds))
            kind, new, cached, batch, ctx = shape
            old, derived, fitted = None, float("nan"), float("nan")
            if predictors is not None:
                shipped, ratios = predictors
                old = shipped.get(shape)
                derived, fitted = ratios(shape, seconds)
            label = f"{kind} {new}+{cached}c {batch}x{ctx}"
            print(
                f"{label:32s} {seconds * 1e3:8.2f} "
                f"{(old.seconds * 1e3 if old else float('nan')):8.2f} "
                f"{(seconds / old.seconds if old else float('nan')):8.2f} "
                f"{derived:11.2f} {fitted:12.2f}",
                flush=True,
            )
    out = Path(args.out or Path(os.environ.get("OUT", ".")) / "gpu_check_steps.csv")
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["kind", "prefill_tokens", "cached_tokens", "decode_seqs",
                         "context_tokens_per_seq", "median_s"])  # fmt: skip
        writer.writerows(rows)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
