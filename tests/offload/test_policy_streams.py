"""Eviction policies on key streams: Mooncake hash-id streams and random ones.

* ``lru`` hits exactly what a plain ``OrderedDict`` LRU hits;
* ``arc:variant=paper`` behaves exactly as ARC in the 2003 paper's Figure 4
  (``textbook_arc.py``): same hits and same four lists after every access,
  whichever replay mode drives it.

The replay is ``policy_replay.replay`` (documented in docs/offload.md). The
Mooncake tests read the bundled traces (``kvframe/data/mooncake``) straight from
the repository, so that the vLLM replay subprocess needs no kvframe install.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from . import policy_replay, textbook_arc

kvframe_arc = pytest.importorskip("kvframe_arc")
kvframe_lru = pytest.importorskip("kvframe_lru")


needs_traces = pytest.mark.skipif(
    not policy_replay.trace_path("conversation").exists(),
    reason="Mooncake traces absent (kvframe/data/mooncake)",
)


def ordered_dict_lru_hits(stream: list[int], capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for key in stream:
        if key in cache:
            hits += 1
            cache.move_to_end(key)
            continue
        if len(cache) >= capacity:
            cache.popitem(last=False)
        cache[key] = None
    return hits


@needs_traces
@pytest.mark.parametrize("trace", policy_replay.TRACES)
@pytest.mark.parametrize("mode", policy_replay.MODES)
@pytest.mark.parametrize("capacity", [256, 1024, 4096])
def test_lru_hits_equal_a_plain_ordered_dict_lru_on_mooncake(trace, mode, capacity):
    stream = policy_replay.load_stream(trace, max_requests=1500)
    expected = ordered_dict_lru_hits(stream, capacity)
    hits = policy_replay.replay(kvframe_lru.LRUPolicy(capacity), stream, capacity, mode=mode)
    assert hits == expected
    assert 0 < hits < len(stream)


def assert_same_lists(policy, oracle) -> None:
    assert list(policy.t1) == list(oracle.T1)
    assert list(policy.t2) == list(oracle.T2)
    assert list(policy.b1) == list(oracle.B1)
    assert list(policy.b2) == list(oracle.B2)
    assert policy.target_t1_size == oracle.p


def replay_against_textbook(stream: list[int], capacity: int, mode: str) -> int:
    """Replay one key at a time through both, comparing every list after each access."""
    policy = kvframe_arc.ARCPolicy(capacity, variant="paper")
    oracle = textbook_arc.TextbookARC(capacity)
    total_hits = 0
    for i, key in enumerate(stream):
        hit = policy_replay.replay(policy, [key], capacity, mode=mode, size=len(policy))
        expected = oracle.request(key)
        assert hit == expected, f"access {i} ({key!r}): hit={hit}, textbook says {expected}"
        assert_same_lists(policy, oracle)
        total_hits += hit
    return total_hits


@needs_traces
@pytest.mark.parametrize("trace", policy_replay.TRACES)
@pytest.mark.parametrize("mode", policy_replay.MODES)
@pytest.mark.parametrize("capacity", [64, 512])
def test_paper_arc_is_the_textbook_algorithm_on_mooncake(trace, mode, capacity):
    stream = policy_replay.load_stream(trace, max_requests=400)
    hits = replay_against_textbook(stream, capacity, mode)
    assert hits > 0


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    capacity=st.integers(1, 6),
    stream=st.lists(st.integers(0, 14), max_size=120),
    mode=st.sampled_from(policy_replay.MODES),
)
def test_paper_arc_is_the_textbook_algorithm_on_random_streams(capacity, stream, mode):
    replay_against_textbook(stream, capacity, mode)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(capacity=st.integers(1, 6), stream=st.lists(st.integers(0, 14), max_size=120))
def test_both_replay_modes_give_lru_the_same_hits(capacity, stream):
    hits = {
        mode: policy_replay.replay(kvframe_lru.LRUPolicy(capacity), stream, capacity, mode=mode)
        for mode in policy_replay.MODES
    }
    assert hits["touch-all"] == hits["touch-hits"] == ordered_dict_lru_hits(stream, capacity)
