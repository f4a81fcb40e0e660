"""kvframe's asynchronous-scheduling mode decides like vLLM's AsyncScheduler, step for step.

Small (40-request) versions of every differential workload under both
scheduling policies, with ``async_scheduling`` on, through each vLLM release's
real ``AsyncScheduler`` and through kvframe's core with the matching fidelity
target, both driven in the engine core's batch-queue order
(``tools/differential/stepping.run_async``), block ids included. Switch E's
workload (``switch-victim-cursor``, an asynchronous one) is checked against
both releases by ``tests/test_differential_vllm033.py``. See docs/fidelity.md.

Needs the vLLM reference interpreters (``$KVFRAME_VLLM_PYTHON`` /
``$KVFRAME_VLLM033_PYTHON`` or the repo's reference venvs; see
``tests/test_differential_vllm033.py``); each part skips at once without its
interpreter, so CI pays nothing.
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


def _interpreter(version: str) -> Path:
    python = compare.find_vllm_python(version=version)
    if python is None:
        pytest.skip(f"no vLLM {version} reference interpreter (see docs/fidelity.md)")
    return python


@pytest.fixture(scope="module", params=compare.VLLM_VERSIONS)
def comparison(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Every workload, asynchronous, against one vLLM release (one vLLM start-up)."""
    version = request.param
    results, _ = compare.run_comparison(
        num_requests=NUM_REQUESTS,
        vllm_python=_interpreter(version),
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp(f"differential-async-{version}"),
        blocks=True,
        vllm_version=version,
        scheduling=("async",),
    )
    return {r.workload: r for r in results}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_kvframe_async_schedules_exactly_like_vllms_async_scheduler(
    comparison: dict[str, Any], workload: str, policy: str
) -> None:
    result = comparison[f"{workload}-{policy}-async"]
    if result.vllm_error:
        pytest.fail(f"the vLLM driver itself failed (a harness bug):\n{result.vllm_error}")
    assert result.vllm["steps"] > 0, "the vLLM driver produced no records"
    assert result.ok, compare.format_details(result)
