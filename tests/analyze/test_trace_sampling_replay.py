"""Building block traces, spatial sampling, the metric, and policies that break the contract."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Set

import pytest

import kvframe
from kvframe.analyze import PolicyContractError, build_block_trace, replay_policy
from kvframe.analyze.sampling import sample_depth, sample_trace, scaled_capacity
from kvframe.analyze.stack import stack_profile
from kvframe.workloads import RequestSpec, load_workload

from .reference import make_trace


def _spec(request_id: str, tokens: list[int]) -> RequestSpec:
    return RequestSpec(request_id, tokens, max_tokens=1)


def test_equal_prefixes_share_block_ids_as_the_engine_hashes_them():
    shared = list(range(32))
    trace = build_block_trace(
        [_spec("a", shared + [1] * 16), _spec("b", shared + [2] * 16), _spec("c", shared)], 16
    )
    a, b, c = (list(chain) for chain in trace.blocks)
    assert a[:2] == b[:2] == c
    assert a[2] != b[2]
    assert list(trace.eligible) == [2, 2, 1]  # 48 and 32 tokens: the last-token rule
    assert trace.num_distinct == 4


def test_blocks_metric_counts_every_full_block_and_no_tokens():
    specs = [_spec("a", list(range(40))), _spec("b", list(range(40)))]
    tokens = build_block_trace(specs, 16)
    blocks = build_block_trace(specs, 16, metric="blocks")
    assert list(tokens.eligible) == [2, 2] and list(tokens.num_tokens) == [40, 40]
    assert list(blocks.eligible) == [2, 2] and list(blocks.num_tokens) == [32, 32]
    assert stack_profile(tokens).hit_rate(None) == 32 / 80
    assert stack_profile(blocks).hit_rate(None) == 0.5
    with pytest.raises(ValueError, match="metric must be one of tokens, blocks, got 'bytes'"):
        build_block_trace(specs, 16, metric="bytes")


def test_sampling_keeps_whole_requests_deterministically_below_a_shared_root():
    workload = load_workload("mooncake:conversation", limit=2000)
    trace = build_block_trace(workload.requests, 512)
    # Every request starts with the same block: the root cannot be the key.
    assert len({chain[0] for chain in trace.blocks}) == 1
    assert sample_depth(trace) == 1
    first = sample_trace(trace, 0.25)
    again = sample_trace(trace, 0.25)
    assert first.blocks == again.blocks
    assert 0.15 < len(first) / len(trace) < 0.35
    kept = {bytes(chain) for chain in first.blocks}
    assert kept <= {bytes(chain) for chain in trace.blocks}
    assert sample_trace(trace, 1.0) is trace
    assert scaled_capacity(1000, 0.25) == 250 and scaled_capacity(1, 0.01) == 1
    with pytest.raises(ValueError, match=r"sample rate must be in \(0, 1\], got 0"):
        sample_trace(trace, 0)


class _ReturnsTooFew(kvframe.EvictionPolicy):
    """Breaks the contract: evicts one block whatever n is."""

    name = "too-few"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.keys: dict[Hashable, object] = {}

    def get(self, key: Hashable) -> object | None:
        return self.keys.get(key)

    def insert(self, key: Hashable, block: object) -> None:
        self.keys[key] = block

    def remove(self, key: Hashable) -> None:
        del self.keys[key]

    def touch(self, keys: Iterable[Hashable]) -> None:
        pass

    def evict(self, n: int, protected: Set[Hashable]) -> list[tuple[Hashable, object]] | None:
        for key in self.keys:
            if key not in protected:
                return [(key, self.keys.pop(key))]
        return None


def test_a_policy_breaking_evict_is_named_with_the_request_and_the_call():
    trace = make_trace([[0, 1, 2], [3, 4, 5]], [1, 1])
    with pytest.raises(PolicyContractError) as err:
        replay_policy(trace, _ReturnsTooFew(3), 3, spec="too-few")
    assert str(err.value) == (
        "eviction policy 'too-few': evict(3, ...) at request 1 returned 1 victims, not 3"
    )


def test_partial_blocks_are_unique_never_eligible_slots_at_the_chain_tail():
    specs = [_spec("a", list(range(40))), _spec("b", list(range(40))), _spec("c", list(range(32)))]
    trace = build_block_trace(specs, 16, partial_blocks=True)
    a, b, c = (list(chain) for chain in trace.blocks)
    assert a[:2] == b[:2] == c and a[2] < 0 and b[2] < 0 and a[2] != b[2]
    assert list(trace.eligible) == [2, 2, 1]
    assert trace.num_distinct == 4
    assert build_block_trace(specs, 16).num_distinct == 2


def test_reuse_profile_counts_every_eligible_lookup_once_and_breaks_down_by_job():
    from kvframe.analyze.reuse import reuse_profile

    shared = list(range(64))
    specs = [
        RequestSpec("a1", shared + [1] * 16, max_tokens=1, arrival_time=0.0, job_id="a"),
        RequestSpec("b1", [7] * 48, max_tokens=1, arrival_time=5.0, job_id="b"),
        RequestSpec(
            "a2", shared + [1] * 16 + [2] * 17, max_tokens=1, arrival_time=30.0, job_id="a"
        ),
    ]
    trace = build_block_trace(specs, 16)
    stack = stack_profile(trace)
    profile = reuse_profile(trace, stack)
    eligible = sum(trace.eligible)
    assert profile.cold_lookups + profile.reused_lookups == eligible
    assert sum(count for _, count in profile.distance_histogram) == profile.reused_lookups == 5
    assert profile.gap_histogram[2] == (60.0, 5)  # all reused 30 s after their first use
    # a2 reuses a1's 5 blocks past b1's 3: stack distances 3..7 (block 0 is the most recent)
    assert list(stack.distances) == [3, 4, 5, 6, 7]
    assert profile.jobs == 2
    # job a: 80 of its 177 prompt tokens hit; job b: none (quantiles: nearest rank, ties up)
    assert profile.job_hit_rate_quartiles == (0.0, 0.0, 80 / 177, 80 / 177, 80 / 177)
    assert profile.request_hit_shares[0] == 2 and profile.requests_without_hit == 2


def test_a_sampled_curve_above_the_bound_is_flagged_as_sampling_error():
    import attrs

    from kvframe.analyze import analyze_trace
    from kvframe.analyze.analysis import Curve
    from kvframe.analyze.report import above_bound_warnings

    trace = make_trace([[0, 1, 2], [0, 1, 3], [0, 1, 2]], [1, 1, 1])
    result = analyze_trace(trace, policies=["lru"], sizes=[2, 4])
    assert above_bound_warnings(result) == []
    bound = result.curve("optimal").hit_rates
    fake = Curve("arc", (bound[0] + 0.01, bound[1]), "sampled at 50%", 0.0)
    flagged = attrs.evolve(result, curves=(*result.curves, fake))
    assert above_bound_warnings(flagged) == [
        "warning: arc (sampled at 50%) lies above the optimal bound at 1 size(s), by up to "
        "1.00 points at 2 blocks: sampling error; --sample-rate 1 replays the whole trace"
    ]
