"""Fit a cost model's step coefficients to measured step times, in pure Python.

**Loss.** Relative squared error (each step's residual divided by its
measured time), because the goals are relative and step times span two
orders of magnitude; every coefficient non-negative.

**Additive form.** Linear in six terms: the exact non-negative solution is
found by solving unconstrained least squares on every subset of the terms
and keeping the best subset whose coefficients are all non-negative (the
constrained optimum is the unconstrained one on its own support), as
:mod:`kvframe.calibrate.torch_timing` does (with torch, on its own timings).

**Overlap form.** Piecewise linear: once it is known which side of each
``max`` wins for each step (the linear layers compute- or weight-bound,
attention compute- or KV-bound), the time is linear in the seven
coefficients. So the fit alternates: fix the sides, solve the non-negative
linear problem, recompute the sides from the new coefficients, until they
stop changing; from a few starting assignments, keeping the one of least
loss. Each converged fit is only a local optimum of the true (``max``) loss:
on the 37 measured H200 shapes the four starts end at losses 0.24, 1.25,
1.85 and 1.63, and the best is the start that follows the roofline (chunks of
512 tokens or more compute-bound, decode batches bandwidth-bound).

Its fixed cost of a step with a prefill is per step (``per_prefill_step_s``),
not per chunk: steps with one chunk cannot tell the two apart, and a forward
pass pays its launches once, however many chunks it holds.

Columns are scaled to unit norm before solving, so the answer does not
depend on units (pairs run to 1e8, the constant is 1).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from kvframe.calibrate.steps import MeasuredStep, predict
from kvframe.domain.costs import CostModel

__all__ = [
    "ADDITIVE_TERMS",
    "OVERLAP_TERMS",
    "error_summary",
    "fit_step_model",
    "leave_one_out",
    "nnls_relative",
]

ADDITIVE_TERMS = (
    "per_step_s",
    "per_prefill_token_s",
    "per_decode_seq_s",
    "per_context_token_s",
    "per_prefill_seq_s",
    "per_prefill_pair_s",
)
OVERLAP_TERMS = (
    "per_step_s",
    "per_prefill_step_s",
    "per_decode_seq_s",
    "per_prefill_token_s",
    "weight_read_s",
    "per_prefill_pair_s",
    "per_context_token_s",
)

Sides = tuple[bool, bool]
"""Which side of each ``max`` wins: (linear layers compute-bound, attention compute-bound)."""


def _additive_row(q: tuple[int, int, int, int, int]) -> list[float]:
    prefill, decode, context, chunks, pairs = q
    return [1.0, prefill, decode, context, chunks, pairs]


def _overlap_row(q: tuple[int, int, int, int, int], sides: Sides) -> list[float]:
    prefill, decode, context, chunks, pairs = q
    linear, attention = sides
    return [
        1.0,
        1.0 if chunks else 0.0,
        decode,
        prefill + decode if linear else 0.0,
        0.0 if linear else 1.0,
        pairs if attention else 0.0,
        0.0 if attention else context,
    ]


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; ``None`` if (near) singular."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def nnls_relative(rows: Sequence[Sequence[float]], seconds: Sequence[float]) -> list[float]:
    """Non-negative ``c`` minimising ``sum((row . c / t - 1) ** 2)``, by subsets."""
    k = len(rows[0])
    scaled = [[v / t for v in row] for row, t in zip(rows, seconds, strict=True)]
    norms = [math.sqrt(sum(r[j] ** 2 for r in scaled)) or 1.0 for j in range(k)]
    scaled = [[r[j] / norms[j] for j in range(k)] for r in scaled]
    gram = [[sum(r[i] * r[j] for r in scaled) for j in range(k)] for i in range(k)]
    rhs = [sum(r[i] for r in scaled) for i in range(k)]
    live = [j for j in range(k) if any(r[j] for r in scaled)]
    best: list[float] | None = None
    best_loss = math.inf
    for size in range(len(live), 0, -1):
        for subset in itertools.combinations(live, size):
            x = _solve([[gram[i][j] for j in subset] for i in subset], [rhs[i] for i in subset])
            if x is None or any(v < 0 for v in x):
                continue
            c = [0.0] * k
            for j, v in zip(subset, x, strict=True):
                c[j] = v
            # ||S c - 1||^2 = c'Gc - 2 c'b + n
            loss = sum(c[i] * gram[i][j] * c[j] for i in subset for j in subset) - 2 * sum(
                c[i] * rhs[i] for i in subset
            )
            if loss < best_loss - 1e-15:
                best, best_loss = c, loss
    if best is None:  # every single column came out negative: impossible for data >= 0
        best = [0.0] * k
    return [c / n for c, n in zip(best, norms, strict=True)]


def _model(form: str, terms: Sequence[str], coef: Sequence[float], base: CostModel) -> CostModel:
    values: dict[str, Any] = {
        "per_step_s": 0.0,
        "per_prefill_token_s": 0.0,
        "per_decode_seq_s": 0.0,
        "per_context_token_s": 0.0,
        "per_prefill_seq_s": 0.0,
        "per_prefill_pair_s": 0.0,
        "weight_read_s": 0.0,
        "per_prefill_step_s": 0.0,
    }
    values.update({t: float(c) for t, c in zip(terms, coef, strict=True)})
    return CostModel(
        form=form,
        transfer_bytes_per_s=base.transfer_bytes_per_s,
        transfer_latency_s=base.transfer_latency_s,
        transfer_per_chunk_s=base.transfer_per_chunk_s,
        transfer_layout=base.transfer_layout,
        **values,
    )


def _sides(model: CostModel, q: tuple[int, int, int, int, int]) -> Sides:
    prefill, decode, context, _chunks, pairs = q
    return (
        model.per_prefill_token_s * (prefill + decode) >= model.weight_read_s,
        model.per_prefill_pair_s * pairs >= model.per_context_token_s * context,
    )


def _loss(model: CostModel, steps: Sequence[MeasuredStep]) -> float:
    return sum((predict(model, s) / s.seconds - 1) ** 2 for s in steps)


_STARTS: tuple[Callable[[tuple[int, int, int, int, int]], Sides], ...] = (
    lambda q: (q[0] + q[1] >= 512, q[4] > 0),  # prefill compute-bound, decode bandwidth-bound
    lambda q: (True, True),
    lambda q: (False, False),
    lambda q: (q[0] + q[1] >= 512, False),
)
"""Starting side assignments of the overlap fit."""


def fit_step_model(
    steps: Sequence[MeasuredStep], *, form: str = "overlap", transfer: CostModel
) -> CostModel:
    """The cost model of ``form`` that best fits ``steps`` (module docstring).

    :param transfer: supplies the transfer fields, which step times do not inform.
    :raises ValueError: no steps, or an unknown form.
    """
    if not steps:
        raise ValueError("no step timings to fit")
    seconds = [s.seconds for s in steps]
    quantities = [s.quantities() for s in steps]
    if form == "additive":
        coef = nnls_relative([_additive_row(q) for q in quantities], seconds)
        return _model(form, ADDITIVE_TERMS, coef, transfer)
    if form != "overlap":
        raise ValueError(f"form must be 'additive' or 'overlap', got {form!r}")
    best: CostModel | None = None
    best_loss = math.inf
    for start in _STARTS:
        sides = [start(q) for q in quantities]
        model = None
        for _ in range(50):
            coef = nnls_relative(
                [_overlap_row(q, s) for q, s in zip(quantities, sides, strict=True)], seconds
            )
            model = _model(form, OVERLAP_TERMS, coef, transfer)
            new_sides = [_sides(model, q) for q in quantities]
            if new_sides == sides:
                break
            sides = new_sides
        assert model is not None
        loss = _loss(model, steps)
        if loss < best_loss:
            best, best_loss = model, loss
    assert best is not None
    return best


def leave_one_out(
    steps: Sequence[MeasuredStep], *, form: str = "overlap", transfer: CostModel
) -> list[float]:
    """For each step, the relative error (predicted / measured - 1) of a model
    fitted to all the *other* steps: how well the form predicts a shape it has
    not seen."""
    errors = []
    for i, step in enumerate(steps):
        model = fit_step_model([*steps[:i], *steps[i + 1 :]], form=form, transfer=transfer)
        errors.append(predict(model, step) / step.seconds - 1)
    return errors


def error_summary(steps: Sequence[MeasuredStep], errors: Sequence[float]) -> dict[str, Any]:
    """Median and max absolute relative error, over all steps and per ``kind``."""

    def summary(values: list[float]) -> dict[str, Any]:
        magnitudes = [abs(v) for v in values]
        return {
            "steps": len(values),
            "median_abs_rel_error": round(statistics.median(magnitudes), 4),
            "max_abs_rel_error": round(max(magnitudes), 4),
        }

    kinds: dict[str, list[float]] = {}
    for step, error in zip(steps, errors, strict=True):
        kinds.setdefault(step.kind, []).append(error)
    return {"all": summary(list(errors)), **{k: summary(v) for k, v in kinds.items()}}
