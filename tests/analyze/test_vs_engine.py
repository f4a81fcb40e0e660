"""The exact LRU curve against the engine's own GPU prefix cache, requests admitted one at a time.

The full simulation is :class:`kvframe.core.kv_cache_manager.KVCacheManager`:
per request, ``get_computed_blocks``, ``allocate_slots`` for the whole prompt,
``free``. Its pool of ``N`` blocks holds the null block, and:

* with vLLM's default free queue, each prompt's partial last block takes a
  slot like any other, so it matches ``partial_blocks=True`` at ``N - 1``;
* with the ``lru`` plugin ordering the cached blocks (``--gpu-eviction lru``),
  uncached free blocks are reused first and one partial block is in the pool
  at a time, so it matches the default model (full blocks only) at ``N - 2``.
"""

from __future__ import annotations

import pytest

from kvframe.analyze import build_block_trace
from kvframe.analyze.stack import stack_profile
from kvframe.core.hashing import make_block_hasher
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.domain.request import Request
from kvframe.host.registry import get_registry
from kvframe.workloads import load_workload
from kvframe.workloads.spec import PromptTokens

POOLS = (600, 1500, 4000, 12000)
"""Pool sizes (blocks of 512 tokens) from a tenth of the footprint of 800 requests to most of it."""


def _engine_hit_rates(
    specs, block_size: int, *, gpu_eviction: str | None, pools=POOLS
) -> list[float]:
    hasher = make_block_hasher(block_size)
    rates = []
    for pool in pools:
        policy = get_registry().create("eviction", gpu_eviction, pool) if gpu_eviction else None
        manager = KVCacheManager(pool, block_size, max_model_len=1 << 30, eviction_policy=policy)
        hits = total = 0
        for spec in specs:
            request = Request(spec.request_id, PromptTokens(spec.prompt), 1, block_hasher=hasher)
            total += request.num_tokens
            blocks, num_hit = manager.get_computed_blocks(request)
            new = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, blocks)
            assert new is not None, "every prompt fits these pools"
            hits += num_hit
            manager.free(request)
        rates.append(hits / total)
    return rates


@pytest.mark.parametrize("name", ["mooncake:conversation", "mooncake:synthetic"])
@pytest.mark.parametrize(
    ("gpu_eviction", "partial_blocks", "reserved"), [(None, True, 1), ("lru", False, 2)]
)
def test_lru_curve_equals_the_engines_gpu_prefix_cache(
    name, gpu_eviction, partial_blocks, reserved
):
    specs = load_workload(name, limit=800).requests
    trace = build_block_trace(specs, 512, partial_blocks=partial_blocks)
    profile = stack_profile(trace)
    engine = _engine_hit_rates(specs, 512, gpu_eviction=gpu_eviction)
    for pool, rate in zip(POOLS, engine, strict=True):
        assert abs(profile.hit_rate(pool - reserved) - rate) <= 0.001, pool


@pytest.mark.parametrize(
    ("gpu_eviction", "partial_blocks", "reserved"), [(None, True, 1), ("lru", False, 2)]
)
def test_lru_curve_equals_the_engines_gpu_prefix_cache_at_vllms_16_token_blocks(
    gpu_eviction, partial_blocks, reserved
):
    specs = load_workload("mooncake:synthetic", limit=150).requests
    pools = (8000, 20000, 40000, 80000)
    trace = build_block_trace(specs, 16, partial_blocks=partial_blocks)
    profile = stack_profile(trace)
    engine = _engine_hit_rates(specs, 16, gpu_eviction=gpu_eviction, pools=pools)
    for pool, rate in zip(pools, engine, strict=True):
        assert abs(profile.hit_rate(pool - reserved) - rate) <= 0.001, pool
