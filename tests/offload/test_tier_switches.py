"""The tier's fidelity switches matter: the 0.33.0 target's run changes when one is off.

Each switch of the offload tier (``kvframe.domain.fidelity``: ``offload_jobs``,
``holding_queue_first``, ``cached_tokens_at_admission``, and under asynchronous
scheduling ``defer_block_free``) is turned off alone on top of the 0.33.0
target, and a 40-request tier workload of the differential
harness (run through its kvframe side, no vLLM needed) must then run
differently, in the way the switch's rule says. That the 0.33.0 target with
every switch on matches vLLM 0.33.0 step for step on these workloads is
``tests/differential/test_vllm_decisions.py``, synchronously and
asynchronously (which need vLLM 0.33.0).
"""

from __future__ import annotations

from typing import Any

import attrs
import kvframe_driver
import pytest
import stepping
from workloads import generate_tier

from kvframe.domain.fidelity import Fidelity, fidelity_for

SWITCH_WORKLOAD = {
    # switch: the tier workload (40 requests, lru, factor 1, no filter, seeded) showing it
    "offload_jobs": "tier-reuse",
    "holding_queue_first": "tier-pressure",
    "cached_tokens_at_admission": "tier-prefix",
}


def run(
    name: str, fidelity: str | Fidelity, async_scheduling: bool = False
) -> list[dict[str, Any]]:
    workload = generate_tier(
        name,
        "fcfs",
        eviction="lru",
        block_size_factor=1,
        store_threshold=0,
        rule="seeded",
        num_requests=40,
    )
    workload["config"]["vllm"] = fidelity
    workload["config"]["async_scheduling"] = async_scheduling
    adapter = kvframe_driver.KvframeAdapter(workload["config"], record_blocks=True)
    loop = stepping.run_async if async_scheduling else stepping.run
    return list(loop(workload, adapter))


def without(switch: str) -> Fidelity:
    return attrs.evolve(fidelity_for("0.33.0"), **{switch: False})


@pytest.fixture(scope="module")
def target_runs() -> dict[str, list[dict[str, Any]]]:
    return {name: run(name, "0.33.0") for name in set(SWITCH_WORKLOAD.values())}


def _first_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def test_the_0_33_connector_numbers_its_transfers_as_jobs(target_runs: Any) -> None:
    """Off: 0.19.1's connector, whose records carry no jobs and whose stores differ."""
    on, off = target_runs["tier-reuse"], run("tier-reuse", without("offload_jobs"))
    assert any(r["store_jobs"] for r in on)
    assert all("store_jobs" not in r for r in off)
    stores_on = sum(len(r["stores"]) for r in on)
    stores_off = sum(len(r["stores"]) for r in off)
    assert stores_on < stores_off  # prompt only, and nothing stored twice


def test_requests_holding_blocks_go_first(target_runs: Any) -> None:
    """Off: a request set aside without blocks keeps its place in skipped-waiting
    (ahead of a request holding a landed load), and the admissions' order changes."""
    on = target_runs["tier-pressure"]
    off = run("tier-pressure", without("holding_queue_first"))
    step = _first_difference(on, off)
    assert step is not None
    # The admissions' order moved: who gets which blocks, what loads where.
    differing = {k for k in on[step] if on[step][k] != off[step].get(k)}
    assert differing & {"scheduled", "blocks", "loads", "stores"}, differing


def test_an_async_load_reports_its_admissions_hit(target_runs: Any) -> None:
    """Off: a full hit reports one token less; accounting only, nothing scheduled moves."""
    on = target_runs["tier-prefix"]
    off = run("tier-prefix", without("cached_tokens_at_admission"))
    assert on != off
    assert len(on) == len(off)
    for a, b in zip(on, off, strict=True):
        assert {k: v for k, v in a.items() if k != "prefix_hits"} == {
            k: v for k, v in b.items() if k != "prefix_hits"
        }
    differing = [
        (rid, hit, b["prefix_hits"][rid])
        for a, b in zip(on, off, strict=True)
        for rid, hit in a["prefix_hits"].items()
        if hit != b["prefix_hits"][rid]
    ]
    assert differing and all(hit == off_hit + 1 for _, hit, off_hit in differing)


def test_blocks_a_step_in_flight_may_write_are_freed_after_it(target_runs: Any) -> None:
    """T22, asynchronous scheduling only. Off: a running request out of blocks preempts
    the last running request although a step in flight still writes its blocks; on
    (vLLM 0.33.0), the running loop stops there and nobody is preempted."""
    on = run("tier-reuse", "0.33.0", async_scheduling=True)
    off = run("tier-reuse", without("defer_block_free"), async_scheduling=True)
    step = _first_difference(on, off)
    assert step is not None
    assert not on[step]["preempted"] and off[step]["preempted"]
    scheduled_on, scheduled_off = on[step]["scheduled"], off[step]["scheduled"]
    assert scheduled_on == scheduled_off[: len(scheduled_on)]
    assert len(scheduled_on) < len(scheduled_off)
    # Synchronous runs never defer: the switch changes nothing there.
    assert target_runs["tier-reuse"] == run("tier-reuse", without("defer_block_free"))
