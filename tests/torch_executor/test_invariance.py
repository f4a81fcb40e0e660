"""Output invariance: KV-cache management must never change what the model generates.

Each test runs the tiny float64 Llama on the paged KV cache under one
configuration and compares every request's generated tokens with the
reference run (no prefix caching, no chunking, no preemption). Each also
checks that the mechanism it exercises actually fired (prefix hits,
preemptions, tier reloads, pins), so a passing test never compares two
identical paths.
"""

from __future__ import annotations

import pytest

from kvframe.workloads.agentic import generate_agentic
from kvframe.workloads.spec import RequestSpec

from .invariance import (
    EXAMPLES,
    PREEMPTED_CHUNK_SETTINGS,
    REFERENCE,
    assert_same_outputs,
    differing_requests,
    preempted_chunk_workload,
    run,
    shared_prefix_workload,
)

CPU_TIER = "cpu:capacity=256KiB"
"""16 blocks of the tiny float64 model (16 KiB each): small enough to evict."""
TIER_SETTINGS = dict(num_gpu_blocks=24, max_num_batched_tokens=64, max_model_len=512)


@pytest.fixture(scope="module")
def workload():
    return shared_prefix_workload()


@pytest.fixture(scope="module")
def reference(workload):
    result = run(workload, **REFERENCE)
    assert result.counters["num_preemptions"] == 0
    assert len(result.outputs) == len(workload)
    return result


def test_prefix_caching_with_shared_prefixes(workload, reference):
    cached = run(workload, **{**REFERENCE, "enable_prefix_caching": True})
    assert cached.counters["prefix_cache_hits"] > 0
    assert_same_outputs(reference, cached)


@pytest.mark.parametrize(
    ("threshold", "budget"),
    [(0, 16), (5, 64), (17, 40), (1, 8)],
)
def test_chunked_prefill(workload, reference, threshold, budget):
    chunked = run(
        workload,
        **{
            **REFERENCE,
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "long_prefill_token_threshold": threshold,
            "max_num_batched_tokens": budget,
        },
    )
    assert_same_outputs(reference, chunked)


def test_heavy_memory_pressure_preempts_and_recomputes():
    # Long outputs, all arriving at once, on 9 usable blocks: decodes outgrow the pool.
    specs = shared_prefix_workload(12, gap=0.0, max_tokens=(20, 48), seed=5)
    baseline = run(specs, **REFERENCE)
    pressed = run(
        specs,
        **{
            **REFERENCE,
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "num_gpu_blocks": 10,
            "reserve_full_sequence": False,
        },
    )
    assert pressed.counters["num_preemptions"] >= 4
    assert_same_outputs(baseline, pressed)


@pytest.fixture(scope="module")
def s3fifo():
    with pytest.MonkeyPatch.context() as patch:  # the example, not installed here
        patch.syspath_prepend(str(EXAMPLES / "third_party_policy"))
        from kvframe_s3fifo import S3FIFOPolicy
    from kvframe.host.registry import get_registry

    get_registry().register_class(S3FIFOPolicy)
    return "s3fifo"


@pytest.mark.parametrize("eviction", ["lru", "arc", "s3fifo"])
def test_cpu_tier_with_eviction_and_reloads(workload, reference, eviction, request):
    if eviction == "s3fifo":
        request.getfixturevalue("s3fifo")
    tiered = run(workload, offload=CPU_TIER, eviction=eviction, **TIER_SETTINGS)
    counters = tiered.counters
    assert counters["offload_loaded_blocks"] > 0, "nothing was reloaded from the tier"
    assert counters["offload_evicted_blocks"] > 0, "the tier never evicted"
    assert_same_outputs(reference, tiered)


@pytest.mark.parametrize("eviction", ["lru", "arc"])
def test_cpu_tier_of_vllm_033_with_eviction_and_reloads(workload, reference, eviction):
    """The 0.33 target's tier (job-numbered connector and worker, prompt-only stores,
    request-scoped policies) moves real bytes: reloaded blocks give the same tokens."""
    tiered = run(workload, offload=CPU_TIER, eviction=eviction, vllm="0.33", **TIER_SETTINGS)
    counters = tiered.counters
    assert counters["offload_loaded_blocks"] > 0, "nothing was reloaded from the tier"
    assert counters["offload_evicted_blocks"] > 0, "the tier never evicted"
    assert_same_outputs(reference, tiered)


def test_lmcache_tier_with_synchronous_reloads(workload, reference):
    """Loads before the forward pass and blocking saves, in chunks, change no output."""
    lmcache = pytest.importorskip("kvframe_lmcache")
    from kvframe.host.registry import get_registry

    if "lmcache" not in get_registry().names("offload"):  # a source checkout, not installed
        get_registry().register_class(lmcache.LMCacheOffloadSpec)
    tiered = run(workload, offload="lmcache:capacity=192KiB,chunk_size=16", **TIER_SETTINGS)
    counters = tiered.counters
    assert counters["offload_loaded_blocks"] > 0, "nothing was reloaded from the tier"
    assert counters["offload_evicted_blocks"] > 0, "the tier never evicted"
    assert_same_outputs(reference, tiered)


def test_priority_scheduling():
    specs = shared_prefix_workload(priorities=True, seed=3)
    baseline = run(specs, **REFERENCE)
    prioritised = run(
        specs,
        scheduling="priority",
        num_gpu_blocks=12,
        max_num_batched_tokens=48,
        max_model_len=512,
    )
    assert prioritised.counters["num_preemptions"] > 0
    assert_same_outputs(baseline, prioritised)


def _issue_32_pair() -> list[RequestSpec]:
    import random

    rng = random.Random(0)
    return [
        RequestSpec("low", [rng.randrange(1, 512) for _ in range(135)], max_tokens=3, priority=5),
        RequestSpec(
            "high",
            [rng.randrange(1, 512) for _ in range(35)],
            max_tokens=8,
            arrival_time=0.005,
            priority=0,
        ),
    ]


def test_a_same_step_preemption_serves_uncomputed_blocks_unless_rolled_back():
    # Issue 32: `low` is given a chunk completing its block of tokens 112-127 and
    # preempted for `high` in the same step; vLLM 0.19.1 leaves that block cached.
    specs = _issue_32_pair()
    baseline = run(specs, **REFERENCE)
    as_vllm = run(specs, **PREEMPTED_CHUNK_SETTINGS)
    uncomputed = as_vllm.engine.scheduler.kv_cache_manager.uncomputed
    assert as_vllm.counters["prefix_cache_uncomputed_hits"] == 16
    assert uncomputed.hit_tokens_by_request == {"low": 16}
    assert differing_requests(baseline, as_vllm) == {"low"}
    fixed = run(specs, rollback_uncomputed_blocks=True, **PREEMPTED_CHUNK_SETTINGS)
    assert fixed.counters["prefix_cache_uncomputed_rolled_back"] == 1
    assert fixed.counters["prefix_cache_uncomputed_hits"] == 0
    assert_same_outputs(baseline, fixed)


def test_randomized_preempted_chunks_differ_exactly_where_uncomputed_blocks_were_hit():
    """Priority + chunked prefill + pressure over 30 seeded workloads: with vLLM's
    registration, the requests whose outputs differ are exactly those served
    uncomputed blocks; with the rollback, every output is the reference's."""
    served = 0
    for seed in range(30):  # 4 reach the path under the default cost model's clock
        specs = preempted_chunk_workload(seed)
        baseline = run(specs, **REFERENCE)
        as_vllm = run(specs, **PREEMPTED_CHUNK_SETTINGS)
        hit = as_vllm.engine.scheduler.kv_cache_manager.uncomputed.hit_tokens_by_request
        assert differing_requests(baseline, as_vllm) == set(hit), f"seed {seed}"
        assert as_vllm.counters["prefix_cache_uncomputed_hits"] == sum(hit.values())
        served += bool(hit)
        fixed = run(specs, rollback_uncomputed_blocks=True, **PREEMPTED_CHUNK_SETTINGS)
        assert fixed.counters["prefix_cache_uncomputed_hits"] == 0
        assert differing_requests(baseline, fixed) == set(), f"seed {seed}"
    assert served >= 3, "too few workloads reached a hit on uncomputed blocks"


def test_continuum_pinning():
    specs = generate_agentic(
        num_jobs=4,
        rate=20.0,
        num_turns="uniform:low=2,high=3",
        system_prompt_length=24,
        task_length="uniform:low=16,high=40",
        output_length="uniform:low=3,high=8",
        tools="fast",
        tool_time_scale=0.01,
        max_context_tokens=400,
        seed=0,
    )
    baseline = run(specs, **REFERENCE)
    pinned = run(
        specs,
        scheduling="continuum:ttl=fixed,fixed_ttl=5.0",
        num_gpu_blocks=40,
        max_num_batched_tokens=64,
        max_model_len=512,
    )
    assert pinned.engine.scheduler.policy.stats.num_pinned > 0
    assert pinned.counters["prefix_cache_hits"] > 0
    assert_same_outputs(baseline, pinned)
