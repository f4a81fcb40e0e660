"""Per-step timings of a real engine, as ``kvframe calibrate --from-steps`` reads them.

The CSV is the one this project measured on an H200
(``kvframe/data/gpu/h200-llama3.1-8b/step_times.csv``): a header row, then
one row per step shape with these columns (others, such as ``min_s``, are
ignored)::

    kind,prefill_tokens,cached_tokens,decode_seqs,context_tokens_per_seq,median_s

* ``kind``: ``prefill``, ``decode`` or ``mixed`` (a label: it groups the fit's
  errors, the quantities come from the numbers);
* ``prefill_tokens``: new tokens of the step's one prefill chunk (0: none);
* ``cached_tokens``: tokens of that request already in the KV cache;
* ``decode_seqs``: requests decoding one token each;
* ``context_tokens_per_seq``: cached tokens of each decoding request;
* ``median_s``: the step's time in seconds.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

import attrs

from kvframe.domain.costs import CostModel, prefill_pairs

__all__ = ["COLUMNS", "MeasuredStep", "predict", "read_step_timings"]

COLUMNS = (
    "kind",
    "prefill_tokens",
    "cached_tokens",
    "decode_seqs",
    "context_tokens_per_seq",
    "median_s",
)
"""The columns a step-timings CSV must have."""


@attrs.frozen(slots=True, kw_only=True)
class MeasuredStep:
    """One measured step shape and its time."""

    kind: str
    prefill_tokens: int
    cached_tokens: int
    decode_seqs: int
    context_tokens_per_seq: int
    seconds: float

    def quantities(self) -> tuple[int, int, int, int, int]:
        """The step in :meth:`CostModel.step_time`'s arguments: prefill tokens,
        decode sequences, context tokens, prefill chunks, prefill pairs."""
        chunks = 1 if self.prefill_tokens > 0 else 0
        pairs = prefill_pairs(self.prefill_tokens, self.cached_tokens) if chunks else 0
        context = (self.cached_tokens if chunks else 0) + (
            self.decode_seqs * self.context_tokens_per_seq
        )
        return self.prefill_tokens, self.decode_seqs, context, chunks, pairs


def predict(model: CostModel, step: MeasuredStep) -> float:
    """``model``'s time for ``step``."""
    return model.step_time(*step.quantities())


def read_step_timings(path: str | Path) -> list[MeasuredStep]:
    """The rows of a step-timings CSV (format in the module docstring).

    :raises ValueError: naming the file, the line and the problem: a missing
        column, a value that is not a number, a negative count, a step with
        neither prefill nor decode, a time that is not positive.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ValueError(f"step timings {path}: {err.strerror or err}") from None
    return _parse(text.splitlines(), str(path))


def _parse(lines: Iterable[str], origin: str) -> list[MeasuredStep]:
    reader = csv.DictReader(lines)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(
            f"step timings {origin}: missing column(s) {', '.join(missing)}; "
            f"needs {','.join(COLUMNS)}"
        )
    steps = []
    for row in reader:
        where = f"step timings {origin}, line {reader.line_num}"
        try:
            counts = {
                c: int(row[c])
                for c in (
                    "prefill_tokens",
                    "cached_tokens",
                    "decode_seqs",
                    "context_tokens_per_seq",
                )
            }
            seconds = float(row["median_s"])
        except (TypeError, ValueError):
            raise ValueError(f"{where}: not a number in {row}") from None
        negative = [c for c, v in counts.items() if v < 0]
        if negative:
            raise ValueError(f"{where}: negative {', '.join(negative)}")
        if counts["prefill_tokens"] == 0 and counts["decode_seqs"] == 0:
            raise ValueError(f"{where}: a step with neither prefill_tokens nor decode_seqs")
        if not seconds > 0:
            raise ValueError(f"{where}: median_s must be > 0, got {row['median_s']!r}")
        steps.append(MeasuredStep(kind=str(row["kind"]), seconds=seconds, **counts))
    if not steps:
        raise ValueError(f"step timings {origin}: no rows")
    return steps
