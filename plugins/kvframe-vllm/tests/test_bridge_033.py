"""The bridge on vLLM 0.33.0: the scheduler seam, and kvframe eviction plugins in 0.33's tier.

Runs with the vLLM 0.33 reference interpreter (``$KVFRAME_VLLM033_PYTHON`` or
``<repo>/.vllm033-reference-venv``, built by ``tools/vllm-reference/install-0.33.sh
--with-kvframe``) and skips cleanly without it:

* ``KvframeScheduler`` in 0.33's types (``hash_block_size``, Model Runner V2's
  resumed-as-new requests, ``prefill_stats``), kvframe's core on the 0.33.0
  fidelity target: step by step like vLLM 0.33.0's own ``Scheduler`` under
  ``fcfs`` / ``priority``, like kvframe's own scheduler (0.33.0 target) under
  ``continuum``, 40 requests per workload, block ids and engine outputs included;
* ``kvframe_vllm.cache_policy`` through vLLM 0.33's own ``CachePolicyFactory``
  (``cache_policy_033.py`` under that interpreter): built as vLLM builds its
  policies, kvframe's ``lru`` making exactly the calls' results of vLLM's
  ``lru`` when requests carry no token positions, other plugins running
  unchanged, and a typo stopping vLLM with kvframe's message.
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
VERSION = "0.33.0"

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vllm033_python() -> Path:
    python = compare.find_vllm_python(version=VERSION)
    if python is None:
        pytest.skip("no vLLM 0.33 reference interpreter (see docs/vllm.md)")
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import vllm, kvframe, kvframe_fcfs, kvframe_priority, kvframe_continuum, "
            "kvframe_lru, kvframe_arc; assert vllm.__version__.startswith('0.33')",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(compare.tree_paths())),
    )
    if probe.returncode != 0:
        pytest.skip(
            "the vLLM 0.33 interpreter cannot import kvframe and its plugins; build it "
            "with tools/vllm-reference/install-0.33.sh --with-kvframe"
        )
    return python


@pytest.fixture(scope="module")
def comparison(vllm033_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results, _ = compare.run_comparison(
        policies=(*POLICIES, *BRIDGE_POLICIES),
        num_requests=NUM_REQUESTS,
        vllm_python=vllm033_python,
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp("bridge-033-differential"),
        blocks=True,
        bridge=True,
        vllm_version=VERSION,
    )
    return {r.workload: r for r in results}


@pytest.mark.parametrize("policy", [*POLICIES, *BRIDGE_POLICIES])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_the_bridge_schedules_like_vllm_033(
    comparison: dict[str, Any], workload: str, policy: str
) -> None:
    result = comparison[f"{workload}-{policy}"]
    assert result.vllm["steps"] > 0, "the reference driver produced no records"
    assert result.ok, compare.format_details(result)


def test_resumed_requests_reach_model_runner_v2_as_new_ones(comparison: dict[str, Any]) -> None:
    """Guard against a vacuous pass: preemptions happen, and resumed requests are compared."""
    records = list(compare.iter_records(comparison["pressure-fcfs"].kvframe_path))
    assert sum(len(r["preempted"]) for r in records) > 0
    assert sum(len(r["resumed"]) for r in records) > 0
    assert any(r.get("outputs") for r in records)


@pytest.fixture(scope="module")
def tier(vllm033_python: Path) -> dict[str, Any]:
    paths = [*compare.tree_paths(), str(REPO / "examples" / "third_party_policy")]
    out = subprocess.run(
        [str(vllm033_python), str(Path(__file__).with_name("cache_policy_033.py"))],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(paths), VLLM_LOGGING_LEVEL="ERROR"),
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_vllms_factory_builds_the_kvframe_plugin(tier: dict[str, Any]) -> None:
    assert tier["built"] == ["KvframeCachePolicy[arc:variant=paper]", "kvframe_arc"]


def test_kvframe_lru_answers_every_manager_call_as_vllms_lru(tier: dict[str, Any]) -> None:
    for name, run in tier["replay"].items():
        assert run["evicted"] > 100 and run["loads"] > 50, name  # the tier was under pressure
        assert run["differing"] == 0, (name, run["first"])


def test_other_plugins_run_in_vllms_tier_unchanged(tier: dict[str, Any]) -> None:
    assert set(tier["others"]) == {"arc", "arc:variant=paper", "kvframe_s3fifo:S3FIFOPolicy"}
    assert all(records > 1000 for records in tier["others"].values())


def test_a_typo_stops_the_tier_with_kvframes_message(tier: dict[str, Any]) -> None:
    assert tier["typo"]["type"] == "ConfigError"
    assert tier["typo"]["message"].startswith("kv_connector_extra_config['eviction_policy']: ")
    assert "did you mean 'lru'?" in tier["typo"]["message"]
    assert "kvframe:<config string>" in tier["unprefixed"]["message"]
