"""Blocks cached for tokens a same-step preemption left uncomputed (issue 32).

vLLM 0.19.1 registers a block in the prefix cache when its tokens get slots;
a request preempted later in the same step leaves it cached without K/V.
kvframe keeps that by default (its decisions are vLLM's) and counts the hits
served from such blocks; ``rollback_uncomputed_blocks`` applies vLLM's PR
#43569 instead. These tests use the sim executor (no tensors): they pin the
bookkeeping; ``tests/torch_executor/test_invariance.py`` pins the tokens.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.engine import Engine
from kvframe.engine.config import EngineConfig
from kvframe.workloads.spec import RequestSpec

SETTINGS = dict(
    scheduling="priority",
    num_gpu_blocks=12,
    max_num_batched_tokens=32,
    long_prefill_token_threshold=24,
    reserve_full_sequence=False,
    max_model_len=512,
)


def _pair() -> list[RequestSpec]:
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


def _run(specs: list[RequestSpec], **settings: object) -> tuple[Engine, dict]:
    engine = Engine.from_config(EngineConfig(**{**SETTINGS, **settings}))  # type: ignore[arg-type]
    result = engine.run(specs)
    assert not result.partial
    return engine, result.counters


def test_vllm_s_registration_is_kept_and_its_hits_counted() -> None:
    # low is given tokens 120-135 (completing its block of tokens 112-127) and
    # preempted for high in the same step; it resumes with a 128-token hit.
    engine, counters = _run(_pair())
    assert counters["num_preemptions"] == 1
    assert counters["preempted_prefix_cache_hits"] == 128
    assert counters["prefix_cache_uncomputed_hits"] == 16
    assert counters["prefix_cache_uncomputed_rolled_back"] == 0
    assert engine.scheduler.kv_cache_manager.uncomputed.hit_tokens_by_request == {"low": 16}


def test_the_rollback_drops_the_registration_so_the_block_is_recomputed() -> None:
    engine, counters = _run(_pair(), rollback_uncomputed_blocks=True)
    assert counters["num_preemptions"] == 1
    assert counters["prefix_cache_uncomputed_rolled_back"] == 1
    assert counters["prefix_cache_uncomputed_hits"] == 0
    assert counters["preempted_prefix_cache_hits"] == 112  # the block before it still hits
    assert not engine.scheduler.kv_cache_manager.uncomputed.blocks


def test_fcfs_never_preempts_a_request_it_already_scheduled_in_that_step() -> None:
    _, counters = _run(_pair(), scheduling="fcfs")
    assert counters["prefix_cache_uncomputed_hits"] == 0


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    num_gpu_blocks=st.integers(10, 16),
    threshold=st.sampled_from((20, 24, 40)),
)
def test_the_rollback_changes_decisions_only_through_the_blocks_it_uncaches(
    seed: int, num_gpu_blocks: int, threshold: int
) -> None:
    """Without any registration to roll back, both settings run the same steps; with
    rollback on, nothing is ever served from an uncomputed block."""
    rng = random.Random(seed)
    specs = [
        RequestSpec(
            f"r{i}",
            [rng.randrange(1, 64) for _ in range(rng.randrange(8, 140))],
            max_tokens=rng.randrange(1, 12),
            arrival_time=i * 0.004,
            priority=rng.randrange(0, 6),
        )
        for i in range(8)
    ]
    knobs = dict(num_gpu_blocks=num_gpu_blocks, long_prefill_token_threshold=threshold)
    _, as_vllm = _run(specs, **knobs)
    _, fixed = _run(specs, rollback_uncomputed_blocks=True, **knobs)
    assert fixed["prefix_cache_uncomputed_hits"] == 0
    served = as_vllm["preempted_prefix_cache_hits"] + as_vllm["prefix_cache_hits"]
    assert as_vllm["prefix_cache_uncomputed_hits"] <= served
    if fixed["prefix_cache_uncomputed_rolled_back"] == 0:
        assert as_vllm["prefix_cache_uncomputed_hits"] == 0
        assert as_vllm["num_steps"] == fixed["num_steps"]
        assert as_vllm["num_preemptions"] == fixed["num_preemptions"]


def test_the_setting_is_a_flag_and_a_kvframe_toml_key(
    conversation_trace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from kvframe.cli import main

    monkeypatch.chdir(tmp_path)
    argv = ["-q", "run", conversation_trace, "--limit", "2", "--json", "--no-config"]
    assert main([*argv, "--rollback-uncomputed-blocks", "--out", "a"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["metadata"]["engine"]["rollback_uncomputed_blocks"] is True
    assert metrics["counters"]["prefix_cache_uncomputed_hits"] == 0
    Path("kvframe.toml").write_text("rollback_uncomputed_blocks = true\n")
    assert main(["-q", "run", conversation_trace, "--limit", "2", "--json", "--out", "b"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["engine"]["rollback_uncomputed_blocks"]
