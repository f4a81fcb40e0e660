"""kvframe eviction plugins in vLLM 0.33.0's tier, through vLLM's own ``CachePolicyFactory``.

``cache_policy_033.py`` runs under the vLLM 0.33 reference interpreter
(``$KVFRAME_VLLM033_PYTHON``, built by ``tools/vllm-reference/install-0.33.sh
--with-kvframe``): ``kvframe_vllm.cache_policy`` built as vLLM builds its
policies, kvframe's ``lru`` making exactly the calls' results of vLLM's ``lru``
when requests carry no token positions, other plugins running unchanged, and a
typo stopping vLLM with kvframe's message. Skips cleanly without it.

``KvframeScheduler`` in 0.33's types (``hash_block_size``, Model Runner V2's
resumed-as-new requests, ``prefill_stats``) is compared step by step with vLLM
0.33.0's own ``Scheduler`` by ``tests/differential/test_vllm_decisions.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import compare
import pytest
from vllm_reference import bridge_python, run_script

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def tier() -> dict[str, Any]:
    return run_script(
        bridge_python("0.33.0"),
        Path(__file__).with_name("cache_policy_033.py"),
        extra_paths=[str(compare.REPO_ROOT / "examples" / "third_party_policy")],
    )


def test_vllms_factory_builds_the_kvframe_plugin(tier: dict[str, Any]) -> None:
    assert tier["built"] == ["KvframeCachePolicy[arc:variant=paper]", "kvframe_arc"]


def test_kvframe_lru_answers_every_manager_call_as_vllms_lru(tier: dict[str, Any]) -> None:
    for name, run in tier["replay"].items():
        assert run["evicted"] > 100 and run["loads"] > 50, name  # the tier was under pressure
        assert run["differing"] == 0, (name, run["first"])


def test_other_plugins_run_in_vllms_tier_unchanged(tier: dict[str, Any]) -> None:
    assert set(tier["others"]) == {"arc", "arc:variant=paper", "kvframe_s3fifo:S3FIFOPolicy"}
    assert all(records > 1000 for records in tier["others"].values())


def test_a_typo_stops_the_tier_with_kvframes_message(tier: dict[str, Any]) -> None:
    assert tier["typo"]["type"] == "ConfigError"
    assert tier["typo"]["message"].startswith("kv_connector_extra_config['eviction_policy']: ")
    assert "did you mean 'lru'?" in tier["typo"]["message"]
    assert "kvframe:<config string>" in tier["unprefixed"]["message"]
