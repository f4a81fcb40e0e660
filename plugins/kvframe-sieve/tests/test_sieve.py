"""SIEVE: the hand, lazy promotion, all-or-nothing sweeps, and a GPU hit that keeps its place.

The conformance suite (``pytest --kvframe-plugin eviction:sieve``) checks the
contract; these tests pin the behaviour the module docstring describes.
"""

from __future__ import annotations

from kvframe_sieve import SIEVEPolicy

import kvframe


class Block:
    def __init__(self, ref_cnt: int = 0) -> None:
        self.ref_cnt = ref_cnt


def keys(victims):
    return [key for key, _ in victims]


def filled(*names: str) -> SIEVEPolicy:
    policy = SIEVEPolicy(8)
    for name in names:
        policy.insert(name, Block())
    return policy


def queue(policy: SIEVEPolicy) -> list[str]:
    """Keys from the tail (oldest) to the head, ``*`` marking a visited block."""
    out, node = [], policy.tail
    while node is not None:
        out.append(node.key + ("*" if node.visited else ""))
        node = node.newer
    return out


def test_is_an_eviction_policy_selected_as_sieve() -> None:
    assert issubclass(SIEVEPolicy, kvframe.EvictionPolicy)
    assert SIEVEPolicy.name == "sieve"


def test_the_hand_clears_visited_bits_and_resumes_where_it_stopped() -> None:
    policy = filled("a", "b", "c", "d")  # a is the oldest
    policy.touch(["a", "c"])
    assert queue(policy) == ["a*", "b", "c*", "d"]  # touch moves nothing
    assert keys(policy.evict(1, frozenset())) == ["b"]  # a's bit cleared on the way
    assert policy.hand.key == "c"
    assert keys(policy.evict(1, frozenset())) == ["d"]  # from c: cleared, then d
    assert policy.hand.key == "a"  # wrapped: the next sweep starts at the tail
    assert keys(policy.evict(1, frozenset())) == ["a"]
    assert queue(policy) == ["c"]


def test_new_blocks_enter_at_the_head_behind_the_hand() -> None:
    policy = filled("a", "b", "c")
    policy.touch(["a", "b"])
    assert keys(policy.evict(1, frozenset())) == ["c"]
    policy.insert("d", Block())
    # The hand wrapped to the tail; a and b lost their bits on the way: a goes.
    assert keys(policy.evict(1, frozenset())) == ["a"]


def test_a_refused_evict_restores_the_bits_and_the_hand() -> None:
    policy = filled("a", "b", "c")
    policy.touch(["a", "b"])
    policy.evict(1, frozenset())  # c
    policy.insert("busy", Block(ref_cnt=1))
    before = (queue(policy), policy.hand)
    assert policy.evict(3, frozenset()) is None
    assert (queue(policy), policy.hand) == before
    assert keys(policy.evict(1, frozenset({"a"}))) == ["b"]


def test_a_gpu_prefix_hit_keeps_the_block_in_its_place() -> None:
    policy = filled("a", "b", "c")
    policy.on_hit("a")  # a request uses a: it is not evictable, but keeps its place
    assert policy.get("a") is None and len(policy) == 2
    assert keys(policy.evict(1, frozenset())) == ["b"]
    policy.insert("a", Block())  # idle again: back at the tail, not the head
    assert queue(policy) == ["a", "c"]
    policy.touch(["a"])  # the tier's touch after a hit: the visited bit
    assert keys(policy.evict(1, frozenset())) == ["c"]


def test_places_taken_by_hits_are_bounded_by_the_capacity() -> None:
    policy = SIEVEPolicy(2)
    for key in "abc":
        policy.insert(key, Block())
        policy.on_hit(key)  # never comes back (its content left the cache in use)
    assert list(policy.nodes) == ["b", "c"]
