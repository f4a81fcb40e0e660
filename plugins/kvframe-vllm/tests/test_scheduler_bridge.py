"""What the bridge (``KvframeScheduler``) refuses inside vLLM 0.19.1, and how a client's
agent fields arrive.

``bridge_refusals.py`` runs under the vLLM reference interpreter (with kvframe and
the bundled plugins importable there, as ``docs/vllm.md`` says); each check builds a
real VllmConfig. The bridge's decisions, step by step against vLLM's own scheduler
(and kvframe's under ``continuum``), both scheduling modes, with and without vLLM's
CPU tier, are compared by ``tests/differential/test_vllm_decisions.py``. Everything
skips cleanly without vLLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from vllm_reference import bridge_python, run_script

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def refusals() -> dict[str, Any]:
    return run_script(bridge_python("0.19.1"), Path(__file__).with_name("bridge_refusals.py"))


def test_engine_features_kvframe_does_not_model_are_refused_at_start_up(
    refusals: dict[str, Any],
) -> None:
    assert refusals["lora"]["type"] == "UnsupportedByKvframe"
    assert "LoRA" in refusals["lora"]["message"]
    assert refusals["async"] is None  # served: kvframe's core models AsyncScheduler
    # ... together with vLLM 0.19.1's OffloadingConnector too (compare.py --bridge
    # --tier --scheduling async)
    assert refusals["async_tier"] is None
    assert "--decode-context-parallel-size 1" in refusals["dcp"]["message"]
    assert "--prefill-context-parallel-size 1" in refusals["pcp"]["message"]
    assert refusals["kv_events"] is None  # served: events go through vLLM's publisher
    assert refusals["fine"] is None


def test_a_cache_reset_resets_the_tier_as_vllm_does(refusals: dict[str, Any]) -> None:
    """``reset_prefix_cache(reset_connector=True)`` with vLLM's CPU tier asks the
    connector's ``reset_cache`` and succeeds, as vLLM 0.19.1's own Scheduler does (the
    bridge used to report failure whenever a connector was configured)."""
    assert refusals["reset_tier"] == {"result": True, "calls": ["reset_cache"]}
    assert refusals["reset_tier"] == refusals["reset_tier_vllm"]


def test_a_tier_plugin_vllms_connector_cannot_honour_is_refused(refusals: dict[str, Any]) -> None:
    """lmcache models LMCache's connector: inside vLLM it would silently be vLLM's."""
    lmcache = refusals["tier_lmcache"]
    assert lmcache["type"] == "UnsupportedByKvframe"
    assert "kv_connector_extra_config['kvframe_offload']" in lmcache["message"]
    assert "loads before the forward pass" in lmcache["message"]
    assert "stores that block the step" in lmcache["message"]
    assert "always runs vLLM's own CPU tier" in refusals["tier_cpu"]["message"]
    assert "kvframe_evicton" in refusals["tier_typo"]["message"]
    assert refusals["tier_fine"] is None


def test_vllms_scheduling_policy_picks_the_kvframe_policy_unless_named(
    refusals: dict[str, Any],
) -> None:
    assert refusals["policy_from_vllm"] == "priority"
    assert refusals["policy_explicit"] == "fcfs"


def test_a_bad_policy_string_stops_vllm_with_kvframes_message(refusals: dict[str, Any]) -> None:
    typo = refusals["typo"]
    assert typo["type"] == "ConfigError"
    assert typo["message"].startswith("additional_config['kvframe_scheduler']: ")
    assert "did you mean 'fcfs'?" in typo["message"]
    assert "option ttl: 'dynamic' | 'fixed'" in refusals["bad_option"]["message"]


def test_per_request_features_and_bad_agent_fields_finish_the_request_with_an_error(
    refusals: dict[str, Any],
) -> None:
    """Finished with FINISHED_ERROR and the reason, never raised out of add_request."""
    assert "min_tokens" in refusals["min_tokens"]
    assert "kvframe_jobid" in refusals["unknown_xarg"]
    assert "true/false/1/0" in refusals["bad_last_turn"]


def test_a_clients_agent_fields_reach_the_policy(refusals: dict[str, Any]) -> None:
    assert refusals["agent_turn"] is None
    assert refusals["agent_fields"] == ["7", 2, False, "search"]
