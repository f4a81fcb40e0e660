"""The core's seams for a host's pause states and its cache reset under running requests.

vLLM 0.19.1's scheduler has three pause states and a prefix-cache reset that
first preempts every running request; a host (the vLLM bridge) passes them to
kvframe's core through ``schedule(token_budget=..., admit_waiting=...)`` and
``preempt_all_running``. The bridge is compared with vLLM's own scheduler on
these in vLLM's engine loop (plugins/kvframe-vllm/tests/test_engine_core.py);
these tests pin the core's side without vLLM.
"""

from __future__ import annotations

from kvframe.domain.request import RequestStatus

from .helpers import add, make_scheduler, sample_for, step


def test_a_zero_budget_schedules_nothing_and_admits_nothing() -> None:
    """vLLM's PAUSED_ALL: no running request runs, no waiting one is admitted."""
    scheduler = make_scheduler()
    add(scheduler, "a", 8)
    step(scheduler)
    add(scheduler, "b", 8)
    out = scheduler.schedule(token_budget=0, admit_waiting=False)
    assert out.num_scheduled_tokens == {}
    assert out.total_num_scheduled_tokens == 0
    assert scheduler.get_request_counts() == (1, 1)


def test_without_admission_running_requests_run_and_waiting_ones_wait() -> None:
    """vLLM's PAUSED_NEW: decoding goes on, the queue does not move."""
    scheduler = make_scheduler()
    add(scheduler, "a", 8)
    step(scheduler)
    add(scheduler, "b", 8)
    out = scheduler.schedule(admit_waiting=False)
    assert out.num_scheduled_tokens == {"a": 1}
    scheduler.update_from_output(out, sample_for(scheduler, out))
    out = scheduler.schedule()  # unpaused: admitted at once
    assert set(out.num_scheduled_tokens) == {"a", "b"}


def test_preempting_all_running_requests_frees_every_block_for_the_reset() -> None:
    scheduler = make_scheduler()
    for rid in ("a", "b", "c"):
        add(scheduler, rid, 10, max_tokens=8)
    step(scheduler)
    step(scheduler)
    assert scheduler.reset_prefix_cache() is False  # blocks in use
    preempted = scheduler.preempt_all_running()
    assert [r.request_id for r in preempted] == ["c", "b", "a"]  # last first, as vLLM
    assert all(
        r.status == RequestStatus.PREEMPTED and r.num_computed_tokens == 0 for r in preempted
    )
    assert all(r.num_preemptions == 1 for r in preempted)
    assert scheduler.running == []
    assert scheduler.reset_prefix_cache() is True
    out = scheduler.schedule()
    # re-admitted in their old running order, recomputing from scratch
    assert list(out.num_scheduled_tokens) == ["a", "b", "c"]
    assert set(out.scheduled_cached_reqs.resumed_req_ids) == {"a", "b", "c"}
