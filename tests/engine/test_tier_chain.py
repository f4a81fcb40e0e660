"""Tiers below DRAM in the engine loop (``--offload-tier``, vLLM 0.33 only; issue 49).

A prefix that both the GPU cache and DRAM have evicted comes back from the disk
tier (promoted to DRAM, then loaded); a tier that fails every load or every
store loses nothing -- every request finishes with all its tokens, the chunks
that did not come back are recomputed, every block is freed, and the tier's
counters say so.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvframe.config import ConfigError
from kvframe.engine.config import EngineConfig
from kvframe.engine.engine import Engine
from kvframe.offload.tiering import TieringOffloadManager, sharing
from kvframe.workloads.spec import RequestSpec

PREFIX = list(range(50_000, 50_256))  # 16 blocks of 16 tokens


def _chunk_bytes() -> int:
    probe = Engine.from_config(
        EngineConfig(num_gpu_blocks=64, vllm="0.33", offload="cpu:capacity=1GiB")
    )
    return (1 << 30) // probe.scheduler.connector.manager.num_chunks  # type: ignore[union-attr]


def _specs() -> list[RequestSpec]:
    """r0 and r9 share a 16-block prefix; eight fillers between them push it out of GPU and DRAM."""
    specs = [RequestSpec("r0", [*PREFIX, 1, 2, 3], 4, arrival_time=0.0)]
    for i in range(1, 9):
        prompt = list(range(i * 10_000, i * 10_000 + 256))
        specs.append(RequestSpec(f"r{i}", prompt, 4, arrival_time=i * 1.0))
    specs.append(RequestSpec("r9", [*PREFIX, 4, 5, 6], 4, arrival_time=20.0))
    return specs


def _engine(tiers: tuple[str, ...] = ()) -> Engine:
    chunk = _chunk_bytes()
    return Engine.from_config(
        EngineConfig(
            num_gpu_blocks=48,
            vllm="0.33",
            offload=f"cpu:capacity={24 * chunk}",
            offload_tiers=tiers,
        )
    )


def _disk() -> str:
    return f"disk:capacity={256 * _chunk_bytes()},bandwidth=2GB,latency=0.0001"


def _chain(engine: Engine) -> TieringOffloadManager:
    manager = engine.scheduler.connector.manager  # type: ignore[union-attr]
    assert isinstance(manager, TieringOffloadManager)
    return manager


def _nothing_held(engine: Engine) -> None:
    """Every GPU block back in the pool, no DRAM chunk pinned, no tier job in flight."""
    pool = engine.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1
    connector: Any = engine.scheduler.connector
    assert not connector.busy
    chain = _chain(engine)
    assert not chain.has_pending_work()
    primary = chain.primary
    resident = primary.num_chunks - primary.num_free_chunks
    assert primary._num_evictable == resident  # no pin outlives its job


def test_a_prefix_evicted_from_gpu_and_dram_comes_back_from_disk() -> None:
    alone = _engine().run(_specs())
    with_disk_engine = _engine((_disk(),))
    with_disk = with_disk_engine.run(_specs())
    counters = with_disk.counters
    assert counters["tier_disk_promoted_chunks"] > 0
    assert counters["offload_hit_tokens"] > alone.counters["offload_hit_tokens"]
    assert counters["tier_disk_read_bytes"] == counters["tier_disk_promoted_chunks"] * (
        _chunk_bytes()
    )
    _nothing_held(with_disk_engine)


@pytest.mark.parametrize("fails", ["loads", "stores"])
def test_a_tier_that_fails_loses_nothing(fails: str) -> None:
    alone = _engine().run(_specs())
    engine = _engine((_disk(),))
    (tier,) = _chain(engine).tiers
    tier.fault = lambda job: job.is_promotion == (fails == "loads")  # type: ignore[attr-defined]
    result = engine.run(_specs())
    counters = result.counters
    if fails == "loads":
        assert counters["tier_disk_promotion_failures"] > 0
    else:
        assert counters["tier_disk_cascade_failures"] == counters["tier_disk_cascades"] > 0
        assert counters["tier_disk_chunk_hits"] == 0
    # The chunks that did not come back are recomputed: every request finishes
    # with every token, as without the tier, and what the tier lost is no hit.
    assert counters["generation_tokens_total"] == alone.counters["generation_tokens_total"]
    assert counters["num_requests_finished"] == len(_specs())
    assert counters["offload_hit_tokens"] == alone.counters["offload_hit_tokens"]
    _nothing_held(engine)


def test_a_run_without_tiers_below_has_no_chain_and_no_tier_counters() -> None:
    engine = _engine()
    result = engine.run(_specs())
    assert not isinstance(engine.scheduler.connector.manager, TieringOffloadManager)  # type: ignore[union-attr]
    assert not any(key.startswith("tier_") for key in result.counters)
    assert "offload_tiers" not in engine.config.describe()


def test_replicas_built_in_one_scope_share_a_shared_tier() -> None:
    store = f"store:capacity={64 * _chunk_bytes()},bandwidth=1GB,shared=true"
    with sharing():
        a, b = _engine((store,)), _engine((store,))
    c = _engine((store,))
    ledger = [_chain(e).tiers[0].ledger for e in (a, b, c)]  # type: ignore[attr-defined]
    assert ledger[0] is ledger[1] and ledger[2] is not ledger[0]
    links = [_chain(e).tiers[0].link for e in (a, b)]  # type: ignore[attr-defined]
    assert links[0] is links[1]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"offload_tiers": ("disk:capacity=1GiB,bandwidth=1GB",)}, "offload is not set"),
        (
            {
                "offload": "cpu:capacity=1GiB",
                "offload_tiers": ("disk:capacity=1GiB,bandwidth=1GB",),
            },
            "--vllm 0.33",
        ),
    ],
)
def test_tiers_below_need_a_dram_tier_and_the_033_target(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(num_gpu_blocks=64, **settings)


@pytest.mark.parametrize(
    ("tier", "message"),
    [
        ("disk:capacity=1GiB", "bandwidth"),
        ("disk:capacity=1GiB,bandwidth=1GB,speed=3", "speed"),
        ("disk:capacity=1KiB,bandwidth=1GB", "holds no chunk"),
        ("disk:capacity=1GiB,bandwidth=1GB,mode=sometimes", "mode"),
        ("disk:capacity=1GiB,bandwidth=1GB,eviction=nosuch", "nosuch"),
    ],
)
def test_a_bad_tier_is_refused_naming_the_problem(tier: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _engine((tier,))


def test_two_replicas_asking_one_shared_store_differently_are_refused() -> None:
    chunk = _chunk_bytes()
    with sharing(), pytest.raises(ConfigError, match="share one store"):
        _engine((f"store:capacity={64 * chunk},bandwidth=1GB,shared=true",))
        _engine((f"store:capacity={32 * chunk},bandwidth=1GB,shared=true",))
