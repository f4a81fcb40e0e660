"""LFU with dynamic aging: frequency over recency, the age ``L``, counts kept across GPU hits.

The conformance suite (``pytest --kvframe-plugin eviction:lfu``) checks the
contract; these tests pin the behaviour the module docstring describes.
"""

from __future__ import annotations

from kvframe_lfu import LFUPolicy

import kvframe
from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request


class Block:
    def __init__(self, ref_cnt: int = 0) -> None:
        self.ref_cnt = ref_cnt


def keys(victims):
    return [key for key, _ in victims]


def test_is_an_eviction_policy_selected_as_lfu() -> None:
    assert issubclass(LFUPolicy, kvframe.EvictionPolicy)
    assert LFUPolicy.name == "lfu"
    assert not LFUPolicy(4).may_refuse


def test_a_block_used_more_outlives_more_recent_ones() -> None:
    policy = LFUPolicy(4)
    for key in "abc":
        policy.insert(key, Block())
    policy.touch(["a"])
    policy.touch(["a"])
    policy.touch(["c"])
    # Counts: a 3, b 1, c 2. LRU would evict a (inserted first, touched before c).
    assert keys(policy.evict(2, frozenset())) == ["b", "c"]
    assert policy.get("a") is not None


def test_equal_counts_go_least_recently_used_first_and_the_first_touched_key_last() -> None:
    policy = LFUPolicy(4)
    for key in "abc":
        policy.insert(key, Block())
    policy.touch(["c", "b", "a"])  # all count 2; c counts as the most recent
    assert keys(policy.evict(3, frozenset())) == ["a", "b", "c"]


def test_aging_lets_an_old_favourite_go_and_plain_lfu_keeps_it() -> None:
    def stream(policy: LFUPolicy) -> list[str]:
        policy.insert("fav", Block())
        for _ in range(4):
            policy.touch(["fav"])  # count 5, priority 5
        evicted = []
        for i in range(8):
            policy.insert(f"new{i}", Block())  # priority L + 1
            evicted += keys(policy.evict(1, frozenset()))
        return evicted

    aged = stream(LFUPolicy(2))
    # Each one-use block evicted raises L by one: by the fifth, fav (priority 5,
    # older) ties with a new block (L + 1 = 5) and goes first.
    assert aged[:5] == ["new0", "new1", "new2", "new3", "fav"]
    plain = stream(LFUPolicy(2, aging=False))
    assert "fav" not in plain


def test_a_refused_evict_changes_nothing_and_passes_over_busy_and_protected_blocks() -> None:
    policy = LFUPolicy(4)
    busy = Block(ref_cnt=1)
    policy.insert("busy", busy)
    policy.insert("kept", Block())
    policy.insert("free", Block())
    assert policy.evict(2, frozenset({"kept"})) is None
    assert keys(policy.evict(1, frozenset({"kept"}))) == ["free"]
    busy.ref_cnt = 0
    assert keys(policy.evict(2, frozenset())) == ["busy", "kept"]
    assert policy.age == 1


def test_counts_survive_a_gpu_prefix_hit() -> None:
    policy = LFUPolicy(4)
    policy.insert("doc", Block())
    policy.touch(["doc"])  # count 2
    policy.on_hit("doc")  # a request uses it: not held, count remembered
    assert policy.get("doc") is None
    policy.insert("doc", Block())  # idle again
    policy.touch(["doc"])  # the tier's touch after a hit: count 3
    assert policy.entries["doc"].count == 3
    policy.remove("doc")  # content gone: forgotten
    policy.insert("doc", Block())
    assert policy.entries["doc"].count == 1


BS = 2


def _run(manager: KVCacheManager, hasher, rid: str, tokens: list[int]) -> None:
    request = Request(rid, tokens, 1, block_hasher=hasher)
    hits, num_hit = manager.get_computed_blocks(request)
    blocks = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, hits)
    assert blocks is not None
    manager.free(request)


def _popular_survives(policy: kvframe.EvictionPolicy) -> bool:
    """A prefix used four times, then prompts used twice each fill the tier: is it still cached?"""
    hasher = make_block_hasher(BS)
    manager = KVCacheManager(9, BS, 4096, eviction_policy=policy)  # 8 usable blocks
    popular = [1, 2, 3, 4]  # 2 blocks
    for i in range(4):
        _run(manager, hasher, f"p{i}", [*popular, 100 + i])
    for i in range(3):  # 6 blocks, each used twice, all more recent than the popular prefix
        scan = [1000 * (i + 1) + t for t in range(5)]
        _run(manager, hasher, f"s{i}", scan)
        _run(manager, hasher, f"s{i}-again", scan)
    probe = Request("probe", [*popular, 7], 1, block_hasher=hasher)
    _, num_hit = manager.get_computed_blocks(probe)
    return num_hit == len(popular)


class _LFUWithoutHitHistory(LFUPolicy):
    """LFU as the GPU tier drove it before ``on_hit``: a hit was a ``remove``."""

    on_hit = kvframe.EvictionPolicy.on_hit


def test_on_the_gpu_tier_a_popular_prefix_outlives_reuse_where_lru_loses_it() -> None:
    from kvframe_lru import LRUPolicy

    assert _popular_survives(LFUPolicy(9))
    assert not _popular_survives(LRUPolicy(9))
    # Without on_hit every count restarts at each hit: the policy orders as LRU does.
    assert not _popular_survives(_LFUWithoutHitHistory(9))
