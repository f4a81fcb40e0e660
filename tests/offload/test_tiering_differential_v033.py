"""kvframe's tier chain decides exactly as vLLM 0.33.0's ``TieringOffloadingManager`` (issue 49).

``tiering_differential_v033.py`` plays vLLM 0.33.0's connector against
:class:`kvframe.offload.tiering.TieringOffloadManager` and against vLLM 0.33.0's
own tiering manager (over its ``CPUPrimaryTierOffloadingManager``), with one
or two tiers below DRAM, 16 seeded scenarios of ~430 calls each, and requires
equal logs: every lookup answer (promotions answer ``pending``), loaded and
stored DRAM slot, eviction, every job handed to a tier (id, direction, keys,
DRAM slots) and the chain's pending work at each step's end. Each of its
deliberately wrong chains (:data:`MUTATIONS`) must be caught.

Needs vLLM 0.33.0's reference environment: ``$KVFRAME_VLLM033_PYTHON``, or
``.vllm033-reference-venv/bin/python`` at the repository root. Skipped otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

from . import tiering_differential_v033 as differential

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        not differential.VLLM033_PYTHON.exists(),
        reason="vLLM 0.33.0 reference environment absent",
    ),
]


@pytest.fixture(scope="module")
def reference() -> list[list[Any]]:
    pytest.importorskip("kvframe_lru")
    pytest.importorskip("kvframe_arc")
    return differential.vllm_logs()


def test_the_tier_chain_answers_every_call_exactly_as_vllm_033(
    reference: list[list[Any]],
) -> None:
    assert differential.first_difference(reference) is None
    counts = differential.coverage(reference)
    # The scenarios reach promotions, cascades, failed tier jobs and tier evictions.
    for decision in ("lookup pending", "tier promote", "tier cascade", "tier job failed"):
        assert counts.get(decision, 0) > 0, (decision, counts)
    assert counts.get("tier removed", 0) > 0, counts


@pytest.mark.parametrize("mutation", sorted(differential.MUTATIONS))
def test_the_comparison_catches_a_wrong_chain(reference: list[list[Any]], mutation: str) -> None:
    assert differential.first_difference(reference, mutation) is not None
