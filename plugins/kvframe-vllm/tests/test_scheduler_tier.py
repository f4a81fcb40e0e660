"""A kvframe scheduling policy and a kvframe CPU tier together in vLLM 0.19.1.

``KvframeScheduler`` with ``kv_transfer_config`` = vLLM's OffloadingConnector
and ``KvframeOffloadingSpec`` (``kvframe_vllm.tier``), against vLLM's own
``Scheduler`` with the OffloadingConnector and vLLM's own CPU spec: every tier
workload, two tier variants (``lru``, GPU-sized offloaded blocks, every store,
transfers landing next step; ``arc``, two-block offloaded blocks, the
``threshold`` reuse filter, seeded transfer delays), 40 requests each, fcfs
and priority; under ``continuum`` the bridge is compared with kvframe's own
scheduler and kvframe's model of the tier. Records compared step by step:
scheduled tokens, admissions, preemptions, prefix and tier hits, the
connector's loads and stores (GPU block ids and tier slots), the tier's
evictions, block ids, engine outputs. Both scheduling modes: synchronous, and
asynchronous (vLLM's ``AsyncScheduler`` + OffloadingConnector against the
bridge in kvframe's async mode, driven in the engine's batch-queue order, the
scripted worker's report applied with its step). Skips without the vLLM 0.19.1
reference interpreter.
"""

from __future__ import annotations

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
from workloads import TIER_WORKLOADS  # noqa: E402

NUM_REQUESTS = 40
VARIANTS = {
    "lru-f1-t0-next": {
        "evictions": ["lru"],
        "factors": [1],
        "thresholds": [0],
        "rules": ["next-step"],
    },
    "arc-f2-t2-seeded": {
        "evictions": ["arc"],
        "factors": [2],
        "thresholds": [2],
        "rules": ["seeded"],
    },
}
POLICIES = ("fcfs", "priority", "continuum")
MODES = ("sync", "async")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    python = compare.find_vllm_python()
    if python is None:
        pytest.skip("no vLLM reference interpreter (see docs/vllm.md)")
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import vllm, kvframe, kvframe_fcfs, kvframe_lru, kvframe_arc, kvframe_continuum;"
            "assert vllm.__version__.startswith('0.19')",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(compare.tree_paths())),
    )
    if probe.returncode != 0:
        pytest.skip("the vLLM 0.19.1 interpreter cannot import kvframe and its plugins")
    return python


@pytest.fixture(scope="module")
def comparison(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for variant, matrix in VARIANTS.items():
        runs, _ = compare.run_comparison(
            policies=POLICIES,
            num_requests=NUM_REQUESTS,
            vllm_python=vllm_python,
            kvframe_python=sys.executable,
            out_dir=tmp_path_factory.mktemp(f"bridge-tier-{variant}"),
            blocks=True,
            tier=matrix,
            bridge=True,
            scheduling=MODES,
        )
        for result in runs:
            results[result.workload] = result
    return results


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("workload", list(TIER_WORKLOADS))
def test_scheduler_and_tier_together_decide_like_the_reference(
    comparison: dict[str, Any], workload: str, variant: str, policy: str, mode: str
) -> None:
    m = VARIANTS[variant]
    name = (
        f"{workload}.{m['evictions'][0]}.f{m['factors'][0]}.t{m['thresholds'][0]}."
        f"{m['rules'][0]}-{policy}" + ("-async" if mode == "async" else "")
    )
    result = comparison[name]
    assert result.vllm["steps"] > 0, "the reference driver produced no records"
    assert result.ok, compare.format_details(result)


def test_the_tier_was_exercised_through_the_bridge(comparison: dict[str, Any]) -> None:
    """Guard against a vacuous pass: the bridge's tier loaded, stored and evicted."""
    bridged = [r.kvframe for r in comparison.values()]
    assert sum(s["tier_loads"] for s in bridged) > 50
    assert sum(s["tier_stores"] for s in bridged) > 500
    assert sum(s["tier_evictions"] for s in bridged) > 500
    assert sum(s["preemptions"] for s in bridged) > 50
