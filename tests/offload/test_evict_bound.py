"""``EvictionPolicy.max_evictable`` lets the ledger refuse early, and changes no answer.

``SlotOffloadManager`` asks a policy that overrides ``max_evictable`` before it
counts a store's new hashes, and refuses the store once it has found more new
hashes than the policy could evict (only for a store that fits in the free and
idle slots, so the refusal is the one the policy would give). This property
runs the same random ledger calls on two ledgers with ``arc`` (T1's target
moved at random, so that T1 is often under it and the policy refuses), one whose
policy answers the bound and one whose policy inherits the base class's (no
claim, so the ledger counts every store in full): every answer, every event
and ``refused_new_blocks`` after every call must be equal.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.contract.bases import EvictionPolicy
from kvframe.offload.slots.manager import OffloadStateError, SlotOffloadManager

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("prepare_store"), st.lists(st.integers(0, 40), min_size=1, max_size=12)),
        st.tuples(st.just("prepare_store"), st.lists(st.integers(0, 40), min_size=1, max_size=4)),
        st.tuples(
            st.just("complete_store"), st.lists(st.integers(0, 40), max_size=8), st.booleans()
        ),
        st.tuples(
            st.just("complete_store"), st.lists(st.integers(0, 40), max_size=8), st.just(True)
        ),
        st.tuples(st.just("prepare_load"), st.lists(st.integers(0, 40), min_size=1, max_size=3)),
        st.tuples(st.just("complete_load"), st.lists(st.integers(0, 40), min_size=1, max_size=3)),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 40), min_size=1, max_size=8)),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 40), min_size=1, max_size=8)),
        # Every block being written made idle (a request finishing), and T1's
        # target moved (ghost hits move it; set here on both policies alike).
        st.tuples(st.just("complete_all")),
        st.tuples(st.just("target"), st.floats(0, 1)),
    ),
    min_size=20,
    max_size=150,
)


def test_the_ledger_answers_the_same_with_and_without_the_bound() -> None:
    arc = pytest.importorskip("kvframe_arc").ARCPolicy
    unbounded = type("UnboundedARC", (arc,), {"max_evictable": EvictionPolicy.max_evictable})
    early = {"refusals": 0}

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(num_blocks=st.integers(2, 12), ops=_OPS, tracking=st.booleans())
    def run(num_blocks: int, ops: list[tuple[Any, ...]], tracking: bool) -> None:
        bounded_policy, plain_policy = arc(num_blocks), unbounded(num_blocks)
        if not tracking:  # the ledger offers idle tracking; decline it on both
            bounded_policy.track_idle = plain_policy.track_idle = lambda: False
        bounded = SlotOffloadManager(bounded_policy, num_blocks, block_size=16)
        plain = SlotOffloadManager(plain_policy, num_blocks, block_size=16)
        assert bounded._max_evictable is not None and plain._max_evictable is None
        for op in ops:
            if op[0] == "complete_all":
                op = ("complete_store", list(range(41)), True)
            elif op[0] == "target":
                bounded_policy.target_t1_size = plain_policy.target_t1_size = op[1] * num_blocks
                continue
            name, keys, *rest = op
            hashes = [b"h%d" % k for k in keys]
            if name == "prepare_store" and bounded._refused_by_bound(hashes):
                early["refusals"] += 1
            answers = []
            for manager in (bounded, plain):
                try:
                    answers.append(getattr(manager, name)(list(hashes), *rest))
                except OffloadStateError as err:
                    answers.append(str(err))
            assert answers[0] == answers[1], op
            assert bounded.refused_new_blocks == plain.refused_new_blocks, op
            assert bounded.take_events() == plain.take_events()

    run()
    # The early refusal was taken, not only declined: 34 times alone, 17 in the whole suite.
    # Even derandomized, Hypothesis biases its integers with constants it finds in the
    # modules already imported, so the count depends on what ran before; 5 keeps the
    # check's meaning without pinning that count.
    assert early["refusals"] > 5


def test_arc_s_bound_is_what_evict_can_give_at_most() -> None:
    """T1 under its target with nothing idle in T2: vLLM's ARC refuses any evict."""
    arc = pytest.importorskip("kvframe_arc").ARCPolicy
    from kvframe.testing.eviction import SimpleBlock

    policy = arc(8)
    for key in "abc":
        policy.insert(key, SimpleBlock(key, 0))
    assert policy.max_evictable() == 3  # target 0: T1 may give all of its idle blocks
    policy.target_t1_size = 3.0  # room over the target: 3 - 3 + 1 = 1
    assert policy.max_evictable() == 1
    assert policy.evict(2, set()) is None
    policy.target_t1_size = 5.0
    assert policy.max_evictable() == 0
    assert policy.evict(1, set()) is None
    assert arc(8, variant="paper").max_evictable() is None
