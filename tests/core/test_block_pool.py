"""BlockPool: allocation, caching, touch, free order, eviction, reset, events."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.contract.records import AllBlocksCleared, BlockRemoved, BlockStored
from kvframe.core.block_pool import BlockHashToBlockMap, BlockPool, KVCacheBlock
from kvframe.core.hashing import make_block_hasher
from kvframe.domain.request import Request

BLOCK = 4


def request(rid: str, tokens: list[int]) -> Request:
    return Request(rid, tokens, 4, block_hasher=make_block_hasher(BLOCK))


def free_ids(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def test_null_block_is_block_zero_and_never_free() -> None:
    pool = BlockPool(5)
    assert pool.null_block is pool.blocks[0]
    assert pool.null_block.is_null
    assert 0 not in free_ids(pool)
    assert pool.get_num_free_blocks() == 4
    blocks = pool.get_new_blocks(4)
    assert pool.null_block not in blocks
    pool.free_blocks(blocks)
    assert 0 not in free_ids(pool)
    # Freeing or touching the null block never puts it in the queue.
    pool.touch([pool.null_block])
    pool.free_blocks([pool.null_block])
    assert 0 not in free_ids(pool)
    assert pool.get_num_free_blocks() == 4


def test_pool_with_only_the_null_block() -> None:
    pool = BlockPool(1)
    assert pool.get_num_free_blocks() == 0
    assert pool.get_usage() == 0.0
    assert pool.get_new_blocks(0) == []
    with pytest.raises(ValueError):
        pool.get_new_blocks(1)
    with pytest.raises(ValueError):
        BlockPool(0)


def test_get_new_blocks_sets_ref_cnt_and_usage() -> None:
    pool = BlockPool(11)
    blocks = pool.get_new_blocks(3)
    assert [b.block_id for b in blocks] == [1, 2, 3]
    assert all(b.ref_cnt == 1 for b in blocks)
    assert pool.get_num_free_blocks() == 7
    assert pool.get_usage() == pytest.approx(0.3)
    with pytest.raises(ValueError):
        pool.get_new_blocks(8)
    assert pool.get_num_free_blocks() == 7


def test_free_blocks_appends_in_given_order() -> None:
    pool = BlockPool(6)
    blocks = pool.get_new_blocks(3)  # 1, 2, 3
    pool.free_blocks(reversed(blocks))
    assert free_ids(pool) == [4, 5, 3, 2, 1]
    assert all(b.ref_cnt == 0 for b in blocks)


def test_freeing_shared_block_keeps_it_until_last_reference() -> None:
    pool = BlockPool(4)
    (block,) = pool.get_new_blocks(1)
    pool.touch([block])  # a second request shares it
    assert block.ref_cnt == 2
    pool.free_blocks([block])
    assert block.ref_cnt == 1 and block.block_id not in free_ids(pool)
    pool.free_blocks([block])
    assert block.ref_cnt == 0 and free_ids(pool)[-1] == block.block_id


def test_cache_full_blocks_and_lookup() -> None:
    pool = BlockPool(8, enable_kv_cache_events=True)
    req = request("a", list(range(10)))  # 2 full blocks
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(req, blocks, 0, 1, BLOCK)
    pool.cache_full_blocks(req, blocks, 1, 2, BLOCK)
    pool.cache_full_blocks(req, blocks, 2, 2, BLOCK)  # nothing new: no-op
    assert [b.block_hash for b in blocks] == [*req.block_hashes, None]
    assert pool.get_cached_block(req.block_hashes[0]) is blocks[0]
    assert pool.get_cached_block(req.block_hashes[1]) is blocks[1]
    assert pool.get_cached_block(b"missing") is None
    assert pool.num_cached_blocks == 2
    assert pool.take_events() == [
        BlockStored((req.block_hashes[0],), None, BLOCK),
        BlockStored((req.block_hashes[1],), req.block_hashes[0], BLOCK),
    ]
    assert pool.take_events() == []


def test_cache_full_blocks_without_hashes_raises() -> None:
    pool = BlockPool(4)
    unhashed = Request("u", list(range(8)), 1)
    blocks = pool.get_new_blocks(2)
    with pytest.raises(ValueError, match="block hasher"):
        pool.cache_full_blocks(unhashed, blocks, 0, 2, BLOCK)


def test_freed_cached_block_stays_findable_until_reused() -> None:
    pool = BlockPool(3, enable_kv_cache_events=True)  # blocks 1 and 2 usable
    req = request("a", list(range(4)))
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(req, [block], 0, 1, BLOCK)
    pool.free_blocks([block])
    assert pool.get_cached_block(req.block_hashes[0]) is block
    assert pool.get_num_free_blocks() == 2
    pool.take_events()
    # Block 2 is at the head, so it goes first; block 1 keeps its hash.
    assert pool.get_new_blocks(1)[0].block_id == 2
    assert pool.get_cached_block(req.block_hashes[0]) is block
    # Reusing block 1 drops its hash and reports it.
    assert pool.get_new_blocks(1) == [block]
    assert block.block_hash is None
    assert pool.get_cached_block(req.block_hashes[0]) is None
    assert pool.num_cached_blocks == 0
    assert pool.take_events() == [BlockRemoved((req.block_hashes[0],))]


def test_touch_revives_a_free_cached_block() -> None:
    pool = BlockPool(4)
    req = request("a", list(range(4)))
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(req, [block], 0, 1, BLOCK)
    pool.free_blocks([block])
    assert block.block_id in free_ids(pool)
    pool.touch([block])
    assert block.ref_cnt == 1
    assert block.block_id not in free_ids(pool)
    assert pool.get_num_free_blocks() == 2
    # Touching an in-use block only counts a reference.
    pool.touch([block])
    assert block.ref_cnt == 2 and pool.get_num_free_blocks() == 2


def test_hash_mapped_to_two_blocks() -> None:
    pool = BlockPool(8, enable_kv_cache_events=True)
    a = request("a", list(range(4)))
    b = request("b", list(range(4)))
    assert a.block_hashes == b.block_hashes
    (block_a,) = pool.get_new_blocks(1)
    (block_b,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [block_a], 0, 1, BLOCK)
    pool.cache_full_blocks(b, [block_b], 0, 1, BLOCK)  # not de-duplicated
    assert pool.num_cached_blocks == 2
    assert len(pool.cached_block_hash_to_block) == 1
    assert pool.cached_block_hash_to_block.get_all_blocks(a.block_hashes[0]) == [block_a, block_b]
    assert pool.get_cached_block(a.block_hashes[0]) is block_a  # the first one cached
    # Evict the first copy: the hash still resolves to the second.
    pool.free_blocks([block_a, block_b])
    pool.get_new_blocks(5)  # never-used blocks 3..7
    assert pool.get_new_blocks(1) == [block_a]
    assert pool.get_cached_block(a.block_hashes[0]) is block_b
    assert pool.num_cached_blocks == 1
    assert pool.get_new_blocks(1) == [block_b]
    assert pool.get_cached_block(a.block_hashes[0]) is None
    assert a.block_hashes[0] not in pool.cached_block_hash_to_block


def test_a_hash_repeated_within_one_range_is_cached_in_both_blocks() -> None:
    # Only a hasher that is not a chain repeats a hash inside one request; the
    # range is then cached block by block, as a hash shared by two requests is.
    def flat_hasher(req: Request) -> list[bytes]:
        return [b"h" * 16] * (req.num_tokens // BLOCK - len(req.block_hashes))

    pool = BlockPool(8)
    r = Request("r", list(range(2 * BLOCK)), 1, block_hasher=flat_hasher)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blocks, 0, 2, BLOCK)
    assert pool.num_cached_blocks == 2
    assert pool.cached_block_hash_to_block.get_all_blocks(b"h" * 16) == blocks
    assert pool.get_cached_block(b"h" * 16) is blocks[0]


def test_block_hash_map_pop_edge_cases() -> None:
    index = BlockHashToBlockMap()
    blocks = [KVCacheBlock(i) for i in range(4)]
    assert index.pop(b"h", 1) is None
    index.insert(b"h", blocks[1])
    assert index.pop(b"h", 2) is None  # other id: entry kept
    assert index.get_one_block(b"h") is blocks[1]
    for block in blocks[2:]:
        index.insert(b"h", block)
    assert index.get_all_blocks(b"h") == blocks[1:]
    assert index.pop(b"h", 9) is None
    assert index.pop(b"h", 2) is blocks[2]
    assert index.get_all_blocks(b"h") == [blocks[1], blocks[3]]
    assert index.pop(b"h", 1) is blocks[1]
    assert index.get_one_block(b"h") is blocks[3]
    assert index.pop(b"h", 3) is blocks[3]
    assert len(index) == 0 and b"h" not in index


def test_caching_disabled_pool_never_looks_at_hashes() -> None:
    pool = BlockPool(4, enable_caching=False)
    blocks = pool.get_new_blocks(3)
    assert all(b.ref_cnt == 1 and b.block_hash is None for b in blocks)
    pool.free_blocks(blocks)
    assert pool.get_num_free_blocks() == 3


def test_reset_prefix_cache_only_when_everything_is_free() -> None:
    pool = BlockPool(6, enable_kv_cache_events=True)
    req = request("a", list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, blocks, 0, 2, BLOCK)
    pool.take_events()
    assert pool.reset_prefix_cache() is False
    assert pool.num_cached_blocks == 2
    assert pool.take_events() == []
    pool.free_blocks(blocks)
    order_before = free_ids(pool)
    assert pool.reset_prefix_cache() is True
    assert pool.num_cached_blocks == 0
    assert all(b.block_hash is None for b in pool.blocks)
    assert pool.get_cached_block(req.block_hashes[0]) is None
    assert free_ids(pool) == order_before
    assert pool.take_events() == [AllBlocksCleared()]


def test_evict_blocks_drops_hashes_only() -> None:
    pool = BlockPool(6, enable_kv_cache_events=True)
    req = request("a", list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, blocks, 0, 2, BLOCK)
    pool.take_events()
    pool.evict_blocks([blocks[1].block_id, 4])  # 4 has no hash: ignored
    assert blocks[1].block_hash is None and blocks[1].ref_cnt == 1
    assert pool.get_cached_block(req.block_hashes[1]) is None
    assert pool.num_cached_blocks == 1
    assert pool.take_events() == [BlockRemoved((req.block_hashes[1],))]


def test_events_disabled_records_nothing() -> None:
    pool = BlockPool(4)
    req = request("a", list(range(4)))
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(req, [block], 0, 1, BLOCK)
    assert pool.kv_event_queue == []
    assert pool.take_events() == []


def test_default_pool_is_plain_block_pool() -> None:
    assert type(BlockPool(3)) is BlockPool


@pytest.mark.parametrize("miss_at", [None, 0, 1, 63, 64, 65, 130, 199])
def test_get_cached_prefix_stops_at_first_miss(miss_at: int | None) -> None:
    pool = BlockPool(256)
    req = request("a", list(range(200 * BLOCK)))
    blocks = pool.get_new_blocks(200)
    pool.cache_full_blocks(req, blocks, 0, 200, BLOCK)
    hashes = list(req.block_hashes)
    if miss_at is not None:
        hashes[miss_at] = b"not cached"
    expected = blocks if miss_at is None else blocks[:miss_at]
    assert pool.get_cached_prefix(hashes, 200) == expected
    assert pool.get_cached_prefix(hashes, 1000) == expected  # limit beyond the hashes
    assert pool.get_cached_prefix(hashes, 70) == expected[:70]
    assert pool.get_cached_prefix(hashes, 0) == []
    assert pool.get_cached_prefix(hashes, -1) == []


@settings(max_examples=60, deadline=None)
@given(
    lookups=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 150), st.integers(0, 160)),
        min_size=1,
        max_size=12,
    )
)
def test_repeated_prefix_lookups_hint_only_the_batch_size(lookups) -> None:
    """Looking the same hash list up again (the blocked queue head) gives what a
    plain walk to the first miss gives, whatever changed in the index since."""
    index = BlockHashToBlockMap()
    lists = [[bytes([n, i]) for i in range(150)] for n in range(3)]
    blocks = [KVCacheBlock(i) for i in range(150)]
    for which, cut, limit in lookups:
        hashes = lists[which]
        # Re-shape the index: the list's first `cut` hashes cached, the rest not.
        for i, block_hash in enumerate(hashes):
            if i < cut and block_hash not in index:
                index.insert(block_hash, blocks[i])
            elif i >= cut and block_hash in index:
                index.pop(block_hash, i)
        expected: list[KVCacheBlock] = []
        for block_hash in hashes[:limit]:
            block = index.get_one_block(block_hash)
            if block is None:
                break
            expected.append(block)
        assert index.get_prefix(hashes, limit) == expected


def test_get_cached_prefix_with_shared_hashes_returns_first_copy() -> None:
    pool = BlockPool(300)
    a = request("a", list(range(100 * BLOCK)))
    first = pool.get_new_blocks(100)
    pool.cache_full_blocks(a, first, 0, 100, BLOCK)
    second = pool.get_new_blocks(100)
    pool.cache_full_blocks(a, second, 0, 100, BLOCK)  # every hash now has two blocks
    index = pool.cached_block_hash_to_block
    assert index._num_shared == 100
    assert pool.get_cached_prefix(a.block_hashes, 100) == first
    pool.free_blocks(first)
    pool.get_new_blocks(99 + 99)  # the never-used blocks, then 99 first copies
    assert index._num_shared == 1  # 99 entries are back to the single-block form
    assert pool.get_cached_prefix(a.block_hashes, 100) == [*second[:99], first[99]]
