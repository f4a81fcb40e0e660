"""Differential test: kvframe's KVCacheManager against vLLM 0.19.1's, decision by decision.

Both managers replay the same scheduler-like workloads (``kvcore_vllm_driver.py``:
chunked prefill, speculative decode with lookahead, preemption, external
tokens with delayed caching, aborts, resets; with and without prefix caching,
and with ``use_eagle``). Every prefix-hit length, block id, refusal,
can-fit answer, free-block count and KV-event count must agree. Block hashes
differ (vLLM uses SHA-256 over its own encoding) but only their equality
matters to the decisions.

Needs the vLLM reference environment: ``$KVFRAME_VLLM_PYTHON``, or
``.vllm-reference-venv/bin/python`` at the repository root. Skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "kvcore_vllm_driver.py"
VLLM_PYTHON = Path(
    os.environ.get(
        "KVFRAME_VLLM_PYTHON", HERE.parents[1] / ".vllm-reference-venv" / "bin" / "python"
    )
)

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="vLLM reference environment absent"),
]


def _load_driver():
    spec = importlib.util.spec_from_file_location("kvcore_vllm_driver", DRIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kv_cache_manager_matches_vllm() -> None:
    driver = _load_driver()
    ours = json.loads(json.dumps(driver.run_all("kvframe")))  # tuples -> lists, as vLLM's
    completed = subprocess.run(
        [str(VLLM_PYTHON), str(DRIVER), "vllm"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "VLLM_CONFIGURE_LOGGING": "0", "PYTHONPATH": ""},
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    theirs = json.loads(completed.stdout.strip().splitlines()[-1])
    assert len(ours) == len(theirs) == len(driver.SCENARIOS)
    for scenario, mine, reference in zip(driver.SCENARIOS, ours, theirs, strict=True):
        for i, (a, b) in enumerate(zip(mine, reference, strict=True)):
            assert a == b, f"scenario {scenario}: first difference at record {i}: {a} != {b}"
        kinds = Counter(record[0] for record in mine)
        # The workload must have reached the interesting paths.
        assert kinds["preempt"] > 10 and kinds["refused"] > 10 and kinds["loaded"] > 10
