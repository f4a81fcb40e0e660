"""Synthetic shared-prefix chat workload (``kvframe gen chat``).

Models a chat service with a few system prompts: each request is a system
prompt followed by a user turn. A fraction ``shared_fraction`` of requests use
one of ``num_system_prompts`` shared system prompts (chosen uniformly, or by a
Zipf law with ``prefix_popularity`` > 0); the others get a system part of the
same length distribution but unique tokens, so the fraction changes how
cacheable the load is without changing how big it is. Arrivals are a Poisson
process at ``rate`` requests per second, starting at ``start_time``.

Determinism: the output depends only on the config. Each random quantity
(arrivals, sharing, prefix choice, the three lengths, the system prompts'
lengths) has its own stream seeded from ``seed`` and a stream name, and every
stream advances exactly once per request whatever the other settings, so
e.g. changing ``shared_fraction`` keeps every arrival time and length and only
changes which requests share. Sampling uses only ``random.Random.random()``
and closed-form transforms, whose outputs CPython keeps stable across versions.
"""

from __future__ import annotations

import bisect
import math
import os
import random
from typing import IO, Any

import attrs

from kvframe.workloads.distributions import (
    Fixed,
    LengthDistribution,
    LogNormal,
    Uniform,
    as_length_distribution,
    check_positive_int,
    parse_length_distribution,
)
from kvframe.workloads.kvframe_jsonl import write_jsonl
from kvframe.workloads.spec import RequestSpec, SyntheticPrompt

__all__ = [
    "ChatConfig",
    "Fixed",
    "LengthDistribution",
    "LogNormal",
    "Uniform",
    "generate_chat",
    "parse_length_distribution",
    "write_chat_jsonl",
    "write_jsonl",
]

# --------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------


def _check_fraction(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be in [0, 1], got {value!r}")


def _check_rate(instance: Any, attribute: attrs.Attribute, value: float | None) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise ValueError(
            f"rate must be > 0 requests/s and finite (or None: all at once), got {value!r}"
        )


def _check_non_negative(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


@attrs.frozen(slots=True, kw_only=True)
class ChatConfig:
    """Every knob of the chat generator; the whole config goes into the file header."""

    num_requests: int = attrs.field(default=1000, validator=check_positive_int)
    rate: float | None = attrs.field(default=10.0, validator=_check_rate)
    """Poisson arrival rate in requests per second; ``None``: all arrive at ``start_time``."""
    num_system_prompts: int = attrs.field(default=8, validator=check_positive_int)
    system_prompt_length: LengthDistribution = attrs.field(
        default=Fixed(1024), converter=as_length_distribution
    )
    user_prompt_length: LengthDistribution = attrs.field(
        default=LogNormal(median=256, sigma=0.8, max=8192), converter=as_length_distribution
    )
    output_length: LengthDistribution = attrs.field(
        default=LogNormal(median=128, sigma=0.8, max=2048), converter=as_length_distribution
    )
    shared_fraction: float = attrs.field(default=0.8, validator=_check_fraction)
    """Fraction of requests whose system prompt is one of the shared ones."""
    prefix_popularity: float = attrs.field(default=0.0, validator=_check_non_negative)
    """Zipf exponent over the shared system prompts (0: uniform)."""
    seed: int = 0
    start_time: float = attrs.field(default=0.0, validator=_check_non_negative)
    id_prefix: str = "chat-"

    def to_params(self) -> dict[str, Any]:
        """JSON-ready parameters (distributions as their parseable strings)."""
        return {
            field.name: str(value) if isinstance(value, (Fixed, Uniform, LogNormal)) else value
            for field, value in ((f, getattr(self, f.name)) for f in attrs.fields(ChatConfig))
        }


def generate_chat(config: ChatConfig | None = None, /, **options: Any) -> list[RequestSpec]:
    """Generate a shared-prefix chat workload; see the module docstring.

    Pass a :class:`ChatConfig`, or its fields as keyword arguments (which
    override the config's). Request ids are ``{id_prefix}{index:06d}``; shared
    prefix ids are ``s{seed}-sys{k}``, so workloads made with different seeds
    never share tokens by accident.
    """
    if config is None:
        config = ChatConfig(**options)
    elif options:
        config = attrs.evolve(config, **options)

    def stream(name: str) -> random.Random:
        # A str seed is hashed with SHA-512 by random.Random: stable across
        # processes and independent of PYTHONHASHSEED.
        return random.Random(f"kvframe.chat:{config.seed}:{name}")

    arrivals, sharing, choice = stream("arrival"), stream("share"), stream("prefix")
    system_len, user_len, output_len = stream("system"), stream("user"), stream("output")

    shared_lengths = [
        config.system_prompt_length.sample(stream("system-prompts"))
        for _ in range(config.num_system_prompts)
    ]
    weights = [1.0 / (k + 1) ** config.prefix_popularity for k in range(config.num_system_prompts)]
    total = sum(weights)
    cumulative: list[float] = []
    running = 0.0
    for weight in weights:
        running += weight / total
        cumulative.append(running)

    specs: list[RequestSpec] = []
    now = config.start_time
    for index in range(config.num_requests):
        if index and config.rate is not None:
            now += -math.log(1.0 - arrivals.random()) / config.rate
        shared = sharing.random() < config.shared_fraction
        k = min(bisect.bisect_left(cumulative, choice.random()), config.num_system_prompts - 1)
        own_system_length = config.system_prompt_length.sample(system_len)
        user_length = config.user_prompt_length.sample(user_len)
        max_tokens = config.output_length.sample(output_len)
        request_id = f"{config.id_prefix}{index:06d}"
        if shared:
            prompt = SyntheticPrompt(
                shared_lengths[k] + user_length,
                f"s{config.seed}-sys{k}",
                shared_lengths[k],
                key=request_id,
            )
        else:
            prompt = SyntheticPrompt(own_system_length + user_length, key=request_id)
        specs.append(
            RequestSpec(
                request_id=request_id, prompt=prompt, max_tokens=max_tokens, arrival_time=now
            )
        )
    return specs


def write_chat_jsonl(
    path: str | os.PathLike[str] | IO[str], config: ChatConfig | None = None, /, **options: Any
) -> int:
    """Generate a chat workload and write it as kvframe JSONL with its config in the header."""
    if config is None:
        config = ChatConfig(**options)
    elif options:
        config = attrs.evolve(config, **options)
    return write_jsonl(
        generate_chat(config), path, name="chat", generator="chat", params=config.to_params()
    )
