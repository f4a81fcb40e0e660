"""LRU as vLLM 0.19's LRUCachePolicy: order, touch, and all-or-nothing eviction."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvframe_lru import LRUPolicy

import kvframe


class Block:
    def __init__(self, ref_cnt: int = 0) -> None:
        self.ref_cnt = ref_cnt

    def __repr__(self) -> str:
        return f"Block({self.ref_cnt})"


def filled(*keys: str, capacity: int = 8) -> tuple[LRUPolicy, dict[str, Block]]:
    policy = LRUPolicy(capacity)
    blocks = {k: Block() for k in keys}
    for key, block in blocks.items():
        policy.insert(key, block)
    return policy, blocks


def order(policy: LRUPolicy) -> list[str]:
    return list(policy.blocks)


def test_is_an_eviction_policy_selected_as_lru():
    assert issubclass(LRUPolicy, kvframe.EvictionPolicy)
    assert LRUPolicy.name == "lru"
    registry = kvframe.PluginRegistry(entry_points=())
    registry.register_class(LRUPolicy)
    policy = registry.create("eviction", "lru", 16)
    assert isinstance(policy, LRUPolicy) and policy.capacity == 16


def test_evicts_the_least_recently_inserted_first():
    policy, blocks = filled("a", "b", "c")
    assert policy.evict(2, set()) == [("a", blocks["a"]), ("b", blocks["b"])]
    assert order(policy) == ["c"]


def test_touch_moves_keys_to_the_recent_end_first_key_last():
    policy, _ = filled("a", "b", "c", "d")
    policy.touch(["b", "a", "zzz"])  # unknown keys are ignored
    # The first key of a touch is the most important, so it ends most recent.
    assert order(policy) == ["c", "d", "a", "b"]


def test_touch_accepts_any_iterable():
    policy, _ = filled("a", "b", "c")
    policy.touch(k for k in ["a"])
    assert order(policy) == ["b", "c", "a"]


def test_evict_skips_protected_and_in_use_blocks():
    policy, blocks = filled("a", "b", "c", "d")
    blocks["a"].ref_cnt = 1  # being loaded
    blocks["b"].ref_cnt = -1  # being stored
    assert policy.evict(1, {"c"}) == [("d", blocks["d"])]
    assert order(policy) == ["a", "b", "c"]


def test_evict_is_all_or_nothing():
    policy, blocks = filled("a", "b", "c")
    blocks["b"].ref_cnt = 2
    assert policy.evict(3, set()) is None
    assert policy.evict(2, {"a"}) is None
    assert order(policy) == ["a", "b", "c"]
    assert policy.evict(2, set()) == [("a", blocks["a"]), ("c", blocks["c"])]


def test_evict_zero_returns_an_empty_list_even_when_empty():
    assert LRUPolicy(4).evict(0, set()) == []
    assert LRUPolicy(4).evict(1, set()) is None


def test_get_changes_no_order_and_remove_forgets():
    policy, blocks = filled("a", "b")
    assert policy.get("a") is blocks["a"] and policy.get("x") is None
    assert order(policy) == ["a", "b"]
    policy.remove("a")
    assert policy.get("a") is None and len(policy) == 1


def test_touching_the_same_keys_again_after_a_change_moves_them_again():
    policy, _ = filled("a", "b", "c")
    keys = ["a"]
    policy.touch(keys)
    policy.insert("d", Block())
    policy.touch(keys)  # not skipped: "d" came after the first touch
    assert order(policy) == ["b", "c", "d", "a"]
    keys.append("b")  # the policy kept its own copy of the last touch
    policy.touch(keys)
    assert order(policy) == ["c", "d", "b", "a"]


def test_a_block_being_stored_is_ordered_like_any_other():
    policy = LRUPolicy(4)
    policy.insert("old", Block())
    policy.insert("new", Block(-1))
    policy.touch(["new"])
    assert order(policy) == ["old", "new"]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 9), st.sampled_from([-1, 0, 0, 1])),
        st.tuples(st.just("touch"), st.lists(st.integers(0, 12), max_size=4)),
        st.tuples(st.just("touch again")),
        st.tuples(st.just("evict"), st.integers(0, 4), st.frozensets(st.integers(0, 9))),
        st.tuples(st.just("remove"), st.integers(0, 9)),
        st.tuples(st.just("ref"), st.integers(0, 9), st.sampled_from([-1, 0, 1])),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ops)
def test_matches_a_plain_ordered_dict_model(operations):
    """Every operation, repeated touches included (a repeat with nothing changed is skipped)."""
    policy = LRUPolicy(10)
    model: OrderedDict[int, Block] = OrderedDict()
    last_touch: list[int] = []
    for op in operations:
        if op[0] == "insert" and op[1] not in model:
            block = Block(op[2])
            policy.insert(op[1], block)
            model[op[1]] = block
        elif op[0] in ("touch", "touch again"):
            keys = list(op[1]) if op[0] == "touch" else last_touch
            policy.touch(keys)
            for key in reversed(keys):
                if key in model:
                    model.move_to_end(key)
            last_touch = keys
        elif op[0] == "evict":
            n, protected = op[1], op[2]
            before = list(model.items())
            result = policy.evict(n, protected)
            eligible = [(k, b) for k, b in model.items() if b.ref_cnt == 0 and k not in protected]
            if len(eligible) < n:
                assert result is None
                assert list(model.items()) == before
            else:
                assert result == eligible[:n]
                for key, _ in result:
                    del model[key]
        elif op[0] == "remove" and op[1] in model:
            policy.remove(op[1])
            del model[op[1]]
        elif op[0] == "ref" and op[1] in model:
            model[op[1]].ref_cnt = op[2]
        assert list(policy.blocks.items()) == list(model.items())


@pytest.mark.parametrize("n", [1, 3])
def test_evicted_blocks_are_never_protected_or_in_use(n):
    policy = LRUPolicy(10)
    blocks = [Block(r) for r in (0, 1, -1, 0, 0, 2, 0)]
    for i, block in enumerate(blocks):
        policy.insert(i, block)
    result = policy.evict(n, {0})
    assert result is not None and len(result) == n
    assert all(k != 0 and b.ref_cnt == 0 for k, b in result)
