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
from hybrid_workloads import REFUSED, hybrid_names, hybrid_workloads
from vllm_reference import RELEASES, reference_python

NUM_REQUESTS = 20


@pytest.mark.parametrize("release", RELEASES)
def test_every_hybrid_workload_matches_vllm_step_by_step(
    release: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every group's block ids, every step, sync and async, fcfs and priority."""
    names = list(hybrid_names(release))
    workloads = hybrid_workloads(names, ("fcfs", "priority"), NUM_REQUESTS, 0)
    for workload in workloads:
        workload["config"]["vllm"] = release
    results, _ = compare.run_workloads(
        compare.with_scheduling(workloads, ("sync", "async")),
        vllm_python=reference_python(release),
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp(f"hybrid-{release}"),
        blocks=True,
    )
    assert len(results) == 4 * len(names)
    for result in results:
        assert result.vllm["steps"] > 0, result.vllm_error
        assert result.ok, compare.format_details(result)
    assert sum(r.vllm["preemptions"] for r in results) > 0
    assert sum(r.vllm["prefix_hit_tokens"] for r in results) > 0


def test_a_release_that_refuses_mamba_caching_is_followed_by_name() -> None:
    """vLLM 0.33.0 asks mamba_cache_mode 'align' for Mamba prefix caching; kvframe's
    0.33.0 target refuses the same configuration (switch G3), 0.19.1's runs it."""
    import kvframe_driver

    (refused,) = REFUSED["0.33.0"]
    for release, fails in (("0.19.1", False), ("0.33.0", True)):
        (workload,) = hybrid_workloads([refused], ("fcfs",), 4, 0)
        workload["config"]["vllm"] = release
        if fails:
            with pytest.raises(ValueError, match="mamba_cache_mode='align'"):
                kvframe_driver.KvframeAdapter(workload["config"])
        else:
            assert kvframe_driver.KvframeAdapter(workload["config"]).scheduler is not None
