"""The statistics behind Continuum's time-to-live, and the TTL rule itself.

Continuum keeps a finished turn's KV pinned for ``tau`` seconds, betting that
the job's tool call returns within ``tau``. The rule (arXiv 2511.02230) picks

    tau* = argmax over tau in {0} + {observed durations of the tool, <= max_ttl}
           of  F(tau) * (T * eta + reload(r)) - tau

* ``F`` -- the empirical CDF of the tool's call durations: the chance that the
  next turn arrives while the pin still stands;
* ``T * eta + reload(r)`` -- what a hit saves: the queueing delay a turn suffers
  when its pin is gone (``T``, a sliding mean, see :class:`SlidingMean`),
  weighted by ``eta`` (see :class:`TurnCorrelation`), plus the time to get
  the turn's context back (``reload``: the offload tier's load time for what
  it holds, a prefill on the cost model for the rest; the policy computes it);
* ``- tau`` -- what the pin costs: memory held for ``tau`` seconds, measured in
  the same seconds.

Only ``{0}`` and observed durations need to be tried: between two observations
``F`` is flat while ``-tau`` falls, so the maximum sits on an observation (or at
0). Ties go to the smaller ``tau`` (less memory for the same value).

Everything here is plain data and arithmetic, testable without a scheduler.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

__all__ = [
    "DurationHistory",
    "DurationWindow",
    "SlidingMean",
    "TurnCorrelation",
    "choose_ttl",
    "choose_ttl_exponential",
]

_TIE_TOLERANCE = 1e-9
"""Relative tolerance under which two utilities count as tied (float noise)."""


def choose_ttl(durations: Sequence[float], benefit: float, *, max_ttl: float = math.inf) -> float:
    """The TTL that maximises ``F(tau) * benefit - tau`` (ties: the smaller ``tau``).

    :param durations: observed durations, **sorted ascending** (the empirical
        distribution; ``F(tau)`` is the fraction ``<= tau``). Must be non-empty.
    :param benefit: seconds a hit saves, ``T * eta + reload(r)``.
    :param max_ttl: candidates above it are not considered.
    :returns: ``0.0`` (do not pin) or one of ``durations``.

    O(number of durations below ``benefit``): a candidate ``d`` can score at
    most ``benefit - d`` (``F <= 1``), so the scan stops once that cannot beat
    the best so far.
    """
    n = len(durations)
    if n == 0:
        raise ValueError("choose_ttl needs at least one observed duration")
    if not benefit > 0:
        return 0.0
    per_observation = benefit / n
    tolerance = _TIE_TOLERANCE * max(1.0, benefit)
    # tau = 0 hits only the calls that took no time at all.
    start = bisect.bisect_right(durations, 0.0)
    best_tau = 0.0
    best_utility = start * per_observation
    for index in range(start, n):
        tau = durations[index]
        if tau > max_ttl or benefit - tau <= best_utility + tolerance:
            break
        # F(tau) = (index + 1) / n at the last of equal values; earlier equal
        # values score less and can only set the same tau.
        utility = (index + 1) * per_observation - tau
        if utility > best_utility + tolerance:
            best_utility = utility
            best_tau = tau
    return best_tau


def choose_ttl_exponential(mean: float, benefit: float, *, max_ttl: float = math.inf) -> float:
    """The TTL that maximises ``F(tau) * benefit - tau`` for exponential durations.

    The cold start of the paper's reproductions: until ``K`` durations have
    been observed overall, the empirical CDF of a handful of samples is a poor
    guide (one sample ``d`` would give ``tau = d`` exactly), so durations are
    modelled as exponential with the observed mean ``m``: ``F(tau) = 1 -
    exp(-tau / m)``. The utility is concave with its maximum where ``benefit /
    m * exp(-tau / m) = 1``, i.e. ``tau* = m ln(benefit / m)`` when
    ``benefit > m`` and ``0`` otherwise; under a cap the utility still rises up
    to it, so the capped optimum is ``min(tau*, max_ttl)``.
    """
    if not mean > 0 or not benefit > mean:
        return 0.0
    return min(mean * math.log(benefit / mean), max_ttl)


def exponential_cdf(mean: float, tau: float) -> float:
    """``F(tau)`` of the exponential model above (a point mass at 0 when ``mean`` is 0)."""
    return 1.0 if not mean > 0 else 1.0 - math.exp(-tau / mean)


class DurationWindow:
    """The last ``size`` observations of one quantity, kept in order and sorted.

    The sorted copy is what :func:`choose_ttl` reads; keeping it sorted
    incrementally costs one ``insort`` and one deletion (memmoves) per
    observation instead of a sort per decision. ``count`` and ``mean_all`` cover
    every observation ever made (the running mean of the fixed-TTL mode).
    """

    __slots__ = ("_fifo", "_sorted", "count", "size", "total")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"window size must be >= 1, got {size}")
        self.size = size
        self._fifo: deque[float] = deque()
        self._sorted: list[float] = []
        self.count = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        if len(self._fifo) == self.size:
            oldest = self._fifo.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]
        self._fifo.append(value)
        bisect.insort(self._sorted, value)
        self.count += 1
        self.total += value

    @property
    def sorted(self) -> Sequence[float]:
        """The window's values, ascending (a live view: do not modify)."""
        return self._sorted

    @property
    def mean_all(self) -> float | None:
        """Mean of every observation so far (not only the window's), or ``None``."""
        return self.total / self.count if self.count else None

    def __len__(self) -> int:
        return len(self._fifo)


class DurationHistory:
    """Tool-call durations per tool and over all tools.

    :meth:`distribution` implements the fallback of the TTL rule: a tool's own
    window once it holds ``min_samples`` observations, else the global window
    (every tool's recent calls), else nothing (the caller's cold start).
    """

    __slots__ = ("_by_tool", "_global", "min_samples", "window")

    def __init__(self, *, window: int, min_samples: int) -> None:
        self.window = window
        self.min_samples = min_samples
        self._global = DurationWindow(window)
        self._by_tool: dict[str | None, DurationWindow] = {}

    def add(self, tool: str | None, duration: float) -> None:
        per_tool = self._by_tool.get(tool)
        if per_tool is None:
            per_tool = self._by_tool[tool] = DurationWindow(self.window)
        per_tool.add(duration)
        self._global.add(duration)

    def distribution(self, tool: str | None) -> tuple[Sequence[float], str]:
        """``(sorted durations, source)`` with source ``"tool"``, ``"global"`` or ``"none"``."""
        per_tool = self._by_tool.get(tool)
        if per_tool is not None and len(per_tool) >= self.min_samples:
            return per_tool.sorted, "tool"
        if len(self._global):
            return self._global.sorted, "global"
        return (), "none"

    def running_mean(self, tool: str | None) -> float | None:
        """Mean of every observed duration of ``tool``; ``None`` if never observed."""
        per_tool = self._by_tool.get(tool)
        return per_tool.mean_all if per_tool is not None else None

    def num_observations(self, tool: str | None = None) -> int:
        """Observations in ``tool``'s window (``None``: calls with no tool name)."""
        per_tool = self._by_tool.get(tool)
        return len(per_tool) if per_tool is not None else 0

    @property
    def num_global(self) -> int:
        return len(self._global)

    @property
    def num_observed(self) -> int:
        """Every duration observed so far, over all tools (not only the window's)."""
        return self._global.count

    @property
    def mean_observed(self) -> float | None:
        """Mean of every duration observed so far, over all tools; ``None`` before any."""
        return self._global.mean_all


class SlidingMean:
    """Mean of the last ``size`` values, O(1) per update.

    The running sum is rebuilt from the window every ``size`` updates so float
    error cannot accumulate over a long run.
    """

    __slots__ = ("_since_rebuild", "_sum", "_values", "size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"window size must be >= 1, got {size}")
        self.size = size
        self._values: deque[float] = deque()
        self._sum = 0.0
        self._since_rebuild = 0

    def add(self, value: float) -> None:
        if len(self._values) == self.size:
            self._sum -= self._values.popleft()
        self._values.append(value)
        self._sum += value
        self._since_rebuild += 1
        if self._since_rebuild >= self.size:
            self._sum = math.fsum(self._values)
            self._since_rebuild = 0

    @property
    def mean(self) -> float:
        """The window's mean; ``0.0`` before the first value (no delay observed yet)."""
        return self._sum / len(self._values) if self._values else 0.0

    def __len__(self) -> int:
        return len(self._values)


class TurnCorrelation:
    """``eta = -corr(k, N - k)`` over the turn boundaries of recently finished jobs.

    A job of ``N`` turns has ``N - 1`` tool calls; at the call after turn ``k``
    (``k = 1 .. N - 1`` turns done) ``N - k`` turns remain. The sample is every
    such pair ``(k, N - k)`` of the last ``size`` finished jobs, and ``corr`` is
    Pearson's correlation over it. ``eta`` is clamped to ``[0, 1]``; it is
    ``None`` (the caller's prior applies) while the correlation is undefined:
    fewer than two pairs, or no spread in ``k`` (every job had ``N <= 2``).

    If every job has the same ``N``, ``N - k`` is a linear function of ``k``:
    ``corr = -1`` and ``eta = 1``. The more ``N`` varies between jobs, the less
    ``k`` says about the turns remaining and the closer ``eta`` gets to 0.

    The sums are exact integers, updated in O(1) per job with closed forms: for
    ``m = N - 1`` pairs, ``sum k = m(m+1)/2``, ``sum k^2 = m(m+1)(2m+1)/6``,
    ``sum k(N-k) = N sum k - sum k^2``; and since ``N - k`` runs over the same
    values as ``k``, its sums equal ``k``'s.
    """

    __slots__ = ("_jobs", "_n", "_sum_k", "_sum_k2", "_sum_kr", "size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"window size must be >= 1, got {size}")
        self.size = size
        self._jobs: deque[int] = deque()
        self._n = 0
        self._sum_k = 0
        self._sum_k2 = 0
        self._sum_kr = 0

    @staticmethod
    def _sums(num_turns: int) -> tuple[int, int, int, int]:
        m = num_turns - 1
        sum_k = m * (m + 1) // 2
        sum_k2 = m * (m + 1) * (2 * m + 1) // 6
        return m, sum_k, sum_k2, num_turns * sum_k - sum_k2

    def add_job(self, num_turns: int) -> None:
        """A job finished after ``num_turns`` turns."""
        if num_turns < 1:
            raise ValueError(f"a job has at least one turn, got {num_turns}")
        if len(self._jobs) == self.size:
            self._apply(self._jobs.popleft(), -1)
        self._jobs.append(num_turns)
        self._apply(num_turns, +1)

    def _apply(self, num_turns: int, sign: int) -> None:
        m, sum_k, sum_k2, sum_kr = self._sums(num_turns)
        self._n += sign * m
        self._sum_k += sign * sum_k
        self._sum_k2 += sign * sum_k2
        self._sum_kr += sign * sum_kr

    @property
    def eta(self) -> float | None:
        n = self._n
        if n < 2:
            return None
        variance = n * self._sum_k2 - self._sum_k * self._sum_k  # times n^2; same for N - k
        if variance <= 0:
            return None
        covariance = n * self._sum_kr - self._sum_k * self._sum_k
        corr = covariance / variance
        return min(1.0, max(0.0, -corr))

    @property
    def num_jobs(self) -> int:
        return len(self._jobs)
