"""Idle tracking (``EvictionPolicy.track_idle`` / ``on_idle``) changes no decision.

The bundled ``lru`` and ``arc`` accept idle tracking and then walk an index of
their idle blocks in ``evict``. These properties compare them, on long random
call sequences, with the same policies walking every block (tracking
declined): every answer must be equal. Once on the policies alone (the tier's
``ref_cnt`` changes reported as the contract says), once through the ledger
that reports them (:class:`SlotOffloadManager`), with every ledger call.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.offload.slots.manager import OffloadStateError, SlotOffloadManager
from kvframe.testing.eviction import SimpleBlock

POLICIES = [
    ("kvframe_lru", "LRUPolicy", {}),
    ("kvframe_arc", "ARCPolicy", {}),
    ("kvframe_arc", "ARCPolicy", {"variant": "paper"}),
]
IDS = ["lru", "arc", "arc-paper"]


def _classes(module: str, attr: str) -> tuple[type, type]:
    """The policy class, and a subclass that declines idle tracking (the full walk)."""
    cls = getattr(pytest.importorskip(module), attr)
    declining = type(f"Untracked{attr}", (cls,), {"track_idle": lambda self: False})
    return cls, declining


# -- the policies alone ---------------------------------------------------------

_POLICY_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 3)),
        st.tuples(st.just("insert"), st.integers(0, 3)),
        st.tuples(st.just("ref"), st.integers(0, 63), st.sampled_from((0, 0, 0, 1, 2, -1))),
        st.tuples(st.just("ref"), st.integers(0, 63), st.just(0)),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 63), min_size=1, max_size=8)),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 63), min_size=1, max_size=1)),
        # The most recent blocks, repeated: a batch of T1 blocks promoted at once.
        st.tuples(st.just("touch_recent"), st.lists(st.integers(0, 3), min_size=2, max_size=6)),
        st.tuples(st.just("evict"), st.integers(0, 4), st.lists(st.integers(0, 63), max_size=3)),
        st.tuples(st.just("remove"), st.integers(0, 63)),
    ),
    min_size=20,
    max_size=200,
)


@pytest.mark.parametrize(("module", "attr", "options"), POLICIES, ids=IDS)
def test_an_idle_index_evicts_what_the_full_walk_evicts(module, attr, options):
    cls, declining = _classes(module, attr)

    @settings(max_examples=150, deadline=None, derandomize=True, database=None)
    @given(capacity=st.integers(1, 12), ops=_POLICY_OPS, start=st.integers(0, 30))
    def run(capacity: int, ops: list[tuple[Any, ...]], start: int) -> None:
        told = cls(capacity, **options)
        untold = declining(capacity, **options)
        tracking = False
        blocks: dict[Hashable, tuple[SimpleBlock, SimpleBlock]] = {}  # held: told's, untold's
        next_key = 0
        for index, op in enumerate(ops):
            if index == start:
                tracking = told.track_idle()
                assert tracking
            held = list(blocks)
            kind = op[0]
            if kind == "insert":
                # As a tier: evict first when full, the new key protected.
                key, next_key = next_key, next_key + 1
                if len(blocks) >= capacity:
                    a = told.evict(len(blocks) - capacity + 1, {key})
                    b = untold.evict(len(blocks) - capacity + 1, {key})
                    assert _keys(a) == _keys(b)
                    if a is None:
                        continue
                    for victim in _keys(a):
                        del blocks[victim]
                ref = (-1, -1, 0, 1)[op[1]]
                pair = SimpleBlock(key, ref), SimpleBlock(key, ref)
                told.insert(key, pair[0])
                untold.insert(key, pair[1])
                blocks[key] = pair
            elif kind == "ref" and held:
                key = held[op[1] % len(held)]
                pair = blocks[key]
                was = pair[0].ref_cnt
                pair[0].ref_cnt = pair[1].ref_cnt = op[2]
                if tracking and op[2] == 0 and was != 0:
                    told.on_idle([key])
            elif kind == "touch" or kind == "touch_recent":
                if kind == "touch_recent":
                    keys = [held[-1 - v % len(held)] for v in op[1]] if held else []
                else:
                    keys = [held[v % len(held)] if held and v < 48 else 1000 + v for v in op[1]]
                told.touch(list(keys))
                untold.touch(list(keys))
            elif kind == "evict":
                protected = {held[v % len(held)] for v in op[2]} if held else set()
                a, b = told.evict(op[1], protected), untold.evict(op[1], protected)
                assert _keys(a) == _keys(b), (index, op)
                for victim in _keys(a) or ():
                    del blocks[victim]
            elif kind == "remove" and held:
                key = held[op[1] % len(held)]
                told.remove(key)
                untold.remove(key)
                del blocks[key]
            if tracking:
                _check_index(told)
        # Whatever is left is evicted in the same order too.
        for n in range(len(blocks), 0, -1):
            a, b = told.evict(n, set()), untold.evict(n, set())
            assert _keys(a) == _keys(b)
            if a is not None:
                break

    run()


def _check_index(policy: Any) -> None:
    """The invariant that makes the walk of an index find the full walk's victims.

    Each index is a subsequence of its list (same keys' order, same blocks)
    at all times, and, unless a rebuild is pending, holds every idle block of
    the list.
    """
    if hasattr(policy, "t1"):
        pairs = [
            (policy._idle_t1, policy.t1, policy._stale_t1),
            (policy._idle_t2, policy.t2, policy._stale_t2),
        ]
    else:
        pairs = [(policy._idle, policy.blocks, policy._stale)]
    for index, order, stale in pairs:
        assert list(index) == [key for key in order if key in index]
        assert all(order.get(key) is block for key, block in index.items())
        if not stale:
            assert {key for key, block in order.items() if block.ref_cnt == 0} <= index.keys()


def _keys(victims: list | None) -> list | None:
    return None if victims is None else [key for key, _ in victims]


# -- through the ledger ------------------------------------------------------------

_LEDGER_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("prepare_store"), st.lists(st.integers(0, 40), min_size=1, max_size=5)),
        st.tuples(st.just("prepare_store"), st.lists(st.integers(0, 40), min_size=1, max_size=5)),
        st.tuples(
            st.just("complete_store"), st.lists(st.integers(0, 40), max_size=6), st.booleans()
        ),
        st.tuples(
            st.just("complete_store"), st.lists(st.integers(0, 40), max_size=6), st.just(True)
        ),
        st.tuples(st.just("prepare_load"), st.lists(st.integers(0, 40), min_size=1, max_size=3)),
        st.tuples(st.just("complete_load"), st.lists(st.integers(0, 40), min_size=1, max_size=3)),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 40), min_size=1, max_size=8)),
        st.tuples(st.just("lookup"), st.lists(st.integers(0, 40), min_size=1, max_size=6)),
    ),
    min_size=20,
    max_size=150,
)


@pytest.mark.parametrize(("module", "attr", "options"), POLICIES, ids=IDS)
def test_the_ledger_decides_the_same_with_and_without_idle_tracking(module, attr, options):
    cls, declining = _classes(module, attr)

    @settings(max_examples=150, deadline=None, derandomize=True, database=None)
    @given(num_blocks=st.integers(1, 10), ops=_LEDGER_OPS)
    def run(num_blocks: int, ops: list[tuple[Any, ...]]) -> None:
        told = SlotOffloadManager(cls(num_blocks, **options), num_blocks, block_size=16)
        untold = SlotOffloadManager(declining(num_blocks, **options), num_blocks, block_size=16)
        assert told._on_idle is not None and untold._on_idle is None
        for op in ops:
            name, keys, *rest = op
            hashes = [b"h%d" % k for k in keys]
            answers = []
            for manager in (told, untold):
                try:
                    answers.append(getattr(manager, name)(list(hashes), *rest))
                except OffloadStateError as err:
                    answers.append(str(err))
            assert answers[0] == answers[1], op
            assert told.take_events() == untold.take_events()

    run()


@pytest.mark.parametrize("options", [{}, {"variant": "paper"}], ids=["arc", "arc-paper"])
def test_arc_s_index_follows_a_touch_that_repeats_promoted_keys(options):
    """Rare for the random calls above: idle T1 blocks promoted by a touch naming them
    twice end in T2 in the order of their last occurrence, and so in T2's index."""
    cls = pytest.importorskip("kvframe_arc").ARCPolicy
    policy = cls(8, **options)
    assert policy.track_idle()
    blocks = {key: SimpleBlock(key, 0) for key in "abc"}
    for key, block in blocks.items():
        policy.insert(key, block)
    policy.touch(["a", "b", "a", "c"])
    assert list(policy.t2) == ["c", "b", "a"]
    _check_index(policy)
    policy.target_t1_size = 8  # T1 under target: evict from T2
    assert _keys(policy.evict(1, set())) == ["c"]
