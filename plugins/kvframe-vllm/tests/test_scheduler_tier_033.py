"""A kvframe scheduling policy and vLLM 0.33.0's CPU tier together in vLLM 0.33.0.

``KvframeScheduler`` with ``kv_transfer_config`` = vLLM 0.33.0's
OffloadingConnector (its job-numbered scheduler half, its ``CPUOffloadingSpec``
and cache policy) against vLLM 0.33.0's own ``Scheduler`` with the same
connector: every tier workload, two tier variants (``lru``, GPU-sized chunks,
every store, jobs landing next step; ``arc``, two-block chunks, the reuse filter,
seeded landing delays), 40 requests each, ``fcfs`` and ``priority``, the
``arc`` variant synchronous and asynchronous (vLLM's ``AsyncScheduler`` against
the bridge in kvframe's async mode, switch T22 deferring block frees as vLLM
0.33.0 does for a KV consumer), the worker played on both sides by
``stepping.JobWorker``. Records compared step by step:
scheduled tokens, admissions, preemptions, prefix and tier hits, the
connector's load and store jobs (GPU block ids and tier slots), flushed and
completed job ids, the tier's evictions, block ids, engine outputs. ``continuum``
is not here: vLLM has no counterpart, and the harness compares the bridge with
vLLM's scheduler only.

Also, under the same interpreter (``tier_refusals_033.py``): which tiers the
bridge takes on 0.33 and what it refuses, each refusal naming its fix.
Skips without the vLLM 0.33.0 reference interpreter (``$KVFRAME_VLLM033_PYTHON``).
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
from workloads import TIER_WORKLOADS  # noqa: E402

NUM_REQUESTS = 40
VERSION = "0.33.0"
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
# Which variants also run asynchronously (vLLM's default).
ASYNC_VARIANTS = ("arc-f2-t2-seeded",)
POLICIES = ("fcfs", "priority")

# slow: 42 runs of two vLLM 0.33.0 drivers, ~3.5 min on two loaded cores (2026-11-26).
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
            "import vllm, kvframe, kvframe_fcfs, kvframe_priority, kvframe_vllm;"
            "assert vllm.__version__.startswith('0.33')",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(compare.tree_paths())),
    )
    if probe.returncode != 0:
        pytest.skip("the vLLM 0.33 interpreter cannot import kvframe and its plugins")
    return python


@pytest.fixture(scope="module")
def comparison(vllm033_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for variant, matrix in VARIANTS.items():
        runs, _ = compare.run_comparison(
            policies=POLICIES,
            num_requests=NUM_REQUESTS,
            vllm_python=vllm033_python,
            kvframe_python=None,
            out_dir=tmp_path_factory.mktemp(f"bridge-tier-033-{variant}"),
            blocks=True,
            tier=matrix,
            bridge=True,
            vllm_version=VERSION,
            scheduling=("sync", "async") if variant in ASYNC_VARIANTS else ("sync",),
        )
        for result in runs:
            results[result.workload] = result
    return results


RUNS = [(variant, "sync") for variant in VARIANTS] + [
    (variant, "async") for variant in ASYNC_VARIANTS
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("variant", "mode"), RUNS)
@pytest.mark.parametrize("workload", list(TIER_WORKLOADS))
def test_scheduler_and_033_tier_together_decide_like_vllm_033(
    comparison: dict[str, Any], workload: str, variant: str, mode: str, policy: str
) -> None:
    m = VARIANTS[variant]
    name = (
        f"{workload}.{m['evictions'][0]}.f{m['factors'][0]}.t{m['thresholds'][0]}."
        f"{m['rules'][0]}-{policy}" + ("-async" if mode == "async" else "")
    )
    result = comparison[name]
    assert result.vllm["steps"] > 0, "the reference driver produced no records"
    assert result.ok, compare.format_details(result)


def test_the_033_connector_paths_were_exercised(comparison: dict[str, Any]) -> None:
    """Guard against a vacuous pass: through the bridge, vLLM 0.33's connector
    loaded, stored, evicted, flushed jobs (preempted requests' stores, and stores
    whose source blocks were allocated again) and had requests wait for loads."""
    bridged = [r.kvframe for r in comparison.values()]
    assert sum(s["tier_loads"] for s in bridged) > 50
    assert sum(s["tier_stores"] for s in bridged) > 300
    assert sum(s["tier_evictions"] for s in bridged) > 300
    assert sum(s["preemptions"] for s in bridged) > 50
    flushed = waiting = completed = 0
    for result in comparison.values():
        for record in compare.iter_records(result.kvframe_path):
            flushed += len(record.get("jobs_to_flush", ()))
            waiting += len(record.get("waiting_remote", ()))
            completed += len(record.get("completed_jobs", ()))
    assert flushed > 10 and waiting > 10 and completed > 300, (flushed, waiting, completed)


@pytest.fixture(scope="module")
def refusals(vllm033_python: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(vllm033_python), str(Path(__file__).with_name("tier_refusals_033.py"))],
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


def test_vllms_own_tier_and_kvframe_policies_are_taken(refusals: dict[str, Any]) -> None:
    assert refusals["vllm_lru"] == {
        "view": "VllmConnector033",
        "policy": "LRUCachePolicy",
        "policy_module": "vllm.v1.kv_offload.cpu.policies.lru",
    }
    assert refusals["vllm_arc"]["policy"] == "ARCCachePolicy"
    assert refusals["kvframe_policy"]["policy"] == "KvframeCachePolicy[arc:variant=paper]"


def test_what_033_does_not_match_is_refused_naming_the_fix(refusals: dict[str, Any]) -> None:
    spec = refusals["kvframe_spec"]
    assert spec["type"] == "UnsupportedByKvframe"
    assert "'KvframeOffloadingSpec' on vLLM 0.33" in spec["message"]
    assert "eviction_policy 'kvframe:<config string>'" in spec["message"]
    assert "sync_load_budget_bytes" in refusals["sync_loads"]["message"]
    assert "'ExampleConnector'" in refusals["other_connector"]["message"]
    # Async scheduling with the tier is served (T22 defers frees as vLLM 0.33.0
    # does for a KV consumer); with a connector that only produces it is refused.
    assert refusals["async"]["view"] == "VllmConnector033"
    assert "not a KV consumer" in refusals["async_producer"]["message"]
    assert "--no-async-scheduling" in refusals["async_producer"]["message"]


def test_a_cache_reset_resets_the_tier_as_vllm_does(refusals: dict[str, Any]) -> None:
    """vLLM 0.33's pause and sleep clear the cache with ``reset_connector=True``: the
    connector's ``reset_cache`` runs and the reset succeeds (the bridge used to report
    failure whenever a connector was configured, without resetting it)."""
    assert refusals["reset"] == {"result": True, "calls": ["reset_cache"], "without": True}
    assert refusals["reset"] == refusals["reset_vllm"]  # vLLM 0.33.0's own Scheduler
