"""The routers' prefix indexes: Dynamo's RadixTree and ApproxKvIndexer, on chained hashes."""

from __future__ import annotations

import random

import pytest

import kvframe
from kvframe import AllBlocksCleared, ApproxPrefixIndex, BlockRemoved, BlockStored, KVPrefixIndex

H = [bytes([i]) * 8 for i in range(10)]


def naive_overlaps(held: list[set[bytes]], hashes: list[bytes]) -> list[int]:
    out = []
    for blocks in held:
        k = 0
        while k < len(hashes) and hashes[k] in blocks:
            k += 1
        out.append(k)
    return out


def test_overlap_is_the_longest_held_prefix_per_replica():
    index = KVPrefixIndex(3)
    index.apply(0, BlockStored(tuple(H[:4]), None, 16))
    index.apply(1, BlockStored(tuple(H[:2]), None, 16))
    index.apply(1, BlockStored((H[3],), H[2], 16))  # a gap: block 2 missing
    assert index.overlaps(H[:5]) == [4, 2, 0]
    assert [index.size(r) for r in range(3)] == [4, 3, 0]


def test_removal_and_clear_forget_blocks_without_reference_counts():
    index = KVPrefixIndex(2)
    index.apply(0, BlockStored(tuple(H[:3]), None, 16))
    index.apply(0, BlockStored((H[1],), H[0], 16))  # stored twice ...
    index.apply(0, BlockRemoved((H[1],)))  # ... removed once: gone (Dynamo's RadixTree)
    assert index.overlaps(H[:3]) == [1, 0]
    index.apply(1, BlockStored(tuple(H[:3]), None, 16))
    index.apply(1, AllBlocksCleared())
    assert index.overlaps(H[:3]) == [1, 0] and index.size(1) == 0


def test_other_media_are_ignored_unless_asked_for():
    stored = BlockStored(tuple(H[:2]), None, 16, medium="CPU")
    gpu_only, both = KVPrefixIndex(1), KVPrefixIndex(1, media=("GPU", "CPU"))
    gpu_only.apply(0, stored)
    both.apply(0, stored)
    assert gpu_only.overlaps(H[:2]) == [0] and both.overlaps(H[:2]) == [2]


def test_matches_a_set_per_replica_on_random_events():
    rng = random.Random(7)
    n = 5
    index, model = KVPrefixIndex(n), [set() for _ in range(n)]
    for _ in range(2000):
        r = rng.randrange(n)
        blocks = tuple(rng.sample(H, rng.randrange(1, 4)))
        if rng.random() < 0.6:
            index.apply(r, BlockStored(blocks, None, 16))
            model[r].update(blocks)
        elif rng.random() < 0.95:
            index.apply(r, BlockRemoved(blocks))
            model[r].difference_update(blocks)
        else:
            index.apply(r, AllBlocksCleared())
            model[r].clear()
        query = H[: rng.randrange(len(H) + 1)]
        assert index.overlaps(query) == naive_overlaps(model, query)
        assert [index.size(i) for i in range(n)] == [len(m) for m in model]


def test_approx_index_expires_a_routed_block_ttl_after_its_last_routing():
    index = ApproxPrefixIndex(2, ttl=10.0)
    index.record(1, H[:3], now=0.0)
    index.record(1, H[:1], now=5.0)  # renews block 0 only
    assert index.overlaps(H[:3], now=9.0) == [0, 3]
    assert index.overlaps(H[:3], now=10.0) == [0, 1]
    assert index.overlaps(H[:3], now=15.0) == [0, 0] and index.size(1) == 0


def test_bad_arguments_are_refused_naming_the_problem():
    with pytest.raises(ValueError, match="num_replicas must be >= 1"):
        KVPrefixIndex(0)
    with pytest.raises(ValueError, match="ttl must be > 0"):
        ApproxPrefixIndex(2, ttl=0)
    with pytest.raises(ValueError, match=r"replica 3 outside 0\.\.1"):
        KVPrefixIndex(2).apply(3, BlockStored((H[0],), None, 16))


def test_the_indexes_are_plugin_authors_names():
    assert kvframe.KVPrefixIndex is KVPrefixIndex and "ApproxPrefixIndex" in kvframe.__all__


@pytest.mark.parametrize("seed", range(4))
def test_apply_all_builds_the_index_that_applying_each_event_builds(seed: int) -> None:
    rng = random.Random(seed)
    one, batched = KVPrefixIndex(3), KVPrefixIndex(3)
    for _ in range(60):
        replica = rng.randrange(3)
        events: list[kvframe.KVEvent] = []
        for _ in range(rng.randrange(1, 12)):
            roll = rng.random()
            picked = tuple(rng.sample(H, rng.randrange(1, 4)))
            if roll < 0.45:
                events.append(BlockStored(picked, None, 16, medium=rng.choice(["GPU", "CPU"])))
            elif roll < 0.95:
                events.append(BlockRemoved(picked, medium=rng.choice(["GPU", "GPU", "CPU"])))
            else:
                events.append(AllBlocksCleared())
        for event in events:
            one.apply(replica, event)
        batched.apply_all(replica, events)
        assert [batched.size(r) for r in range(3)] == [one.size(r) for r in range(3)]
        probe = rng.sample(H, 6)
        assert batched.overlaps(probe) == one.overlaps(probe)
    assert batched._owners == one._owners  # the masks themselves, not only what they answer
    with pytest.raises(ValueError, match="replica 5 outside"):
        batched.apply_all(5, [BlockRemoved((H[0],))])
