"""The ``lmcache`` tier in the engine: loads and saves on the step's critical path, in chunks.

Each step's duration is checked against the cost model's own prices: the
forward pass (``step_time`` of the step's shape), plus the transfer time of
every load in the step (synchronous: before the forward pass) and of every
store (blocking: at its end). A step with neither costs exactly its forward
pass. The native ``cpu`` tier is the contrast: its loads never lengthen a step.
"""

from __future__ import annotations

import pytest

from kvframe.domain.transfers import num_chunks
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


def test_a_load_and_a_save_add_their_transfer_time_to_their_step():
    engine, steps = _run("lmcache:capacity=1GiB")
    handler = engine.executor.transfer_handler
    cost = engine.executor.cost_model

    def transfer(num_blocks: int) -> float:
        """What the sim handler charges: bytes over the link plus one overhead per copy,
        the copies counted by the preset's block layout (issue 33)."""
        copies = num_chunks(cost.transfer_layout, num_blocks, handler.num_layers)
        return cost.transfer_time(num_blocks * handler.gpu_block_bytes, copies)

    loading = [s for s in steps if s[2]]
    storing = [s for s in steps if s[3]]
    plain = [s for s in steps if not s[2] and not s[3]]
    assert len(loading) == 1 and len(storing) == 2 and len(plain) > 100
    for duration, price, loads, stores in loading + storing:
        # One transfer per request per direction: exactly one of each here.
        extra = (transfer(loads) if loads else 0.0) + (transfer(stores) if stores else 0.0)
        assert extra > 0
        assert duration == pytest.approx(price + extra, rel=1e-12, abs=0.0)
    for duration, price, _, _ in plain:
        assert duration == price


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
