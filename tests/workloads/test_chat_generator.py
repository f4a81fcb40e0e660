"""The shared-prefix chat generator: determinism, arrivals, sharing, distributions."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from kvframe.workloads import SyntheticPrompt
from kvframe.workloads.chat import (
    ChatConfig,
    Fixed,
    LogNormal,
    Uniform,
    generate_chat,
    parse_length_distribution,
)


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    assert generate_chat(num_requests=300, seed=3) == generate_chat(num_requests=300, seed=3)
    assert generate_chat(num_requests=300, seed=3) != generate_chat(num_requests=300, seed=4)


def test_output_is_pinned_for_seed_zero() -> None:
    # Guards against silent changes to the sampling (which would change every
    # published kvframe result that used a generated workload).
    first, second, *_, fifth = generate_chat(num_requests=5, seed=0)
    assert first.arrival_time == 0.0
    assert second.arrival_time == pytest.approx(0.021080457666793416, rel=1e-12)
    assert first.prompt == SyntheticPrompt(1231, "s0-sys1", 1024, key="chat-000000")
    assert first.max_tokens == 126
    assert fifth.prompt == SyntheticPrompt(1378, key="chat-000004")
    assert fifth.max_tokens == 306


def test_poisson_arrivals_have_the_requested_rate() -> None:
    specs = generate_chat(num_requests=4000, rate=20.0, seed=1, start_time=5.0)
    arrivals = [spec.arrival_time for spec in specs]
    assert arrivals[0] == 5.0
    assert arrivals == sorted(arrivals)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert statistics.fmean(gaps) == pytest.approx(1 / 20.0, rel=0.05)
    # Exponential gaps: standard deviation equals the mean.
    assert statistics.pstdev(gaps) == pytest.approx(1 / 20.0, rel=0.08)


def test_no_rate_means_everything_arrives_at_once() -> None:
    specs = generate_chat(num_requests=10, rate=None, start_time=2.0)
    assert {spec.arrival_time for spec in specs} == {2.0}


def test_shared_fraction_controls_sharing_only() -> None:
    base = dict(num_requests=2000, seed=5, num_system_prompts=4,
                system_prompt_length=Fixed(512))  # fmt: skip
    none = generate_chat(**base, shared_fraction=0.0)
    half = generate_chat(**base, shared_fraction=0.5)
    every = generate_chat(**base, shared_fraction=1.0)

    assert all(s.prompt.shared_prefix_id is None for s in none)
    assert {s.prompt.shared_prefix_id for s in every} == {f"s5-sys{k}" for k in range(4)}
    shared = sum(s.prompt.shared_prefix_id is not None for s in half)
    assert shared == pytest.approx(1000, abs=100)
    # Same arrivals, lengths and output lengths whatever the fraction.
    for a, b in zip(none, every, strict=True):
        assert (a.arrival_time, a.num_prompt_tokens, a.max_tokens) == (
            b.arrival_time,
            b.num_prompt_tokens,
            b.max_tokens,
        )


def test_requests_with_the_same_system_prompt_share_its_tokens() -> None:
    specs = generate_chat(num_requests=50, seed=2, shared_fraction=1.0, num_system_prompts=2,
                          system_prompt_length=Uniform(100, 200))  # fmt: skip
    by_prefix: dict[str, list[list[int]]] = {}
    for spec in specs:
        by_prefix.setdefault(spec.prompt.shared_prefix_id, []).append(spec.prompt_token_ids)
    for prefix_id, prompts in by_prefix.items():
        length = next(
            s.prompt.shared_prefix_length for s in specs if s.prompt.shared_prefix_id == prefix_id
        )
        assert all(p[:length] == prompts[0][:length] for p in prompts)
        assert len({tuple(p[length : length + 16]) for p in prompts}) == len(prompts)


def test_zipf_popularity_favours_the_first_prompts() -> None:
    specs = generate_chat(num_requests=3000, seed=9, shared_fraction=1.0,
                          num_system_prompts=10, prefix_popularity=1.2)  # fmt: skip
    counts = [sum(s.prompt.shared_prefix_id == f"s9-sys{k}" for s in specs) for k in range(10)]
    assert counts[0] > counts[1] > counts[5]
    weights = [1 / (k + 1) ** 1.2 for k in range(10)]
    assert counts[0] / 3000 == pytest.approx(weights[0] / sum(weights), abs=0.03)


def test_lengths_follow_their_distributions() -> None:
    rng = random.Random(0)
    samples = [LogNormal(median=300, sigma=0.5, min=10, max=5000).sample(rng) for _ in range(4000)]
    assert statistics.median(samples) == pytest.approx(300, rel=0.05)
    assert all(10 <= s <= 5000 for s in samples)
    uniform = [Uniform(3, 5).sample(rng) for _ in range(3000)]
    assert set(uniform) == {3, 4, 5}
    assert Fixed(7).sample(rng) == 7


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512", Fixed(512)),
        (64, Fixed(64)),
        ("fixed:value=8", Fixed(8)),
        ("uniform:low=64,high=512", Uniform(64, 512)),
        ("lognormal:median=256,sigma=0.8", LogNormal(median=256, sigma=0.8)),
        ("lognormal:median=256,sigma=0.8,min=4,max=8192",
         LogNormal(median=256, sigma=0.8, min=4, max=8192)),
    ],
)  # fmt: skip
def test_length_distribution_strings(text: str | int, expected: object) -> None:
    parsed = parse_length_distribution(text)
    assert parsed == expected
    assert parse_length_distribution(str(parsed)) == parsed  # str() round-trips


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("unifrom:low=1,high=2", "unknown length distribution 'unifrom'.*did you mean 'uniform'"),
        ("uniform:lo=1,high=2", "uniform has no parameter 'lo'.*known: low, high"),
        ("uniform:low=1,high", "expected key=value"),
        ("uniform:low=x,high=2", "low must be a number"),
        ("uniform:low=5,high=2", "low <= high"),
        ("fixed:value=0", "must be a positive integer"),
    ],
)
def test_bad_length_distribution_strings(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_length_distribution(text)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="shared_fraction must be in"):
        ChatConfig(shared_fraction=1.5)
    with pytest.raises(ValueError, match="rate must be > 0"):
        ChatConfig(rate=0.0)
    with pytest.raises(ValueError, match="num_requests must be a positive integer"):
        ChatConfig(num_requests=0)
    assert ChatConfig(output_length="32").output_length == Fixed(32)
    assert math.isclose(ChatConfig(rate=2).rate, 2.0)
