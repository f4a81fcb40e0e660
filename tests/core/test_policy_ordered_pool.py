"""The policy-ordered block pool (GPU-tier eviction through an EvictionPolicy)."""

from __future__ import annotations

import random

import pytest

from kvframe.contract.records import BlockRemoved
from kvframe.core.block_pool import BlockPool, PolicyOrderedBlockPool
from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request

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


def test_policy_holds_idle_content_keyed_by_hash(lru_policy_cls: type) -> None:
    policy = RecordingPolicy(lru_policy_cls(5))
    pool = BlockPool(5, eviction_policy=policy)  # type: ignore[arg-type]
    a = req("a", list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(a, blocks, 0, 2, BS)
    assert policy.calls == []  # caching an in-use block: nothing to evict yet
    keys = a.block_hashes[:2]
    pool.free_blocks(reversed(blocks))
    # Idle now: inserted in release order (tail first = evicted first).
    assert policy.calls == [("insert", keys[1]), ("insert", keys[0])]
    assert pool.get_num_free_blocks() == 4
    assert list(pool.evictable) == [keys[1], keys[0]]
    policy.calls.clear()
    pool.touch(blocks)  # a prefix hit takes both out of the policy ...
    assert policy.calls == [("remove", keys[0]), ("remove", keys[1])]
    assert not policy.inner.entries and pool.num_evictable_cached_blocks == 0
    assert pool.get_num_free_blocks() == 2
    policy.calls.clear()
    pool.touch(blocks[:1])  # ... a second sharer changes nothing for the policy
    pool.free_blocks(reversed(blocks))
    # Block 2 is idle again: inserted, then touched (a hit used it since).
    assert policy.calls == [("insert", keys[1]), ("touch", [keys[1]])]
    policy.calls.clear()
    pool.free_blocks(blocks[:1])
    assert policy.calls == [("insert", keys[0]), ("touch", [keys[0]])]
    assert pool.get_num_free_blocks() == 4
    policy.calls.clear()
    # Two uncached blocks are free: they go first, without asking the policy.
    assert [b.block_id for b in pool.get_new_blocks(2)] == [3, 4]
    assert policy.calls == []
    # The next must be evicted: block 2 became idle before block 1.
    assert pool.get_new_blocks(1) == [blocks[1]]
    assert policy.calls == [("evict", 1)]
    assert blocks[1].block_hash is None and pool.num_cached_blocks == 1
    assert list(pool.evictable) == [keys[0]]
    pool.get_new_blocks(1)
    with pytest.raises(ValueError):
        pool.get_new_blocks(1)


def test_in_use_blocks_are_never_in_the_policy(lru_policy_cls: type) -> None:
    """What the policy holds is what it may evict: ``evict`` never skips a block."""
    policy = lru_policy_cls(8)
    manager = KVCacheManager(8, BS, 4096, eviction_policy=policy)
    a = req("a", list(range(4 * BS)))
    hits, num_hit = manager.get_computed_blocks(a)
    manager.allocate_slots(a, a.num_tokens, num_hit, hits)
    manager.free(a)
    assert len(policy.entries) == 4
    b = req("b", list(range(2 * BS)) + [7] * BS)
    hits, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 2 * BS
    manager.allocate_slots(b, b.num_tokens - num_hit, num_hit, hits)
    assert set(policy.entries) == set(a.block_hashes[2:4])  # b's hits left the policy
    assert all(block.ref_cnt == 0 for block in policy.entries.values())


def test_admission_touches_the_missed_hashes_only(lru_policy_cls: type) -> None:
    policy = RecordingPolicy(lru_policy_cls(8))
    manager = KVCacheManager(8, BS, 4096, eviction_policy=policy)  # type: ignore[arg-type]
    a = req("a", list(range(2 * BS)))
    hits, num_hit = manager.get_computed_blocks(a)
    manager.allocate_slots(a, a.num_tokens, num_hit, hits)
    assert policy.calls == [("touch", a.block_hashes[:2])]  # everything missed
    manager.free(a)
    policy.calls.clear()
    b = req("b", [*list(range(3 * BS)), 1])
    hits, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 2 * BS
    assert manager.allocate_slots(b, b.num_tokens - num_hit, num_hit, hits) is not None
    # The hits are removed (now in use), the one miss is touched first.
    assert policy.calls[0] == ("touch", [b.block_hashes[2]])
    assert sorted(c[0] for c in policy.calls[1:]) == ["remove", "remove"]
    policy.calls.clear()
    manager.allocate_slots(b, 1)  # a running request: no lookup to report
    assert policy.calls == []


def test_a_policy_that_fails_to_evict_is_named(lru_policy_cls: type) -> None:
    class Refusing(lru_policy_cls):  # type: ignore[misc, valid-type]
        def evict(self, n, protected):
            return None

    pool = BlockPool(3, eviction_policy=Refusing(3))
    a = req("a", list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(a, blocks, 0, 2, BS)
    pool.free_blocks(reversed(blocks))
    with pytest.raises(RuntimeError, match=r"Refusing\.evict\(1, frozenset\(\)\).*2 idle"):
        pool.get_new_blocks(1)
    assert pool.get_num_free_blocks() == 2 and pool.num_cached_blocks == 2  # nothing lost


def test_mixed_release_keeps_release_order(lru_policy_cls: type) -> None:
    """Hit blocks and new blocks released in one call are inserted in release order."""
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
    keys = b.block_hashes[:4]
    assert policy.calls == [
        ("insert", keys[3]),
        ("insert", keys[2]),
        ("insert", keys[1]),
        ("touch", [keys[1]]),
        ("insert", keys[0]),
        ("touch", [keys[0]]),
    ]
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


def test_a_duplicate_idle_block_is_keyed_by_hash_and_id(lru_policy_cls: type) -> None:
    """Two idle blocks with one content stay two entries, in release order."""
    policy = lru_policy_cls(6)
    pool = BlockPool(6, eviction_policy=policy, enable_kv_cache_events=True)
    a, b = req("a", list(range(4))), req("b", list(range(4)))
    (block_a,) = pool.get_new_blocks(1)
    (block_b,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [block_a], 0, 1, BS)
    pool.cache_full_blocks(b, [block_b], 0, 1, BS)
    pool.free_blocks([block_b])
    pool.free_blocks([block_a])
    content = a.block_hashes[0]
    assert list(policy.entries) == [content, (content, block_a.block_id)]
    pool.touch([block_a])  # a hit on the duplicate takes it out under its own key
    assert list(policy.entries) == [content]
    pool.free_blocks([block_a])
    pool.get_new_blocks(3)  # uncached 3, 4, 5
    pool.take_events()
    assert pool.get_new_blocks(1) == [block_b]  # released first, evicted first
    assert pool.get_cached_block(content) is block_a
    assert pool.take_events() == [BlockRemoved((content,))]


def test_evict_blocks_moves_free_block_to_the_queue(lru_policy_cls: type) -> None:
    policy = lru_policy_cls(6)
    pool = BlockPool(6, eviction_policy=policy)
    a = req("a", list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(a, blocks, 0, 2, BS)
    pool.free_blocks([blocks[1]])  # block 2 free & cached, block 1 in use
    assert list(policy.entries) == [a.block_hashes[1]]
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
