"""The distributions the workload generators draw lengths and durations from.

Two families: token *lengths* (positive integers: prompt, output, tool-result
lengths) and *durations* (seconds, floats: tool calls). Each distribution
draws exactly one ``random.Random.random()`` per sample, whatever its
parameters, so that a generator's streams stay in step when a user swaps one
distribution for another; and each prints as the text that parses back to it
(``lognormal:median=256,sigma=0.8,min=1,max=8192``), so a workload file's header
records it readably. :func:`parse_length_distribution` and
:func:`parse_duration_distribution` share one parser of that ``NAME:key=value``
text, the same shape as kvframe's config strings.
"""

from __future__ import annotations

import difflib
import math
import random
from collections.abc import Callable, Mapping
from statistics import NormalDist
from typing import Any

import attrs

__all__ = [
    "DurationDistribution",
    "Fixed",
    "FixedDuration",
    "LengthDistribution",
    "LogNormal",
    "LogNormalDuration",
    "ParetoDuration",
    "Uniform",
    "UniformDuration",
    "as_duration_distribution",
    "as_length_distribution",
    "check_finite_non_negative",
    "check_positive_float",
    "check_positive_int",
    "parse_duration_distribution",
    "parse_length_distribution",
]

_STANDARD_NORMAL = NormalDist()


def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    """One log-normal draw by the inverse CDF, from exactly one ``random()``."""
    u = rng.random() or 0.5 / 2**53  # inv_cdf is undefined at 0
    return median * math.exp(sigma * _STANDARD_NORMAL.inv_cdf(u))


def check_positive_int(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def check_finite_non_negative(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def check_positive_float(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


# --------------------------------------------------------------------------
# Token lengths (positive integers)
# --------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Fixed:
    """Always ``value`` tokens."""

    value: int = attrs.field(validator=check_positive_int)

    def sample(self, rng: random.Random) -> int:
        rng.random()  # keep the stream in step with the other distributions
        return self.value

    def __str__(self) -> str:
        return f"fixed:value={self.value}"


@attrs.frozen(slots=True)
class Uniform:
    """Uniform over the integers ``low..high`` inclusive."""

    low: int = attrs.field(validator=check_positive_int)
    high: int = attrs.field(validator=check_positive_int)

    def __attrs_post_init__(self) -> None:
        if self.high < self.low:
            raise ValueError(f"uniform needs low <= high, got low={self.low} high={self.high}")

    def sample(self, rng: random.Random) -> int:
        return min(self.high, self.low + int(rng.random() * (self.high - self.low + 1)))

    def __str__(self) -> str:
        return f"uniform:low={self.low},high={self.high}"


@attrs.frozen(slots=True)
class LogNormal:
    """Log-normal with the given median and log-space sigma, clamped to ``[min, max]``.

    The usual shape of prompt and output lengths in production traces: most
    are short, a long tail is very long.
    """

    median: float
    sigma: float = 1.0
    min: int = attrs.field(default=1, validator=check_positive_int)
    max: int = attrs.field(default=32768, validator=check_positive_int)

    def __attrs_post_init__(self) -> None:
        if not self.median > 0 or not self.sigma >= 0 or self.max < self.min:
            raise ValueError(
                f"lognormal needs median > 0, sigma >= 0, min <= max; got median={self.median}, "
                f"sigma={self.sigma}, min={self.min}, max={self.max}"
            )

    def sample(self, rng: random.Random) -> int:
        return max(self.min, min(self.max, round(lognormal(rng, self.median, self.sigma))))

    def __str__(self) -> str:
        return (
            f"lognormal:median={self.median:g},sigma={self.sigma:g},min={self.min},max={self.max}"
        )


LengthDistribution = Fixed | Uniform | LogNormal

_LENGTHS: dict[str, Callable[..., Any]] = {
    "fixed": Fixed,
    "uniform": Uniform,
    "lognormal": LogNormal,
}


# --------------------------------------------------------------------------
# Durations (seconds, floats)
# --------------------------------------------------------------------------


@attrs.frozen(slots=True)
class FixedDuration:
    """Always ``value`` seconds."""

    value: float = attrs.field(validator=check_finite_non_negative)

    def sample(self, rng: random.Random) -> float:
        rng.random()  # keep the stream in step with the other distributions
        return float(self.value)

    def __str__(self) -> str:
        return f"fixed:value={self.value:g}"


@attrs.frozen(slots=True)
class UniformDuration:
    """Uniform on ``[low, high]`` seconds."""

    low: float = attrs.field(validator=check_finite_non_negative)
    high: float = attrs.field(validator=check_finite_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.high < self.low:
            raise ValueError(f"uniform needs low <= high, got low={self.low} high={self.high}")

    def sample(self, rng: random.Random) -> float:
        return self.low + rng.random() * (self.high - self.low)

    def __str__(self) -> str:
        return f"uniform:low={self.low:g},high={self.high:g}"


@attrs.frozen(slots=True)
class LogNormalDuration:
    """Log-normal with the given median (seconds) and log-space sigma, clamped to ``[min, max]``."""

    median: float = attrs.field(validator=check_positive_float)
    sigma: float = attrs.field(default=1.0, validator=check_finite_non_negative)
    min: float = attrs.field(default=0.0, validator=check_finite_non_negative)
    max: float = attrs.field(default=3600.0, validator=check_finite_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.max < self.min:
            raise ValueError(f"lognormal needs min <= max, got min={self.min} max={self.max}")

    def sample(self, rng: random.Random) -> float:
        return max(self.min, min(self.max, lognormal(rng, self.median, self.sigma)))

    def __str__(self) -> str:
        return (
            f"lognormal:median={self.median:g},sigma={self.sigma:g},"
            f"min={self.min:g},max={self.max:g}"
        )


@attrs.frozen(slots=True)
class ParetoDuration:
    """Pareto (type I): ``scale / U ** (1 / alpha)`` seconds, capped at ``max``.

    The classic heavy tail: most calls take about ``scale``, a few take many
    times longer (``alpha <= 2`` has infinite variance before the cap).
    """

    scale: float = attrs.field(validator=check_positive_float)
    alpha: float = attrs.field(default=1.5, validator=check_positive_float)
    max: float = attrs.field(default=3600.0, validator=check_finite_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.max < self.scale:
            raise ValueError(f"pareto needs scale <= max, got scale={self.scale} max={self.max}")

    def sample(self, rng: random.Random) -> float:
        u = 1.0 - rng.random()  # in (0, 1]
        return min(self.max, self.scale / u ** (1.0 / self.alpha))

    def __str__(self) -> str:
        return f"pareto:scale={self.scale:g},alpha={self.alpha:g},max={self.max:g}"


DurationDistribution = FixedDuration | UniformDuration | LogNormalDuration | ParetoDuration

_DURATIONS: dict[str, Callable[..., Any]] = {
    "fixed": FixedDuration,
    "uniform": UniformDuration,
    "lognormal": LogNormalDuration,
    "pareto": ParetoDuration,
}


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------


def _parse_number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _parse(
    text: str,
    factories: Mapping[str, Callable[..., Any]],
    what: str,
    plain: str,
    number: Callable[[str], int | float],
) -> Any:
    """``NAME:key=value,...`` as ``factories[NAME](key=number(value), ...)``.

    :raises ValueError: naming the bad text, with the known names or keys.
    """
    name, _, options = text.partition(":")
    factory = factories.get(name)
    if factory is None:
        close = difflib.get_close_matches(name, factories, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown {what} distribution {name!r} in {text!r}{hint} "
            f"(known: {', '.join(factories)}, or {plain})"
        )
    kwargs: dict[str, int | float] = {}
    for item in filter(None, options.split(",")):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"expected key=value in {text!r}, got {item!r}")
        if key not in attrs.fields_dict(factory):  # type: ignore[arg-type]
            known = ", ".join(attrs.fields_dict(factory))  # type: ignore[arg-type]
            raise ValueError(f"{name} has no parameter {key!r} in {text!r} (known: {known})")
        try:
            kwargs[key] = number(value.strip())
        except ValueError:
            raise ValueError(f"{key} must be a number in {text!r}, got {value!r}") from None
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad parameters in {text!r}: {exc}") from None


def parse_length_distribution(text: str | int) -> LengthDistribution:
    """Parse ``512``, ``fixed:value=512``, ``uniform:low=64,high=512`` or
    ``lognormal:median=256,sigma=0.8[,min=1,max=8192]``.

    :raises ValueError: naming the bad text, with the known names or keys.
    """
    if isinstance(text, int):
        return Fixed(text)
    text = text.strip()
    if text.isdigit():
        return Fixed(int(text))
    return _parse(text, _LENGTHS, "length", "a plain integer", _parse_number)  # type: ignore[no-any-return]


def parse_duration_distribution(text: str | float) -> DurationDistribution:
    """Parse ``2.5``, ``fixed:value=2.5``, ``uniform:low=0.1,high=2``,
    ``lognormal:median=0.5,sigma=1[,min=0.05,max=30]`` or
    ``pareto:scale=5,alpha=1.5[,max=120]`` (seconds).

    :raises ValueError: naming the bad text, with the known names or keys.
    """
    if isinstance(text, int | float):
        return FixedDuration(float(text))
    text = text.strip()
    try:
        return FixedDuration(float(text))
    except ValueError:
        pass
    return _parse(text, _DURATIONS, "duration", "a plain number of seconds", float)  # type: ignore[no-any-return]


def as_length_distribution(value: LengthDistribution | int | str) -> LengthDistribution:
    """Accept a distribution object, an int (fixed) or its config text."""
    if isinstance(value, Fixed | Uniform | LogNormal):
        return value
    return parse_length_distribution(value)


def as_duration_distribution(value: DurationDistribution | float | str) -> DurationDistribution:
    """Accept a distribution object, a number of seconds (fixed) or its config text."""
    if isinstance(value, FixedDuration | UniformDuration | LogNormalDuration | ParetoDuration):
        return value
    return parse_duration_distribution(value)
