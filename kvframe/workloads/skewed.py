"""A workload on which eviction policies part (``kvframe gen skewed``).

On the bundled traces at the README's settings every eviction policy ties:
either everything reused fits in the cache (no policy has to choose) or
nothing is reused in time (no policy can help). Policies differ only when
(1) popularity is skewed, so that some content is worth more than other
content; (2) one-use traffic ("scans") passes through, which a recency policy
lets push out the popular content and a frequency or scan-resistant policy
does not; and (3) the reuse distance of the popular content -- how many other
blocks are touched between two uses of it -- is around the cache size, so
that whether it survives depends on the policy's choice.

Each request is a *document* (a shared prefix, ``s{seed}-doc{k}``) followed
by a short user part, or, with probability ``scan_fraction``, a *scan*: a
prompt of ``scan_length`` tokens nobody shares. Documents are chosen with Zipf
weights ``1 / (k + 1)^popularity``. The working set is
``num_documents * document_length`` tokens; set it around the GPU cache's
size (``kvframe run`` logs the number of blocks) and the scans' volume
between two uses of a popular document at a similar size.

Determinism as in :mod:`kvframe.workloads.chat`: every random quantity has its
own stream seeded from ``seed`` and a name, and advances once per request
whatever the other settings.
"""

from __future__ import annotations

import bisect
import math
import os
import random
from typing import IO, Any

import attrs

from kvframe.workloads.chat import (
    Fixed,
    LengthDistribution,
    LogNormal,
    Uniform,
    as_length_distribution,
    check_positive_int,
)
from kvframe.workloads.kvframe_jsonl import write_jsonl
from kvframe.workloads.spec import RequestSpec, SyntheticPrompt

__all__ = ["SkewedConfig", "generate_skewed", "write_skewed_jsonl"]


def _check_fraction(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be in [0, 1], got {value!r}")


def _check_non_negative(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be >= 0 and finite, got {value!r}")


def _check_rate(instance: Any, attribute: attrs.Attribute, value: float | None) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise ValueError(
            f"rate must be > 0 requests/s and finite (or None: all at once), got {value!r}"
        )


@attrs.frozen(slots=True, kw_only=True)
class SkewedConfig:
    """Every knob of the skewed generator; the whole config goes into the file header."""

    num_requests: int = attrs.field(default=1000, validator=check_positive_int)
    rate: float | None = attrs.field(default=10.0, validator=_check_rate)
    """Poisson arrival rate in requests per second; ``None``: all arrive at ``start_time``."""
    num_documents: int = attrs.field(default=64, validator=check_positive_int)
    document_length: LengthDistribution = attrs.field(
        default=Fixed(1024), converter=as_length_distribution
    )
    """Length of each shared document (drawn once per document)."""
    popularity: float = attrs.field(default=1.0, validator=_check_non_negative)
    """Zipf exponent over the documents (0: uniform; 1: the classic Zipf law)."""
    scan_fraction: float = attrs.field(default=0.3, validator=_check_fraction)
    """Fraction of requests that are scans: one-use prompts nobody shares."""
    scan_length: LengthDistribution = attrs.field(
        default=Fixed(2048), converter=as_length_distribution
    )
    user_prompt_length: LengthDistribution = attrs.field(
        default=Fixed(64), converter=as_length_distribution
    )
    output_length: LengthDistribution = attrs.field(
        default=LogNormal(median=32, sigma=0.5, max=256), converter=as_length_distribution
    )
    seed: int = 0
    start_time: float = attrs.field(default=0.0, validator=_check_non_negative)
    id_prefix: str = "skewed-"

    def to_params(self) -> dict[str, Any]:
        """JSON-ready parameters (distributions as their parseable strings)."""
        return {
            field.name: str(value) if isinstance(value, (Fixed, Uniform, LogNormal)) else value
            for field, value in ((f, getattr(self, f.name)) for f in attrs.fields(SkewedConfig))
        }


def generate_skewed(config: SkewedConfig | None = None, /, **options: Any) -> list[RequestSpec]:
    """Generate the skewed document + scan workload; see the module docstring.

    Pass a :class:`SkewedConfig`, or its fields as keyword arguments (which
    override the config's). Request ids are ``{id_prefix}{index:06d}``.
    """
    if config is None:
        config = SkewedConfig(**options)
    elif options:
        config = attrs.evolve(config, **options)

    def stream(name: str) -> random.Random:
        return random.Random(f"kvframe.skewed:{config.seed}:{name}")

    arrivals, scanning, choice = stream("arrival"), stream("scan"), stream("document")
    scan_len, user_len, output_len = stream("scan-length"), stream("user"), stream("output")
    document_lengths = [
        config.document_length.sample(stream("documents")) for _ in range(config.num_documents)
    ]
    cumulative: list[float] = []
    weights = [1.0 / (k + 1) ** config.popularity for k in range(config.num_documents)]
    total, running = sum(weights), 0.0
    for weight in weights:
        running += weight / total
        cumulative.append(running)

    specs: list[RequestSpec] = []
    now = config.start_time
    for index in range(config.num_requests):
        if index and config.rate is not None:
            now += -math.log(1.0 - arrivals.random()) / config.rate
        scan = scanning.random() < config.scan_fraction
        k = min(bisect.bisect_left(cumulative, choice.random()), config.num_documents - 1)
        own_scan_length = config.scan_length.sample(scan_len)
        user_length = config.user_prompt_length.sample(user_len)
        max_tokens = config.output_length.sample(output_len)
        request_id = f"{config.id_prefix}{index:06d}"
        if scan:
            prompt = SyntheticPrompt(own_scan_length, key=request_id)
        else:
            prompt = SyntheticPrompt(
                document_lengths[k] + user_length,
                f"s{config.seed}-doc{k}",
                document_lengths[k],
                key=request_id,
            )
        specs.append(
            RequestSpec(
                request_id=request_id, prompt=prompt, max_tokens=max_tokens, arrival_time=now
            )
        )
    return specs


def write_skewed_jsonl(
    path: str | os.PathLike[str] | IO[str], config: SkewedConfig | None = None, /, **options: Any
) -> int:
    """Generate a skewed workload and write it as kvframe JSONL with its config in the header."""
    if config is None:
        config = SkewedConfig(**options)
    elif options:
        config = attrs.evolve(config, **options)
    return write_jsonl(
        generate_skewed(config), path, name="skewed", generator="skewed", params=config.to_params()
    )
