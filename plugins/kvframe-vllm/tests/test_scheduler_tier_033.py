"""Which tiers the bridge takes on vLLM 0.33.0 and what it refuses, each refusal naming
its fix; and a cache reset that resets the tier as vLLM 0.33.0's own Scheduler does.

``tier_refusals_033.py`` runs under the vLLM 0.33.0 reference interpreter
(``$KVFRAME_VLLM033_PYTHON``) and skips cleanly without it. ``KvframeScheduler``
with vLLM 0.33.0's OffloadingConnector (its job-numbered scheduler half, its
``CPUOffloadingSpec`` and cache policy) is compared step by step with vLLM
0.33.0's own ``Scheduler`` and the same connector, synchronous and asynchronous,
by ``tests/differential/test_vllm_decisions.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from vllm_reference import bridge_python, run_script

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def refusals() -> dict[str, Any]:
    return run_script(bridge_python("0.33.0"), Path(__file__).with_name("tier_refusals_033.py"))


def test_vllms_own_tier_and_kvframe_policies_are_taken(refusals: dict[str, Any]) -> None:
    assert refusals["vllm_lru"] == {
        "view": "VllmConnector033",
        "policy": "LRUCachePolicy",
        "policy_module": "vllm.v1.kv_offload.cpu.policies.lru",
    }
    assert refusals["vllm_arc"]["policy"] == "ARCCachePolicy"
    assert refusals["kvframe_policy"]["policy"] == "KvframeCachePolicy[arc:variant=paper]"


def test_what_033_does_not_match_is_refused_naming_the_fix(refusals: dict[str, Any]) -> None:
    spec = refusals["kvframe_spec"]
    assert spec["type"] == "UnsupportedByKvframe"
    assert "'KvframeOffloadingSpec' on vLLM 0.33" in spec["message"]
    assert "eviction_policy 'kvframe:<config string>'" in spec["message"]
    assert "sync_load_budget_bytes" in refusals["sync_loads"]["message"]
    assert "'ExampleConnector'" in refusals["other_connector"]["message"]
    # Async scheduling with the tier is served (T22 defers frees as vLLM 0.33.0
    # does for a KV consumer); with a connector that only produces it is refused.
    assert refusals["async"]["view"] == "VllmConnector033"
    assert "not a KV consumer" in refusals["async_producer"]["message"]
    assert "--no-async-scheduling" in refusals["async_producer"]["message"]


def test_a_cache_reset_resets_the_tier_as_vllm_does(refusals: dict[str, Any]) -> None:
    """vLLM 0.33's pause and sleep clear the cache with ``reset_connector=True``: the
    connector's ``reset_cache`` runs and the reset succeeds (the bridge used to report
    failure whenever a connector was configured, without resetting it)."""
    assert refusals["reset"] == {"result": True, "calls": ["reset_cache"], "without": True}
    assert refusals["reset"] == refusals["reset_vllm"]  # vLLM 0.33.0's own Scheduler
