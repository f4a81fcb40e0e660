"""kvframe's scheduler + CPU tier make vLLM's decisions, step by step (issue #18).

The whole offload loop -- lookups through the connector, requests waiting for
asynchronous loads, stores deferred to the next step, blocks held until a
store lands, the tier's evictions -- is run through vLLM 0.19.1's Scheduler
with its own OffloadingConnector and through kvframe's Scheduler with its
OffloadingConnector, the worker played by one shared script
(``tools/differential/stepping.py``: ``ScriptedWorker``). Every tier workload
runs at 40 requests under a covering set of tier variants (both eviction
policies, both block-size factors, with and without the reuse filter, both
completion rules); ``docs/fidelity.md`` records the full 240-request matrix.

Skips at once without the vLLM reference interpreter (CI does not build one).
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


def _name(workload: str, variant: tuple[str, int, int, str]) -> str:
    eviction, factor, threshold, rule = variant
    return f"{workload}.{eviction}.f{factor}.t{threshold}.{rule}-fcfs"


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of both drivers over every tier workload x variant (one vLLM start-up)."""
    vllm_python = compare.find_vllm_python()
    if vllm_python is None:
        pytest.skip(
            "no vLLM reference interpreter (set KVFRAME_VLLM_PYTHON or build "
            ".vllm-reference-venv with ../shared/tools/vllm-reference/install.sh)"
        )
    out_dir = tmp_path_factory.mktemp("tier-differential")
    workloads = [
        generate_tier(
            name,
            "fcfs",
            eviction=eviction,
            block_size_factor=factor,
            store_threshold=threshold,
            rule=rule,
            num_requests=NUM_REQUESTS,
        )
        for name in TIER_WORKLOADS
        for eviction, factor, threshold, rule in VARIANTS
    ]
    # Issue 32: a 240-request run under priority that reached the admission-stall
    # breaker while a finished request's store was in flight (vLLM waits a step).
    workloads.append(
        generate_tier(
            "tier-pressure-tight",
            "priority",
            eviction="lru",
            block_size_factor=1,
            store_threshold=0,
            rule="seeded",
        )
    )
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


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("workload", list(TIER_WORKLOADS))
def test_kvframe_with_a_tier_schedules_exactly_like_vllm(
    comparison: dict[str, Any], workload: str, variant: tuple[str, int, int, str]
) -> None:
    result = comparison["results"][_name(workload, variant)]
    if result.vllm_error:
        pytest.fail(f"the vLLM driver itself failed (a harness bug):\n{result.vllm_error}")
    assert result.vllm["steps"] > 0, "the vLLM driver produced no records"
    assert result.ok, compare.format_details(result)


def test_a_stall_with_a_store_in_flight_waits_a_step_as_vllm_does(
    comparison: dict[str, Any],
) -> None:
    result = comparison["results"]["tier-pressure-tight.lru.f1.t0.seeded-priority"]
    if result.vllm_error:
        pytest.fail(f"the vLLM driver itself failed (a harness bug):\n{result.vllm_error}")
    assert result.vllm["preemptions"] > 0
    assert result.ok, compare.format_details(result)


def test_tier_workloads_exercise_the_tier(comparison: dict[str, Any]) -> None:
    """Guard against a vacuous pass: loads, stores and tier evictions all happen."""
    by_name = comparison["results"]
    results = by_name.values()
    # Without the reuse filter every computed block is offered to the tier.
    assert all(r.vllm["tier_stores"] > 0 for name, r in by_name.items() if ".t0." in name)
    assert sum(r.vllm["tier_loads"] for r in results) > 0
    assert sum(r.vllm["tier_evictions"] for r in results) > 0
    for variant in VARIANTS:
        reuse = comparison["results"][_name("tier-reuse", variant)].vllm
        assert reuse["tier_hit_tokens"] > 0, f"tier-reuse {variant} never hit the tier"
