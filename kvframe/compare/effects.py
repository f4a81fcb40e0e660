"""Repeats, confidence intervals and which differences are real.

Runs that differ only in ``seed`` (:mod:`kvframe.sweep.repeats`: a new draw of a
generated workload, or a new arrival jitter of a trace) are repeats of one
*setting*. For each setting and headline metric this module gives the mean and
a 95% confidence interval (Student's t over the repeats), and for each metric a
:class:`Verdict`: which settings are best, which are worse and by how much --
or, plainly, that the settings cannot be told apart at that confidence, with
the size of difference the repeats could have detected.

How two settings are compared: on the seeds both ran, *paired* (each seed's
difference, so that the luck of a draw common to both cancels); the
difference's interval excluding zero makes it real. A setting is ranked worse
than the best only then; settings whose difference to the best includes zero
tie with it. Why not rank by the means alone: on a workload where the policies
tie, the means still differ in the fourth digit, and a ranking by them would
be noise presented as a result.

The t quantiles are tabulated (no SciPy): exact for 1-30 degrees of freedom,
and the next smaller tabulated one above that (a slightly wider, conservative
interval).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import attrs

from kvframe.compare.load import Entry

__all__ = [
    "EFFECT_METRICS",
    "REPEAT_KEYS",
    "Interval",
    "Setting",
    "Verdict",
    "interval",
    "repeated",
    "settings_of",
    "settings_rows",
    "t95",
    "verdicts",
]

REPEAT_KEYS = ("seed",)
"""Settings whose values are repeats, not conditions."""

CONTEXT_KEYS = (
    "workload",
    "format",
    "limit",
    "skip_bad_lines",
    "sort_arrivals",
    "generate",
    "jitter",
    "rate_scale",
)
"""Settings that make a different workload: settings are compared only within one."""

EFFECT_METRICS: tuple[tuple[str, str, bool, float, str], ...] = (
    # (metric, label, higher is better, display scale, unit)
    ("total_hit_rate", "hit rate", True, 100.0, "%"),
    ("time_to_first_token_seconds.mean", "TTFT mean", False, 1.0, " s"),
    ("e2e_request_latency_seconds.mean", "e2e mean", False, 1.0, " s"),
    ("job_completion_time_seconds.mean", "JCT mean", False, 1.0, " s"),
)
"""The metrics a verdict is given for (those every run of the comparison has)."""

_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
"""Two-sided 95% quantiles of Student's t by degrees of freedom."""


def t95(df: int) -> float:
    """The two-sided 95% t quantile for ``df`` degrees of freedom (>= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df > 120:
        return 1.960
    return _T95[max(k for k in _T95 if k <= df)]


@attrs.frozen(slots=True)
class Interval:
    """A mean and its 95% confidence interval; ``half`` is ``None`` with one value."""

    mean: float
    half: float | None
    n: int

    @property
    def low(self) -> float:
        return self.mean - (self.half or 0.0)

    @property
    def high(self) -> float:
        return self.mean + (self.half or 0.0)

    def excludes_zero(self) -> bool:
        return self.half is not None and (self.low > 0 or self.high < 0)


def interval(values: Sequence[float]) -> Interval:
    """Mean and 95% t-interval of ``values`` (no interval from one value)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, None, 1)
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return Interval(mean, t95(n - 1) * math.sqrt(var / n), n)


@attrs.frozen(slots=True)
class Setting:
    """One setting (a configuration without its repeat keys) and its repeats."""

    label: str
    runs: tuple[Entry, ...]
    context: str = ""
    """The workload it ran (:data:`CONTEXT_KEYS`): verdicts compare within one context."""

    def values(self, metric: str) -> dict[str, float]:
        """``seed -> value`` of ``metric`` over the runs that have it."""
        out: dict[str, float] = {}
        for run in self.runs:
            value = run.value(metric)
            if value is not None:
                out[json.dumps(run.config.get("seed"))] = float(value)
        return out

    def interval(self, metric: str) -> Interval | None:
        values = list(self.values(metric).values())
        return interval(values) if values else None


def settings_of(entries: Sequence[Entry]) -> list[Setting]:
    """The settings of ``entries`` (done runs), each with its repeats, in first-seen order."""
    from kvframe.compare.load import varying_keys

    ok = [e for e in entries if e.status != "failed" and e.metrics is not None]
    keys = [k for k in varying_keys(ok) if k not in REPEAT_KEYS]
    groups: dict[str, list[Entry]] = {}
    labels: dict[str, str] = {}
    contexts: dict[str, str] = {}
    for entry in ok:
        config = {k: v for k, v in entry.config.items() if k not in REPEAT_KEYS}
        ident = json.dumps(config, sort_keys=True, default=str)
        groups.setdefault(ident, []).append(entry)
        labels.setdefault(ident, entry.label(keys) if keys else "all runs")
        context = {k: config.get(k) for k in CONTEXT_KEYS if config.get(k) is not None}
        contexts.setdefault(ident, json.dumps(context, sort_keys=True, default=str))
    settings = [Setting(labels[k], tuple(v), contexts[k]) for k, v in groups.items()]
    return settings


def _within(settings: Sequence[Setting]) -> list[Setting]:
    """The settings of one context, labelled by what varies between them only."""
    from kvframe.compare.load import varying_keys

    runs = [run for s in settings for run in s.runs]
    keys = [k for k in varying_keys(runs) if k not in REPEAT_KEYS and k not in CONTEXT_KEYS]
    if not keys:
        return list(settings)
    return [attrs.evolve(s, label=s.runs[0].label(keys)) for s in settings]


@attrs.frozen(slots=True)
class Verdict:
    """What the repeats say about one metric across the settings."""

    metric: str
    label: str
    best: tuple[str, ...]
    """Settings tied for best (the best mean, and every one not distinguishable from it)."""
    worse: tuple[tuple[str, Interval], ...]
    """Settings really worse than the best mean, with the difference's interval."""
    detectable: float | None
    """The widest half-width of a difference to the best: smaller differences could
    not have been told from zero (``None``: too few repeats for any interval)."""
    scale: float
    unit: str

    @property
    def indistinguishable(self) -> bool:
        return not self.worse

    def sentence(self) -> str:
        """The verdict in one line, for the table and the report."""

        unit = " points" if self.unit == "%" else self.unit  # a difference of two rates

        def amount(x: float) -> str:
            return f"{x * self.scale:.3g}{unit}"

        if self.detectable is None:
            return f"{self.label}: too few repeats (seeds) for a confidence interval"
        if self.indistinguishable and self.detectable == 0:
            return f"{self.label}: identical on every seed for all {len(self.best)} settings"
        if self.indistinguishable:
            return (
                f"{self.label}: no difference at 95% confidence between the "
                f"{len(self.best)} settings (a difference under about "
                f"{amount(self.detectable)} would not show with these repeats)"
            )
        worse = "; ".join(
            f"{label} by {amount(abs(d.mean))} [{amount(abs(d.high))}, {amount(abs(d.low))}]"
            if d.mean < 0
            else f"{label} by {amount(d.mean)} [{amount(d.low)}, {amount(d.high)}]"
            for label, d in self.worse
        )
        best = self.best[0] if len(self.best) == 1 else " = ".join(self.best) + " (tied at 95%)"
        return f"{self.label}: best {best}; worse at 95% confidence: {worse}"


def _difference(a: Setting, b: Setting, metric: str) -> Interval | None:
    """``b - a`` of ``metric``: paired on common seeds when there are two or more."""
    va, vb = a.values(metric), b.values(metric)
    common = [s for s in va if s in vb]
    if len(common) >= 2:
        return interval([vb[s] - va[s] for s in common])
    ia, ib = a.interval(metric), b.interval(metric)
    if ia is None or ib is None or ia.half is None or ib.half is None:
        return None
    # Welch's standard error, with the smaller sample's degrees of freedom (conservative).
    se = math.sqrt((ia.half / t95(ia.n - 1)) ** 2 + (ib.half / t95(ib.n - 1)) ** 2)
    return Interval(ib.mean - ia.mean, t95(min(ia.n, ib.n) - 1) * se, min(ia.n, ib.n))


def verdicts(settings: Sequence[Setting]) -> list[Verdict]:
    """Verdicts within each context (workload) of two or more settings; the label
    names the workload when there are several."""
    contexts: dict[str, list[Setting]] = {}
    for setting in settings:
        contexts.setdefault(setting.context, []).append(setting)
    out: list[Verdict] = []
    for context, members in contexts.items():
        name = (json.loads(context) if context else {}).get("workload")
        for verdict in _verdicts(_within(members)):
            if len(contexts) > 1 and name:
                verdict = attrs.evolve(verdict, label=f"[{_short_workload(name)}] {verdict.label}")
            out.append(verdict)
    return out


def _short_workload(name: str) -> str:
    return str(name).rsplit("/", 1)[-1].removesuffix(".gz").removesuffix(".jsonl")


def _verdicts(settings: Sequence[Setting]) -> list[Verdict]:
    """One :class:`Verdict` per metric of :data:`EFFECT_METRICS` every setting has."""
    out: list[Verdict] = []
    if len(settings) < 2:
        return out
    for metric, label, higher, scale, unit in EFFECT_METRICS:
        intervals = {s.label: s.interval(metric) for s in settings}
        if any(i is None for i in intervals.values()):
            continue
        sign = 1.0 if higher else -1.0
        best = max(settings, key=lambda s: sign * intervals[s.label].mean)  # type: ignore[union-attr]
        tied = [best.label]
        worse: list[tuple[str, Interval]] = []
        halves: list[float] = []
        missing = False
        for other in settings:
            if other is best:
                continue
            diff = _difference(best, other, metric)
            if diff is None or diff.half is None:
                missing = True
                tied.append(other.label)
                continue
            halves.append(diff.half)
            if diff.excludes_zero():
                worse.append((other.label, diff))
            else:
                tied.append(other.label)
        detectable = None if missing or not halves else max(halves)
        out.append(Verdict(metric, label, tuple(tied), tuple(worse), detectable, scale, unit))
    return out


def repeated(settings: Sequence[Setting]) -> bool:
    """Whether any setting has repeats (two or more seeds): then intervals mean something."""
    return any(len(s.runs) >= 2 for s in settings)


def settings_rows(settings: Sequence[Setting]) -> tuple[list[str], list[list[str]]]:
    """Headings and cells of the per-setting table: runs, then ``mean ± half`` per metric."""
    present = [m for m in EFFECT_METRICS if all(s.interval(m[0]) is not None for s in settings)]
    headings = ["setting", "runs", *(f"{label} (95% CI)" for _, label, _, _, _ in present)]
    rows = []
    for setting in settings:
        cells = [setting.label, str(len(setting.runs))]
        for metric, _, _, scale, unit in present:
            i = setting.interval(metric)
            assert i is not None
            mean = f"{i.mean * scale:.4g}{unit}"
            cells.append(mean if i.half is None else f"{mean} ± {i.half * scale:.2g}")
        rows.append(cells)
    return headings, rows
