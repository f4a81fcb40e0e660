"""Differential tests: kvframe's offload policies and ledger against vLLM 0.19.1's own.

* ``lru`` and ``arc`` replay both Mooncake hash-id streams in both replay modes
  (``policy_replay.py``) with exactly vLLM's ``LRUCachePolicy`` /
  ``ARCCachePolicy`` hit counts and eviction sequences;
* the ``cpu`` tier (ledger, policies, ``threshold`` filter) answers a seeded
  connector-like call sequence exactly as ``CPUOffloadingManager`` (wrapped in
  ``FilterReusedOffloadingManager`` where the filter is on) does
  (``manager_differential.py``).

Needs the vLLM reference environment: ``$KVFRAME_VLLM_PYTHON``, or
``.vllm-reference-venv/bin/python`` at the repository root. Skipped otherwise.
The full table at all four capacities: ``python tests/offload/policy_replay.py compare``.
"""

from __future__ import annotations

import pytest

from . import manager_differential, policy_replay

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        not policy_replay.VLLM_PYTHON.exists(), reason="vLLM reference environment absent"
    ),
]


@pytest.mark.skipif(
    not policy_replay.trace_path("conversation").exists(), reason="Mooncake traces absent"
)
def test_lru_and_arc_replay_the_mooncake_streams_exactly_as_vllm():
    pytest.importorskip("kvframe_lru")
    pytest.importorskip("kvframe_arc")
    capacities = (1024, 16384)
    ours = policy_replay.run_all(policy_replay.kvframe_factories(), capacities=capacities)
    theirs = policy_replay.run_vllm(capacities)
    assert len(ours) == len(theirs) == 2 * 2 * 2 * len(capacities)
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine == reference
    assert all(r["evictions"] > 0 for r in ours if r["capacity"] == 1024)


def test_cpu_tier_answers_every_call_exactly_as_vllm():
    pytest.importorskip("kvframe_cpu_offload")
    ours = manager_differential.run_all(manager_differential.build_kvframe)
    theirs = manager_differential.run_vllm()
    for scenario, mine, reference in zip(manager_differential.SCENARIOS, ours, theirs, strict=True):
        difference = manager_differential.first_difference(mine, reference)
        assert difference is None, f"{scenario}: {difference}"
        outcomes = {e[3] is None for e in mine if e[0] == "store"}
        assert outcomes == {True, False} or scenario["num_blocks"] == 48
