"""The tier workloads run through vLLM 0.33.0's own OffloadingConnector (issue 39).

vLLM 0.33.0's connector numbers its transfers as jobs; the harness plays its
worker with ``stepping.JobWorker`` and its driver speaks 0.33's connector
(``tools/differential/vllm_driver.py``). This checks vLLM's side alone (kvframe's
model of it is compared step by step in ``tests/differential/test_vllm_decisions.py``):
a 40-request ``tier-reuse`` run completes with loads, stores and tier
evictions, and undoing one upstream
change in vLLM itself -- ``offload_prompt_only`` (PR #43797), on by default in
0.33.0 -- changes the run (the outputs' blocks are offloaded too).

Skips at once without vLLM 0.33.0's reference interpreter
(``$KVFRAME_VLLM033_PYTHON`` or ``.vllm033-reference-venv``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import compare
import pytest
from vllm_reference import reference_python
from workloads import generate_tier, write_workload

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _totals(records: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "loads": sum(len(r["loads"]) for r in records),
        "stores": sum(len(r["stores"]) for r in records),
        "evictions": sum(len(r["tier_evicted"]) for r in records),
        "completed_jobs": sum(len(r["completed_jobs"]) for r in records),
    }


def test_vllm_033_runs_the_tier_and_offload_prompt_only_matters(tmp_path: Path) -> None:
    vllm_python = reference_python("0.33.0")
    workload = generate_tier(
        "tier-reuse",
        "fcfs",
        eviction="lru",
        block_size_factor=1,
        store_threshold=0,
        rule="seeded",
        num_requests=40,
    )
    workload["config"]["vllm"] = "0.33.0"
    all_blocks = json.loads(json.dumps(workload))
    all_blocks["name"] += ".all-blocks"
    all_blocks["config"]["tier"]["offload_prompt_only"] = False
    paths = [write_workload(w, tmp_path / f"{w['name']}.json") for w in (workload, all_blocks)]
    out = tmp_path / "vllm"
    subprocess.run(
        [
            str(vllm_python),
            str(compare.HERE / "vllm_driver.py"),
            *map(str, paths),
            "--out-dir",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    runs = []
    for w in (workload, all_blocks):
        lines = (out / f"{w['name']}.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert "error" not in records[-1], records[-1].get("traceback")
        finished = {rid for r in records for rid in r["finished"]}
        assert len(finished) == len(w["requests"])
        runs.append(records)
    prompt_only, every_block = (_totals(r) for r in runs)
    assert min(prompt_only.values()) > 0, prompt_only
    assert runs[0] != runs[1]
    assert every_block["stores"] > prompt_only["stores"], (prompt_only, every_block)
