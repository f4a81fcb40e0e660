"""kvframe's 0.33 tier makes vLLM 0.33.0's decisions, step by step (issue 39).

The whole offload loop under vLLM 0.33.0 -- transfers as numbered jobs, a
store's chunks ready when its job lands, a finished request's blocks freed at
once and its last stores fenced, prompt-only offloading, per-key lookups that
defer a request while a chunk is being written, the store cursor restarting
at every lookup, the request-scoped LRU / ARC and the reuse filter inside the
manager -- is run through vLLM 0.33.0's Scheduler with its own
OffloadingConnector and through kvframe's Scheduler under the 0.33.0 target
(``JobOffloadingConnector`` over ``RequestScopedOffloadManager``), the worker
played by one shared script (``tools/differential/stepping.py``:
``JobWorker``). Every tier workload runs at 40 requests under a covering set
of tier variants; ``docs/fidelity.md`` records the 240-request matrix.

Skips at once without vLLM 0.33.0's reference interpreter
(``$KVFRAME_VLLM033_PYTHON`` or ``.vllm033-reference-venv``).
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

# (eviction, block_size_factor, store_threshold, completion rule): every value of
# every axis appears, and each pair of axes meets in at least two combinations.
VARIANTS = [
    ("lru", 1, 0, "next-step"),
    ("arc", 2, 2, "seeded"),
    ("lru", 2, 2, "next-step"),
    ("arc", 1, 0, "seeded"),
]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _name(workload: str, variant: tuple[str, int, int, str], policy: str = "fcfs") -> str:
    eviction, factor, threshold, rule = variant
    return f"{workload}.{eviction}.f{factor}.t{threshold}.{rule}-{policy}"


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of both drivers over every tier workload x variant (one vLLM start-up)."""
    vllm_python = compare.find_vllm_python(version="0.33.0")
    if vllm_python is None:
        pytest.skip(
            "no vLLM 0.33.0 reference interpreter (set KVFRAME_VLLM033_PYTHON or build "
            ".vllm033-reference-venv with tools/vllm-reference/install-0.33.sh)"
        )
    out_dir = tmp_path_factory.mktemp("tier-differential-033")
    workloads = [
        generate_tier(
            name,
            policy,
            eviction=eviction,
            block_size_factor=factor,
            store_threshold=threshold,
            rule=rule,
            num_requests=NUM_REQUESTS,
        )
        for name in TIER_WORKLOADS
        for eviction, factor, threshold, rule in VARIANTS
        for policy in ("fcfs", "priority")
    ]
    for workload in workloads:
        workload["config"]["vllm"] = "0.33.0"
    paths = [write_workload(wl, out_dir / "workloads" / f"{wl['name']}.json") for wl in workloads]
    runs = compare.run_drivers(
        paths, out_dir, vllm_python=vllm_python, kvframe_python=sys.executable, blocks=True
    )
    results = {
        wl["name"]: compare.compare_runs(
            wl["name"],
            out_dir / "vllm" / f"{wl['name']}.jsonl",
            out_dir / "kvframe" / f"{wl['name']}.jsonl",
        )
        for wl in workloads
    }
    return {"results": results, "runs": runs}


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("workload", list(TIER_WORKLOADS))
def test_kvframe_033_tier_schedules_exactly_like_vllm_033(
    comparison: dict[str, Any], workload: str, variant: tuple[str, int, int, str], policy: str
) -> None:
    result = comparison["results"][_name(workload, variant, policy)]
    if result.vllm_error:
        pytest.fail(f"the vLLM driver itself failed (a harness bug):\n{result.vllm_error}")
    assert result.vllm["steps"] > 0, "the vLLM driver produced no records"
    assert result.ok, compare.format_details(result)


def test_tier_workloads_exercise_the_033_tier(comparison: dict[str, Any]) -> None:
    """Guard against a vacuous pass: loads, stores, tier evictions and flushes happen."""
    by_name = comparison["results"]
    results = by_name.values()
    assert all(r.vllm["tier_stores"] > 0 for name, r in by_name.items() if ".t0." in name)
    assert sum(r.vllm["tier_loads"] for r in results) > 0
    assert sum(r.vllm["tier_evictions"] for r in results) > 0
    for variant in VARIANTS:
        reuse = by_name[_name("tier-reuse", variant)].vllm
        assert reuse["tier_hit_tokens"] > 0, f"tier-reuse {variant} never hit the tier"
