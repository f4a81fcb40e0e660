"""The policy-ordered block pool (GPU-tier eviction through an EvictionPolicy)."""

from __future__ import annotations

import random

import pytest

from kvframe.core.block_pool import BlockPool, PolicyOrderedBlockPool
from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.events import BlockRemoved
from kvframe.request import Request

BS = 4
HASHER = make_block_hasher(BS)


def req(rid: str, tokens: list[int]) -> Request:
    return Request(rid, tokens, 4, block_hasher=HASHER)


class RecordingPolicy:
    """Wraps a policy and records the calls the pool makes."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple] = []

    def get(self, key):
        return self.inner.get(key)

    def insert(self, key, block):
        self.calls.append(("insert", key))
        self.inner.insert(key, block)

    def remove(self, key):
        self.calls.append(("remove", key))
        self.inner.remove(key)

    def touch(self, keys):
        keys = list(keys)
        self.calls.append(("touch", keys))
        self.inner.touch(keys)

    def evict(self, n, protected):
        self.calls.append(("evict", n))
        return self.inner.evict(n, protected)


def test_constructor_picks_the_policy_pool(lru_policy_cls: type) -> None:
    pool = BlockPool(8, eviction_policy=lru_policy_cls(8))
    assert type(pool) is PolicyOrderedBlockPool
    assert pool.get_num_free_blocks() == 7
    with pytest.raises(ValueError):
        PolicyOrderedBlockPool(8)


def test_policy_sees_each_release_as_one_use(lru_policy_cls: type) -> None:
    policy = RecordingPolicy(lru_policy_cls(5))
    pool = BlockPool(5, eviction_policy=policy)  # type: ignore[arg-type]
    a = req("a", list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(a, blocks, 0, 2, BS)
    assert policy.calls == []  # caching alone is not a use yet
    keys = [(a.block_hashes[i], blocks[i].block_id) for i in range(2)]
    pool.free_blocks(reversed(blocks))
    # First release: inserted in release order (tail first = evicted first).
    assert policy.calls == [("insert", keys[1]), ("insert", keys[0])]
    assert pool.get_num_free_blocks() == 4
    assert pool.num_evictable_cached_blocks == 2
    policy.calls.clear()
    pool.touch(blocks)  # a prefix hit: not reported ...
    assert policy.calls == []
    assert pool.get_num_free_blocks() == 2
    pool.touch(blocks[:1])  # ... nor a second sharer
    pool.free_blocks(reversed(blocks))  # ... the releases are, head most important
    assert policy.calls == [("touch", keys)]
    assert pool.num_evictable_cached_blocks == 1  # block 1 is still shared
    policy.calls.clear()
    pool.free_blocks(blocks[:1])
    assert policy.calls == [("touch", keys[:1])]
    assert pool.get_num_free_blocks() == 4
    policy.calls.clear()
    # Two uncached blocks are free: they go first, without asking the policy.
    assert [b.block_id for b in pool.get_new_blocks(2)] == [3, 4]
    assert policy.calls == []
    # The next must be evicted: block 2 was released before block 1.
    assert pool.get_new_blocks(1) == [blocks[1]]
    assert policy.calls == [("evict", 1)]
    assert blocks[1].block_hash is None and pool.num_cached_blocks == 1
    assert pool.tracked_block_ids == {blocks[0].block_id}
    pool.get_new_blocks(1)
    with pytest.raises(ValueError):
        pool.get_new_blocks(1)


def test_mixed_release_keeps_release_order(lru_policy_cls: type) -> None:
    """Hit blocks (touched) and new blocks (inserted) released in one call."""
    policy = RecordingPolicy(lru_policy_cls(8))
    pool = BlockPool(8, eviction_policy=policy)  # type: ignore[arg-type]
    a = req("a", list(range(8)))
    first = pool.get_new_blocks(2)
    pool.cache_full_blocks(a, first, 0, 2, BS)
    pool.free_blocks(reversed(first))
    b = req("b", list(range(16)))
    pool.touch(first)  # b hits a's two blocks, then computes two more
    table = [*first, *pool.get_new_blocks(2)]
    pool.cache_full_blocks(b, table, 2, 4, BS)
    policy.calls.clear()
    pool.free_blocks(reversed(table))
    keys = [(b.block_hashes[i], table[i].block_id) for i in range(4)]
    assert policy.calls == [("insert", keys[3]), ("insert", keys[2]), ("touch", keys[:2])]
    evicted = [blk.block_id for blk in pool.get_new_blocks(7)[3:]]  # 3 uncached first
    assert evicted == [table[3].block_id, table[2].block_id, table[1].block_id, table[0].block_id]


def test_uncached_free_blocks_are_used_before_evicting(lru_policy_cls: type) -> None:
    """The documented difference from the default pool."""
    default = BlockPool(6)
    ordered = BlockPool(6, eviction_policy=lru_policy_cls(6))
    for pool in (default, ordered):
        a = req("a", list(range(9)))  # 2 full blocks + 1 partial
        blocks = pool.get_new_blocks(3)
        pool.cache_full_blocks(a, blocks, 0, 2, BS)
        pool.free_blocks(reversed(blocks))  # queue: 4, 5, 3(partial), 2, 1
        pool.get_new_blocks(3)  # takes 4, 5, 3
    # Default LRU: the next block is the head of its queue, cached block 2.
    assert [b.block_id for b in default.get_new_blocks(1)] == [2]
    assert default.num_cached_blocks == 1
    # Same here: nothing uncached is left, so the policy evicts the tail block 2.
    assert [b.block_id for b in ordered.get_new_blocks(1)] == [2]
    # But with an uncached block free again, the policy pool prefers it.
    default2 = BlockPool(6)
    ordered2 = BlockPool(6, eviction_policy=lru_policy_cls(6))
    for pool in (default2, ordered2):
        a = req("a", list(range(8)))
        cached_blocks = pool.get_new_blocks(2)
        pool.cache_full_blocks(a, cached_blocks, 0, 2, BS)
        pool.free_blocks(reversed(cached_blocks))  # cached 2, 1 at the queue's tail
        pool.get_new_blocks(3)  # never-used 3, 4, 5
        pool.free_blocks([pool.blocks[3]])  # an uncached block is free again
    assert [b.block_id for b in default2.get_new_blocks(1)] == [2]  # evicts a cached block
    assert [b.block_id for b in ordered2.get_new_blocks(1)] == [3]  # keeps the cache


def test_duplicate_hash_blocks_are_distinct_policy_keys(lru_policy_cls: type) -> None:
    policy = lru_policy_cls(6)
    pool = BlockPool(6, eviction_policy=policy, enable_kv_cache_events=True)
    a, b = req("a", list(range(4))), req("b", list(range(4)))
    (block_a,) = pool.get_new_blocks(1)
    (block_b,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [block_a], 0, 1, BS)
    pool.cache_full_blocks(b, [block_b], 0, 1, BS)
    pool.free_blocks([block_b])
    pool.free_blocks([block_a])
    assert list(policy.entries) == [(a.block_hashes[0], 2), (a.block_hashes[0], 1)]
    pool.get_new_blocks(3)  # uncached 3, 4, 5
    pool.take_events()
    assert pool.get_new_blocks(1) == [block_b]  # released first, evicted first
    assert pool.get_cached_block(a.block_hashes[0]) is block_a
    assert pool.take_events() == [BlockRemoved((a.block_hashes[0],))]


def test_evict_blocks_moves_free_block_to_the_queue(lru_policy_cls: type) -> None:
    policy = lru_policy_cls(6)
    pool = BlockPool(6, eviction_policy=policy)
    a = req("a", list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(a, blocks, 0, 2, BS)
    pool.free_blocks([blocks[1]])  # block 2 free & cached, block 1 in use
    pool.evict_blocks([1, 2])
    assert not policy.entries
    assert pool.num_evictable_cached_blocks == 0
    assert pool.free_block_queue.get_all_free_blocks()[-1] is blocks[1]
    assert pool.get_num_free_blocks() == 4 and blocks[0].ref_cnt == 1


def test_reset_prefix_cache_returns_cached_blocks_to_the_queue(lru_policy_cls: type) -> None:
    policy = lru_policy_cls(6)
    pool = BlockPool(6, eviction_policy=policy)
    a = req("a", list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(a, blocks, 0, 2, BS)
    assert pool.reset_prefix_cache() is False
    pool.free_blocks(reversed(blocks))
    assert pool.reset_prefix_cache() is True
    assert not policy.entries and pool.num_cached_blocks == 0
    order = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
    assert order == [3, 4, 5, 2, 1]  # uncached first, then the LRU order
    assert pool.get_num_free_blocks() == 5


def _aligned_workload(seed: int, num_requests: int) -> list[tuple[str, list[int], int]]:
    """Block-aligned prompts over shared prefixes, with random lifetimes.

    Every block a request frees is full (hence cached), which is when the
    default pool's LRU and the policy pool coincide: the free queue never
    holds an uncached block behind a cached one.
    """
    rng = random.Random(seed)
    documents = [[d * 1000 + i for i in range(20 * BS)] for d in range(4)]
    workload = []
    for i in range(num_requests):
        doc = rng.choice(documents)
        num_blocks = rng.randint(1, 8)
        tokens = doc[: num_blocks * BS]
        if rng.random() < 0.5:  # a private tail of whole blocks
            tokens = tokens + [50_000 + i * 100 + j for j in range(rng.randint(1, 3) * BS)]
        workload.append((f"r{i}", tokens, rng.randint(1, 4)))
    return workload


def _replay(manager: KVCacheManager, workload: list[tuple[str, list[int], int]]) -> list[object]:
    """Admit requests, keep a few alive, free the oldest; record every decision."""
    trace: list[object] = []
    live: list[tuple[Request, int]] = []
    for rid, tokens, lifetime in workload:
        request = req(rid, tokens)
        hits, num_hit = manager.get_computed_blocks(request)
        new = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, hits)
        trace.append((rid, num_hit, None if new is None else [b.block_id for b in new]))
        if new is not None:
            live.append((request, lifetime))
        trace.append(manager.num_free_blocks)
        next_live = []
        for other, remaining in live:
            if remaining <= 1:
                manager.free(other)
            else:
                next_live.append((other, remaining - 1))
        live = next_live
        trace.append(
            [(type(e).__name__, getattr(e, "block_hashes", ())) for e in manager.take_events()]
        )
    return trace


@pytest.mark.parametrize("seed", range(4))
def test_lru_policy_pool_evicts_exactly_like_the_default_pool(
    lru_policy_cls: type, seed: int
) -> None:
    workload = _aligned_workload(seed, 300)
    default = KVCacheManager(41, BS, 4096, enable_kv_cache_events=True)
    ordered = KVCacheManager(
        41, BS, 4096, enable_kv_cache_events=True, eviction_policy=lru_policy_cls(41)
    )
    assert type(ordered.block_pool) is PolicyOrderedBlockPool
    default_trace = _replay(default, workload)
    assert default_trace == _replay(ordered, workload)
    # The workload really exercised eviction and hits.
    removed = sum(
        len(h)
        for step in default_trace
        if isinstance(step, list)
        for n, h in step
        if n == "BlockRemoved"
    )
    assert removed > 50
    assert default.make_prefix_cache_stats().hits > 0
