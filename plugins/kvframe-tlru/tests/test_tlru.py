"""T-LRU: TEL-safe chain tails are evicted before anything else, least recent first."""

from __future__ import annotations

import pytest
from kvframe_tlru import TLRUPolicy

import kvframe


class Block:
    def __init__(self) -> None:
        self.ref_cnt = 0


def release(policy: TLRUPolicy, name: str, num_blocks: int, num_tokens: int) -> None:
    """What the GPU tier does when a request frees a chain of ``num_blocks`` 16-token
    blocks: inserts tail first, then ``on_release`` with the chain in prefix order."""
    keys = [f"{name}{i}" for i in range(num_blocks)]
    for key in reversed(keys):
        policy.insert(key, Block())
    policy.on_release([(key, 16 * i) for i, key in enumerate(keys)], num_tokens)


def evicted(policy: TLRUPolicy, n: int) -> list[str]:
    victims = policy.evict(n, frozenset())
    assert victims is not None
    return [key for key, _ in victims]


def test_is_an_eviction_policy_selected_as_tlru() -> None:
    assert issubclass(TLRUPolicy, kvframe.EvictionPolicy)
    assert TLRUPolicy.name == "tlru"


def test_tel_safe_tails_of_every_conversation_go_before_any_protected_block() -> None:
    # 64-token histories, next prompt 8, budget 40: B = 64 + 8 - 40 = 32 tokens stay,
    # so blocks 2 and 3 (tokens 32..63) of each chain are TEL-safe.
    policy = TLRUPolicy(64, threshold=40, next_prompt=8)
    release(policy, "a", 4, 64)
    release(policy, "b", 4, 64)
    release(policy, "c", 2, 20)  # B = max(0, 20 + 8 - 40) = 0: both blocks are safe
    # Plain LRU would take a3 a2 a1 a0 (release order). T-LRU: the safe tails first,
    # least recently released first, then the LRU order of what is left.
    assert evicted(policy, 6) == ["a3", "a2", "b3", "b2", "c1", "c0"]
    assert evicted(policy, 4) == ["a1", "a0", "b1", "b0"]


def test_a_zero_budget_is_plain_lru() -> None:
    policy = TLRUPolicy(64, threshold=0, next_prompt=0)  # B = L: nothing is past it
    release(policy, "a", 3, 48)
    release(policy, "b", 3, 48)
    assert not policy.safe
    assert evicted(policy, 6) == ["a2", "a1", "a0", "b2", "b1", "b0"]


def test_a_touch_reorders_safe_blocks_as_lru_does_and_a_hit_forgets_safety() -> None:
    policy = TLRUPolicy(64, threshold=40, next_prompt=8)
    release(policy, "a", 4, 64)
    release(policy, "b", 4, 64)
    policy.touch(["a2"])  # a2 used again: the most recent safe block now
    policy.on_hit("b3")  # a prefix hit takes b3; back later, released by another request
    policy.insert("b3", Block())
    assert evicted(policy, 3) == ["a3", "b2", "a2"]
    assert evicted(policy, 1) == ["a1"]  # b3 came back unmarked: LRU order


def test_a_block_in_use_or_protected_is_never_taken_and_refusal_changes_nothing() -> None:
    policy = TLRUPolicy(64, threshold=40, next_prompt=8)
    release(policy, "a", 4, 64)
    policy.blocks["a3"].ref_cnt = 1
    victims = policy.evict(2, frozenset({"a1"}))
    assert victims is not None and [k for k, _ in victims] == ["a2", "a0"]
    assert policy.evict(2, frozenset({"a1"})) is None
    assert list(policy.blocks) == ["a3", "a1"] and list(policy.safe) == ["a3"]


def test_negative_options_are_refused() -> None:
    with pytest.raises(ValueError) as caught:
        TLRUPolicy(8, threshold=-1)
    assert str(caught.value) == (
        "tlru: threshold=-1 and next_prompt=64 are token counts; neither may be negative"
    )


def test_on_the_real_gpu_tier_both_tails_go_before_the_older_head() -> None:
    """Through kvframe's KVCacheManager (``--gpu-eviction``): requests a, then b, each
    release a 4-block chain of 16 tokens; a 16-token request then needs 4 of the 8
    cached blocks. LRU evicts the whole of a (released first); T-LRU with B = 16 - 8
    = 8 tokens evicts blocks 2 and 3 of both, and both conversations keep their head."""
    from kvframe_lru import LRUPolicy

    assert _kept(LRUPolicy) == {"a": [], "b": [0, 1, 2, 3]}
    assert _kept(lambda capacity: TLRUPolicy(capacity, threshold=8, next_prompt=0)) == {
        "a": [0, 1],
        "b": [0, 1],
    }


def _kept(make) -> dict[str, list[int]]:
    """The blocks (index in their request) of a's and b's chains still cached after c."""
    from kvframe.core.hashing import make_block_hasher
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.domain.request import Request

    kv = KVCacheManager(num_gpu_blocks=9, block_size=4, max_model_len=64, eviction_policy=make(9))
    hasher = make_block_hasher(4, 0)
    chains = {}
    for name, base in (("a", 100), ("b", 200), ("c", 900)):
        r = Request(name, list(range(base, base + 16)), 1, block_hasher=hasher)
        assert kv.allocate_slots(r, 16) is not None
        if name != "c":
            chains[name] = list(r.block_hashes)
            kv.free(r)
    cached = kv.block_pool.cached_block_hash_to_block
    return {
        name: [i for i, h in enumerate(hashes) if h in cached] for name, hashes in chains.items()
    }
