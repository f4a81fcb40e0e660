"""The exact LRU curve, the policy replays and the optimal bound, against reference models."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.analyze import analyze_trace, build_block_trace, default_policy_specs, replay_policy
from kvframe.analyze.optimal import optimal_hit_tokens
from kvframe.analyze.replay import build_policy
from kvframe.analyze.stack import stack_profile
from kvframe.host.registry import get_registry
from kvframe.workloads import load_workload

from .reference import (
    brute_force_optimal_hit_tokens,
    make_trace,
    reference_lru_hit_tokens,
    traces,
)

S3FIFO_EXAMPLE = "kvframe_s3fifo:S3FIFOPolicy"
"""The s3fifo example (examples/third_party_policy), by class path when importable."""


def _policies() -> list[str]:
    """Every installed eviction policy and its variants, and the s3fifo example if importable."""
    specs = default_policy_specs(get_registry())
    if "s3fifo" not in specs and importlib.util.find_spec("kvframe_s3fifo") is not None:
        specs.append(S3FIFO_EXAMPLE)
    return specs


POLICIES = _policies()


@settings(max_examples=60, deadline=None)
@given(traces())
def test_stack_distance_curve_equals_reference_lru_at_every_size(trace):
    profile = stack_profile(trace)
    for capacity in range(1, trace.num_distinct + 2):
        assert profile.hit_tokens(capacity) == reference_lru_hit_tokens(trace, capacity)


@settings(max_examples=40, deadline=None)
@given(traces())
def test_lru_plugin_replay_equals_reference_lru(trace):
    registry = get_registry()
    for capacity in range(1, trace.num_distinct + 2):
        policy = build_policy(registry, "lru", capacity)
        hits, refused = replay_policy(trace, policy, capacity, spec="lru")
        assert (hits, refused) == (reference_lru_hit_tokens(trace, capacity), 0)


@settings(max_examples=40, deadline=None)
@given(traces())
def test_optimal_bound_is_at_least_every_policy_and_the_ceiling_when_unlimited(trace):
    registry = get_registry()
    ceiling = stack_profile(trace).hit_tokens(None)
    for capacity in range(1, trace.num_distinct + 2):
        bound = optimal_hit_tokens(trace, capacity)
        for spec in POLICIES:
            policy = build_policy(registry, spec, capacity)
            assert replay_policy(trace, policy, capacity, spec=spec)[0] <= bound, spec
        assert bound <= ceiling
    assert optimal_hit_tokens(trace, trace.num_distinct) == ceiling


@settings(max_examples=60, deadline=None)
@given(traces(max_requests=7, max_blocks=3), st.integers(1, 3))
def test_optimal_bound_equals_brute_force_optimum_on_small_traces(trace, capacity):
    if trace.num_distinct > 8:
        return  # the brute force is exponential in distinct blocks
    assert optimal_hit_tokens(trace, capacity) == brute_force_optimal_hit_tokens(trace, capacity)


def test_hit_counts_stop_at_the_first_missing_block_and_the_last_token_rule():
    # Request 1 repeats request 0 exactly (8 tokens = 2 blocks): only 1 block may hit.
    # Request 2 shares block 0 and has one more token: both its blocks may hit, but
    # block 1 differs, so the hit stops there.
    trace = make_trace([[0, 1], [0, 1], [0, 2]], [0, 0, 1])
    assert list(trace.eligible) == [1, 1, 2]
    profile = stack_profile(trace)
    assert profile.hit_tokens(None) == 2 * trace.block_size
    assert reference_lru_hit_tokens(trace, 10) == 2 * trace.block_size


@pytest.mark.parametrize("name", ["mooncake:synthetic", "mooncake:conversation"])
def test_bundled_traces_lru_exact_within_a_tenth_of_a_point_and_bound_above_all(name):
    workload = load_workload(name, limit=700)
    trace = build_block_trace(workload.requests, 512, name=name)
    specs = POLICIES
    result = analyze_trace(trace, policies=specs)
    assert len(result.sizes) >= 12
    lru = result.curve("lru").hit_rates
    for size, rate in zip(result.sizes, lru, strict=True):
        reference = reference_lru_hit_tokens(trace, size) / trace.total_tokens
        assert abs(rate - reference) <= 0.001, size
    bound = result.curve("optimal").hit_rates
    for curve in result.curves:
        assert all(b >= r for b, r in zip(bound, curve.hit_rates, strict=True)), curve.policy
    assert bound[-1] == result.ceiling
    assert result.sizes[-1] == result.footprint


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mooncake:synthetic", "mooncake:conversation"])
def test_whole_bundled_traces_bound_above_every_exact_policy_curve(name):
    """Every installed policy replayed on the whole trace: with six installed, 72 s
    (synthetic) and 130 s (conversation) on two busy cores."""
    workload = load_workload(name)
    trace = build_block_trace(workload.requests, 512, name=name)
    specs = POLICIES
    result = analyze_trace(trace, policies=specs, sample_rate=1.0)
    bound = result.curve("optimal").hit_rates
    for curve in result.curves:
        assert all(b >= r for b, r in zip(bound, curve.hit_rates, strict=True)), curve.policy
    assert bound[-1] == result.ceiling
