"""Hybrid models' KV-cache groups against vLLM's own Scheduler (issue 46).

The hybrid workloads (``tools/differential/hybrid_workloads.py``: gpt-oss-like,
Gemma-3-like, Llama-4-like, a Mamba hybrid; prefix caching on and off) run under
fcfs and priority, sync and async, on each release's reference interpreter; every
step must agree, block ids of every group included. 20 requests each keep a run
short; the pressure and chunked pools still preempt. Skipped without the
interpreters (CI builds none).
"""

from __future__ import annotations

import sys

import compare
import pytest
from hybrid_workloads import HYBRID_NAMES, hybrid_workloads
from vllm_reference import RELEASES, reference_python

NUM_REQUESTS = 20


@pytest.mark.parametrize("release", RELEASES)
def test_every_hybrid_workload_matches_vllm_step_by_step(
    release: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every group's block ids, every step, sync and async, fcfs and priority."""
    workloads = hybrid_workloads(list(HYBRID_NAMES), ("fcfs", "priority"), NUM_REQUESTS, 0)
    for workload in workloads:
        workload["config"]["vllm"] = release
    results, _ = compare.run_workloads(
        compare.with_scheduling(workloads, ("sync", "async")),
        vllm_python=reference_python(release),
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp(f"hybrid-{release}"),
        blocks=True,
    )
    assert len(results) == 4 * len(HYBRID_NAMES)
    for result in results:
        assert result.vllm["steps"] > 0, result.vllm_error
        assert result.ok, compare.format_details(result)
    assert sum(r.vllm["preemptions"] for r in results) > 0
    assert sum(r.vllm["prefix_hit_tokens"] for r in results) > 0
