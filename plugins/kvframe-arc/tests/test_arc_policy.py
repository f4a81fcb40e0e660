"""ARC: vLLM 0.19's ARCCachePolicy (``arc``) and the paper's algorithm (``arc:variant=paper``).

The paper variant is checked case by case against a textbook implementation
in kvframe's ``tests/offload/test_policy_streams.py``; here are the rules each
variant follows through the five-operation interface, and the contract both
keep (exactly ``n`` victims or none, never protected, never in use).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvframe_arc import ARCPolicy

import kvframe


class Block:
    def __init__(self, ref_cnt: int = 0) -> None:
        self.ref_cnt = ref_cnt

    def __repr__(self) -> str:
        return f"Block({self.ref_cnt})"


def state(policy: ARCPolicy) -> tuple:
    return (
        list(policy.t1.items()),
        list(policy.t2.items()),
        list(policy.b1.items()),
        list(policy.b2.items()),
        policy.target_t1_size,
    )


def lists(policy: ARCPolicy) -> tuple[list, list, list, list]:
    return list(policy.t1), list(policy.t2), list(policy.b1), list(policy.b2)


def make(capacity: int = 4, variant: str = "vllm", **contents: str) -> ARCPolicy:
    """A policy whose T1/T2 hold the given keys (``t1="abc"``), all ready and idle."""
    policy = ARCPolicy(capacity, variant=variant)  # type: ignore[arg-type]
    for key in contents.get("t1", ""):
        policy.t1[key] = Block()
    for key in contents.get("t2", ""):
        policy.t2[key] = Block()
    for key in contents.get("b1", ""):
        policy.b1[key] = False
    for key in contents.get("b2", ""):
        policy.b2[key] = False
    policy.keys_held.update("".join(contents.values()))
    return policy


# -- selection ---------------------------------------------------------------


def test_registered_as_arc_with_a_variant_option():
    registry = kvframe.PluginRegistry(entry_points=())
    registry.register_class(ARCPolicy)
    assert registry.create("eviction", "arc", 8).variant == "vllm"
    paper = registry.create("eviction", "arc:variant=paper", 8)
    assert paper.variant == "paper" and paper.capacity == 8
    with pytest.raises(kvframe.ConfigError, match="one of 'vllm', 'paper'"):
        registry.create("eviction", "arc:variant=textbook", 8)


# -- vLLM variant --------------------------------------------------------------


def test_new_blocks_enter_t1_and_a_second_use_promotes_them_to_t2():
    policy = ARCPolicy(4)
    a, b = Block(), Block()
    policy.insert("a", a)
    policy.insert("b", b)
    assert lists(policy) == (["a", "b"], [], [], [])
    policy.touch(["a"])
    assert lists(policy) == (["b"], ["a"], [], [])
    assert policy.get("a") is a and policy.get("b") is b and policy.get("c") is None
    assert len(policy) == 2


def test_touching_a_block_still_being_stored_keeps_it_in_t1_as_most_recent():
    policy = make(t1="ab")
    policy.insert("c", Block(-1))
    policy.touch(["c", "a"])  # reversed: a is promoted, then c refreshed in T1
    assert lists(policy) == (["b", "c"], ["a"], [], [])


def test_touch_processes_keys_in_reverse_so_the_first_ends_most_recent():
    policy = make(t2="abcd")
    policy.touch(["b", "a"])
    assert list(policy.t2) == ["c", "d", "a", "b"]


def test_a_b1_ghost_hit_grows_the_target_and_refreshes_the_ghost():
    policy = make(capacity=4, b1="xy", b2="pqrst")
    policy.touch(["x"])
    assert policy.target_t1_size == 2.5  # max(1, |B2| / |B1|) = 5 / 2
    assert list(policy.b1) == ["y", "x"]
    policy.touch(["x", "y"])
    assert policy.target_t1_size == 4  # clamped at the capacity


def test_a_b2_ghost_hit_shrinks_the_target_down_to_zero():
    policy = make(capacity=8, b1="xyz", b2="p")
    policy.target_t1_size = 5.0
    policy.touch(["p"])
    assert policy.target_t1_size == 2.0  # max(1, |B1| / |B2|) = 3
    policy.touch(["p"])  # the same ghost adapts again on every touch
    assert policy.target_t1_size == 0


def test_insert_always_enters_t1_even_after_a_ghost_hit():
    policy = make(b1="x", b2="y")
    policy.insert("x", Block())
    policy.insert("y", Block())
    assert lists(policy) == (["x", "y"], [], [], [])


def test_evicts_from_t1_while_it_is_at_least_the_truncated_target():
    policy = make(capacity=8, t1="abc", t2="pq")
    policy.target_t1_size = 2.9  # int() -> 2: |T1| = 3, 2 >= 2, then 1 < 2
    victims = policy.evict(3, set())
    assert [k for k, _ in victims] == ["a", "b", "p"]
    assert lists(policy) == (["c"], ["q"], ["a", "b"], ["p"])


def test_falls_back_to_t2_when_t1_has_nothing_evictable():
    policy = make(t1="ab", t2="pq")
    policy.t1["a"].ref_cnt = 1
    assert [k for k, _ in policy.evict(2, {"b"})] == ["p", "q"]


def test_a_batch_takes_a_run_from_t1_then_a_run_from_t2():
    policy = make(capacity=8, t1="abc", t2="pqr")
    policy.t1["a"].ref_cnt = 1
    # target 0: T1 may give all it has (b, c; a is in use), then T2 in order.
    assert [k for k, _ in policy.evict(4, {"q"})] == ["b", "c", "p", "r"]
    assert lists(policy) == (["a"], ["q"], ["b", "c"], ["p", "r"])


def test_never_falls_back_from_t2_to_t1_and_then_fails_atomically():
    # vLLM's quirk: T1 below target and nothing evictable in T2 -> None, even
    # though T1 has an idle block.
    policy = make(capacity=4, t1="a", t2="p")
    policy.target_t1_size = 3.0
    policy.t2["p"].ref_cnt = 2
    before = state(policy)
    assert policy.evict(1, set()) is None
    assert state(policy) == before


def test_ghost_lists_are_trimmed_to_the_capacity_each_after_an_eviction():
    policy = make(capacity=2, t1="abc", b1="xy", b2="pqr")
    policy.evict(1, set())
    assert list(policy.b1) == ["y", "a"]  # x fell off: |B1| <= 2
    assert list(policy.b2) == ["q", "r"]  # trimmed too, though nothing entered it


def test_remove_is_tolerant_and_leaves_no_ghost():
    policy = make(t1="a", t2="b")
    policy.remove("a")
    policy.remove("b")
    policy.remove("zzz")
    assert lists(policy) == ([], [], [], [])


# -- paper variant -------------------------------------------------------------


def test_paper_a_ghost_hit_comes_back_into_t2():
    policy = make(variant="paper", b1="x", b2="y")
    policy.insert("x", Block())
    policy.insert("y", Block())
    assert lists(policy) == ([], ["x", "y"], [], [])


def test_paper_a_ghost_hit_adapts_the_target_once():
    policy = make(capacity=8, variant="paper", b1="x", b2="pq")
    policy.touch(["x"])
    policy.touch(["x"])
    assert policy.target_t1_size == 2  # max(1, 2 / 1), once
    assert list(policy.b1) == ["x"]  # stays put until it is inserted
    policy.evict(0, {"x"})
    policy.insert("x", Block())
    assert policy.target_t1_size == 2


def test_paper_an_untouched_ghost_adapts_when_evict_sees_it_protected():
    policy = make(capacity=2, variant="paper", t1="a", t2="b", b1="x")
    # p = 0 + 1 = 1 before REPLACE; |T1| = 1 is not > 1 -> evict from T2.
    assert [k for k, _ in policy.evict(1, {"x"})] == ["b"]
    assert policy.target_t1_size == 1


def test_paper_replace_breaks_the_tie_towards_t1_for_an_incoming_b2_ghost():
    for incoming, expected in (("y", "a"), ("new", "p")):
        policy = make(capacity=4, variant="paper", t1="ab", t2="pq", b2="y")
        policy.b2["y"] = True  # already adapted
        policy.target_t1_size = 2
        assert [k for k, _ in policy.evict(1, {incoming})] == [expected]


def test_paper_falls_back_both_ways_and_restores_the_target_on_failure():
    policy = make(capacity=4, variant="paper", t1="a", t2="p", b1="x")
    policy.t2["p"].ref_cnt = 1
    # p becomes 1; |T1| = 1 is not > 1, so REPLACE names T2, which is pinned.
    assert [k for k, _ in policy.evict(1, {"x"})] == ["a"]
    policy = make(capacity=4, variant="paper", t1="a", t2="p", b1="x")
    policy.t2["p"].ref_cnt = 1
    policy.t1["a"].ref_cnt = -1
    before = state(policy)
    assert policy.evict(1, {"x"}) is None
    assert state(policy) == before  # the adaptation was undone, x is still unseen


# -- the contract, both variants -------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 11), st.sampled_from([-1, 0, 0, 0, 1])),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 14), max_size=4)),
        st.tuples(st.just("evict"), st.integers(0, 4), st.frozensets(st.integers(0, 11))),
        st.tuples(st.just("remove"), st.integers(0, 11)),
        st.tuples(st.just("ref"), st.integers(0, 11), st.sampled_from([-1, 0, 1])),
    ),
    max_size=80,
)


@pytest.mark.slow  # a long property run: 10-12 s per variant on 2 cores
@pytest.mark.parametrize("variant", ["vllm", "paper"])
@settings(max_examples=200, deadline=None, derandomize=True)
@given(ops=operations, capacity=st.integers(1, 8))
def test_evict_returns_exactly_n_idle_unprotected_blocks_or_changes_nothing(variant, ops, capacity):
    policy = ARCPolicy(capacity, variant=variant)
    resident: dict[int, Block] = {}
    for op in ops:
        if op[0] == "insert" and op[1] not in resident:
            resident[op[1]] = Block(op[2])
            policy.insert(op[1], resident[op[1]])
        elif op[0] == "touch":
            policy.touch(op[1])
        elif op[0] == "evict":
            before = state(policy)
            result = policy.evict(op[1], op[2])
            if result is None:
                assert state(policy) == before
                continue
            assert len(result) == op[1]
            assert len({k for k, _ in result}) == op[1]
            for key, block in result:
                assert key not in op[2] and block.ref_cnt == 0
                assert resident.pop(key) is block
        elif op[0] == "remove" and op[1] in resident:
            policy.remove(op[1])
            del resident[op[1]]
        elif op[0] == "ref" and op[1] in resident:
            resident[op[1]].ref_cnt = op[2]
        assert {**policy.t1, **policy.t2} == resident
        assert not (policy.t1.keys() & policy.t2.keys())
        assert not ((policy.t1.keys() | policy.t2.keys()) & (policy.b1.keys() | policy.b2.keys()))
        assert 0 <= policy.target_t1_size <= capacity
        if variant == "vllm":  # ghosts only grow in evict, which trims them
            assert len(policy.b1) <= capacity and len(policy.b2) <= capacity


@pytest.mark.parametrize("variant", ["vllm", "paper"])
def test_evict_zero_is_an_empty_list(variant):
    assert ARCPolicy(2, variant=variant).evict(0, set()) == []
    assert ARCPolicy(2, variant=variant).evict(1, set()) is None


def test_rejects_unknown_variants_and_negative_capacities():
    with pytest.raises(ValueError, match="variant must be"):
        ARCPolicy(4, variant="lru")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capacity must be >= 0"):
        ARCPolicy(-1)


def plain_touch(policy: ARCPolicy, keys: list) -> None:
    """``touch`` key by key over all four lists, with no shortcut (the reference)."""
    t1, t2, b1, b2 = policy.t1, policy.t2, policy.b1, policy.b2
    for key in reversed(keys):
        if key in t1:
            block = t1.pop(key)
            (t1 if block.ref_cnt < 0 else t2)[key] = block
        elif key in t2:
            t2.move_to_end(key)
        elif policy.variant == "paper":
            if key in b1 or key in b2:
                policy._see_ghost(key)
        elif key in b1:
            policy.target_t1_size = min(
                policy.target_t1_size + max(1, len(b2) / len(b1)), policy.capacity
            )
            b1.move_to_end(key)
        elif key in b2:
            policy.target_t1_size = max(policy.target_t1_size - max(1, len(b1) / len(b2)), 0)
            b2.move_to_end(key)


shortcut_operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 6), st.sampled_from([-1, -1, 0, 0, 1])),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 8), max_size=6)),
        st.tuples(st.just("touch again")),
        st.tuples(st.just("touch again")),
        st.tuples(st.just("evict"), st.integers(0, 3), st.frozensets(st.integers(0, 6))),
        st.tuples(st.just("remove"), st.integers(0, 6)),
        st.tuples(st.just("ref"), st.integers(0, 6), st.sampled_from([-1, 0, 1])),
    ),
    max_size=60,
)


@pytest.mark.slow  # a long property run: 11-13 s per variant on 2 cores
@pytest.mark.parametrize("variant", ["vllm", "paper"])
@settings(max_examples=300, deadline=None, derandomize=True)
@given(ops=shortcut_operations, capacity=st.integers(1, 6))
def test_touch_shortcuts_end_in_the_state_a_plain_touch_gives(variant, ops, capacity):
    """``keys_held`` and the skipped repeat touch change no outcome, whatever the tier did."""
    fast = ARCPolicy(capacity, variant=variant)
    plain = ARCPolicy(capacity, variant=variant)
    resident: dict[int, Block] = {}
    last_touch: list[int] = []
    for op in ops:
        if op[0] == "insert" and op[1] not in resident:
            resident[op[1]] = Block(op[2])
            fast.insert(op[1], resident[op[1]])
            plain.insert(op[1], resident[op[1]])
        elif op[0] in ("touch", "touch again"):
            keys = list(op[1]) if op[0] == "touch" else last_touch
            fast.touch(keys)
            plain_touch(plain, keys)
            last_touch = keys
        elif op[0] == "evict":
            result = fast.evict(op[1], op[2])
            assert result == plain.evict(op[1], op[2])
            for key, _ in result or ():
                del resident[key]
        elif op[0] == "remove" and op[1] in resident:
            fast.remove(op[1])
            plain.remove(op[1])
            del resident[op[1]]
        elif op[0] == "ref" and op[1] in resident:
            resident[op[1]].ref_cnt = op[2]  # behind both policies' backs
        assert state(fast) == state(plain)
        assert fast.keys_held == set(fast.t1) | set(fast.t2) | set(fast.b1) | set(fast.b2)


def test_a_repeated_touch_promotes_a_block_the_tier_made_ready_in_between():
    policy = ARCPolicy(4)
    block = Block(-1)
    policy.insert("a", block)
    keys = ["a"]
    policy.touch(keys)
    assert list(policy.t1) == ["a"]  # being written: not a second use
    block.ref_cnt = 0  # the store completed, which the policy does not see
    policy.touch(keys)
    assert list(policy.t1) == [] and list(policy.t2) == ["a"]


def test_a_repeated_touch_of_a_ghost_adapts_the_target_again():
    policy = make(capacity=4, t1="a", b1="g")
    keys = ["g"]
    policy.touch(keys)
    policy.touch(keys)
    assert policy.target_t1_size == 2  # vLLM adapts on every touch of a ghost


@pytest.mark.parametrize("ref_cnt", [0, -1])
def test_a_key_repeated_in_one_touch_ends_where_its_last_use_puts_it(ref_cnt):
    fast = ARCPolicy(8)
    plain = ARCPolicy(8)
    for key in "abc":
        block = Block(ref_cnt)
        fast.insert(key, block)
        plain.insert(key, block)
    fast.touch(["a", "b", "a", "c"])
    plain_touch(plain, ["a", "b", "a", "c"])
    assert state(fast) == state(plain)
    assert lists(fast)[0 if ref_cnt < 0 else 1] == ["c", "b", "a"]


store_touch_operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 9), st.sampled_from([-1, -1, 0])),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 10), min_size=2, max_size=10)),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 10), min_size=2, max_size=10)),
        st.tuples(st.just("evict"), st.integers(1, 3), st.frozensets(st.integers(0, 9))),
        st.tuples(st.just("ref"), st.integers(0, 9), st.sampled_from([-1, 0, 0, 1])),
        st.tuples(st.just("idle"), st.integers(0, 9)),
        st.tuples(st.just("touch again")),
    ),
    min_size=10,
    max_size=120,
)


@pytest.mark.slow  # a long property run: 4-7 s per variant on 2 cores
@pytest.mark.parametrize("variant", ["vllm", "paper"])
@settings(max_examples=400, deadline=None, derandomize=True)
@given(ops=store_touch_operations, capacity=st.integers(2, 8), tracking=st.booleans())
def test_a_touch_of_blocks_being_written_ends_in_the_state_a_plain_touch_gives(
    variant, ops, capacity, tracking
):
    """The store touch's path (every T1 key named is being written), with T2 keys and
    ghosts in the same touch, and with or without idle tracking (the tier reports
    ``ref_cnt`` set to 0 with ``on_idle``, as ``SlotOffloadManager`` does)."""
    fast = ARCPolicy(capacity, variant=variant)
    plain = ARCPolicy(capacity, variant=variant)
    if tracking:
        assert fast.track_idle()
    resident: dict[int, Block] = {}
    last_touch: list[int] = []
    for op in ops:
        if op[0] == "insert" and op[1] not in resident:
            if len(resident) >= capacity:
                victims = fast.evict(1, {op[1]})
                assert victims == plain.evict(1, {op[1]})
                if victims is None:
                    continue
                del resident[victims[0][0]]
            resident[op[1]] = Block(op[2])
            fast.insert(op[1], resident[op[1]])
            plain.insert(op[1], resident[op[1]])
        elif op[0] in ("touch", "touch again"):
            keys = list(op[1]) if op[0] == "touch" else last_touch
            fast.touch(keys)
            plain_touch(plain, keys)
            last_touch = keys
        elif op[0] == "evict":
            result = fast.evict(op[1], op[2])
            assert result == plain.evict(op[1], op[2])
            for key, _ in result or ():
                del resident[key]
        elif op[0] in ("ref", "idle") and op[1] in resident:
            block = resident[op[1]]
            new = 0 if op[0] == "idle" else op[2]
            if new == 0 and block.ref_cnt == 0:
                continue
            if new == -1 and block.ref_cnt != -1:
                continue  # a tier never makes a stored block "being written" again
            block.ref_cnt = new
            if tracking and new == 0:
                fast.on_idle([op[1]])
        assert state(fast) == state(plain)
