"""Synthetic shared-prefix chat workload (``kvframe gen chat``).

Models a chat service with a few system prompts: each request is a system
prompt followed by a user turn. A fraction ``shared_fraction`` of requests use
one of ``num_system_prompts`` shared system prompts (chosen uniformly, or by a
Zipf law with ``prefix_popularity`` > 0); the others get a system part of the
same length distribution but unique tokens, so the fraction changes how
cacheable the load is without changing how big it is. Arrivals are a Poisson
process at ``rate`` requests per second, starting at ``start_time``.

Determinism (the skeleton in :mod:`kvframe.workloads.generator`): the output
depends only on the config. Each random quantity
(arrivals, sharing, prefix choice, the three lengths, the system prompts'
lengths) has its own stream seeded from ``seed`` and a stream name, and every
stream advances exactly once per request whatever the other settings, so
e.g. changing ``shared_fraction`` keeps every arrival time and length and only
changes which requests share. Sampling uses only ``random.Random.random()``
and closed-form transforms, whose outputs CPython keeps stable across versions.
"""

from __future__ import annotations

import attrs

from kvframe.workloads import generator as gen
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
    "CHAT",
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


@attrs.frozen(slots=True, kw_only=True)
class ChatConfig(gen.GeneratorConfig):
    """Every knob of the chat generator; the whole config goes into the file header."""

    num_requests: int = attrs.field(default=1000, validator=check_positive_int)
    rate: float | None = attrs.field(default=10.0, validator=gen.check_rate)
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
    shared_fraction: float = attrs.field(default=0.8, validator=gen.check_fraction)
    """Fraction of requests whose system prompt is one of the shared ones."""
    prefix_popularity: float = attrs.field(default=0.0, validator=gen.check_non_negative)
    """Zipf exponent over the shared system prompts (0: uniform)."""
    seed: int = 0
    start_time: float = attrs.field(default=0.0, validator=gen.check_non_negative)
    id_prefix: str = "chat-"


def _chat_specs(config: ChatConfig) -> list[RequestSpec]:
    """The chat generator's own part: a shared or an own system prompt, then a user turn."""
    stream = gen.seeded_streams("chat", config.seed)
    sharing, choice = stream("share"), stream("prefix")
    system_len, user_len, output_len = stream("system"), stream("user"), stream("output")
    lengths = gen.prefix_lengths(
        config.system_prompt_length, stream, "system-prompts", config.num_system_prompts
    )
    system_prompts = gen.ZipfPrefixes.of(f"s{config.seed}-sys", lengths, config.prefix_popularity)

    def draw(request_id: str) -> tuple[SyntheticPrompt, int]:
        # Every stream advances once per request, whichever prompt it gets.
        shared, u = sharing.random() < config.shared_fraction, choice.random()
        own_system_length = config.system_prompt_length.sample(system_len)
        user_length = config.user_prompt_length.sample(user_len)
        if shared:
            prompt = system_prompts.prompt(u, user_length, key=request_id)
        else:
            prompt = SyntheticPrompt(own_system_length + user_length, key=request_id)
        return prompt, config.output_length.sample(output_len)

    return gen.emit_requests(config, stream("arrival"), draw)


CHAT: gen.WorkloadGenerator[ChatConfig] = gen.WorkloadGenerator("chat", ChatConfig, _chat_specs)
"""The chat generator (``kvframe gen chat``)."""

generate_chat = CHAT.generate
"""Generate a shared-prefix chat workload; see the module docstring.

Pass a :class:`ChatConfig`, or its fields as keyword arguments (which
override the config's). Request ids are ``{id_prefix}{index:06d}``; shared
prefix ids are ``s{seed}-sys{k}``, so workloads made with different seeds
never share tokens by accident.
"""
write_chat_jsonl = CHAT.write_jsonl
"""Generate a chat workload and write it as kvframe JSONL with its config in the header."""
