"""Repeats, confidence intervals and which differences are real.

Runs that differ only in ``seed`` (:mod:`kvframe.sweep.repeats`: a new draw of a
generated workload, or a new arrival jitter of a trace) are repeats of one
*setting*. For each setting and headline metric this module gives the mean and
a 95% confidence interval (Student's t over the repeats), and for each metric a
:class:`Verdict`: which settings are best, which are worse and by how much --
or, plainly, that the settings cannot be told apart at that confidence, with
the size of difference the repeats could have detected.

How two settings are compared: on the seeds both ran, *paired* (each seed's
difference, so that the luck of a draw common to both cancels). Settings are
ranked only against settings of the same workload *and pool size*
(:data:`CONTEXT_KEYS`, :data:`POOL_KEYS`): "lru@400 worse than s3fifo@1200"
says nothing about either policy. Each other setting is then, against the
best one, exactly one of:

* **identical** -- the same value on every seed: merged with the settings it
  equals (``a = b = c``), never listed separately;
* **worse** -- the difference's 95% interval excludes zero;
* **tied** -- the difference's 95% interval lies within ±:data:`TIE_TOLERANCE`
  (1%) of the best setting's mean: the repeats show that any difference is small;
* **undecided** -- neither: the interval includes zero *and* differences over
  1%; the verdict gives the gap and its interval instead of calling it a tie.

Why this rule (issue 50): "tied" used to mean "the interval includes zero",
so four seeds with a wide interval called an 18% gap a tie while a 2% gap
with a tight one was "worse". Why not rank by the means alone: on a workload
where the policies tie, the means still differ in the fourth digit, and a
ranking by them would be noise presented as a result.

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
    "CONTEXT_KEYS",
    "EFFECT_METRICS",
    "POOL_KEYS",
    "REPEAT_KEYS",
    "TIE_TOLERANCE",
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

POOL_KEYS = ("num_gpu_blocks", "kv_memory")
"""Pool sizes: settings are ranked only against settings of the same size."""

TIE_TOLERANCE = 0.01
"""Tied: the difference's 95% interval lies within ± this share of the best's mean."""

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
    """The workload and pool size it ran (:data:`CONTEXT_KEYS`, :data:`POOL_KEYS`):
    verdicts compare within one context."""

    def pairs(self, metric: str) -> list[tuple[str, float]]:
        """``(seed, value)`` of ``metric`` for every run that has it (a seed may repeat:
        runs without one, or the same run twice)."""
        out = []
        for run in self.runs:
            value = run.value(metric)
            if value is not None:
                out.append((json.dumps(run.config.get("seed")), float(value)))
        return out

    def values(self, metric: str) -> dict[str, float]:
        """``seed -> value`` when every run has its own seed (pairable); empty otherwise."""
        pairs = self.pairs(metric)
        out = dict(pairs)
        return out if len(out) == len(pairs) else {}

    def interval(self, metric: str) -> Interval | None:
        """The mean over *every* run (not one per seed: three runs without a seed are
        three values) and its interval."""
        values = [value for _, value in self.pairs(metric)]
        return interval(values) if values else None


def settings_of(entries: Sequence[Entry]) -> list[Setting]:
    """The settings of ``entries`` (done runs), each with its repeats, in first-seen order.

    Two runs are one setting only when *every* setting they record is equal but the
    seed: a setting compare does not know is still a setting (issue 50).
    """
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
        context = {
            k: config.get(k) for k in (*CONTEXT_KEYS, *POOL_KEYS) if config.get(k) is not None
        }
        contexts.setdefault(ident, json.dumps(context, sort_keys=True, default=str))
    return [Setting(labels[k], tuple(v), contexts[k]) for k, v in groups.items()]


def _within(settings: Sequence[Setting]) -> list[Setting]:
    """The settings of one context, labelled by what varies between them only."""
    from kvframe.compare.load import varying_keys

    runs = [run for s in settings for run in s.runs]
    fixed = (*REPEAT_KEYS, *CONTEXT_KEYS, *POOL_KEYS)
    keys = [k for k in varying_keys(runs) if k not in fixed]
    if not keys:
        return list(settings)
    return [attrs.evolve(s, label=s.runs[0].label(keys)) for s in settings]


@attrs.frozen(slots=True)
class Verdict:
    """What the repeats say about one metric across the settings of one context.

    Each setting other than the best is in exactly one of :attr:`worse`,
    :attr:`tied` and :attr:`undecided` (settings identical on every seed are
    one entry, labelled ``a = b``); the rule is the module docstring's.
    """

    metric: str
    label: str
    best: tuple[str, ...]
    """The best setting, and those identical to it on every seed."""
    worse: tuple[tuple[str, Interval], ...]
    """Settings really worse than the best (interval excludes zero), with the difference."""
    detectable: float | None
    """The widest half-width of a difference to the best: smaller differences could
    not have been told from zero (``None``: too few repeats for any interval)."""
    scale: float
    unit: str
    tied: tuple[str, ...] = ()
    """Settings whose difference to the best lies within ±:data:`TIE_TOLERANCE` of it."""
    undecided: tuple[tuple[str, Interval], ...] = ()
    """Settings neither worse nor tied: the interval spans zero and more than the tolerance."""
    reference: float = 0.0
    """The best setting's mean (the tolerance is a share of it)."""

    @property
    def indistinguishable(self) -> bool:
        """No setting is shown to be worse (tied or undecided)."""
        return not self.worse

    @property
    def identical(self) -> bool:
        """Every setting equals the best on every seed."""
        return not (self.worse or self.tied or self.undecided)

    def sentence(self) -> str:
        """The verdict in one line, for the table and the report."""
        if self.detectable is None and not self.identical:
            return f"{self.label}: too few repeats (seeds) for a confidence interval"
        if self.identical:
            count = len(self.best[0].split(" = "))
            return f"{self.label}: identical on every seed for all {count} settings"
        parts = [f"best {self.best[0]}"]
        tolerance = f"{TIE_TOLERANCE:.0%} of the best"
        if self.tied:
            parts.append(f"tied with it (95% CI within ±{tolerance}): " + "; ".join(self.tied))
        if self.worse:
            parts.append(
                "worse at 95% confidence: "
                + "; ".join(f"{label} by {self._gap(d)}" for label, d in self.worse)
            )
        if self.undecided:
            parts.append(
                f"undecided (95% CI spans 0 and more than ±{tolerance}; more seeds needed): "
                + "; ".join(f"{label} {self._gap(d)} apart" for label, d in self.undecided)
            )
        return f"{self.label}: " + "; ".join(parts)

    def _gap(self, d: Interval) -> str:
        """``2 points [1.5 points, 2.5 points]``: the difference's size and interval."""
        unit = " points" if self.unit == "%" else self.unit  # a difference of two rates

        def amount(x: float) -> str:
            return f"{x * self.scale:.3g}{unit}"

        if d.mean < 0:
            return f"{amount(abs(d.mean))} [{amount(-d.high)}, {amount(-d.low)}]"
        return f"{amount(d.mean)} [{amount(d.low)}, {amount(d.high)}]"


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
    """Verdicts within each context (workload and pool size) of two or more settings;
    the label names the context when there are several."""
    contexts: dict[str, list[Setting]] = {}
    for setting in settings:
        contexts.setdefault(setting.context, []).append(setting)
    names = _context_names(list(contexts))
    out: list[Verdict] = []
    for context, members in contexts.items():
        for verdict in _verdicts(_within(members)):
            if names[context]:
                verdict = attrs.evolve(verdict, label=f"[{names[context]}] {verdict.label}")
            out.append(verdict)
    return out


def _context_names(contexts: Sequence[str]) -> dict[str, str]:
    """Each context's name: the workload and pool size where they vary (``chat,
    num_gpu_blocks=400``), other context keys only when those do not tell them apart."""
    decoded = {c: json.loads(c) if c else {} for c in contexts}

    def varies(key: str) -> bool:
        return len({json.dumps(d.get(key), default=str) for d in decoded.values()}) > 1

    def name(d: dict, keys: Sequence[str]) -> str:
        parts = []
        for key in keys:
            if d.get(key) is None or not varies(key) or key == "generate":
                continue
            parts.append(_short_workload(d[key]) if key == "workload" else f"{key}={d[key]}")
        return ", ".join(parts)

    short = {c: name(d, ("workload", *POOL_KEYS)) for c, d in decoded.items()}
    if len(set(short.values())) == len(short):
        return short
    every = ("workload", *POOL_KEYS, *(k for k in CONTEXT_KEYS if k != "workload"))
    return {c: name(d, every) for c, d in decoded.items()}


def _short_workload(name: str) -> str:
    return str(name).rsplit("/", 1)[-1].removesuffix(".gz").removesuffix(".jsonl")


def _identical(a: Setting, b: Setting, metric: str) -> bool:
    """Equal values on the same seeds (each setting with its own seeds)."""
    va, vb = a.values(metric), b.values(metric)
    return bool(va) and va.keys() == vb.keys() and all(va[s] == vb[s] for s in va)


def _classes(settings: Sequence[Setting], metric: str) -> list[Setting]:
    """``settings`` with those identical on every seed merged into one (``a = b``)."""
    classes: list[list[Setting]] = []
    for setting in settings:
        for members in classes:
            if _identical(members[0], setting, metric):
                members.append(setting)
                break
        else:
            classes.append([setting])
    return [
        members[0]
        if len(members) == 1
        else attrs.evolve(members[0], label=" = ".join(m.label for m in members))
        for members in classes
    ]


def _judge(diff: Interval, reference: float) -> str:
    """``worse``, ``tied`` or ``undecided``: the one rule of the module docstring."""
    if diff.excludes_zero():
        return "worse"
    tolerance = TIE_TOLERANCE * abs(reference)
    return (
        "tied"
        if diff.half is not None and diff.low >= -tolerance and diff.high <= tolerance
        else "undecided"
    )


def _verdict(settings: Sequence[Setting], metric: str, label: str, higher: bool) -> Verdict | None:
    """One metric's verdict over ``settings`` (one context), or ``None`` when some lacks it."""
    intervals = {s.label: s.interval(metric) for s in settings}
    if any(i is None for i in intervals.values()):
        return None
    classes = _classes(settings, metric)
    sign = 1.0 if higher else -1.0
    best = max(classes, key=lambda s: sign * s.interval(metric).mean)  # type: ignore[union-attr]
    reference = best.interval(metric).mean  # type: ignore[union-attr]
    found: dict[str, list] = {"worse": [], "tied": [], "undecided": []}
    halves: list[float] = []
    missing = False
    for other in classes:
        if other is best:
            continue
        diff = _difference(best, other, metric)
        if diff is None or diff.half is None:
            missing = True
            found["undecided"].append((other.label, diff or Interval(0.0, None, 0)))
            continue
        halves.append(diff.half)
        kind = _judge(diff, reference)
        found[kind].append(other.label if kind == "tied" else (other.label, diff))
    detectable = None if missing or not halves else max(halves)
    return Verdict(
        metric, label, (best.label,), tuple(found["worse"]), detectable, 1.0, "",
        tied=tuple(found["tied"]), undecided=tuple(found["undecided"]), reference=reference,
    )  # fmt: skip


def _verdicts(settings: Sequence[Setting]) -> list[Verdict]:
    """One :class:`Verdict` per metric of :data:`EFFECT_METRICS` every setting has."""
    out: list[Verdict] = []
    if len(settings) < 2:
        return out
    for metric, label, higher, scale, unit in EFFECT_METRICS:
        verdict = _verdict(settings, metric, label, higher)
        if verdict is not None:
            out.append(attrs.evolve(verdict, scale=scale, unit=unit))
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
