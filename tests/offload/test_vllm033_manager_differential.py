"""kvframe's 0.33 tier ledger and policies answer exactly as vLLM 0.33.0's (issue 39).

``manager_differential_v033.py`` plays vLLM 0.33.0's connector against
``RequestScopedOffloadManager`` (with ``RankLRUPolicy`` / ``RequestARCPolicy``)
and against vLLM 0.33.0's ``CPUOffloadingManager`` (its rank-heap LRU and
request-scoped ARC, the reuse filter inside at ``store_threshold`` 2), 16
seeded scenarios of ~490 calls each, and requires equal logs: every lookup
answer, loaded slot, stored key and slot, eviction (in order) and refusal.

Needs vLLM 0.33.0's reference environment: ``$KVFRAME_VLLM033_PYTHON``, or
``.vllm033-reference-venv/bin/python`` at the repository root. Skipped otherwise.
"""

from __future__ import annotations

import pytest

from . import manager_differential_v033 as differential

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        not differential.VLLM033_PYTHON.exists(),
        reason="vLLM 0.33.0 reference environment absent",
    ),
]


def test_the_033_tier_answers_every_call_exactly_as_vllm_033(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("kvframe_lru")
    pytest.importorskip("kvframe_arc")
    assert differential.compare() == 0, capsys.readouterr().out
