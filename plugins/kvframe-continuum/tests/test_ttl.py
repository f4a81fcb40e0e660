"""The TTL rule and its statistics, on hand-computed distributions."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kvframe_continuum import (
    DurationHistory,
    DurationWindow,
    SlidingMean,
    TurnCorrelation,
    choose_ttl,
)
from kvframe_continuum.ttl import choose_ttl_exponential, exponential_cdf

# ---------------------------------------------------------------- choose_ttl


def test_picks_the_duration_that_maximises_hit_probability_times_benefit_minus_ttl():
    # F = 1/4, 2/4, 3/4, 1 at 1, 2, 3, 4 s; benefit 10 s:
    # U(0)=0, U(1)=1.5, U(2)=3, U(3)=4.5, U(4)=6.
    assert choose_ttl([1.0, 2.0, 3.0, 4.0], 10.0) == 4.0
    # benefit 6 s: U(1)=0.5, U(2)=1, U(3)=1.5, U(4)=2.
    assert choose_ttl([1.0, 2.0, 3.0, 4.0], 6.0) == 4.0
    # A long tail is not worth waiting for: U(1)=0.9*5-1=3.5, U(30)=5-30.
    durations = sorted([1.0] * 9 + [30.0])
    assert choose_ttl(durations, 5.0) == 1.0


def test_not_pinning_wins_when_the_benefit_is_small():
    # benefit 2 s: U(1)=-0.5, U(2)=-1, ... all below U(0)=0.
    assert choose_ttl([1.0, 2.0, 3.0, 4.0], 2.0) == 0.0
    assert choose_ttl([1.0], 0.0) == 0.0
    assert choose_ttl([1.0], -3.0) == 0.0


def test_ties_go_to_the_smaller_ttl():
    # benefit 4 s: U(0)=U(1)=U(2)=U(3)=U(4)=0 -> 0.
    assert choose_ttl([1.0, 2.0, 3.0, 4.0], 4.0) == 0.0
    # benefit 4 s over {1, 1, 3, 3}: U(1)=2-1=1, U(3)=4-3=1 -> 1.
    assert choose_ttl([1.0, 1.0, 3.0, 3.0], 4.0) == 1.0
    # Float noise does not break a tie: 0.1 + 0.2 style values.
    durations = [0.1, 0.30000000000000004]
    benefit = 0.4  # U(0.1)=0.2-0.1=0.1, U(0.3)=0.4-0.3=0.1
    assert choose_ttl(durations, benefit) == 0.1


def test_repeated_durations_count_fully_in_the_cdf():
    # U(2) = 3/4 * 8 - 2 = 4 (all three 2s count), U(10) = 8 - 10.
    assert choose_ttl([2.0, 2.0, 2.0, 10.0], 8.0) == 2.0


def test_instant_tools_make_zero_ttl_score():
    # Two of three calls took no time: U(0) = 2/3 * 3 = 2 beats U(5) = 3 - 5.
    assert choose_ttl([0.0, 0.0, 5.0], 3.0) == 0.0
    # With a large benefit the last call is worth it: U(0)=20, U(5)=30-5=25.
    assert choose_ttl([0.0, 0.0, 5.0], 30.0) == 5.0


def test_max_ttl_removes_longer_candidates():
    assert choose_ttl([1.0, 2.0, 3.0, 4.0], 10.0, max_ttl=2.5) == 2.0
    assert choose_ttl([1.0, 2.0, 3.0, 4.0], 10.0, max_ttl=0.5) == 0.0


def test_empty_history_is_an_error_the_policy_never_makes():
    with pytest.raises(ValueError, match="at least one"):
        choose_ttl([], 1.0)


def test_matches_brute_force_on_random_distributions():
    rng = random.Random(0)
    for _ in range(300):
        durations = sorted(round(rng.expovariate(1.0), 2) for _ in range(rng.randint(1, 30)))
        benefit = rng.uniform(0.0, 6.0)
        n = len(durations)

        def utility(tau: float, durations=durations, benefit=benefit, n=n) -> float:
            return sum(d <= tau for d in durations) / n * benefit - tau

        candidates = [0.0, *sorted(set(durations))]
        best = max(utility(tau) for tau in candidates)
        expected = min(tau for tau in candidates if utility(tau) >= best - 1e-9)
        assert choose_ttl(durations, benefit) == expected


# ---------------------------------------------------------------- windows


def test_duration_window_keeps_the_last_values_sorted_and_a_running_mean():
    window = DurationWindow(3)
    for value in (5.0, 1.0, 3.0, 2.0):
        window.add(value)
    assert list(window.sorted) == [1.0, 2.0, 3.0]  # 5.0 left the window
    assert len(window) == 3
    assert window.mean_all == pytest.approx(11.0 / 4)  # over every observation


def test_history_uses_a_tools_own_window_from_k_observations_on():
    history = DurationHistory(window=10, min_samples=3)
    assert history.distribution("grep") == ((), "none")
    history.add("grep", 0.5)
    history.add("pytest", 20.0)
    # Fewer than K grep calls: the global distribution (every tool).
    durations, source = history.distribution("grep")
    assert (list(durations), source) == ([0.5, 20.0], "global")
    history.add("grep", 0.7)
    history.add("grep", 0.6)
    durations, source = history.distribution("grep")
    assert (list(durations), source) == ([0.5, 0.6, 0.7], "tool")
    # A tool never seen also falls back to the global distribution.
    assert history.distribution("ls")[1] == "global"
    assert history.running_mean("grep") == pytest.approx(0.6)
    assert history.running_mean("ls") is None
    assert history.num_observations("grep") == 3 and history.num_global == 4


def test_sliding_mean_averages_the_last_values():
    mean = SlidingMean(3)
    assert mean.mean == 0.0
    for value in (1.0, 2.0, 3.0, 10.0):
        mean.add(value)
    assert mean.mean == pytest.approx(5.0)
    for _ in range(10_000):
        mean.add(0.1)
    assert mean.mean == pytest.approx(0.1, abs=1e-12)


# ---------------------------------------------------------------- eta


def test_eta_is_one_when_every_job_has_the_same_number_of_turns():
    turns = TurnCorrelation(100)
    for _ in range(5):
        turns.add_job(5)
    assert turns.eta == 1.0


def test_eta_by_hand_for_two_and_three_turn_jobs():
    # Pairs (k, N-k): N=2 -> (1,1); N=3 -> (1,2), (2,1). Means 4/3 and 4/3;
    # cov = (1/9 - 2/9 - 2/9)/3, var = (1/9 + 1/9 + 4/9)/3 -> corr = -1/2.
    turns = TurnCorrelation(100)
    turns.add_job(2)
    turns.add_job(3)
    assert turns.eta == pytest.approx(0.5)


def test_eta_is_undefined_without_spread_and_ignores_single_turn_jobs():
    turns = TurnCorrelation(100)
    assert turns.eta is None
    turns.add_job(1)  # no tool call, no pair
    turns.add_job(2)
    turns.add_job(2)
    assert turns.eta is None  # every pair is (1, 1)


def test_eta_window_forgets_old_jobs():
    turns = TurnCorrelation(2)
    turns.add_job(2)
    turns.add_job(3)
    assert turns.eta == pytest.approx(0.5)
    turns.add_job(3)
    turns.add_job(3)
    assert turns.eta == 1.0
    assert turns.num_jobs == 2


def test_eta_matches_pearson_on_random_jobs():
    rng = random.Random(1)
    for _ in range(50):
        jobs = [rng.randint(1, 12) for _ in range(rng.randint(2, 40))]
        turns = TurnCorrelation(1000)
        for n in jobs:
            turns.add_job(n)
        ks = [k for n in jobs for k in range(1, n)]
        rs = [n - k for n in jobs for k in range(1, n)]
        if len(ks) < 2 or len(set(ks)) < 2:
            assert turns.eta is None
            continue
        expected = min(1.0, max(0.0, -statistics.correlation(ks, rs)))
        assert turns.eta == pytest.approx(expected, abs=1e-12)
        assert 0.0 <= turns.eta <= 1.0
        assert not math.isnan(turns.eta)


@given(
    mean=st.floats(min_value=0.01, max_value=50.0),
    benefit=st.floats(min_value=0.0, max_value=100.0),
    max_ttl=st.floats(min_value=0.0, max_value=200.0),
)
def test_the_exponential_cold_start_ttl_maximises_the_utility(mean, benefit, max_ttl):
    tau = choose_ttl_exponential(mean, benefit, max_ttl=max_ttl)
    assert 0.0 <= tau <= max_ttl

    def utility(t: float) -> float:
        return exponential_cdf(mean, t) * benefit - t

    # No point of a fine grid over [0, max_ttl] does better (up to float noise).
    grid = [max_ttl * i / 400 for i in range(401)]
    assert utility(tau) >= max(utility(t) for t in grid) - 1e-9 * max(1.0, benefit)
