"""Per-step records of a run, kept only when asked (``Engine.run(record_steps=True)``).

Why a collector of its own: :meth:`MetricsCollector.on_step
<kvframe.engine.metrics.MetricsCollector.on_step>` runs once per engine step,
hundreds of thousands of times in a whole trace, inside runs of plain decode
steps too. A run that does not want the steps must not pay even a branch for
them, so recording is a subclass the engine uses instead of the plain collector,
not a flag the plain one tests.

Each step is four numbers in :mod:`array` columns (about 32 bytes a step: a
whole Mooncake trace's 124,129 steps are 4 MiB), turned into rows only when read.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import attrs

from kvframe.engine.metrics import MetricsCollector

__all__ = ["STEP_COLUMNS", "StepLog", "StepRecordingCollector"]

STEP_COLUMNS = (
    "step",
    "start_seconds",
    "duration_seconds",
    "end_seconds",
    "num_computed_tokens",
    "num_generated_tokens",
)
"""The columns of :meth:`StepLog.columns`: the step's number (from 1), when it started
and how long it took on the run's clock, and the tokens it ran through the model
(prefill and decode) and sampled. Steps that schedule nothing take no time and are
not steps here, as in ``num_steps``'s forward passes."""


@attrs.define(slots=True)
class StepLog:
    """The steps of one run, in order: four parallel columns."""

    start: array[float] = attrs.field(factory=lambda: array("d"))
    duration: array[float] = attrs.field(factory=lambda: array("d"))
    computed: array[int] = attrs.field(factory=lambda: array("q"))
    generated: array[int] = attrs.field(factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.start)

    def columns(self) -> dict[str, list[int] | list[float]]:
        """:data:`STEP_COLUMNS` to their values (what a DataFrame is built from)."""
        return {
            "step": list(range(1, len(self.start) + 1)),
            "start_seconds": self.start.tolist(),
            "duration_seconds": self.duration.tolist(),
            "end_seconds": [s + d for s, d in zip(self.start, self.duration, strict=True)],
            "num_computed_tokens": self.computed.tolist(),
            "num_generated_tokens": self.generated.tolist(),
        }

    def rows(self) -> Iterator[tuple[int, float, float, float, int, int]]:
        """One tuple per step, in :data:`STEP_COLUMNS` order (for a CSV)."""
        for i, (start, duration, computed, generated) in enumerate(
            zip(self.start, self.duration, self.computed, self.generated, strict=True), 1
        ):
            yield i, start, duration, start + duration, computed, generated


class StepRecordingCollector(MetricsCollector):
    """A :class:`MetricsCollector` that also keeps every step in a :class:`StepLog`."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = StepLog()

    def on_step(
        self,
        now: float,
        duration: float,
        *,
        num_generated_tokens: int = 0,
        num_computed_tokens: int = 0,
    ) -> None:
        """The parent's bookkeeping, then the step's row."""
        super().on_step(
            now,
            duration,
            num_generated_tokens=num_generated_tokens,
            num_computed_tokens=num_computed_tokens,
        )
        steps = self.steps
        steps.start.append(now)
        steps.duration.append(duration)
        steps.computed.append(num_computed_tokens)
        steps.generated.append(num_generated_tokens)
