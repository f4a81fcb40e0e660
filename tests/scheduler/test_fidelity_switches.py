"""Each vLLM fidelity switch matters: the two targets' runs differ where its rule does.

The workloads are ``tools/differential/switch_workloads.py``, one per switch,
run through the differential harness's kvframe side (no vLLM needed). For
each, the 0.19.1 and 0.33.0 targets must part at the step the switch's rule
predicts, and turning on that one switch alone on top of 0.19.1 must give the
0.33.0 run exactly: the switch is the whole difference on its workload. That
each target also matches its vLLM there is ``tests/differential/test_vllm_decisions.py``
(which needs the vLLM reference environments).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import kvframe_driver
import pytest
import stepping
from switch_workloads import SWITCH_WORKLOADS, switch_workload

from kvframe.domain.fidelity import VLLM_TARGETS, Fidelity, fidelity_for
from kvframe.engine.config import EngineConfig

SWITCH_OF = {
    "switch-threshold": "threshold_needs_company",
    "switch-self-preemption": "self_preemption_continues",
    "switch-free-order": "uncached_freed_first",
    "switch-free-order-nocache": "uncached_freed_first",
    "switch-victim-cursor": "victim_cursor_by_position",
}
ENGINE_ONLY = {"empty_step_keeps_queue"}
WORKER_ONLY = {"resumed_sent_as_new": "plugins/kvframe-vllm/tests/test_engine_core.py"}
"""Switch C changes what the worker is told, not a decision: kvframe's executors read
resumed requests either way, and the vLLM bridge's EngineCore harness shows it
(Model Runner V1 and V2 on both releases)."""
"""Switches of the engine's batch queue, not of the scheduler: no harness workload
shows them (an empty step with nothing in flight while requests remain needs a
blocked admission with nothing running, which vLLM's policies without a
connector never produce); ``tests/engine/test_batch_queue.py`` checks the rule."""


def run(name: str, fidelity: str | Fidelity) -> list[dict[str, Any]]:
    """The step records of switch workload ``name`` under ``fidelity``, block ids included."""
    workload = switch_workload(name)
    config = dict(workload["config"], vllm=fidelity)
    adapter = kvframe_driver.KvframeAdapter(config, record_blocks=True)
    loop = stepping.run_async if config.get("async_scheduling") else stepping.run
    return list(loop(workload, adapter))


def first_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)


TIER_SWITCHES = {
    # The tier's switches: each shown where the tier workloads need them (and T16
    # also on a scripted connector).
    "reserve_for_inflight_prefills": "tests/scheduler/test_inflight_reservation.py",
    "offload_jobs": "tests/offload/test_tier_switches.py",
    "holding_queue_first": "tests/offload/test_tier_switches.py",
    "cached_tokens_at_admission": "tests/offload/test_tier_switches.py",
    # Asynchronous scheduling with a tier only (tier-reuse async).
    "defer_block_free": "tests/offload/test_tier_switches.py",
    # Streaming-input sessions: no harness workload has them (its driver sends
    # none); shown on the core, and inside vLLM by the EngineCore harness.
    "sessions_resume_from_frontier": "tests/scheduler/test_sessions.py",
    # Failed asynchronous loads (disaggregation): accounting only, shown on the
    # core; the disaggregation harness compares both releases' runs.
    "failed_load_keeps_external_count": "tests/scheduler/test_disagg_transfers.py",
    # Finished requests a transfer holds keep the engine stepping (disaggregation).
    "held_requests_keep_engine": "tests/scheduler/test_disagg_transfers.py",
    # KV-cache groups (hybrid models): shown on the hybrid workloads.
    "groups_admission_cap": "tests/core/test_kv_cache_groups.py",
    "groups_skip_processed_only": "tests/core/test_kv_cache_groups.py",
    "groups_mamba_caching_needs_align": "tests/differential/test_hybrid_groups.py",
    # How a model's layers become KV-cache groups and how many blocks the pool holds
    # (configuration, before any step): shown against vLLM's own grouping functions.
    "hybrid_kept_with_kv_events": "tests/models/test_kv_groups_vllm.py",
    "hybrid_kept_with_hma_connector": "tests/models/test_kv_groups_vllm.py",
    "mamba_block_aligned_to_block_size": "tests/models/test_kv_groups_vllm.py",
    "mamba_prefix_cache_align_only": "tests/models/test_kv_groups_vllm.py",
}


def test_every_switch_has_a_workload() -> None:
    switches = {f.name for f in attrs.fields(Fidelity)} - {"vllm"} - ENGINE_ONLY
    assert set(SWITCH_OF.values()) == switches - set(TIER_SWITCHES) - set(WORKER_ONLY)
    root = Path(__file__).resolve().parents[2]
    shown_elsewhere = [*TIER_SWITCHES.values(), *WORKER_ONLY.values()]
    assert all((root / test).is_file() for test in shown_elsewhere)
    assert set(SWITCH_OF) == set(SWITCH_WORKLOADS)


@pytest.mark.parametrize("name", list(SWITCH_WORKLOADS))
def test_one_switch_alone_is_the_whole_difference(name: str) -> None:
    old, new = run(name, "0.19.1"), run(name, "0.33.0")
    assert old != new
    only = attrs.evolve(fidelity_for("0.19.1"), **{SWITCH_OF[name]: True})
    assert run(name, only) == new
    for other in (set(SWITCH_OF.values()) | ENGINE_ONLY | set(WORKER_ONLY)) - {SWITCH_OF[name]}:
        assert run(name, attrs.evolve(fidelity_for("0.19.1"), **{other: True})) == old


def test_threshold_caps_a_lone_request_only_in_0_19_1() -> None:
    config = switch_workload("switch-threshold")["config"]
    threshold, budget = config["long_prefill_token_threshold"], config["max_num_batched_tokens"]
    old, new = run("switch-threshold", "0.19.1"), run("switch-threshold", "0.33.0")
    assert old[0]["scheduled"] == [["r0", threshold]]
    assert new[0]["scheduled"] == [["r0", budget]]
    # The rest of the 40-token prompt: capped again, as a lone request's chunk.
    assert new[1]["scheduled"] == [["r0", threshold]]
    assert len(new) < len(old)


def test_priority_self_preemption_ends_the_running_loop_only_in_0_19_1() -> None:
    old, new = run("switch-self-preemption", "0.19.1"), run("switch-self-preemption", "0.33.0")
    step = first_difference(old, new)
    # r0 (priority 5) needs a block, none is free, and it is its own victim.
    assert old[step]["preempted"] == new[step]["preempted"] == ["r0"]
    assert old[step]["scheduled"] == []
    # 0.33: the urgent r1 after it decodes in the step r0 freed blocks.
    assert new[step]["scheduled"] == [["r1", 1]]


def test_an_unscheduled_earlier_victim_moves_the_cursor_back_only_in_0_33() -> None:
    old, new = run("switch-victim-cursor", "0.19.1"), run("switch-victim-cursor", "0.33.0")
    step = first_difference(old, new)
    # r0's last token is in flight (skipped), r1 needs a block, r0 is the victim.
    assert old[step]["preempted"] == new[step]["preempted"] == ["r0"]
    assert [r for r, _ in old[step - 1]["scheduled"]] == ["r0", "r1", "r2"]
    # 0.19.1 skips r2, the request after r1, for this step; 0.33 schedules it.
    assert old[step]["scheduled"] == [["r1", 1]]
    assert new[step]["scheduled"] == [["r1", 1], ["r2", 1]]
    # The switch changes no decision synchronously (block ids aside, switch D).
    sync = dict(switch_workload("switch-victim-cursor"))
    sync["config"] = {**sync["config"], "async_scheduling": False}
    runs = []
    for target in ("0.19.1", "0.33.0"):
        config = dict(sync["config"], vllm=target)
        adapter = kvframe_driver.KvframeAdapter(config, record_blocks=False)
        runs.append(list(stepping.run(sync, adapter)))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", ["switch-free-order", "switch-free-order-nocache"])
def test_freed_blocks_without_a_hash_are_reused_first_only_in_0_33(name: str) -> None:
    old, new = run(name, "0.19.1"), run(name, "0.33.0")
    first_blocks = old[0]["blocks"]["r0"]  # [full block, partial block]
    assert first_blocks == new[0]["blocks"]["r0"] == [1, 2]
    step = first_difference(old, new)
    assert old[step]["blocks"]["r1"] == [3, 4]  # the freed ones went to the back
    if name == "switch-free-order":
        # The partial (unhashed) block first; the cached full block stays findable.
        assert new[step]["blocks"]["r1"] == [2, 3]
    else:
        # Caching off: both freed blocks first, tail first (freed in reverse).
        assert new[step]["blocks"]["r1"] == [2, 1]


def test_release_names_and_errors() -> None:
    assert VLLM_TARGETS == ("0.19.1", "0.33.0")
    assert fidelity_for("0.33") is fidelity_for("0.33.0")
    assert fidelity_for("0.19") == Fidelity(vllm="0.19.1")
    with pytest.raises(ValueError) as err:
        fidelity_for("0.25")
    assert str(err.value) == (
        "unknown vLLM fidelity target '0.25'; kvframe follows 0.19.1 or 0.33.0 "
        "(0.33 is short for 0.33.0)"
    )


def test_engine_setting_reaches_the_core() -> None:
    default = EngineConfig(num_gpu_blocks=64)
    assert default.vllm == "0.19.1"
    assert default.scheduler_config().fidelity == fidelity_for("0.19.1")
    newer = EngineConfig.from_settings({"vllm": "0.33", "num_gpu_blocks": 64})
    assert newer.vllm == "0.33.0"
    assert newer.describe()["vllm"] == "0.33.0"
    assert newer.scheduler_config().fidelity.self_preemption_continues


def test_engine_setting_error_names_its_origin() -> None:
    from kvframe.config import ConfigError

    with pytest.raises(ConfigError) as err:
        EngineConfig.from_settings({"vllm": "1.0"}, origins={"vllm": "--vllm"})
    assert "--vllm" in str(err.value)
    assert "unknown vLLM fidelity target '1.0'" in str(err.value)


def test_the_0_33_target_runs_vllm_033s_tier() -> None:
    """Under 0.33 a tier is vLLM 0.33.0's connector and ledger (not 0.19.1's)."""
    from kvframe.engine.engine import Engine
    from kvframe.offload.jobs.connector import JobOffloadingConnector
    from kvframe.offload.jobs.worker import JobOffloadWorker
    from kvframe.offload.slots.connector import OffloadingConnector

    newer = Engine.from_config(
        EngineConfig(num_gpu_blocks=64, vllm="0.33", offload="cpu:capacity=1GiB")
    )
    assert isinstance(newer.scheduler.connector, JobOffloadingConnector)
    assert isinstance(newer.executor.offload_worker, JobOffloadWorker)
    older = Engine.from_config(EngineConfig(num_gpu_blocks=64, offload="cpu:capacity=1GiB"))
    assert isinstance(older.scheduler.connector, OffloadingConnector)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"eviction": "lfu"},
            "vllm=0.33.0: the offload tier's eviction policy 'lfu' has no vLLM 0.33.0 "
            "(request-scoped) form; lru and arc have one",
        ),
        (
            {"eviction": "arc:variant=paper"},
            "vllm=0.33.0: eviction policy 'arc': vLLM 0.33.0's arc has no variant 'paper' "
            "(only 'vllm')",
        ),
    ],
)
def test_the_0_33_tier_refuses_what_it_does_not_model(
    settings: dict[str, Any], message: str
) -> None:
    from kvframe.config import ConfigError
    from kvframe.engine.engine import Engine

    config = EngineConfig(num_gpu_blocks=64, vllm="0.33", offload="cpu:capacity=1GiB", **settings)
    with pytest.raises(ConfigError) as err:
        Engine.from_config(config)
    assert message in str(err.value)
