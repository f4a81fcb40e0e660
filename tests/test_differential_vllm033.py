"""kvframe's 0.33 fidelity target schedules like vLLM 0.33.0, step for step (issue #39).

Small (40-request) versions of every differential workload under both
scheduling policies, through vLLM 0.33.0's real Scheduler and through kvframe
with ``fidelity="0.33.0"``, block ids included; and the one-per-switch
workloads (``tools/differential/switch_workloads.py``) through *each* vLLM
release against the matching target, so that every switch is shown to match
the vLLM it claims to. See ``docs/fidelity.md``.

Needs the vLLM reference interpreters (``$KVFRAME_VLLM033_PYTHON`` or
``<repo>/.vllm033-reference-venv/bin/python`` built by
``tools/vllm-reference/install-0.33.sh``; 0.19.1 as in
``tests/test_differential_vllm.py``); each part skips at once without its
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
from switch_workloads import SWITCH_WORKLOADS, switch_workload  # noqa: E402
from workloads import POLICIES, WORKLOADS  # noqa: E402

NUM_REQUESTS = 40

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _interpreter(version: str) -> Path:
    python = compare.find_vllm_python(version=version)
    if python is None:
        pytest.skip(f"no vLLM {version} reference interpreter (see docs/fidelity.md)")
    return python


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every workload against vLLM 0.33.0 (one vLLM start-up)."""
    results, _ = compare.run_comparison(
        num_requests=NUM_REQUESTS,
        vllm_python=_interpreter("0.33.0"),
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp("differential033"),
        blocks=True,
        vllm_version="0.33.0",
    )
    return {r.workload: r for r in results}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_kvframe_0_33_schedules_exactly_like_vllm_0_33(
    comparison: dict[str, Any], workload: str, policy: str
) -> None:
    result = comparison[f"{workload}-{policy}"]
    if result.vllm_error:
        pytest.fail(f"the vLLM driver itself failed (a harness bug):\n{result.vllm_error}")
    assert result.vllm["steps"] > 0, "the vLLM driver produced no records"
    assert result.ok, compare.format_details(result)


@pytest.mark.parametrize("version", compare.VLLM_VERSIONS)
def test_each_switch_workload_matches_its_vllm(
    version: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each target matches its own vLLM where the two releases part."""
    results, _ = compare.run_comparison(
        vllm_python=_interpreter(version),
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp(f"switches-{version}"),
        blocks=True,
        vllm_version=version,
        switches=True,
    )
    names = [switch_workload(name)["name"] for name in SWITCH_WORKLOADS]
    assert [r.workload for r in results] == names
    for result in results:
        assert result.vllm["steps"] > 0, result.vllm_error
        assert result.ok, compare.format_details(result)
