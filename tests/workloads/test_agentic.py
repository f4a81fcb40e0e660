"""The agentic multi-turn generator: determinism, growing shared prefixes, fields, round trip."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import defaultdict

import attrs
import pytest

from kvframe.workloads import RequestSpec, SyntheticPrompt, load_workload
from kvframe.workloads.agentic import (
    TOOL_MIXES,
    AgenticConfig,
    FixedDuration,
    LogNormalDuration,
    ParetoDuration,
    ToolSpec,
    UniformDuration,
    generate_agentic,
    parse_duration_distribution,
    scripted_output_tokens,
    write_agentic_jsonl,
)


def by_job(specs: list[RequestSpec]) -> dict[str, list[RequestSpec]]:
    jobs: dict[str, list[RequestSpec]] = defaultdict(list)
    for spec in specs:
        jobs[spec.job_id].append(spec)
    for turns in jobs.values():
        turns.sort(key=lambda s: s.turn)
    return jobs


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    assert generate_agentic(num_jobs=50, seed=3) == generate_agentic(num_jobs=50, seed=3)
    assert generate_agentic(num_jobs=50, seed=3) != generate_agentic(num_jobs=50, seed=4)


def test_output_is_pinned_for_seed_zero() -> None:
    # Guards against silent changes to the sampling (which would change every
    # published kvframe result that used a generated workload).
    first, second, *_ = generate_agentic(num_jobs=3, seed=0)
    assert first.request_id == "job-00000-t0" and first.arrival_time == 0.0
    assert first.prompt == SyntheticPrompt(1331, "s0-agent0", 1024, key="s0-job-00000")
    assert (first.max_tokens, first.tool_name, first.tool_duration) == (87, "search", 0.992244)
    assert second.request_id == "job-00000-t1"
    assert second.prompt.length == 2001 and second.arrival_time == 0.992244


def test_each_turn_prompt_is_the_previous_prompt_plus_output_plus_tool_result() -> None:
    specs = generate_agentic(num_jobs=15, seed=1)
    for turns in by_job(specs).values():
        for prev, nxt in itertools.pairwise(turns):
            # Lengths: P_{k+1} = P_k + O_k + R_k with a tool result of >= 1 token.
            assert len(nxt.prompt) >= len(prev.prompt) + prev.max_tokens + 1
            # Tokens: the previous prompt is a prefix, then the output stand-in.
            previous_tokens = prev.prompt_token_ids
            next_tokens = nxt.prompt_token_ids
            assert next_tokens[: len(previous_tokens)] == previous_tokens
            stand_in = next_tokens[len(previous_tokens) : len(previous_tokens) + prev.max_tokens]
            assert scripted_output_tokens(prev) == stand_in


def test_jobs_share_their_agent_system_prompt_and_nothing_else() -> None:
    specs = generate_agentic(num_jobs=6, seed=2, system_prompt_length=64, task_length=32)
    firsts = [turns[0].prompt_token_ids for turns in by_job(specs).values()]
    for a, b in itertools.combinations(firsts, 2):
        assert a[:64] == b[:64]
        assert a[64:96] != b[64:96]
    private = generate_agentic(num_jobs=6, seed=2, system_prompt_length=64, task_length=32,
                               share_system_prompt=False)  # fmt: skip
    firsts = [turns[0].prompt_token_ids for turns in by_job(private).values()]
    for a, b in itertools.combinations(firsts, 2):
        assert a[:16] != b[:16]


def test_fields_are_valid_and_placeholders_are_lower_bounds() -> None:
    config = AgenticConfig(num_jobs=80, seed=5)
    specs = generate_agentic(config)
    arrivals = [spec.arrival_time for spec in specs]
    assert arrivals == sorted(arrivals)  # the reader's order requirement
    assert len({spec.request_id for spec in specs}) == len(specs)
    tool_names = {tool.name for tool in config.tools}
    jobs = by_job(specs)
    assert len(jobs) == 80
    for job_id, turns in jobs.items():
        assert [s.turn for s in turns] == list(range(len(turns)))
        assert [s.is_last_turn for s in turns] == [False] * (len(turns) - 1) + [True]
        assert all(s.request_id == f"{job_id}-t{s.turn}" for s in turns)
        *calls, last = turns
        assert last.tool_name is None and last.tool_duration is None
        placeholder = turns[0].arrival_time
        for spec, nxt in zip(calls, turns[1:], strict=True):
            assert spec.tool_name in tool_names
            assert spec.tool_duration is not None and spec.tool_duration >= 0
            placeholder += spec.tool_duration
            assert nxt.arrival_time == pytest.approx(placeholder, abs=1e-9)
        for spec in turns:
            assert spec.num_prompt_tokens + spec.max_tokens <= config.max_context_tokens


def test_turn_count_follows_its_distribution() -> None:
    specs = generate_agentic(num_jobs=60, num_turns="uniform:low=3,high=5", seed=0)
    counts = [len(turns) for turns in by_job(specs).values()]
    assert set(counts) <= {3, 4, 5} and len(set(counts)) == 3
    single = generate_agentic(num_jobs=5, num_turns=1)
    assert all(s.is_last_turn and s.tool_name is None for s in single)


def test_a_full_context_ends_the_job_early() -> None:
    specs = generate_agentic(num_jobs=30, num_turns=20, max_context_tokens=4096, seed=3)
    jobs = by_job(specs)
    assert any(len(turns) < 20 for turns in jobs.values())
    for turns in jobs.values():
        assert turns[-1].is_last_turn
        assert all(s.num_prompt_tokens + s.max_tokens <= 4096 for s in turns)


def test_poisson_job_arrivals_have_the_requested_rate() -> None:
    specs = generate_agentic(num_jobs=3000, rate=4.0, num_turns=1, seed=1, start_time=2.0)
    arrivals = [s.arrival_time for s in specs]
    assert arrivals[0] == 2.0
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.06)
    none = generate_agentic(num_jobs=4, rate=None, start_time=1.0)
    assert {turns[0].arrival_time for turns in by_job(none).values()} == {1.0}


def test_tool_durations_change_without_moving_anything_else() -> None:
    base = generate_agentic(num_jobs=40, seed=7)
    scaled = generate_agentic(num_jobs=40, seed=7, tool_time_scale=0.1)
    assert [(s.request_id, s.prompt, s.max_tokens, s.tool_name) for s in sorted(
        base, key=lambda s: s.request_id)] == [(s.request_id, s.prompt, s.max_tokens, s.tool_name)
        for s in sorted(scaled, key=lambda s: s.request_id)]  # fmt: skip
    pairs = {s.request_id: s.tool_duration for s in base}
    for spec in scaled:
        if spec.tool_duration is not None:
            assert spec.tool_duration == pytest.approx(pairs[spec.request_id] * 0.1, abs=2e-6)

    tools = [attrs.evolve(t, duration=FixedDuration(1.0)) for t in TOOL_MIXES["mixed"]]
    fixed = generate_agentic(num_jobs=40, seed=7, tools=tools)
    assert {s.tool_duration for s in fixed} == {1.0, None}
    assert sorted((s.request_id, s.prompt, s.tool_name) for s in fixed) == sorted(
        (s.request_id, s.prompt, s.tool_name) for s in base
    )


def test_tool_durations_follow_each_tools_distribution() -> None:
    specs = generate_agentic(num_jobs=400, seed=11)
    durations: dict[str, list[float]] = defaultdict(list)
    for spec in specs:
        if spec.tool_name is not None:
            durations[spec.tool_name].append(spec.tool_duration)
    assert set(durations) == {"read_file", "search", "edit", "run_tests"}
    assert statistics.median(durations["edit"]) == pytest.approx(0.2, rel=0.15)
    assert statistics.median(durations["read_file"]) == pytest.approx(0.3, rel=0.15)
    assert min(durations["run_tests"]) >= 5.0
    assert statistics.median(durations["run_tests"]) == pytest.approx(5 * 2 ** (1 / 1.5), rel=0.15)


def test_round_trip_through_jsonl(tmp_path) -> None:
    config = AgenticConfig(num_jobs=25, seed=9, tools="fast", rate=2.0)
    path = tmp_path / "agentic.jsonl"
    count = write_agentic_jsonl(path, config)
    workload = load_workload(path)
    assert count == len(workload)
    assert list(workload) == generate_agentic(config)
    assert workload.metadata["generator"] == "agentic"
    assert AgenticConfig(**workload.metadata["params"]) == config


def test_duration_distributions_parse_and_print_back() -> None:
    for dist in (
        FixedDuration(2.5),
        UniformDuration(0.1, 2.0),
        LogNormalDuration(median=0.5, sigma=1.0, min=0.05, max=30.0),
        ParetoDuration(scale=5.0, alpha=1.5, max=120.0),
    ):
        assert parse_duration_distribution(str(dist)) == dist
    assert parse_duration_distribution("3") == FixedDuration(3.0)
    assert parse_duration_distribution(0.5) == FixedDuration(0.5)
    with pytest.raises(ValueError, match="did you mean 'pareto'"):
        parse_duration_distribution("paretto:scale=1")
    with pytest.raises(ValueError, match="no parameter 'mean'"):
        parse_duration_distribution("lognormal:mean=1")
    with pytest.raises(ValueError):
        UniformDuration(2.0, 1.0)


def test_each_duration_draws_one_number_and_stays_in_range() -> None:
    rng, check = random.Random(0), random.Random(0)
    distributions = (
        FixedDuration(1.0),
        UniformDuration(1.0, 2.0),
        LogNormalDuration(median=1.0, min=0.5, max=3.0),
        ParetoDuration(scale=1.0, max=9.0),
    )
    for dist in distributions:
        for _ in range(200):
            value = dist.sample(rng)
            check.random()
            assert rng.getstate() == check.getstate()
            assert math.isfinite(value) and value >= 0
    pareto = ParetoDuration(scale=2.0, alpha=1.2, max=50.0)
    values = [pareto.sample(rng) for _ in range(2000)]
    assert min(values) >= 2.0 and max(values) <= 50.0


def test_bad_configs_are_rejected_with_a_reason() -> None:
    with pytest.raises(ValueError, match="did you mean 'fast'"):
        AgenticConfig(tools="fats")
    with pytest.raises(ValueError, match="unique"):
        AgenticConfig(tools=[ToolSpec(name="a", duration=1.0), ToolSpec(name="a", duration=2.0)])
    with pytest.raises(ValueError, match="rate"):
        AgenticConfig(rate=0.0)
    with pytest.raises(ValueError, match="num_jobs"):
        AgenticConfig(num_jobs=0)
    tools = AgenticConfig(tools=[{"name": "t", "duration": "fixed:value=0.5"}]).tools
    assert tools == (ToolSpec(name="t", duration=FixedDuration(0.5)),)


# ---------------------------------------------------------------- presets


def test_swe_bench_preset_reproduces_its_published_figures() -> None:
    # The SWE-smith figures the preset is fitted to (docs/continuum.md):
    # 26.4 tool calls per trajectory; tier medians and means of the call
    # durations; call shares of the four tiers (submit excluded).
    specs = generate_agentic(AgenticConfig.from_preset("swe-bench", num_jobs=400, seed=5))
    jobs = by_job(specs)
    assert statistics.mean(len(t) for t in jobs.values()) == pytest.approx(26.4, rel=0.05)
    durations: dict[str, list[float]] = defaultdict(list)
    for spec in specs:
        if spec.tool_name is not None:
            durations[spec.tool_name].append(spec.tool_duration)
    calls = sum(len(d) for d in durations.values())
    published = {  # tier: (calls, p50 s, mean s)
        "editor": (4294, 0.0002, 0.0002),
        "light_bash": (1036, 0.1906, 0.1988),
        "normal_bash": (392, 0.4239, 0.7261),
        "heavy_bash": (1675, 0.4880, 4.9471),
    }
    total = sum(n for n, _, _ in published.values())
    for tool, (n, p50, mean) in published.items():
        assert len(durations[tool]) / calls == pytest.approx(n / total, abs=0.01)
        assert statistics.median(durations[tool]) == pytest.approx(p50, rel=0.1)
        if tool != "heavy_bash":  # a sigma-2.15 tail: its sample mean is too noisy to pin
            assert statistics.mean(durations[tool]) == pytest.approx(mean, rel=0.1)
    # Every job runs on one agent's system prompt: shared across jobs.
    assert {s.prompt.shared_prefix_id for s in specs} == {"s5-agent0"}


def test_bfcl_preset_is_short_turns_with_millisecond_tools() -> None:
    specs = generate_agentic(AgenticConfig.from_preset("bfcl", num_jobs=200, seed=2))
    tools = [s for s in specs if s.tool_name is not None]
    assert {s.tool_name for s in tools} == {"api_call"}
    assert statistics.median(s.tool_duration for s in tools) == pytest.approx(0.002, rel=0.15)
    assert max(s.tool_duration for s in tools) <= 1.0
    assert statistics.median(len(t) for t in by_job(specs).values()) == pytest.approx(8, abs=1)


def test_preset_fields_can_be_overridden_and_unknown_presets_are_named() -> None:
    config = AgenticConfig.from_preset("swe-bench", num_jobs=7, rate=0.5, seed=1)
    assert (config.num_jobs, config.rate, config.seed) == (7, 0.5, 1)
    assert config.tools == TOOL_MIXES["swe-bench"]
    assert AgenticConfig.from_preset("bfcl", tools="fast").tools == TOOL_MIXES["fast"]
    with pytest.raises(ValueError, match=r"unknown preset 'swe-bnch'; did you mean 'swe-bench'\?"):
        AgenticConfig.from_preset("swe-bnch")


def test_cli_preset_writes_the_presets_config(tmp_path) -> None:
    from kvframe.cli import main

    out = tmp_path / "w.jsonl"
    assert main(["gen", "agentic", "--preset", "bfcl", "--jobs", "3", "--out", str(out)]) == 0
    params = load_workload(out).metadata["params"]
    assert AgenticConfig(**params) == AgenticConfig.from_preset("bfcl", num_jobs=3)
