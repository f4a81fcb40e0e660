"""The paper sweep's JCT breakdown (examples/agentic_continuum/paper/jct_breakdown.py).

docs/continuum.md explains the tier's effect on Continuum's gain with this
script's per-phase figures, so they must account for every second of a job:
the phases add up to the mean JCT, whatever the workload, scheduler or tier.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvframe.workloads.agentic import AgenticConfig, write_agentic_jsonl

SCRIPT = Path(__file__).resolve().parents[3] / "examples/agentic_continuum/paper/jct_breakdown.py"


def _load_script():
    # Registered under its own name: the engine resolves the tracer's config
    # string ("jct_breakdown:PhaseTracer") by importing that module.
    module = sys.modules.get("jct_breakdown")
    if module is None:
        spec = importlib.util.spec_from_file_location("jct_breakdown", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["jct_breakdown"] = module
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _load_script()


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 1000),
    scheduler=st.sampled_from(["fcfs", "continuum"]),
    tier=st.booleans(),
)
def test_phases_add_up_to_the_mean_jct(script, tmp_path_factory, seed, scheduler, tier):
    path = tmp_path_factory.mktemp("w") / "agentic.jsonl"
    # 2,100 blocks hold one 32k-token context (the generator's cap), so every
    # turn runs; a few jobs at once contend for them.
    write_agentic_jsonl(path, AgenticConfig(num_jobs=8, rate=4.0, seed=seed))
    cell = {"workload": str(path), "scheduler": scheduler, "num_gpu_blocks": 2100}
    if tier:
        cell["offload"] = "cpu:capacity=4GiB"
    out = script.breakdown(cell)
    assert out["jobs left out"] == 0
    assert sum(out[phase] for phase in script.PHASES) == pytest.approx(out["jct"], abs=1e-6)
    assert all(out[phase] >= -1e-9 for phase in script.PHASES)
    if not tier:
        assert out["tier load"] == out["turns that loaded"] == out["tokens from tier"] == 0.0
