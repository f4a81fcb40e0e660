"""The tier half of the differential harness, checked without vLLM (runs in CI).

``stepping.ScriptedWorker`` plays the connector's worker side for both drivers;
these tests pin its completion rules, and run kvframe's driver over the tier
workloads so that a kvframe change that breaks the offload loop (a crash, a
request that never finishes, a tier that is never used) fails here even where
the vLLM comparison itself is skipped.
"""

from __future__ import annotations

import pytest
import stepping
from kvframe_driver import KvframeAdapter
from workloads import TIER_WORKLOADS, generate_tier


def _view(**kw: object) -> stepping.TierView:
    fields: dict[str, object] = dict(
        loads={},
        stores={},
        flush=[],
        finished_req_ids=[],
        external_hits={},
        waiting_remote=[],
        evicted=[],
    )
    fields.update(kw)
    return stepping.TierView(**fields)  # type: ignore[arg-type]


def _transfer() -> stepping.Transfer:
    return {"gpu": [1], "cpu": [0]}


def test_next_step_rule_lands_a_load_at_the_end_of_the_next_step() -> None:
    worker = stepping.ScriptedWorker({"kind": "next-step"})
    assert worker.step(0, _view(loads={"a": _transfer()})) == (set(), set())
    assert worker.step(1, _view()) == (set(), {"a"})


def test_stores_are_submitted_a_step_late_and_report_the_finished_request() -> None:
    worker = stepping.ScriptedWorker({"kind": "next-step"})
    worker.step(0, _view(stores={"a": _transfer()}))  # deferred: submitted at step 1
    assert worker.step(1, _view(finished_req_ids=["a"])) == (set(), set())
    # lands at the end of step 2; "a" finished earlier, so it is reported now
    assert worker.step(2, _view()) == ({"a"}, set())


def test_a_finished_request_without_pending_stores_is_reported_at_once() -> None:
    worker = stepping.ScriptedWorker({"kind": "seeded", "max_delay": 0})
    worker.step(0, _view(stores={"a": _transfer()}))
    assert worker.step(1, _view()) == (set(), set())  # landed with delay 0, not finished
    assert worker.step(2, _view(finished_req_ids=["a"])) == ({"a"}, set())
    assert worker.step(3, _view(finished_req_ids=["b"])) == (set(), set())  # never stored


def test_a_flush_lands_a_preempted_requests_stores_at_once() -> None:
    worker = stepping.ScriptedWorker({"kind": "seeded", "max_delay": 50, "seed": 1})
    worker.step(0, _view(stores={"a": _transfer()}))
    worker.step(1, _view(flush=["a"]))
    assert worker.step(2, _view(finished_req_ids=["a"])) == ({"a"}, set())


def test_seeded_delays_depend_on_the_transfer_not_on_issue_order() -> None:
    def landing_steps(order: list[str]) -> dict[str, int]:
        worker = stepping.ScriptedWorker({"kind": "seeded", "max_delay": 5, "seed": 7})
        landed: dict[str, int] = {}
        worker.step(0, _view(loads={rid: _transfer() for rid in order}))
        for step in range(1, 8):
            for rid in worker.step(step, _view())[1]:
                landed[rid] = step
        return landed

    forward = landing_steps(["a", "b", "c", "d"])
    assert forward == landing_steps(["d", "c", "b", "a"])
    assert len(set(forward.values())) > 1, "the seeded rule drew one delay for everything"


def test_unknown_completion_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown completion rule"):
        stepping.ScriptedWorker({"kind": "sometimes"})


def _jobs(**kw: object) -> stepping.TierView:
    """A 0.33 view: the connector's transfers as numbered jobs."""
    jobs = stepping.TierJobs(
        loads=kw.pop("loads", {}),  # type: ignore[arg-type]
        stores=kw.pop("stores", {}),  # type: ignore[arg-type]
        flush=kw.pop("flush", []),  # type: ignore[arg-type]
    )
    return _view(jobs=jobs, **kw)


def test_job_worker_reports_landed_jobs_by_id_and_never_finished_sending() -> None:
    worker = stepping.JobWorker({"kind": "next-step"})
    assert worker.step(0, _jobs(loads={0: "a"}, stores={1: "b"})) == (set(), set())
    # the load lands at the end of step 1; the store, deferred to step 1, at the end of step 2
    assert worker.step(1, _jobs()) == (set(), {"a"})
    assert worker.completed == [0]
    view = _jobs(finished_req_ids=["b"])
    assert worker.step(2, view) == (set(), set())  # a store never reports its request
    assert worker.completed == [1] and view.jobs is not None and view.jobs.completed == [1]


def test_job_worker_lands_a_flushed_job_now_even_one_created_this_step() -> None:
    worker = stepping.JobWorker({"kind": "seeded", "max_delay": 50, "seed": 1})
    worker.step(0, _jobs(stores={0: "a"}))
    # job 0 (deferred from step 0) and job 1 (this step's) are both flushed: both land now
    worker.step(1, _jobs(stores={1: "a", 2: "b"}, flush=[0, 1]))
    assert worker.completed == [0, 1]


def test_job_worker_draws_the_same_delays_as_the_request_worker() -> None:
    """The two workers land the same transfer at the same step (only the reports differ)."""
    rule = {"kind": "seeded", "max_delay": 3, "seed": 5}
    by_request = stepping.ScriptedWorker(rule)
    by_job = stepping.JobWorker(rule)
    loads = {"a": _transfer(), "b": _transfer(), "c": _transfer()}
    by_request.step(0, _view(loads=loads))
    by_job.step(0, _jobs(loads={i: rid for i, rid in enumerate(loads)}))
    for step in range(1, 5):
        assert by_request.step(step, _view())[1] == by_job.step(step, _jobs())[1]


def test_job_worker_needs_jobs() -> None:
    with pytest.raises(RuntimeError, match="needs the connector's jobs"):
        stepping.JobWorker({}).step(0, _view())


def test_block_names_chain_content_not_position() -> None:
    shared = list(range(10, 42))
    a = stepping.block_names(
        {"prompt_token_ids": shared + [1] * 16, "max_tokens": 1}, block_size=16
    )
    b = stepping.block_names(
        {"prompt_token_ids": shared + [2] * 16, "max_tokens": 1}, block_size=16
    )
    assert a[:2] == b[:2] and a[2] != b[2]


@pytest.mark.parametrize("workload", list(TIER_WORKLOADS))
def test_kvframe_driver_runs_every_tier_workload_through_the_tier(workload: str) -> None:
    wl = generate_tier(
        workload,
        "fcfs",
        eviction="arc",
        block_size_factor=2,
        store_threshold=0,
        rule="seeded",
        num_requests=40,
    )
    records = list(stepping.run(wl, KvframeAdapter(wl["config"], record_blocks=True)))
    assert sum(len(r["finished"]) for r in records) == 40
    assert any(r["stores"] for r in records)
    for r in records:
        for rid, transfer in r["stores"].items():
            assert len(transfer["gpu"]) == 2 * len(transfer["cpu"]), (r["step"], rid)
