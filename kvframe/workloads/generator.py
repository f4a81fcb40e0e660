"""The skeleton every synthetic workload generator shares (``kvframe gen``).

A generator is two things of its own -- a config class (attrs, frozen, every
knob a field, the whole config recorded in the file's header) and a function
from that config to request specs -- around a skeleton that is the same for
all of them and lives here once:

- **seeded streams** (:func:`seeded_streams`): each random quantity has its own
  ``random.Random`` seeded from the generator's name, the config's seed and a
  stream name, so every stream advances a fixed number of times per request
  (or job) whatever the other settings, and changing one knob changes only
  what depends on it;
- **the arrival process** (:func:`poisson_arrivals`): Poisson arrivals at
  ``rate`` from ``start_time``, or everything at once;
- **popularity** (:func:`zipf_weights`, :func:`cumulative_shares`,
  :func:`pick`): a Zipf law (or any weights) drawn with one uniform number;
- **shared prefixes** (:class:`ZipfPrefixes`, :func:`prefix_lengths`,
  :func:`prefixed_prompt`);
- **request spec emission** (:func:`emit_requests`): one spec per arrival, the
  id ``{id_prefix}{index:06d}``;
- **options and validation** (:class:`GeneratorConfig`, the ``check_*``
  validators, :meth:`WorkloadGenerator.config`);
- **writing** (:meth:`WorkloadGenerator.write_jsonl`): kvframe JSONL with the
  config in the header.

Sampling uses only ``random.Random.random()`` and closed-form transforms,
whose outputs CPython keeps stable across versions, so a config names its
workload byte for byte.
"""

from __future__ import annotations

import bisect
import math
import os
import random
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, Generic, Protocol, TypeVar

import attrs

from kvframe.workloads.distributions import Fixed, LogNormal, Uniform
from kvframe.workloads.kvframe_jsonl import write_jsonl
from kvframe.workloads.spec import RequestSpec, SyntheticPrompt

__all__ = [
    "GeneratorConfig",
    "WorkloadGenerator",
    "ZipfPrefixes",
    "check_fraction",
    "check_non_negative",
    "check_non_negative_finite",
    "check_rate",
    "cumulative_shares",
    "emit_requests",
    "pick",
    "poisson_arrivals",
    "prefix_lengths",
    "prefixed_prompt",
    "seeded_streams",
    "zipf_weights",
]

# --------------------------------------------------------------------------
# Options: validators and the config's shared behaviour
# --------------------------------------------------------------------------


def check_fraction(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    """A probability: in ``[0, 1]``."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be in [0, 1], got {value!r}")


def check_rate(instance: Any, attribute: attrs.Attribute, value: float | None) -> None:
    """An arrival rate: finite and positive, or ``None`` for everything at the start."""
    unit = getattr(instance, "RATE_UNIT", "requests")
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise ValueError(
            f"rate must be > 0 {unit}/s and finite (or None: all at once), got {value!r}"
        )


def check_non_negative(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    """``>= 0``, infinity allowed (the chat generator has always accepted it)."""
    if not value >= 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def check_non_negative_finite(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    """``>= 0`` and finite."""
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be >= 0 and finite, got {value!r}")


class GeneratorConfig:
    """Mixed into every generator's attrs config: how it is recorded in a file's header.

    Holds no fields (``__slots__ = ()``), so each config keeps its own field
    order, which is the order of the header's ``params``.
    """

    __slots__ = ()

    RATE_UNIT = "requests"
    """What ``rate`` counts, for :func:`check_rate`'s message."""

    seed: int

    def to_params(self) -> dict[str, Any]:
        """JSON-ready parameters (distributions as their parseable strings)."""
        return {
            field.name: self._param(field.name, getattr(self, field.name))
            for field in attrs.fields(type(self))
        }

    def _param(self, name: str, value: Any) -> Any:
        """One field's JSON-ready value; a config with other kinds of field extends it."""
        return str(value) if isinstance(value, Fixed | Uniform | LogNormal) else value


# --------------------------------------------------------------------------
# Randomness: streams, arrivals, popularity
# --------------------------------------------------------------------------


def seeded_streams(generator: str, seed: int) -> Callable[[str], random.Random]:
    """A factory of named random streams for one generator and seed.

    Each call makes a fresh ``random.Random``: two calls with one name give two
    streams in the same state. A str seed is hashed with SHA-512 by
    ``random.Random``: stable across processes and independent of
    ``PYTHONHASHSEED``.
    """

    def stream(name: str) -> random.Random:
        return random.Random(f"kvframe.{generator}:{seed}:{name}")

    return stream


def poisson_arrivals(
    rng: random.Random, *, start: float, rate: float | None, count: int
) -> Iterator[float]:
    """``count`` arrival times: the first at ``start``, then exponential gaps at ``rate``.

    One draw from ``rng`` per arrival after the first; ``rate=None`` puts every
    arrival at ``start`` and draws nothing.
    """
    now = start
    for index in range(count):
        if index and rate is not None:
            now += -math.log(1.0 - rng.random()) / rate
        yield now


def zipf_weights(count: int, exponent: float) -> list[float]:
    """Weights ``1 / (k + 1)^exponent`` for ``k`` in ``range(count)`` (0: uniform)."""
    return [1.0 / (k + 1) ** exponent for k in range(count)]


def cumulative_shares(weights: Iterable[float]) -> list[float]:
    """Each item's cumulative share of the total weight, for :func:`pick`."""
    weights = list(weights)
    total = sum(weights)
    cumulative: list[float] = []
    running = 0.0
    for weight in weights:
        running += weight / total
        cumulative.append(running)
    return cumulative


def pick(cumulative: list[float], u: float) -> int:
    """The index that the uniform number ``u`` selects from :func:`cumulative_shares`.

    Clamped to the last index, as rounding can leave the last share a little under 1.
    """
    return min(bisect.bisect_left(cumulative, u), len(cumulative) - 1)


# --------------------------------------------------------------------------
# Prompts and request specs
# --------------------------------------------------------------------------


class _Length(Protocol):
    def sample(self, rng: random.Random) -> int: ...


def prefix_lengths(
    distribution: _Length, stream: Callable[[str], random.Random], name: str, count: int
) -> list[int]:
    """The lengths of ``count`` shared prefixes, each drawn from a fresh stream ``name``.

    Every prefix gets a new stream in the same state, so all of them draw the
    same first value (equal lengths, also under a spread distribution). That is
    how the generators have always drawn them; workload files depend on it.
    """
    return [distribution.sample(stream(name)) for _ in range(count)]


@attrs.frozen(slots=True, kw_only=True)
class ZipfPrefixes:
    """Shared prefixes (system prompts, documents) chosen by a Zipf law over their index.

    Prefix ``k`` is ``{id_base}{k}`` with ``lengths[k]`` tokens and weight
    ``1 / (k + 1)^exponent``; :meth:`prompt` puts a request's own tokens after
    the one a uniform number picks.
    """

    id_base: str
    lengths: list[int]
    cumulative: list[float]

    @classmethod
    def of(cls, id_base: str, lengths: list[int], exponent: float) -> ZipfPrefixes:
        """Prefixes ``{id_base}{k}`` of these lengths under a Zipf law with ``exponent``."""
        return cls(
            id_base=id_base,
            lengths=lengths,
            cumulative=cumulative_shares(zipf_weights(len(lengths), exponent)),
        )

    def prompt(self, u: float, own_length: int, *, key: str) -> SyntheticPrompt:
        """The prefix that ``u`` picks, then ``own_length`` tokens unique to ``key``."""
        k = pick(self.cumulative, u)
        length = self.lengths[k]
        return SyntheticPrompt(length + own_length, f"{self.id_base}{k}", length, key=key)


def prefixed_prompt(
    length: int, prefix_id: str | None, prefix_length: int, *, key: str
) -> SyntheticPrompt:
    """A prompt of ``length`` tokens that starts with shared prefix ``prefix_id``, if any."""
    if prefix_id is None:
        return SyntheticPrompt(length, key=key)
    return SyntheticPrompt(length, prefix_id, prefix_length, key=key)


class _RequestsConfig(Protocol):
    id_prefix: str
    start_time: float
    rate: float | None
    num_requests: int


def emit_requests(
    config: _RequestsConfig,
    arrivals: random.Random,
    draw: Callable[[str], tuple[SyntheticPrompt, int]],
) -> list[RequestSpec]:
    """One request spec per Poisson arrival; ``draw(request_id)`` gives its prompt and max_tokens.

    Request ids are ``{id_prefix}{index:06d}``. ``draw`` advances each of the
    generator's own streams once per request, so the order of the draws
    across streams does not matter.
    """
    times = poisson_arrivals(
        arrivals, start=config.start_time, rate=config.rate, count=config.num_requests
    )
    specs: list[RequestSpec] = []
    for index, now in enumerate(times):
        request_id = f"{config.id_prefix}{index:06d}"
        prompt, max_tokens = draw(request_id)
        specs.append(
            RequestSpec(
                request_id=request_id, prompt=prompt, max_tokens=max_tokens, arrival_time=now
            )
        )
    return specs


# --------------------------------------------------------------------------
# A generator: its config class, its specs function, resolving and writing
# --------------------------------------------------------------------------

C = TypeVar("C", bound=GeneratorConfig)


@attrs.frozen(slots=True)
class WorkloadGenerator(Generic[C]):
    """One generator: a name (the file's ``name`` and ``generator``), its config and its specs."""

    name: str
    config_type: Callable[..., C]
    specs: Callable[[C], list[RequestSpec]]
    """The generator's own part: the specs of a resolved config."""

    def config(self, config: C | None = None, /, **options: Any) -> C:
        """``config`` with ``options`` on top, or a config of ``options`` alone.

        :raises ValueError, TypeError: a bad value or an unknown option.
        """
        if config is None:
            return self.config_type(**options)
        return attrs.evolve(config, **options) if options else config

    def generate(self, config: C | None = None, /, **options: Any) -> list[RequestSpec]:
        """The specs of ``config`` with ``options`` on top (see :meth:`config`)."""
        return self.specs(self.config(config, **options))

    def write_jsonl(
        self, path: str | os.PathLike[str] | IO[str], config: C | None = None, /, **options: Any
    ) -> int:
        """Generate and write the workload as kvframe JSONL with its config in the header."""
        config = self.config(config, **options)
        return self.write_specs(self.specs(config), path, config)

    def write_specs(
        self,
        specs: Iterable[RequestSpec],
        path: str | os.PathLike[str] | IO[str],
        config: C,
        *,
        description: str | None = None,
    ) -> int:
        """Write ``specs`` made from ``config`` (perhaps transformed) under this name."""
        return write_jsonl(
            specs,
            path,
            name=self.name,
            generator=self.name,
            params=config.to_params(),
            description=description,
        )
