"""KVCacheManager: prefix hits, the three allocation phases, caching rules, free order."""

from __future__ import annotations

import pytest

from kvframe.contract.records import BlockStored
from kvframe.core.block_pool import KVCacheBlock
from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request

BS = 4
HASHER = make_block_hasher(BS)


def req(rid: str, tokens: list[int], max_tokens: int = 16, **kwargs: object) -> Request:
    return Request(rid, tokens, max_tokens, block_hasher=HASHER, **kwargs)  # type: ignore[arg-type]


def manager(num_blocks: int = 17, max_model_len: int = 1024, **kwargs: object) -> KVCacheManager:
    return KVCacheManager(num_blocks, BS, max_model_len, **kwargs)  # type: ignore[arg-type]


def admit(m: KVCacheManager, r: Request, chunk: int | None = None) -> list[KVCacheBlock] | None:
    """What the scheduler does for a waiting request: look up, allocate, advance."""
    hits, num_hit = m.get_computed_blocks(r)
    num_new = r.num_tokens - num_hit if chunk is None else chunk
    new = m.allocate_slots(r, num_new, num_hit, hits)
    if new is not None:
        r.num_computed_tokens = num_hit + num_new
    return new


def cached(blocks: list[KVCacheBlock]) -> list[bool]:
    return [b.block_hash is not None for b in blocks]


# ------------------------------------------------------------- prefix lookups


def test_prefill_allocates_cdiv_blocks_and_caches_full_ones() -> None:
    m = manager()
    r = req("a", list(range(10)))
    new = admit(m, r)
    assert new is not None and len(new) == 3
    assert m.get_block_ids("a") == [1, 2, 3]
    assert cached(m.get_blocks("a")) == [True, True, False]
    assert m.num_free_blocks == 13
    assert m.num_cached_blocks == 2


def test_hit_stops_at_first_miss() -> None:
    m = manager()
    a = req("a", [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 9])
    admit(m, a)
    b = req("b", [1, 1, 1, 1, 2, 2, 2, 2, 7, 7, 7, 7, 3, 3, 3, 3, 9])
    hits, num_hit = m.get_computed_blocks(b)
    assert num_hit == 8
    assert hits == m.get_blocks("a")[:2]


def test_all_hit_prompt_recomputes_last_token_block() -> None:
    m = manager()
    admit(m, req("a", list(range(8))))
    # Exactly two full blocks cached; an identical prompt may hit only one:
    # at most num_tokens - 1 = 7 tokens, rounded down to whole blocks.
    hits, num_hit = m.get_computed_blocks(req("b", list(range(8))))
    assert (len(hits), num_hit) == (1, 4)
    # One token more and both blocks may hit.
    admit(m, req("c", list(range(9))))
    hits, num_hit = m.get_computed_blocks(req("d", list(range(9))))
    assert (len(hits), num_hit) == (2, 8)


def test_shared_prefix_is_shared_not_copied() -> None:
    m = manager()
    a = req("a", list(range(9)))
    admit(m, a)
    b = req("b", list(range(9)))
    new = admit(m, b)
    assert new is not None and len(new) == 1  # only the partial last block
    assert m.get_block_ids("b")[:2] == m.get_block_ids("a")[:2]
    assert [blk.ref_cnt for blk in m.get_blocks("b")] == [2, 2, 1]
    assert m.num_free_blocks == 16 - 4


def test_duplicate_full_block_is_cached_again_not_deduplicated() -> None:
    m = manager()
    admit(m, req("a", list(range(8))))
    b = req("b", list(range(8)))
    admit(m, b)  # hits block 0, recomputes block 1 into a new block
    blocks_a, blocks_b = m.get_blocks("a"), m.get_blocks("b")
    assert blocks_b[1] is not blocks_a[1]
    assert blocks_b[1].block_hash == blocks_a[1].block_hash
    assert m.num_cached_blocks == 3


def test_lookup_skipped_when_caching_off_or_request_opts_out() -> None:
    off = manager(enable_caching=False)
    r = req("a", list(range(9)))
    admit(off, r)
    assert off.num_cached_blocks == 0 and not any(cached(off.get_blocks("a")))
    assert off.get_computed_blocks(req("b", list(range(9)))) == ([], 0)
    assert off.make_prefix_cache_stats().requests == 0

    on = manager()
    admit(on, req("a", list(range(9))))
    opt_out = req("b", list(range(9)), skip_reading_prefix_cache=True)
    assert on.get_computed_blocks(opt_out) == ([], 0)
    stats = on.make_prefix_cache_stats()
    assert (stats.requests, stats.queries, stats.hits) == (1, 9, 0)


def test_prefix_cache_stats_and_reset_of_counters() -> None:
    m = manager()
    admit(m, req("a", list(range(9))))
    admit(m, req("b", list(range(9))))
    resumed = req("c", list(range(9)))
    resumed.num_preemptions = 1
    m.get_computed_blocks(resumed)
    stats = m.make_prefix_cache_stats()
    assert (stats.requests, stats.queries, stats.hits) == (2, 18, 8)
    assert (stats.preempted_requests, stats.preempted_queries, stats.preempted_hits) == (1, 9, 8)
    assert stats.hit_rate == pytest.approx(8 / 18)
    fresh = m.make_prefix_cache_stats()
    assert (fresh.requests, fresh.queries, fresh.hits, fresh.reset) == (0, 0, 0, False)


def test_use_eagle_gives_up_the_last_hit_block() -> None:
    m = manager(use_eagle=True)
    admit(m, req("a", list(range(13))))
    hits, num_hit = m.get_computed_blocks(req("b", list(range(13))))
    assert (len(hits), num_hit) == (2, 8)


# ------------------------------------------------------------------ allocation


def test_zero_new_tokens_without_external_tokens_is_an_error() -> None:
    m = manager()
    with pytest.raises(ValueError):
        m.allocate_slots(req("a", [1, 2]), 0)


def test_chunked_prefill_then_decode() -> None:
    m = manager()
    r = req("a", list(range(10)))
    assert admit(m, r, chunk=3) is not None
    assert len(m.get_blocks("a")) == 1 and not any(cached(m.get_blocks("a")))
    new = m.allocate_slots(r, 5)  # tokens 3..7 -> two full blocks
    r.num_computed_tokens += 5
    assert new is not None and len(new) == 1
    assert cached(m.get_blocks("a")) == [True, True]
    new = m.allocate_slots(r, 2)
    r.num_computed_tokens += 2
    assert new is not None and len(new) == 1 and cached(m.get_blocks("a")) == [True, True, False]
    # Decode: each step computes the token sampled in the step before.
    r.append_output_token_ids(100)
    assert m.allocate_slots(r, 1) == []  # 11 slots fit in three blocks
    r.num_computed_tokens += 1
    assert cached(m.get_blocks("a")) == [True, True, False]
    r.append_output_token_ids(101)
    assert m.allocate_slots(r, 1) == []
    r.num_computed_tokens += 1
    assert cached(m.get_blocks("a")) == [True, True, True]  # block 2 just filled
    r.append_output_token_ids(102)
    new = m.allocate_slots(r, 1)
    r.num_computed_tokens += 1
    assert new is not None and len(new) == 1
    assert cached(m.get_blocks("a")) == [True, True, True, False]


def test_speculative_tokens_are_never_cached() -> None:
    m = manager()
    r = req("a", list(range(7)))
    admit(m, r)  # 7 tokens: one full block cached, second block partial
    r.append_output_token_ids(7)  # token 7 fills block 1 (not yet computed)
    r.spec_token_ids = [8, 9, 10, 11]  # drafts fill block 2
    new = m.allocate_slots(r, 1 + len(r.spec_token_ids))
    assert new is not None and len(new) == 1
    # Cached up to min(7 + 5, num_tokens = 8) tokens: block 1, not block 2.
    assert cached(m.get_blocks("a")) == [True, True, False]


def test_lookahead_slots_are_allocated_but_not_cached() -> None:
    m = manager()
    r = req("a", list(range(8)))
    new = m.allocate_slots(r, 8, num_lookahead_tokens=5)
    assert new is not None and len(new) == 4  # cdiv(13, 4)
    assert cached(m.get_blocks("a")) == [True, True, False, False]


def test_slots_are_capped_at_max_model_len() -> None:
    m = manager(max_model_len=10)
    r = req("a", list(range(8)))
    new = m.allocate_slots(r, 8, num_lookahead_tokens=8)
    assert new is not None and len(new) == 3  # cdiv(min(16, 10), 4)


def test_tokens_past_max_model_len_are_refused_by_name() -> None:
    m = manager(max_model_len=10)
    r = req("a", list(range(16)))
    with pytest.raises(ValueError, match=r"request 'a': 16 new tokens .* max_model_len=10"):
        m.allocate_slots(r, 16)
    assert m.get_blocks("a") == [] and m.num_free_blocks == 16  # nothing changed


def test_failed_allocation_changes_nothing() -> None:
    m = manager(num_blocks=4)  # 3 usable
    admit(m, req("a", list(range(8))))
    m.free(req("a", []))
    r = req("b", list(range(17)))
    hits, num_hit = m.get_computed_blocks(r)
    assert num_hit == 8
    before = [(blk.block_id, blk.ref_cnt, blk.block_hash) for blk in m.block_pool.blocks]
    assert m.allocate_slots(r, r.num_tokens - num_hit, num_hit, hits) is None
    assert [(blk.block_id, blk.ref_cnt, blk.block_hash) for blk in m.block_pool.blocks] == before
    assert "b" not in m.req_to_blocks and m.get_blocks("b") == []
    assert m.num_free_blocks == 3


def test_free_hit_blocks_count_against_free_space() -> None:
    # 4 usable blocks; a freed 3-block prompt stays cached in them.
    m = manager(num_blocks=5)
    admit(m, req("a", list(range(12))))
    m.free(req("a", []))
    assert m.num_free_blocks == 4
    # 13 tokens: 3 hit blocks (all evictable, so they use up free space) + 1 new.
    fits = req("b", list(range(13)))
    hits, num_hit = m.get_computed_blocks(fits)
    assert num_hit == 12 and all(blk.ref_cnt == 0 for blk in hits)
    assert m.allocate_slots(fits, 1, num_hit, hits) is not None
    assert m.num_free_blocks == 0
    m.free(fits)
    # 3 hits + 2 new blocks = 5 > 4 free: refused.
    too_big = req("c", list(range(20)))
    hits, num_hit = m.get_computed_blocks(too_big)
    assert num_hit == 12
    assert m.allocate_slots(too_big, too_big.num_tokens - num_hit, num_hit, hits) is None
    assert m.num_free_blocks == 4


def test_hit_blocks_in_use_do_not_count_against_free_space() -> None:
    m = manager(num_blocks=5)
    a = req("a", list(range(13)))
    admit(m, a)  # 4 blocks in use, 0 free
    assert m.num_free_blocks == 0
    b = req("b", [*range(12), 50])
    hits, num_hit = m.get_computed_blocks(b)
    assert num_hit == 12
    # The hits are in use (not free) and the last block is... still needed: refused.
    assert m.allocate_slots(b, 1, num_hit, hits) is None
    m.free(a)
    assert m.allocate_slots(b, 1, num_hit, hits) is not None


def test_free_releases_tail_first() -> None:
    m = manager(num_blocks=6)  # blocks 1..5
    r = req("a", list(range(12)))
    admit(m, r)  # blocks 1, 2, 3
    m.free(r)
    order = [blk.block_id for blk in m.block_pool.free_block_queue.get_all_free_blocks()]
    assert order == [4, 5, 3, 2, 1]
    assert m.get_blocks("a") == [] and m.get_block_ids("a") == []
    m.free(r)  # freeing again (or a request that never got blocks) is a no-op
    assert m.num_free_blocks == 5


def test_external_tokens_get_blocks_but_are_not_returned() -> None:
    m = manager()
    admit(m, req("a", list(range(8))))
    b = req("b", list(range(20)))
    hits, num_hit = m.get_computed_blocks(b)
    assert num_hit == 8
    # 6 more tokens come from a connector; 3 are computed now.
    new = m.allocate_slots(b, 3, num_hit, hits, num_external_computed_tokens=6)
    assert new is not None
    table = m.get_blocks("b")
    assert len(table) == 5  # cdiv(8 + 6 + 3, 4)
    assert table[:2] == hits
    assert new == table[4:]  # blocks 2, 3 (external) are not in the returned list
    assert cached(table) == [True, True, True, True, False]  # full up to 17 tokens


def test_delay_cache_blocks_then_cache_blocks() -> None:
    m = manager(enable_kv_cache_events=True)
    r = req("a", list(range(14)))
    # Asynchronous load of 12 external tokens: nothing computed this step.
    new = m.allocate_slots(r, 0, num_external_computed_tokens=12, delay_cache_blocks=True)
    assert new == []
    assert len(m.get_blocks("a")) == 3
    assert not any(cached(m.get_blocks("a")))
    assert m.take_events() == []
    # The load landed: the scheduler caches what it now has.
    r.num_computed_tokens = 12
    m.cache_blocks(r, r.num_computed_tokens)
    assert cached(m.get_blocks("a")) == [True, True, True]
    (event,) = m.take_events()
    assert isinstance(event, BlockStored) and event.block_hashes == tuple(r.block_hashes[:3])
    # Then the rest of the prompt is computed normally.
    new = m.allocate_slots(r, 2)
    assert new is not None and len(new) == 1


def test_cache_blocks_is_noop_without_caching() -> None:
    m = manager(enable_caching=False)
    r = req("a", list(range(8)))
    m.allocate_slots(r, 8)
    m.cache_blocks(r, 8)
    assert m.num_cached_blocks == 0


def test_can_fit_full_sequence() -> None:
    m = manager(num_blocks=5, max_model_len=64)  # 4 usable blocks
    r = req("a", list(range(10)), max_tokens=10)
    assert m.can_fit_full_sequence(r)  # 3 blocks for 10 tokens
    assert not m.can_fit_full_sequence(r, include_max_tokens=True)  # 20 tokens -> 5 blocks
    capped = manager(num_blocks=5, max_model_len=16)
    assert capped.can_fit_full_sequence(r, include_max_tokens=True)  # capped at 16 -> 4
    big = req("b", list(range(17)))
    assert not m.can_fit_full_sequence(big)
    # Evictable hits count as consumed space, like in allocate_slots.
    admit(m, req("c", list(range(12))))
    m.free(req("c", []))
    hits, num_hit = m.get_computed_blocks(big)
    assert m.can_fit_full_sequence(big, num_hit, hits[:3]) is False
    assert m.can_fit_full_sequence(req("d", list(range(16))), 12, hits[:3]) is True


def test_reset_prefix_cache_through_manager() -> None:
    m = manager()
    r = req("a", list(range(9)))
    admit(m, r)
    assert m.reset_prefix_cache() is False
    m.free(r)
    assert m.reset_prefix_cache() is True
    assert m.num_cached_blocks == 0
    assert m.make_prefix_cache_stats().reset is True
    assert m.get_computed_blocks(req("b", list(range(9)))) == ([], 0)


def test_usage_and_common_prefix_blocks() -> None:
    m = manager(num_blocks=11)
    a = req("a", list(range(9)))
    admit(m, a)
    assert m.usage == pytest.approx(0.3)
    b = req("b", [*range(8), 99])
    admit(m, b)
    assert m.get_num_common_prefix_blocks("a") == 2
    admit(m, req("c", [5] * 9))
    assert m.get_num_common_prefix_blocks("a") == 0


def test_preempted_request_is_readmitted_with_its_own_blocks() -> None:
    m = manager()
    r = req("a", list(range(10)))
    admit(m, r)
    r.append_output_token_ids([10, 11])
    m.allocate_slots(r, 1)
    r.num_computed_tokens += 1
    m.free(r)  # preemption frees everything ...
    r.num_computed_tokens = 0
    r.num_preemptions += 1
    hits, num_hit = m.get_computed_blocks(r)  # ... and the cache gives it back
    assert num_hit == 8
    assert m.allocate_slots(r, r.num_tokens - num_hit, num_hit, hits) is not None
    assert m.make_prefix_cache_stats().preempted_hits == 8
