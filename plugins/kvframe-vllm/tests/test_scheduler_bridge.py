"""kvframe's scheduler behind vLLM's scheduler interface (``KvframeScheduler``).

With the vLLM reference interpreter (and kvframe plus the bundled plugins
importable there, as ``docs/vllm.md`` says), three drivers run every
differential workload, 40 requests each:

* under ``fcfs`` and ``priority``, vLLM's own ``Scheduler`` and the bridge,
  both in vLLM's types, must produce identical ``SchedulerOutput``s and
  ``EngineCoreOutputs`` step by step (scheduled tokens, new / resumed /
  preempted / finished ids, block ids, prefix hits, new tokens, finish reasons);
* under ``continuum`` (vLLM has none), the bridge must make the decisions of
  kvframe's own scheduler with ``continuum``, step by step;
* each again with asynchronous scheduling (``<workload>-async``: vLLM's
  ``AsyncScheduler`` / kvframe's async mode against the bridge in the
  engine's batch-queue order).

A second module run under the vLLM interpreter (``bridge_refusals.py``) checks
what the bridge refuses and how a client's agent fields arrive. Everything
skips cleanly without vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
HARNESS = REPO / "tools" / "differential"
if str(HARNESS) not in sys.path:
    sys.path.insert(0, str(HARNESS))

import compare  # noqa: E402  (the harness is a script folder, not a package)
from workloads import BRIDGE_POLICIES, POLICIES, WORKLOADS  # noqa: E402

NUM_REQUESTS = 40

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    python = compare.find_vllm_python()
    if python is None:
        pytest.skip("no vLLM reference interpreter (see docs/vllm.md)")
    probe = subprocess.run(
        [str(python), "-c", "import kvframe, kvframe_fcfs, kvframe_priority, kvframe_continuum"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(compare.tree_paths())),
    )
    if probe.returncode != 0:
        pytest.skip(
            "the vLLM interpreter cannot import kvframe and its plugins; install them "
            "there as docs/vllm.md says"
        )
    return python


@pytest.fixture(scope="module")
def comparison(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # compare puts this tree first on every driver's import path
    results, _ = compare.run_comparison(
        policies=(*POLICIES, *BRIDGE_POLICIES),
        num_requests=NUM_REQUESTS,
        vllm_python=vllm_python,
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp("bridge-differential"),
        blocks=True,
        bridge=True,
        scheduling=("sync", "async"),
    )
    return {r.workload: r for r in results}


@pytest.mark.parametrize("mode", ["", "-async"])
@pytest.mark.parametrize("policy", [*POLICIES, *BRIDGE_POLICIES])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_the_bridge_schedules_like_its_reference(
    comparison: dict[str, Any], workload: str, policy: str, mode: str
) -> None:
    """fcfs / priority: like vLLM's Scheduler (AsyncScheduler with ``-async``);
    continuum: like kvframe's own scheduler (in its async mode)."""
    result = comparison[f"{workload}-{policy}{mode}"]
    assert result.vllm["steps"] > 0, "the reference driver produced no records"
    assert result.ok, compare.format_details(result)


def test_the_comparison_sees_engine_outputs_and_pinning(comparison: dict[str, Any]) -> None:
    """Guard against a vacuous pass: outputs are compared, and continuum changes decisions."""
    records = list(compare.iter_records(comparison["prefix-fcfs"].kvframe_path))
    assert any(r.get("outputs") for r in records), "the bridge's EngineCoreOutputs not recorded"
    finished = [o for r in records for o in r["outputs"] if o[2] is not None]
    assert finished and all(o[2] == "length" for o in finished)
    pinned = compare.compare_runs(
        "continuum vs fcfs",
        comparison["agentic-fcfs"].kvframe_path,
        comparison["agentic-continuum"].kvframe_path,
    )
    assert pinned.num_diffs > 0, "continuum decided exactly as fcfs: nothing was pinned"


@pytest.fixture(scope="module")
def refusals(vllm_python: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(vllm_python), str(Path(__file__).with_name("bridge_refusals.py"))],
        capture_output=True,
        text=True,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(compare.tree_paths()),
            VLLM_LOGGING_LEVEL="ERROR",
        ),
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


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
