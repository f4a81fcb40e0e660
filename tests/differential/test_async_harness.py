"""The asynchronous half of the differential harness, checked without vLLM (runs in CI).

``stepping.run_async`` drives a scheduler in vLLM's batch-queue order for both
drivers; these tests run kvframe's driver through it over small versions of
every workload, so that a kvframe change that breaks the asynchronous mode (a
crash, a request that never finishes, a step that is not one behind) fails
here even where the vLLM comparison itself is skipped
(``tests/differential/test_vllm_decisions.py``).
"""

from __future__ import annotations

import compare
import pytest
import stepping
from kvframe_driver import KvframeAdapter
from workloads import POLICIES, TIER_WORKLOADS, WORKLOADS, generate, generate_tier

NUM_REQUESTS = 16


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_workload_finishes_one_step_behind(name: str, policy: str) -> None:
    (workload,) = compare.with_scheduling([generate(name, policy, NUM_REQUESTS, 0)], ("async",))
    assert workload["name"] == f"{name}-{policy}-async"
    adapter = KvframeAdapter(workload["config"], record_blocks=True)
    records = list(stepping.run_async(workload, adapter))
    finished = [rid for r in records for rid in r["finished"]]
    assert sorted(finished) == sorted(s["request_id"] for s in workload["requests"])
    scheduled = [r["scheduled_step"] for r in records if r["scheduled_step"] is not None]
    applied = [r["applied_step"] for r in records if r["applied_step"] is not None]
    assert scheduled == list(range(len(scheduled)))
    assert applied == list(range(len(applied)))  # every step's output, in order
    for r in records:
        if r["applied_step"] is not None and r["scheduled_step"] is not None:
            # The output applied is never the step just scheduled when it ran tokens.
            assert r["applied_step"] < r["scheduled_step"] or not r["scheduled"]
    assert not adapter.scheduler.requests
    for request in adapter.scheduler.running:
        assert request.num_output_placeholders == 0


def test_sync_and_async_records_differ_and_both_modes_are_named() -> None:
    base = generate("pressure", "fcfs", NUM_REQUESTS, 0)
    both = compare.with_scheduling([base], ("sync", "async"))
    assert [w["name"] for w in both] == ["pressure-fcfs", "pressure-fcfs-async"]
    assert "async_scheduling" not in both[0]["config"]
    assert both[1]["config"]["async_scheduling"] is True
    sync = list(stepping.run(both[0], KvframeAdapter(both[0]["config"])))
    lagged = list(stepping.run_async(both[1], KvframeAdapter(both[1]["config"])))
    strip = ("step", "scheduled_step", "applied_step", "finished", "free_blocks")
    assert [{k: v for k, v in r.items() if k not in strip} for r in sync] != [
        {k: v for k, v in r.items() if k not in strip} for r in lagged
    ]
    with pytest.raises(ValueError, match="unknown scheduling mode"):
        compare.with_scheduling([base], ("lagged",))


def test_the_async_loop_plays_vllm_0_33s_job_worker() -> None:
    """Under the 0.33.0 target the tier's worker is ``JobWorker``, run when each step
    is queued: the records carry its jobs, and the jobs it reports landed are ones
    the connector numbered, each reported once."""
    tier = generate_tier(
        "tier-reuse",
        "fcfs",
        eviction="lru",
        block_size_factor=1,
        store_threshold=0,
        rule="seeded",
        num_requests=NUM_REQUESTS,
    )
    tier["config"]["vllm"] = "0.33.0"
    (workload,) = compare.with_scheduling([tier], ("async",))
    records = list(stepping.run_async(workload, KvframeAdapter(workload["config"])))
    scheduled = [r for r in records if r["scheduled_step"] is not None]
    assert all("completed_jobs" in r for r in scheduled)
    numbered = [int(j) for r in scheduled for j in (*r["load_jobs"], *r["store_jobs"])]
    landed = [j for r in scheduled for j in r["completed_jobs"]]
    assert numbered and len(set(numbered)) == len(numbered)
    assert landed and len(set(landed)) == len(landed) and set(landed) <= set(numbered)


@pytest.mark.parametrize("name", list(TIER_WORKLOADS))
def test_the_async_loop_applies_each_worker_report_with_its_step(name: str) -> None:
    """With a tier the scripted worker runs each step when it is queued; its report
    goes into that step's update, whenever the step leaves the queue."""
    tier = generate_tier(
        name,
        "fcfs",
        eviction="lru",
        block_size_factor=1,
        store_threshold=0,
        rule="seeded",
        num_requests=NUM_REQUESTS,
    )
    (workload,) = compare.with_scheduling([tier], ("async",))
    adapter = KvframeAdapter(workload["config"], record_blocks=True)
    applied: list[tuple[list[str], list[str]]] = []
    update = adapter.update

    def recording_update(view, sampled, transfers=None):  # type: ignore[no-untyped-def]
        assert transfers is not None, "a tier step was applied without the worker's report"
        applied.append((sorted(transfers[0]), sorted(transfers[1])))
        return update(view, sampled, transfers)

    adapter.update = recording_update  # type: ignore[method-assign]
    records = list(stepping.run_async(workload, adapter))
    reported = [
        (r["finished_sending"], r["finished_recving"])
        for r in records
        if r["scheduled_step"] is not None
    ]
    # Step k's report (recorded when k was scheduled) is the one applied k-th; the
    # loop ends when the last request finished, a step may still be queued then.
    assert applied == reported[: len(applied)]
    assert len(reported) - len(applied) < stepping.BATCH_QUEUE_SIZE
    finished = sorted(rid for r in records for rid in r["finished"])
    assert finished == sorted(s["request_id"] for s in workload["requests"])
    assert any(r["stores"] for r in records)
