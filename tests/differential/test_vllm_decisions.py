"""kvframe's scheduler makes vLLM V1's decisions, step for step (issue #4).

Runs small (40-request) versions of every differential workload under both
scheduling policies through vLLM 0.19.1's real Scheduler and through kvframe's,
and requires identical per-step records, block ids included. The harness lives
in ``tools/differential`` (see ``docs/fidelity.md``).

Needs the vLLM reference interpreter (``--vllm-python`` is not available here:
``$KVFRAME_VLLM_PYTHON`` or ``<repo>/.vllm-reference-venv/bin/python``); without
it the whole module skips at once, so CI pays nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "tools" / "differential"
if str(HARNESS) not in sys.path:
    sys.path.insert(0, str(HARNESS))

import compare  # noqa: E402  (the harness is a script folder, not a package)
from workloads import POLICIES, WORKLOADS  # noqa: E402

NUM_REQUESTS = 40

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of both drivers over every workload (one vLLM start-up, ~15 s)."""
    vllm_python = compare.find_vllm_python()
    if vllm_python is None:
        pytest.skip(
            "no vLLM reference interpreter (set KVFRAME_VLLM_PYTHON or build "
            ".vllm-reference-venv with ../shared/tools/vllm-reference/install.sh)"
        )
    results, runs = compare.run_comparison(
        num_requests=NUM_REQUESTS,
        vllm_python=vllm_python,
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp("differential"),
        blocks=True,
    )
    return {"results": {r.workload: r for r in results}, "runs": runs}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_kvframe_schedules_exactly_like_vllm(
    comparison: dict[str, Any], workload: str, policy: str
) -> None:
    result = comparison["results"][f"{workload}-{policy}"]
    if result.vllm_error:
        pytest.fail(f"the vLLM driver itself failed (a harness bug):\n{result.vllm_error}")
    assert result.vllm["steps"] > 0, "the vLLM driver produced no records"
    assert result.ok, compare.format_details(result)


def test_workloads_exercise_what_they_claim(comparison: dict[str, Any]) -> None:
    """Guard against a vacuous pass: the small workloads still preempt, hit and chunk."""
    results = comparison["results"]
    for policy in POLICIES:
        assert results[f"pressure-{policy}"].vllm["preemptions"] > 0
        assert results[f"priorities-{policy}"].vllm["preemptions"] > 0
        assert results[f"prefix-{policy}"].vllm["prefix_hit_tokens"] > 0
        assert results[f"prefix-nocache-{policy}"].vllm["prefix_hit_tokens"] == 0
        chunked = compare.iter_records(results[f"chunked-{policy}"].vllm_path)
        budget_steps = sum(1 for r in chunked if sum(n for _, n in r["scheduled"]) == 192)
        assert budget_steps > 0, "the chunked workload never filled its token budget"
