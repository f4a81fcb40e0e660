"""On the skewed workload (``kvframe gen skewed``) GPU-tier policies part, and ``lru`` is vLLM.

The workload is built for it (docs/workloads.md): Zipf-popular documents whose
working set is larger than the cache, mixed with one-use scans. The replay
drives kvframe's own KV cache manager -- the GPU tier -- with block-aligned
prompts (every block a request frees is full), where the default pool is
vLLM's LRU exactly. Checked:

* ``--gpu-eviction lru`` makes the same decisions as the default pool, step by
  step (hits, block ids, ``BlockRemoved`` victims): the ``on_hit`` path did not
  change what an LRU sees;
* ``lfu`` (which keeps its counts across prefix hits, ``on_hit``) and
  ``arc:variant=paper`` (frequency list and ghosts) hit more than ``lru`` and
  evict other blocks.
"""

from __future__ import annotations

import random

import pytest

from kvframe.contract.records import BlockRemoved
from kvframe.core.block_pool import PolicyOrderedBlockPool
from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request
from kvframe.workloads.skewed import generate_skewed

BS = 16
NUM_BLOCKS = 97  # 96 usable: the working set (16 documents x 8 blocks) does not fit
HASHER = make_block_hasher(BS)


def _workload(seed: int) -> list[tuple[str, list[int], int]]:
    specs = generate_skewed(
        num_requests=400,
        num_documents=16,
        document_length=8 * BS,
        user_prompt_length=BS,
        scan_length=12 * BS,
        scan_fraction=0.3,
        popularity=1.0,
        seed=seed,
    )
    lifetimes = random.Random(seed)
    return [(s.request_id, s.prompt.token_ids(), lifetimes.randint(1, 3)) for s in specs]


def _replay(manager: KVCacheManager, workload: list[tuple[str, list[int], int]]) -> dict:
    """Admit each request, keep it a few requests long, free it; record every decision."""
    steps: list[object] = []
    victims: list[object] = []
    hit_tokens = 0
    live: list[tuple[Request, int]] = []
    for rid, tokens, lifetime in workload:
        request = Request(rid, tokens, 1, block_hasher=HASHER)
        hits, num_hit = manager.get_computed_blocks(request)
        new = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, hits)
        steps.append((rid, num_hit, None if new is None else [b.block_id for b in new]))
        if new is not None:
            hit_tokens += num_hit
            live.append((request, lifetime))
        still = []
        for other, remaining in live:
            if remaining <= 1:
                manager.free(other)
            else:
                still.append((other, remaining - 1))
        live = still
        for event in manager.take_events():
            if isinstance(event, BlockRemoved):
                victims.extend(event.block_hashes)
    return {"steps": steps, "victims": victims, "hit_tokens": hit_tokens}


def _manager(policy: object | None) -> KVCacheManager:
    return KVCacheManager(NUM_BLOCKS, BS, 8192, enable_kv_cache_events=True, eviction_policy=policy)


@pytest.mark.parametrize("seed", range(3))
def test_lfu_and_arc_part_from_lru_which_stays_vllm(seed: int) -> None:
    arc = pytest.importorskip("kvframe_arc")
    lfu = pytest.importorskip("kvframe_lfu")
    lru = pytest.importorskip("kvframe_lru")
    workload = _workload(seed)
    default = _replay(_manager(None), workload)
    ordered = _manager(lru.LRUPolicy(NUM_BLOCKS))
    assert type(ordered.block_pool) is PolicyOrderedBlockPool
    with_lru = _replay(ordered, workload)
    assert with_lru == default  # step by step: hits, block ids, victims
    assert len(default["victims"]) > 500  # eviction is exercised

    for policy in (lfu.LFUPolicy(NUM_BLOCKS), arc.ARCPolicy(NUM_BLOCKS, variant="paper")):
        result = _replay(_manager(policy), workload)
        name = type(policy).__name__
        assert result["hit_tokens"] > with_lru["hit_tokens"], (name, result["hit_tokens"])
        assert result["victims"] != with_lru["victims"], name
