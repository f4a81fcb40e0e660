"""Real-trace prefix reuse: Mooncake hash ids -> tokens -> the KV cache manager.

``expand_hash_ids`` must turn equal hash ids into equal tokens and unequal ids
into unequal tokens; replaying the head of the Mooncake conversation trace
through the manager must then find the trace's prefix sharing, and a bigger
pool must never hit less (LRU is a stack algorithm).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request
from kvframe.workloads.mooncake_tokens import expand_hash_ids

TRACE = Path(__file__).resolve().parent / "data" / "mooncake_conversation_head300.jsonl"
BLOCK_SIZE = 16


# --------------------------------------------------------------- expansion


def test_expansion_length_and_truncation() -> None:
    assert len(expand_hash_ids([1, 2, 3], 1100)) == 1100
    assert expand_hash_ids([1, 2], 512) == expand_hash_ids([1], 512)
    assert expand_hash_ids([5], 0) == []
    assert expand_hash_ids([], 0) == []
    assert len(expand_hash_ids([7, 8], 3, block_tokens=2)) == 3


def test_equal_ids_give_equal_tokens() -> None:
    a = expand_hash_ids([0, 1, 2], 1500)
    b = expand_hash_ids([0, 1, 9], 1400)
    assert a[:1024] == b[:1024]
    assert a[1024:1400] != b[1024:1400]


def test_unequal_ids_differ_at_every_position() -> None:
    ids = list(range(200))
    tokens = [expand_hash_ids([i], 512) for i in ids]
    for position in range(0, 512, 37):
        column = [t[position] for t in tokens]
        assert len(set(column)) == len(column)
    # ... so every 16-token block of different ids hashes differently.
    hasher = make_block_hasher(BLOCK_SIZE)
    first_blocks = {
        Request(str(i), t, 1, block_hasher=hasher).block_hashes[0] for i, t in enumerate(tokens)
    }
    assert len(first_blocks) == len(ids)


def test_expansion_is_deterministic_and_fits_the_hasher() -> None:
    tokens = expand_hash_ids([182_789, 3], 600)
    assert tokens == expand_hash_ids([182_789, 3], 600)
    assert max(tokens) < 2**32
    hasher = make_block_hasher(BLOCK_SIZE)
    assert len(Request("r", tokens, 1, block_hasher=hasher).block_hashes) == 600 // BLOCK_SIZE


@pytest.mark.parametrize(
    ("hash_ids", "length"),
    [([1], 513), ([1], -1), ([-3], 10)],
    ids=["too-long", "negative", "bad-id"],
)
def test_expansion_rejects_bad_input(hash_ids: list[int], length: int) -> None:
    with pytest.raises(ValueError):
        expand_hash_ids(hash_ids, length)


# --------------------------------------------------------------- replay


def load_requests(num: int) -> list[Request]:
    hasher = make_block_hasher(BLOCK_SIZE)
    requests = []
    with TRACE.open() as lines:
        for i, line in zip(range(num), lines, strict=False):
            record = json.loads(line)
            tokens = expand_hash_ids(record["hash_ids"], record["input_length"])
            requests.append(Request(f"m{i}", tokens, record["output_length"], block_hasher=hasher))
    return requests


def replay(requests: list[Request], num_gpu_blocks: int) -> tuple[int, int, int]:
    """Prompt-only replay: look up, allocate the prompt, free. Returns (hits, queries, refused)."""
    manager = KVCacheManager(num_gpu_blocks, BLOCK_SIZE, max_model_len=1 << 20)
    hits = queries = refused = 0
    for request in requests:
        blocks, num_hit = manager.get_computed_blocks(request)
        queries += request.num_tokens
        new = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, blocks)
        if new is None:
            refused += 1
            continue
        hits += num_hit
        manager.free(request)
        assert manager.num_free_blocks == num_gpu_blocks - 1
    return hits, queries, refused


@pytest.fixture(scope="module")
def trace_requests() -> list[Request]:
    return load_requests(150)


def expected_unbounded_hits(num: int) -> int:
    """Hit tokens an unbounded cache must find, computed from the hash ids alone.

    The tokens of 16-token block ``b`` are fixed by the ids up to the one
    covering it, so ``(ids[: b * 16 // 512 + 1], b)`` identifies its content
    and chained hash. A request hits its leading blocks whose identity an
    earlier request had as a *full* block, capped at ``(length - 1) // 16``.
    """
    seen: set[tuple[tuple[int, ...], int]] = set()
    total = 0
    with TRACE.open() as lines:
        for _, line in zip(range(num), lines, strict=False):
            record = json.loads(line)
            ids, length = tuple(record["hash_ids"]), record["input_length"]

            def identity(b: int, ids: tuple[int, ...] = ids) -> tuple[tuple[int, ...], int]:
                return ids[: b * BLOCK_SIZE // 512 + 1], b

            hit = 0
            while hit < (length - 1) // BLOCK_SIZE and identity(hit) in seen:
                hit += 1
            total += hit * BLOCK_SIZE
            seen.update(identity(b) for b in range(length // BLOCK_SIZE))
    return total


def test_replay_finds_exactly_the_traces_prefix_sharing(trace_requests: list[Request]) -> None:
    hits, queries, refused = replay(trace_requests, 1 << 18)  # never evicts
    assert refused == 0
    assert hits == expected_unbounded_hits(len(trace_requests))
    assert hits / queries > 0.03  # the head of the trace shares little; later parts more


def test_hit_rate_is_monotone_in_pool_size(trace_requests: list[Request]) -> None:
    rates = []
    for num_blocks in (1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 18):
        hits, queries, _ = replay(trace_requests, num_blocks)
        rates.append(hits / queries)
    assert rates == sorted(rates), rates
    assert rates[0] < rates[-1]
