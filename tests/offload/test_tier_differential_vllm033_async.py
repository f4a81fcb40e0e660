"""The CPU tier under asynchronous scheduling makes vLLM 0.33.0's decisions, step by step.

vLLM 0.33.0's ``AsyncScheduler`` with its ``OffloadingConnector`` against
kvframe's core in its async mode under the 0.33.0 target (the job connector,
switch T22's deferred block frees), both driven in the engine core's
batch-queue order (``tools/differential/stepping.run_async``): step N+1 is
scheduled -- and its connector metadata run by the worker -- before step N's
output, with the jobs the worker reported landed, is applied. The worker is
one shared script (``JobWorker``, the seeded completion rule: transfers land
0..3 steps after they start, drawn per request and transfer). Every tier
workload at 40 requests, two tier variants, under fcfs and priority, block ids
included; ``docs/fidelity.md`` records the full matrix.

Skips at once without vLLM 0.33.0's reference interpreter
(``$KVFRAME_VLLM033_PYTHON`` or ``.vllm033-reference-venv``; CI builds none).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "tools" / "differential"
if str(HARNESS) not in sys.path:
    sys.path.insert(0, str(HARNESS))

import compare  # noqa: E402  (the harness is a script folder, not a package)
from workloads import TIER_WORKLOADS, generate_tier, write_workload  # noqa: E402

NUM_REQUESTS = 40
POLICIES = ("fcfs", "priority")

# (eviction, block_size_factor, store_threshold): the seeded rule for both.
VARIANTS = [("arc", 2, 2), ("lru", 1, 0)]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _name(workload: str, variant: tuple[str, int, int], policy: str) -> str:
    eviction, factor, threshold = variant
    return f"{workload}.{eviction}.f{factor}.t{threshold}.seeded-{policy}-async"


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of both drivers over every workload x variant x policy (one vLLM start-up)."""
    vllm_python = compare.find_vllm_python(version="0.33.0")
    if vllm_python is None:
        pytest.skip(
            "no vLLM 0.33.0 reference interpreter (set KVFRAME_VLLM033_PYTHON or build "
            ".vllm033-reference-venv with tools/vllm-reference/install-0.33.sh)"
        )
    out_dir = tmp_path_factory.mktemp("tier-differential-033-async")
    tier_runs = [
        generate_tier(
            name,
            policy,
            eviction=eviction,
            block_size_factor=factor,
            store_threshold=threshold,
            rule="seeded",
            num_requests=NUM_REQUESTS,
        )
        for name in TIER_WORKLOADS
        for eviction, factor, threshold in VARIANTS
        for policy in POLICIES
    ]
    for workload in tier_runs:
        workload["config"]["vllm"] = "0.33.0"
    workloads = compare.with_scheduling(tier_runs, ("async",))
    paths = [write_workload(wl, out_dir / "workloads" / f"{wl['name']}.json") for wl in workloads]
    compare.run_drivers(
        paths, out_dir, vllm_python=vllm_python, kvframe_python=sys.executable, blocks=True
    )
    return {
        wl["name"]: compare.compare_runs(
            wl["name"],
            out_dir / "vllm" / f"{wl['name']}.jsonl",
            out_dir / "kvframe" / f"{wl['name']}.jsonl",
        )
        for wl in workloads
    }


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("workload", list(TIER_WORKLOADS))
def test_the_0_33_tier_under_async_scheduling_schedules_exactly_like_vllm(
    comparison: dict[str, Any], workload: str, variant: tuple[str, int, int], policy: str
) -> None:
    result = comparison[_name(workload, variant, policy)]
    if result.vllm_error:
        pytest.fail(f"the vLLM driver itself failed (a harness bug):\n{result.vllm_error}")
    assert result.vllm["steps"] > 0, "the vLLM driver produced no records"
    assert result.ok, compare.format_details(result)


def test_the_0_33_async_tier_workloads_exercise_the_tier(comparison: dict[str, Any]) -> None:
    """Guard against a vacuous pass: loads, stores, and evictions all happen."""
    results = comparison.values()
    assert sum(r.vllm["tier_loads"] for r in results) > 0
    assert sum(r.vllm["tier_stores"] for r in results) > 0
    assert sum(r.vllm["tier_evictions"] for r in results) > 0
    assert sum(r.vllm["tier_hit_tokens"] for r in results) > 0
