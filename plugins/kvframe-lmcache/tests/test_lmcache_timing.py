"""The ``lmcache`` tier in the engine: loads and saves on the step's critical path, in chunks.

Each step's duration is checked against the cost model's own prices: the
forward pass (``step_time`` of the step's shape), plus the transfer time of
every load in the step (synchronous: before the forward pass) and of every
store (blocking: at its end). A step with neither costs exactly its forward
pass. The native ``cpu`` tier is the contrast: its loads never lengthen a step.
"""

from __future__ import annotations

import pytest

from kvframe.engine import Engine, EngineConfig
from kvframe.executors.base import classify_step
from kvframe.workloads.spec import RequestSpec

pytest.importorskip("kvframe_lmcache")

BLOCK = 16
SHARED = list(range(1000, 1600))  # 600 tokens: two whole 256-token chunks and 88 more


def _workload() -> list[RequestSpec]:
    """A request, one that pushes it out of the GPU cache, then its prefix again."""
    return [
        RequestSpec("first", SHARED, max_tokens=300, arrival_time=0.0),
        RequestSpec("flood", list(range(5000, 6000)), max_tokens=1, arrival_time=100.0),
        RequestSpec("again", [*SHARED, *range(9000, 9100)], max_tokens=2, arrival_time=200.0),
    ]


def _run(offload: str) -> tuple[Engine, list[tuple[float, float, int, int]]]:
    """Run the workload; per executed step: (duration, forward price, load bytes, store bytes)."""
    engine = Engine.from_config(EngineConfig(num_gpu_blocks=64, block_size=BLOCK, offload=offload))
    executor = engine.executor
    cost = executor.cost_model
    execute = executor.execute
    steps: list[tuple[float, float, int, int]] = []

    def recording(output, requests, now=0.0):  # type: ignore[no-untyped-def]
        shape, _ = classify_step(output.num_scheduled_tokens, requests)
        price = cost.step_time(
            shape.prefill, shape.decode, shape.context, shape.prefill_seqs, shape.prefill_pairs
        )
        meta = output.kv_connector_metadata
        loads = sum(len(s.gpu_block_ids) for s in meta.reqs_to_load.values())
        stores = sum(len(s.gpu_block_ids) for s in meta.reqs_to_store.values())
        result = execute(output, requests, now)
        steps.append((result.duration, price, loads, stores))
        return result

    executor.execute = recording  # type: ignore[method-assign]
    engine.run(_workload())
    return engine, steps


def _lmcache_seconds(is_store: bool, num_blocks: int, block_bytes: int) -> float:
    """LMCache 0.3.7's cost of one call, from the README's figures: 0.55 ms per call,
    bytes at 46.56 GiB/s (store) or 41.81 GiB/s (retrieve)."""
    throughput = 0.5309 / (11.9537e-3 - 0.55e-3) if is_store else 1.3747 / (33.4281e-3 - 0.55e-3)
    return 0.55e-3 + num_blocks * block_bytes / (throughput * 1024**3)


def test_a_load_and_a_save_add_lmcaches_transfer_time_to_their_step():
    engine, steps = _run("lmcache:capacity=1GiB")
    block_bytes = engine.executor.transfer_handler.gpu_block_bytes
    loading = [s for s in steps if s[2]]
    storing = [s for s in steps if s[3]]
    plain = [s for s in steps if not s[2] and not s[3]]
    assert len(loading) == 1 and len(storing) == 2 and len(plain) > 100
    for duration, price, loads, stores in loading + storing:
        # One call per request per direction: exactly one of each here.
        extra = (_lmcache_seconds(False, loads, block_bytes) if loads else 0.0) + (
            _lmcache_seconds(True, stores, block_bytes) if stores else 0.0
        )
        assert extra > 0
        assert duration == pytest.approx(price + extra, rel=1e-12, abs=0.0)
    for duration, price, _, _ in plain:
        assert duration == price


def test_the_rates_are_the_readmes_figures():
    from kvframe_lmcache import LMCACHE_0_3_7

    # PR LMCache/LMCache#1740's two log lines, each less the quickstart's one-chunk call.
    assert LMCACHE_0_3_7.store_throughput == pytest.approx(46.56, abs=0.01)
    assert LMCACHE_0_3_7.load_throughput == pytest.approx(41.81, abs=0.01)
    assert LMCACHE_0_3_7.call_overhead == 0.55e-3
    assert LMCACHE_0_3_7.chunk_overhead == 0.0
    # Read back, the logged calls cost what LMCache logged (to its 4 printed digits).
    pricing = _pricing()
    assert pricing.transfer_time(True, 3866 // 16, int(0.5309 * 1024**3)) == pytest.approx(
        11.9537e-3, rel=1e-4
    )
    assert pricing.transfer_time(False, 10010 // 16, int(1.3747 * 1024**3)) == pytest.approx(
        33.4281e-3, rel=1e-4
    )


def _pricing(**options: float):  # type: ignore[no-untyped-def]
    from kvframe_lmcache import LMCacheOffloadSpec

    from kvframe import OffloadContext

    spec = LMCacheOffloadSpec(capacity=1 << 30, **options)
    return spec.transfer_pricing(
        OffloadContext(gpu_block_size=BLOCK, kv_bytes_per_token=131072, num_gpu_blocks=64)
    )


def test_options_change_each_term_of_the_price():
    block = BLOCK * 131072
    base = _pricing(call_overhead=0.0)
    # Bytes at the direction's throughput: 1 GiB at 10 GiB/s is 0.1 s.
    assert _pricing(call_overhead=0.0, store_throughput=10.0).transfer_time(
        True, 1024**3 // block, 1024**3
    ) == pytest.approx(0.1)
    assert base.transfer_time(False, 16, 16 * block) == pytest.approx(
        16 * block / (base.rates.load_throughput * 1024**3)
    )
    # 17 GPU blocks of 16 tokens are 272 tokens: two 256-token chunks.
    chunked = _pricing(call_overhead=1e-3, chunk_overhead=1e-4, load_throughput=1e9)
    assert chunked.transfer_time(False, 17, 0) == pytest.approx(1e-3 + 2 * 1e-4)
    assert chunked.transfer_time(False, 0, 0) == 0.0


def test_bad_rates_are_refused_by_name():
    from kvframe_lmcache import LMCacheOffloadSpec

    with pytest.raises(ValueError, match="load_throughput"):
        LMCacheOffloadSpec(capacity=1 << 30, load_throughput=0.0)
    with pytest.raises(ValueError, match="call_overhead"):
        LMCacheOffloadSpec(capacity=1 << 30, call_overhead=-1.0)


def test_offload_bandwidth_is_refused_for_a_tier_that_prices_itself():
    from kvframe import ConfigError

    with pytest.raises(ConfigError, match="prices its own"):
        Engine.from_config(
            EngineConfig(
                num_gpu_blocks=64,
                block_size=BLOCK,
                offload="lmcache:capacity=1GiB",
                offload_bandwidth=10**9,
            )
        )


def test_the_tier_view_prices_a_load_as_the_worker_does():
    engine = Engine.from_config(
        EngineConfig(num_gpu_blocks=64, block_size=BLOCK, offload="lmcache:capacity=1GiB")
    )
    connector = engine.scheduler.connector
    block_bytes = engine.executor.transfer_handler.gpu_block_bytes
    assert connector.estimate_load_time(512) == pytest.approx(
        _lmcache_seconds(False, 512 // BLOCK, block_bytes), rel=1e-12
    )


def test_the_native_cpu_tier_overlaps_the_same_load_with_other_steps():
    _, steps = _run("cpu:capacity=1GiB,block_size_factor=16")
    loading = [s for s in steps if s[2]]
    assert len(loading) == 1
    assert all(duration == price for duration, price, _, _ in steps)


def test_only_whole_prompt_chunks_are_saved_and_loaded():
    engine, steps = _run("lmcache:capacity=1GiB")
    saved = [s[3] * BLOCK for s in steps if s[3]]  # blocks moved, in tokens
    loaded = [s[2] * BLOCK for s in steps if s[2]]
    # "first": 600 prompt tokens -> 2 chunks; its 300 outputs are never saved.
    # "flood": 1000 prompt tokens -> 3 chunks. "again": its 2 chunks are loaded,
    # and its 700 tokens complete no third chunk.
    assert saved == [512, 768]
    assert loaded == [512]
    stats = engine.scheduler.connector.stats
    assert stats.num_stored_blocks == 5 and stats.num_loaded_blocks == 2


def test_a_hit_covering_the_whole_prompt_leaves_a_chunk_to_compute():
    spec = [
        RequestSpec("first", list(range(512)), max_tokens=1, arrival_time=0.0),
        RequestSpec("flood", list(range(5000, 6000)), max_tokens=1, arrival_time=100.0),
        RequestSpec("again", list(range(512)), max_tokens=1, arrival_time=200.0),
    ]
    engine = Engine.from_config(
        EngineConfig(num_gpu_blocks=64, block_size=BLOCK, offload="lmcache:capacity=1GiB")
    )
    counters = engine.run(spec).summary.counters
    # The synchronous path runs the request at once, so one token must be left:
    # the last chunk is recomputed instead of loaded.
    assert counters["external_prefix_cache_hits"] == 256
    assert counters["num_requests_finished"] == 3
