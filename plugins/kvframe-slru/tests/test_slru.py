"""SLRU: the protected segment survives scans, overflows demote, GPU hits keep protection.

The conformance suite (``pytest --kvframe-plugin eviction:slru``) checks the
contract; these tests pin the behaviour the module docstring describes.
"""

from __future__ import annotations

import pytest
from kvframe_slru import SLRUPolicy

import kvframe


class Block:
    def __init__(self, ref_cnt: int = 0) -> None:
        self.ref_cnt = ref_cnt


def keys(victims):
    return [key for key, _ in victims]


def test_is_an_eviction_policy_selected_as_slru() -> None:
    assert issubclass(SLRUPolicy, kvframe.EvictionPolicy)
    assert SLRUPolicy.name == "slru"
    assert SLRUPolicy(10).protected_size == 8


def test_a_reused_block_survives_a_scan_of_one_use_blocks() -> None:
    policy = SLRUPolicy(4, protected_fraction=0.5)
    policy.insert("hot", Block())
    policy.touch(["hot"])  # used again: protected
    evicted = []
    for i in range(10):  # a scan, each block more recent than "hot"
        policy.insert(f"scan{i}", Block())
        if len(policy) > 3:
            evicted += keys(policy.evict(1, frozenset()))
    assert evicted == [f"scan{i}" for i in range(8)]
    assert policy.get("hot") is not None
    assert list(policy.protected) == ["hot"]


def test_an_overflowing_protected_segment_demotes_its_least_recent_block() -> None:
    policy = SLRUPolicy(4, protected_fraction=0.5)  # 2 protected
    for key in "abcd":
        policy.insert(key, Block())
    policy.touch(["a"])
    policy.touch(["b"])
    policy.touch(["c"])  # protected would be a, b, c: a goes back to probation's recent end
    assert list(policy.protected) == ["b", "c"]
    assert list(policy.probation) == ["d", "a"]
    # Probation is evicted first, least recent first; then the protected segment.
    assert keys(policy.evict(3, frozenset())) == ["d", "a", "b"]


def test_touch_takes_keys_last_to_first_and_ignores_unknown_ones() -> None:
    policy = SLRUPolicy(10)
    for key in "abc":
        policy.insert(key, Block())
    policy.touch(["a", "zzz", "b"])
    assert list(policy.protected) == ["b", "a"]


def test_evict_passes_over_busy_and_protected_blocks_and_refuses_whole() -> None:
    policy = SLRUPolicy(4)
    policy.insert("busy", Block(ref_cnt=1))
    policy.insert("kept", Block())
    policy.insert("free", Block())
    assert policy.evict(2, frozenset({"kept"})) is None
    assert list(policy.probation) == ["busy", "kept", "free"]
    assert keys(policy.evict(1, frozenset({"kept"}))) == ["free"]


def test_a_gpu_prefix_hit_keeps_a_protected_block_protected() -> None:
    policy = SLRUPolicy(4, protected_fraction=0.5)
    policy.insert("doc", Block())
    policy.touch(["doc"])
    policy.on_hit("doc")  # a request uses it
    assert policy.get("doc") is None
    policy.insert("doc", Block())  # idle again: straight back to protected
    assert list(policy.protected) == ["doc"]
    # A hit on a probation block keeps nothing: it comes back to probation.
    policy.insert("new", Block())
    policy.on_hit("new")
    policy.insert("new", Block())
    assert list(policy.probation) == ["new"]


def test_rejects_a_protected_fraction_outside_zero_and_one() -> None:
    with pytest.raises(ValueError, match="protected_fraction must be between 0 and 1"):
        SLRUPolicy(4, protected_fraction=1.0)
