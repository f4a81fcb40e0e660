"""Synthetic multi-turn agent workload (``kvframe gen agentic``).

Models agents that interleave LLM calls with tool calls. A *job* is one agent
run: it arrives (Poisson process at ``rate`` jobs per second, the first at
``start_time``), then runs ``N`` turns, ``N`` drawn from ``num_turns``. Every
turn but the last ends with a tool call; the tool's result is appended to the
context and the next turn starts. So, with ``P_k`` the prompt length of turn
``k`` and ``O_k`` its output length (``max_tokens``)::

    P_0     = system prompt + task
    P_{k+1} = P_k + O_k + R_k          (R_k: the tool result's tokens)

and turn ``k``'s prompt is a prefix of turn ``k + 1``'s: prefixes grow and are
shared within a job (and, with ``share_system_prompt``, the system prompt is
shared across jobs).

**Tokens.** Every prompt is a :class:`~kvframe.workloads.spec.SyntheticPrompt`:
the agent's system prompt (a shared prefix ``s{seed}-agent{a}``) followed by
the job's own token stream (key ``s{seed}-{job_id}``). Streams are
prefix-stable, so turn ``k``'s prompt is exactly the first ``P_k`` tokens of
turn ``k + 1``'s, and files stay compact (a length and two names per line).

**Output stand-in.** A turn's real output is not known in advance, yet the next
turn's prompt must contain it. The generator uses a deterministic stand-in:
turn ``k``'s output is *the next ``O_k`` tokens of the job's stream* -- exactly
the tokens that turn ``k + 1``'s prompt holds at positions ``[P_k, P_k + O_k)``
-- and :func:`scripted_output_tokens` returns them. A trace has no stop tokens,
so a simulator generates exactly ``max_tokens`` tokens per turn, as the
stand-in assumes. An executor that *replays* the stand-in makes turn ``k``'s
output blocks hittable by turn ``k + 1``, as on a real server where the agent
sends the model's output back verbatim. kvframe's sim executor samples a
constant token instead, so under it only turn ``k``'s *prompt* blocks (the
first ``floor(P_k / block_size)`` blocks) can be hit by turn ``k + 1``; the
output and the partial block are recomputed. That understates cross-turn reuse
by at most ``O_k + block_size`` tokens per turn, equally for every policy.

**Arrivals are closed loop.** Turn ``k + 1`` arrives ``tool_duration`` seconds
after turn ``k`` *finishes*, which only the engine knows. The ``arrival`` a
follow-up turn carries in the file is therefore a placeholder: the earliest it
could arrive, ``job arrival + sum of the job's earlier tool durations`` (a lower
bound, since every turn takes some time). The engine recomputes it as
``max(placeholder, finish(k) + tool_duration(k))`` =
``finish(k) + tool_duration(k)``. Specs come out sorted by that placeholder
(stable), so the file is in non-decreasing arrival order as the reader requires.

**Tools.** Each non-final turn picks a tool from ``tools`` (weighted); the tool
decides the call's duration (a float distribution in seconds, e.g. fast tools
around 0.1-2 s, slow ones 5-30 s and heavy-tailed) and its result's length.
The final turn has no tool and ``is_last_turn`` set. ``tool_time_scale``
multiplies every duration (a knob for "short" vs "long" tool calls).

**Determinism.** The output depends only on the config. Job-level quantities
(arrival gaps, turn counts, task lengths, system-prompt choice) have one stream
each, advanced once per job; each job has its own turn stream, advanced
exactly four times per turn (output length, tool, duration, result length)
whatever the distributions, so changing one tool's duration distribution
changes only durations. Sampling uses only ``random.Random.random()`` and
closed-form inverse CDFs.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from kvframe.workloads import generator as gen
from kvframe.workloads.distributions import (
    DurationDistribution,
    Fixed,
    FixedDuration,
    LengthDistribution,
    LogNormal,
    LogNormalDuration,
    ParetoDuration,
    UniformDuration,
    as_duration_distribution,
    as_length_distribution,
    check_finite_non_negative,
    check_positive_float,
    check_positive_int,
    parse_duration_distribution,
)
from kvframe.workloads.spec import RequestSpec, SyntheticPrompt

__all__ = [
    "AGENTIC",
    "PRESETS",
    "TOOL_MIXES",
    "AgenticConfig",
    "DurationDistribution",
    "FixedDuration",
    "LogNormalDuration",
    "ParetoDuration",
    "ToolSpec",
    "UniformDuration",
    "generate_agentic",
    "parse_duration_distribution",
    "scripted_output_tokens",
    "write_agentic_jsonl",
]

# --------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class ToolSpec:
    """A tool an agent calls: how often, how long the call takes, how long its result is."""

    name: str = attrs.field()
    weight: float = attrs.field(default=1.0, validator=check_positive_float)
    """Relative frequency among the config's tools."""
    duration: DurationDistribution = attrs.field(converter=as_duration_distribution)
    """Seconds between the turn finishing and the job's next turn arriving."""
    result_length: LengthDistribution = attrs.field(
        default=LogNormal(median=256, sigma=0.8, max=8192), converter=as_length_distribution
    )
    """Tokens the tool's result adds to the next turn's prompt."""

    @name.validator
    def _check_name(self, attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError(f"a tool needs a non-empty name, got {value!r}")

    def to_params(self) -> dict[str, Any]:
        """JSON-ready form; ``ToolSpec(**params)`` rebuilds it."""
        return {
            "name": self.name,
            "weight": self.weight,
            "duration": str(self.duration),
            "result_length": str(self.result_length),
        }


TOOL_MIXES: dict[str, tuple[ToolSpec, ...]] = {
    "mixed": (
        ToolSpec(
            name="read_file",
            weight=0.35,
            duration=LogNormalDuration(median=0.3, sigma=0.8, min=0.05, max=10.0),
            result_length=LogNormal(median=400, sigma=0.8, max=8192),
        ),
        ToolSpec(
            name="search",
            weight=0.25,
            duration=LogNormalDuration(median=1.0, sigma=0.6, min=0.1, max=15.0),
            result_length=LogNormal(median=300, sigma=0.7, max=4096),
        ),
        ToolSpec(
            name="edit",
            weight=0.2,
            duration=LogNormalDuration(median=0.2, sigma=0.5, min=0.05, max=5.0),
            result_length=LogNormal(median=60, sigma=0.6, max=1024),
        ),
        ToolSpec(
            name="run_tests",
            weight=0.2,
            duration=ParetoDuration(scale=5.0, alpha=1.5, max=120.0),
            result_length=LogNormal(median=800, sigma=0.9, max=8192),
        ),
    ),
}
"""Built-in tool sets, selectable by name (``tools="fast"``).

``mixed`` resembles a coding agent (SWE-bench-like): fast file reads, edits and
searches (median 0.2-1 s) and a slow, heavy-tailed test run (Pareto from 5 s,
median about 8 s). ``fast`` and ``slow`` are its two halves.
"""
TOOL_MIXES["fast"] = TOOL_MIXES["mixed"][:3]
TOOL_MIXES["slow"] = TOOL_MIXES["mixed"][3:]

# SWE-bench-style coding agent: the four duration tiers measured on 7,907 tool
# calls of 300 SWE-smith trajectories (Whrlicht/vllm-continuum,
# tool_call_time/runs/run_2902/paper_eval.md). Weights are the tiers' call
# counts without ``submit`` (510 calls, 0 s), which ends a job: it is the final
# turn here, which calls no tool. Each log-normal has the tier's measured
# median, and the sigma that gives its measured mean (mean = median *
# exp(sigma^2 / 2)). Result lengths are assumptions (docs/continuum.md).
TOOL_MIXES["swe-bench"] = (
    ToolSpec(
        name="editor",  # view / str_replace / create: p50 = mean = 0.2 ms
        weight=4294,
        duration=LogNormalDuration(median=0.0002, sigma=0.3),
        result_length=LogNormal(median=400, sigma=0.9, max=8192),
    ),
    ToolSpec(
        name="light_bash",  # grep, find, ls, rm: p50 0.191 s, mean 0.199 s
        weight=1036,
        duration=LogNormalDuration(median=0.1906, sigma=0.29),
        result_length=LogNormal(median=150, sigma=1.0, max=4096),
    ),
    ToolSpec(
        name="normal_bash",  # p50 0.424 s, mean 0.726 s
        weight=392,
        duration=LogNormalDuration(median=0.4239, sigma=1.04, max=300.0),
        result_length=LogNormal(median=200, sigma=1.0, max=4096),
    ),
    ToolSpec(
        name="heavy_bash",  # python scripts, pytest, pip: p50 0.488 s, mean 4.95 s
        weight=1675,
        duration=LogNormalDuration(median=0.488, sigma=2.15, max=300.0),
        result_length=LogNormal(median=400, sigma=1.0, max=8192),
    ),
)
# BFCL v3 multi-turn: the tools are simulated Python APIs (file system, trading,
# travel booking, ...) executed in the harness's process, so a call takes
# milliseconds. No measured distribution is published: an assumption.
TOOL_MIXES["bfcl"] = (
    ToolSpec(
        name="api_call",
        weight=1.0,
        duration=LogNormalDuration(median=0.002, sigma=1.0, max=1.0),
        result_length=LogNormal(median=80, sigma=0.8, max=2048),
    ),
)

# The Continuum paper's own traces (arXiv 2511.02230, Table 2): per-program
# tool time as one log-normal with the table's mean and standard deviation
# (sigma^2 = ln(1 + cv^2), median = mean / exp(sigma^2 / 2)); the result
# length carries the table's tokens per program (docs/continuum.md).
TOOL_MIXES["swe-bench-paper"] = (
    ToolSpec(
        name="bash",  # mini-swe-agent: every action is one bash command; 925 +- 3,550 ms
        duration=LogNormalDuration(median=0.233, sigma=1.66, max=300.0),
        result_length=LogNormal(median=5466, sigma=0.614, max=65536),
    ),
)
TOOL_MIXES["bfcl-v4-paper"] = (
    ToolSpec(
        name="web_search",  # BFCL v4 Web Search: 1,923 +- 2,133 ms
        duration=LogNormalDuration(median=1.288, sigma=0.896, max=300.0),
        # Pages x 0.4 (the paper's scaling to fit Llama-3.1's 128k context).
        result_length=LogNormal(median=3300, sigma=1.25, max=65536),
    ),
)


def _as_tools(value: str | Iterable[ToolSpec | Mapping[str, Any]]) -> tuple[ToolSpec, ...]:
    if isinstance(value, str):
        tools = TOOL_MIXES.get(value)
        if tools is None:
            close = difflib.get_close_matches(value, TOOL_MIXES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown tool mix {value!r}{hint} (known: {', '.join(TOOL_MIXES)})")
        return tools
    tools = tuple(t if isinstance(t, ToolSpec) else ToolSpec(**t) for t in value)
    if not tools:
        raise ValueError("an agentic workload needs at least one tool")
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"tool names must be unique, got {names}")
    return tools


# --------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class AgenticConfig(gen.GeneratorConfig):
    """Every knob of the agentic generator; the whole config goes into the file header."""

    RATE_UNIT = "jobs"

    num_jobs: int = attrs.field(default=100, validator=check_positive_int)
    rate: float | None = attrs.field(default=1.0, validator=gen.check_rate)
    """Poisson job arrival rate in jobs per second; ``None``: all jobs at ``start_time``."""
    num_turns: LengthDistribution = attrs.field(
        default=LogNormal(median=6, sigma=0.6, min=1, max=40), converter=as_length_distribution
    )
    """Turns per job (LLM calls); every turn but the last ends with a tool call."""
    num_system_prompts: int = attrs.field(default=1, validator=check_positive_int)
    """Distinct agents (system prompts); each job uses one, chosen uniformly."""
    system_prompt_length: LengthDistribution = attrs.field(
        default=Fixed(1024), converter=as_length_distribution
    )
    """Drawn once per system prompt."""
    share_system_prompt: bool = True
    """Jobs of one agent share its system prompt's tokens; ``False``: every job's are its own."""
    task_length: LengthDistribution = attrs.field(
        default=LogNormal(median=512, sigma=0.8, max=8192), converter=as_length_distribution
    )
    """The first user message, after the system prompt."""
    output_length: LengthDistribution = attrs.field(
        default=LogNormal(median=128, sigma=0.8, min=8, max=2048), converter=as_length_distribution
    )
    """Tokens each turn generates (``max_tokens``)."""
    tools: tuple[ToolSpec, ...] = attrs.field(default="mixed", converter=_as_tools)
    """A name from :data:`TOOL_MIXES` or a sequence of :class:`ToolSpec` (or their dicts)."""
    tool_time_scale: float = attrs.field(default=1.0, validator=check_finite_non_negative)
    """Multiplies every tool duration."""
    max_context_tokens: int = attrs.field(default=32768, validator=check_positive_int)
    """A job ends early, at its last turn whose prompt plus output fits."""
    seed: int = 0
    start_time: float = attrs.field(default=0.0, validator=check_finite_non_negative)
    id_prefix: str = "job-"

    def __attrs_post_init__(self) -> None:
        if self.max_context_tokens < 2:
            raise ValueError("max_context_tokens must be >= 2 (a prompt and one output token)")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> AgenticConfig:
        """The config of preset ``name`` (:data:`PRESETS`), with ``overrides`` on top.

        :raises ValueError: for an unknown name (with the known ones).
        """
        preset = PRESETS.get(name)
        if preset is None:
            close = difflib.get_close_matches(name, PRESETS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown preset {name!r}{hint} (known: {', '.join(PRESETS)})")
        return cls(**{**preset, **overrides})

    def to_params(self) -> dict[str, Any]:
        """JSON-ready parameters; ``AgenticConfig(**params)`` rebuilds the config."""
        return gen.GeneratorConfig.to_params(self)

    def _param(self, name: str, value: Any) -> Any:
        if name == "tools":
            return [tool.to_params() for tool in value]
        return gen.GeneratorConfig._param(self, name, value)


PRESETS: dict[str, dict[str, Any]] = {
    "swe-bench": {
        # 7,907 tool calls in 300 trajectories: 26.4 calls, i.e. turns, per job
        # (a mean of 26.6 here). The spread is an assumption, narrow enough
        # that turns done predict turns left, as the Continuum paper's Figure 3
        # shows for SWE-Bench (eta about 0.47 here).
        "num_turns": LogNormal(median=25, sigma=0.35, min=3, max=100),
        "num_system_prompts": 1,
        "system_prompt_length": Fixed(1500),
        # SWE-bench issue texts: mean 195 words, max 4,477 (SWE-bench, Table 1).
        "task_length": LogNormal(median=260, sigma=0.8, max=6000),
        "output_length": LogNormal(median=150, sigma=0.6, min=16, max=1024),
        "tools": "swe-bench",
        "max_context_tokens": 32768,
    },
    "bfcl": {
        "num_turns": LogNormal(median=8, sigma=0.4, min=2, max=40),
        "num_system_prompts": 8,
        "system_prompt_length": Fixed(4000),
        "task_length": LogNormal(median=120, sigma=0.6, max=2000),
        "output_length": LogNormal(median=60, sigma=0.6, min=8, max=512),
        "tools": "bfcl",
        "max_context_tokens": 32768,
    },
    # Table 2 of the Continuum paper (arXiv 2511.02230): 100 mini-swe-agent
    # SWE-bench programs, 10.9 +- 2.1 turns, tool time 925 +- 3,550 ms,
    # 70,126 +- 19,732 tokens per program (read as the final context). The
    # paper serves them with 2048-token prefill chunks (kvframe:
    # --max-num-batched-tokens 2048); that is an engine knob, not a workload field.
    "swe-bench-paper": {
        "num_turns": LogNormal(median=10.7, sigma=0.191, min=2, max=40),
        "num_system_prompts": 1,
        "system_prompt_length": Fixed(1500),
        "task_length": LogNormal(median=400, sigma=0.8, max=6000),
        "output_length": LogNormal(median=200, sigma=0.6, min=16, max=2048),
        "tools": "swe-bench-paper",
        "max_context_tokens": 131072,
    },
    # Table 2: 100 BFCL v4 Web Search programs, 6.3 +- 2.3 turns, tool time
    # 1,923 +- 2,133 ms, 93,256 +- 68,687 tokens per program, scaled by 0.4
    # (the paper's factor to fit Llama-3.1's 128k context): 37,302 +- 27,475.
    "bfcl-v4-paper": {
        "num_turns": LogNormal(median=5.92, sigma=0.354, min=2, max=40),
        "num_system_prompts": 1,
        "system_prompt_length": Fixed(1000),
        "task_length": LogNormal(median=100, sigma=0.6, max=2000),
        "output_length": LogNormal(median=100, sigma=0.6, min=8, max=1024),
        "tools": "bfcl-v4-paper",
        "max_context_tokens": 131072,
    },
}
"""Workloads grounded in the Continuum paper's agent benchmarks, by name.

Each is a set of :class:`AgenticConfig` fields (``AgenticConfig.from_preset``;
``kvframe gen agentic --preset NAME``); arrival rate, job count and seed stay
the caller's. Every number's source, or the assumption behind it, is in
``docs/continuum.md`` (section *Workload presets*).
"""


def _agentic_specs(config: AgenticConfig) -> list[RequestSpec]:
    """The agentic generator's own part: jobs of turns, sorted by their arrival placeholders.

    The job-level streams (arrival, turn count, agent, task length) are drawn
    here, once per job, in one visible order; each job's turns in
    :func:`_job_specs` from the job's own stream.
    """
    stream = gen.seeded_streams("agentic", config.seed)
    turn_counts, agent_choice, task_len = stream("turns"), stream("agent"), stream("task")
    system_lengths = gen.prefix_lengths(
        config.system_prompt_length, stream, "system-prompts", config.num_system_prompts
    )
    cumulative = gen.cumulative_shares(tool.weight for tool in config.tools)
    arrivals = gen.poisson_arrivals(
        stream("arrival"), start=config.start_time, rate=config.rate, count=config.num_jobs
    )
    generated: list[RequestSpec] = []
    for index, job_arrival in enumerate(arrivals):
        num_turns = config.num_turns.sample(turn_counts)
        agent = min(int(agent_choice.random() * config.num_system_prompts),
                    config.num_system_prompts - 1)  # fmt: skip
        task_length = config.task_length.sample(task_len)
        job = _Job(
            config,
            index=index,
            agent=agent,
            system_length=system_lengths[agent],
            arrival=job_arrival,
            turns=stream(f"job:{index}"),
        )
        generated.extend(_job_specs(job, cumulative, num_turns=num_turns, task_length=task_length))
    generated.sort(key=lambda spec: spec.arrival_time)  # stable: ties keep job, turn order
    return generated


AGENTIC: gen.WorkloadGenerator[AgenticConfig] = gen.WorkloadGenerator(
    "agentic", AgenticConfig, _agentic_specs
)
"""The agentic generator (``kvframe gen agentic``)."""


def scripted_output_tokens(spec: RequestSpec) -> list[int]:
    """The output stand-in of a generated turn: the next ``max_tokens`` tokens of its stream.

    These are exactly the tokens the job's next turn has at positions
    ``[len(prompt), len(prompt) + max_tokens)``. An executor that samples them
    (instead of a constant token) makes a turn's output blocks hittable by the
    next turn, as on a real server.

    :raises TypeError: if the spec's prompt is not a :class:`SyntheticPrompt`.
    """
    prompt = spec.prompt
    if not isinstance(prompt, SyntheticPrompt):
        raise TypeError(
            f"request {spec.request_id!r}: scripted outputs need a SyntheticPrompt, "
            f"got {type(prompt).__name__}"
        )
    longer = attrs.evolve(prompt, length=prompt.length + spec.max_tokens)
    return longer.token_ids()[prompt.length :]


@attrs.frozen(slots=True)
class _Job:
    """One job's fixed facts: its ids, its agent's system prompt, its arrival, its turn stream."""

    config: AgenticConfig
    index: int = attrs.field(kw_only=True)
    agent: int = attrs.field(kw_only=True)
    system_length: int = attrs.field(kw_only=True)
    arrival: float = attrs.field(kw_only=True)
    turns: random.Random = attrs.field(kw_only=True)
    """The job's own stream: four draws per turn, always in the order of :func:`_draw_turn`."""

    @property
    def job_id(self) -> str:
        return f"{self.config.id_prefix}{self.index:05d}"

    def prompt(self, length: int) -> SyntheticPrompt:
        """``length`` tokens: the agent's system prompt (if shared), then the job's own."""
        config = self.config
        system_id = f"s{config.seed}-agent{self.agent}" if config.share_system_prompt else None
        key = f"s{config.seed}-{self.job_id}"
        return gen.prefixed_prompt(length, system_id, min(self.system_length, length), key=key)


@attrs.frozen(slots=True)
class _Turn:
    output_length: int
    tool: ToolSpec
    duration: float
    result_length: int


def _draw_turn(job: _Job, cumulative: list[float]) -> _Turn:
    """One turn's four draws from the job's stream: output length, tool, duration, result length."""
    config, turns = job.config, job.turns
    output_length = config.output_length.sample(turns)
    tool = config.tools[gen.pick(cumulative, turns.random())]
    duration = round(tool.duration.sample(turns) * config.tool_time_scale, 6)
    return _Turn(output_length, tool, duration, tool.result_length.sample(turns))


def _job_specs(
    job: _Job, cumulative: list[float], *, num_turns: int, task_length: int
) -> list[RequestSpec]:
    """One job's turns; the job ends early at its last turn whose prompt plus output fits."""
    max_context = job.config.max_context_tokens
    prompt_length = min(job.system_length + task_length, max_context - 1)
    placeholder = job.arrival
    job_specs: list[RequestSpec] = []
    for turn in range(num_turns):
        drawn = _draw_turn(job, cumulative)
        output_length = drawn.output_length
        if turn == 0:
            output_length = min(output_length, max_context - prompt_length)
        elif prompt_length + output_length > max_context:
            break  # the context is full: the previous turn was the last
        job_specs.append(
            RequestSpec(
                request_id=f"{job.job_id}-t{turn}",
                prompt=job.prompt(prompt_length),
                max_tokens=output_length,
                arrival_time=placeholder,
                job_id=job.job_id,
                turn=turn,
                is_last_turn=False,
                tool_name=drawn.tool.name,
                tool_duration=drawn.duration,
            )
        )
        placeholder += drawn.duration
        prompt_length += output_length + drawn.result_length
    last = job_specs[-1]
    job_specs[-1] = attrs.evolve(last, is_last_turn=True, tool_name=None, tool_duration=None)
    return job_specs


generate_agentic = AGENTIC.generate
"""Generate an agentic multi-turn workload; see the module docstring.

Pass an :class:`AgenticConfig`, or its fields as keyword arguments (which
override the config's). Job ids are ``{id_prefix}{index:05d}``, request ids
``{job_id}-t{turn}``; system prompt ids ``s{seed}-agent{a}`` and job stream
keys ``s{seed}-{job_id}``, so workloads made with different seeds never
share tokens by accident.
"""
write_agentic_jsonl = AGENTIC.write_jsonl
"""Generate an agentic workload and write it as kvframe JSONL with its config in the header.

``AgenticConfig(**load_workload(path).metadata["params"])`` rebuilds the config.
"""
