"""kvframe eviction plugins inside vLLM's own CPU tier (``KvframeOffloadingSpec``).

Without vLLM (CI): the package imports nothing heavy and builds the extra
config. With the vLLM reference interpreter (``$KVFRAME_VLLM_PYTHON`` or
``<repo>/.vllm-reference-venv``) that can also import kvframe and the bundled
plugins: vLLM's scheduler + OffloadingConnector with the bridge spec and
kvframe's ``lru`` / ``arc`` make the same lookups, loads, stores and evictions,
step by step, as with vLLM's built-in policies; the third-party ``s3fifo``
runs there unchanged; a bad config string stops vLLM at start-up with
kvframe's message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import compare
import kvframe_vllm
import pytest
from vllm_reference import reference_python
from workloads import TIER_WORKLOADS, generate_tier, write_workload

NUM_REQUESTS = 60
VARIANTS = [
    ("lru", 1, 0, "next-step"),
    ("arc", 2, 2, "seeded"),
    ("lru", 2, 2, "seeded"),
    ("arc", 1, 0, "next-step"),
]


def test_importing_the_bridge_imports_no_vllm() -> None:
    code = "import sys, kvframe_vllm; print('vllm' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_extra_config_names_the_spec_and_the_plugins() -> None:
    config = kvframe_vllm.extra_config(
        cpu_bytes_to_use=1 << 30,
        eviction="arc:variant=paper",
        reuse_filter="threshold:store_threshold=2",
        block_size=32,
    )
    assert config == {
        "spec_name": "KvframeOffloadingSpec",
        "spec_module_path": "kvframe_vllm.offload",
        "cpu_bytes_to_use": 1 << 30,
        "kvframe_eviction": "arc:variant=paper",
        "kvframe_reuse_filter": "threshold:store_threshold=2",
        "block_size": 32,
    }


_PROBE = """
import kvframe
names = set(kvframe.get_registry().names("eviction"))
missing = {"lru", "arc", "s3fifo"} - names
assert not missing, f"eviction plugins not installed: {sorted(missing)}"
"""


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    # The plugins must be *installed* there (entry points), not only importable.
    return reference_python("0.19.1", probe=_PROBE)


def _run(
    python: Path, workloads: list[dict[str, Any]], out_dir: Path
) -> dict[str, compare.DriverRun]:
    paths = [write_workload(wl, out_dir / "workloads" / f"{wl['name']}.json") for wl in workloads]
    # compare.run_drivers puts this tree (the bridge included) first on the driver's path
    return compare.run_drivers(paths, out_dir, vllm_python=python, kvframe_python=None, blocks=True)


@pytest.fixture(scope="module")
def bridged(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vLLM's tier with its own policy and with kvframe's, over every tier workload."""
    out_dir = tmp_path_factory.mktemp("bridge")
    pairs = []
    workloads = []
    for name in TIER_WORKLOADS:
        for eviction, factor, threshold, rule in VARIANTS:
            own, ours = (
                generate_tier(
                    name,
                    "fcfs",
                    eviction=eviction,
                    block_size_factor=factor,
                    store_threshold=threshold,
                    rule=rule,
                    num_requests=NUM_REQUESTS,
                    bridge=bridge,
                )
                for bridge in (False, True)
            )
            pairs.append((own["name"], ours["name"]))
            workloads += [own, ours]
    s3fifo = generate_tier(
        "tier-reuse",
        "fcfs",
        eviction="s3fifo",
        block_size_factor=1,
        store_threshold=0,
        rule="seeded",
        num_requests=NUM_REQUESTS,
        bridge=True,
    )
    typo = generate_tier(
        "tier-reuse",
        "fcfs",
        eviction="lruu",
        block_size_factor=1,
        store_threshold=0,
        rule="seeded",
        num_requests=NUM_REQUESTS,
        bridge=True,
    )
    _run(vllm_python, [*workloads, s3fifo, typo], out_dir)
    vdir = out_dir / "vllm"
    return {
        "pairs": {
            own: compare.compare_runs(own, vdir / f"{own}.jsonl", vdir / f"{ours}.jsonl")
            for own, ours in pairs
        },
        "s3fifo": list(compare.iter_records(vdir / f"{s3fifo['name']}.jsonl")),
        "typo": list(compare.iter_records(vdir / f"{typo['name']}.jsonl")),
    }


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("workload", list(TIER_WORKLOADS))
def test_kvframe_policies_in_vllms_tier_decide_like_vllms_own(
    bridged: dict[str, Any], workload: str, variant: tuple[str, int, int, str]
) -> None:
    eviction, factor, threshold, rule = variant
    result = bridged["pairs"][f"{workload}.{eviction}.f{factor}.t{threshold}.{rule}-fcfs"]
    assert result.vllm["steps"] > 0 and result.kvframe is not None
    # here "vllm" is vLLM's own policy and "kvframe" is the bridge run
    assert result.ok, compare.format_details(result)


@pytest.mark.vllm
@pytest.mark.slow
def test_the_third_party_s3fifo_policy_runs_in_vllms_tier_unchanged(
    bridged: dict[str, Any],
) -> None:
    records = bridged["s3fifo"]
    assert "error" not in records[-1], records[-1].get("traceback")
    assert sum(len(r["finished"]) for r in records) == NUM_REQUESTS
    assert sum(len(r["tier_evicted"]) for r in records) > 0
    assert any(r["loads"] for r in records)


@pytest.mark.vllm
@pytest.mark.slow
def test_a_misspelt_policy_stops_vllm_at_start_up_with_kvframes_message(
    bridged: dict[str, Any],
) -> None:
    (record,) = bridged["typo"]
    assert record["error"].startswith("ConfigError")
    assert "kv_connector_extra_config['kvframe_eviction']" in record["error"]
    assert "did you mean 'lru'" in record["error"]
