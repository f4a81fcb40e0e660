"""Program-level FCFS queue order, re-ranking on pin changes, victim and reclaim order.

These tests drive the policy against a small stand-in for the scheduler's
context, so each ordering rule can be checked in isolation; the lifecycle tests
use the real scheduler.
"""

from __future__ import annotations

import attrs
import pytest
from kvframe_continuum import ContinuumPolicy, ContinuumQueue

from kvframe.domain.request import Request, RequestStatus


@attrs.define
class _Retention:
    request: Request
    deadline: float
    retained_at: float


class FakeContext:
    """What a policy sees of the scheduler: retained requests, running, free blocks."""

    def __init__(self, num_free_blocks: int = 0) -> None:
        self.now = 0.0
        self.block_size = 16
        self.num_free_blocks = num_free_blocks
        self.cost_model = None
        self.running: list[Request] = []
        self.retained: dict[str, _Retention] = {}
        self.blocks: dict[str, int] = {}
        self.released: list[str] = []

    def release(self, request_id: str) -> None:
        self.retained.pop(request_id)
        self.num_free_blocks += self.blocks.pop(request_id, 0)
        self.released.append(request_id)


def make_policy(**options) -> tuple[ContinuumPolicy, FakeContext]:
    policy = ContinuumPolicy(cold_start_ttl=5.0, **options)
    context = FakeContext()
    policy.attach(context)  # type: ignore[arg-type]
    return policy, context


def turn(job: str | None, turn: int, arrival: float, *, last: bool = False) -> Request:
    request_id = f"{job}-t{turn}" if job is not None else f"solo-{arrival}"
    return Request(
        request_id,
        [1, 2, 3],
        4,
        arrival_time=arrival,
        job_id=job,
        turn=turn if job is not None else None,
        is_last_turn=last,
        tool_name="grep" if job is not None else None,
    )


def pin(policy: ContinuumPolicy, context: FakeContext, request: Request, blocks: int = 1) -> None:
    """The request arrives, finishes at ``context.now`` and is retained, as the core would."""
    policy.on_arrival(request)
    deadline = policy.on_finish(request)
    assert deadline is not None
    context.retained[request.request_id] = _Retention(request, deadline, context.now)
    context.blocks[request.request_id] = blocks
    policy.on_step_start(context.now)  # the pin is visible from the next step on


def ids(queue) -> list[str]:
    return [r.request_id for r in queue]


def test_jobs_are_served_by_first_arrival_not_by_turn_arrival():
    policy, context = make_policy()
    old = turn("A", 0, 0.0)
    policy.on_arrival(old)
    policy.on_finish(old)  # cold start would pin...
    context.retained.clear()  # ...but say the pin is already gone
    queue = policy.create_queue()
    b0 = turn("B", 0, 1.0)
    solo = turn(None, 0, 1.5)
    a1 = turn("A", 1, 5.0)
    for request in (b0, solo, a1):
        policy.on_arrival(request)
        queue.add_request(request)
    assert ids(queue) == ["A-t1", "B-t0", "solo-1.5"]
    assert queue.pop_request() is a1
    assert queue.peek_request() is b0 and len(queue) == 2


def test_ttl_none_is_job_level_fcfs_with_no_pinned_class():
    """Without pins every queued turn is class 2 (0 if preempted), by its job's first arrival."""
    policy, context = make_policy(ttl="none")
    queue = policy.create_queue()
    a0, b0 = turn("A", 0, 0.0), turn("B", 0, 1.0)
    for request in (a0, b0):
        policy.on_arrival(request)
    context.now = 2.0
    assert policy.on_finish(b0) is None  # B's turn 0 finishes first...
    assert policy.on_finish(a0) is None  # ...then A's: neither is pinned
    policy.on_step_start(2.0)
    b1, a1 = turn("B", 1, 3.0), turn("A", 1, 4.0)
    for request in (b1, a1):
        policy.on_arrival(request)
        queue.add_request(request)
    # A arrived first as a program: its later turn goes ahead of B's earlier one.
    assert ids(queue) == ["A-t1", "B-t1"]
    assert {queue.rank_of(r)[0] for r in (a1, b1)} == {2}
    assert not context.retained and not policy.reclaim_retained(1)


def test_preempted_first_then_pinned_jobs_then_the_rest():
    policy, context = make_policy()
    pin(policy, context, turn("P", 0, 9.0))  # job P holds a pin, started last
    queue = policy.create_queue()
    early = turn("E", 0, 0.0)
    p1 = turn("P", 1, 9.5)
    resumed = turn("R", 0, 20.0)
    resumed.num_preemptions = 1
    resumed.status = RequestStatus.PREEMPTED
    for request in (early, p1):
        policy.on_arrival(request)
        queue.add_request(request)
    policy.on_arrival(resumed)
    queue.prepend_request(resumed)
    assert ids(queue) == ["R-t0", "P-t1", "E-t0"]
    assert queue.rank_of(p1)[0] == 1 and queue.rank_of(early)[0] == 2


def test_a_released_pin_re_ranks_the_jobs_queued_turn():
    policy, context = make_policy()
    pin(policy, context, turn("P", 0, 9.0))
    queue = policy.create_queue()
    early = turn("E", 0, 0.0)
    p1 = turn("P", 1, 9.5)
    for request in (early, p1):
        policy.on_arrival(request)
        queue.add_request(request)
    assert queue.peek_request() is p1
    # Memory pressure: reclaim releases the pin (nothing runs, so it may).
    assert policy.reclaim_retained(1)
    assert context.released == ["P-t0"]
    assert queue.rank_of(p1)[0] == 2
    assert ids(queue) == ["E-t0", "P-t1"]


def test_a_pin_gained_while_a_turn_waits_re_ranks_it_at_the_next_step():
    policy, context = make_policy()
    queue = policy.create_queue()
    early = turn("E", 0, 0.0)
    policy.on_arrival(early)
    queue.add_request(early)
    # Open-loop: job P's turn 1 is already queued when turn 0 finishes and pins.
    p0, p1 = turn("P", 0, 1.0), turn("P", 1, 1.0)
    policy.on_arrival(p0)
    policy.on_arrival(p1)
    queue.add_request(p1)
    assert ids(queue) == ["E-t0", "P-t1"]
    deadline = policy.on_finish(p0)
    context.retained["P-t0"] = _Retention(p0, deadline, 0.0)
    policy.on_step_start(0.0)
    assert ids(queue) == ["P-t1", "E-t0"]


def test_a_pin_the_core_dropped_is_noticed_at_the_head():
    policy, context = make_policy()
    pin(policy, context, turn("P", 0, 9.0))
    queue = policy.create_queue()
    early, p1 = turn("E", 0, 0.0), turn("P", 1, 9.5)
    for request in (early, p1):
        policy.on_arrival(request)
        queue.add_request(request)
    assert queue.rank_of(p1)[0] == 1
    del context.retained["P-t0"]  # e.g. the core aborted the pinned request
    assert queue.peek_request() is early
    assert queue.pop_request() is early
    assert queue.pop_request() is p1
    with pytest.raises(IndexError):
        queue.pop_request()
    with pytest.raises(IndexError):
        queue.peek_request()


def test_remove_iterate_and_prepend_requests():
    policy, _ = make_policy()
    queue = policy.create_queue()
    requests = [turn(job, 0, float(i)) for i, job in enumerate("abcd")]
    for request in requests:
        policy.on_arrival(request)
        queue.add_request(request)
    queue.remove_requests([requests[1], requests[3], turn("zz", 0, 0.0)])
    assert ids(queue) == ["a-t0", "c-t0"]
    queue.remove_request(requests[0])
    with pytest.raises(ValueError):
        queue.remove_request(requests[0])
    other = policy.create_queue()
    other.prepend_requests(queue)
    assert ids(other) == ["c-t0"] and bool(other) and len(queue) == 1


def test_re_ranking_does_not_grow_the_heap_without_bound():
    policy, context = make_policy(ttl="fixed")
    queue = policy.create_queue()
    waiting = turn("P", 1, 1.0)
    for step in range(500):
        context.now = float(step)
        pin(policy, context, turn("P", 0, 0.0))
        if step == 0:
            policy.on_arrival(waiting)
            queue.add_request(waiting)
        assert queue.rank_of(waiting)[0] == 1
        assert policy.reclaim_retained(1)
        assert queue.rank_of(waiting)[0] == 2
    assert len(queue._heap) < 200
    assert ids(queue) == ["P-t1"]


def test_select_queue_takes_the_better_head():
    policy, _ = make_policy()
    waiting, skipped = policy.create_queue(), policy.create_queue()
    late, early = turn("L", 0, 5.0), turn("E", 0, 1.0)
    for request in (late, early):
        policy.on_arrival(request)
    waiting.add_request(late)
    assert policy.select_queue(waiting, skipped) is waiting
    skipped.add_request(early)
    assert policy.select_queue(waiting, skipped) is skipped
    waiting.pop_request()
    assert policy.select_queue(waiting, skipped) is skipped


# ---------------------------------------------------------------- victims


def test_victim_is_the_running_tail_without_a_pin():
    policy, context = make_policy()
    pin(policy, context, turn("B", 0, 5.0))
    running = [turn("A", 0, 0.0), turn("D", 0, 4.0), turn(None, 0, 3.0), turn("B", 1, 5.5)]
    for request in running:
        policy.on_arrival(request)
    # B holds a pin: the last request in running order of a job without one.
    assert policy.choose_victim(running).request_id == "solo-3.0"
    assert policy.choose_victim(running[:2]).request_id == "D-t0"
    # Only pinned jobs run: the tail itself.
    assert policy.choose_victim([running[3]]).request_id == "B-t1"


def test_victim_is_fcfs_tail_not_the_latest_job():
    # The tail was admitted last and has computed the least; a later job's
    # older request (a long decode) is not preferred over it.
    policy, context = make_policy()
    a0, b0 = turn("A", 0, 0.0), turn("B", 0, 1.0)
    for request in (a0, b0):
        policy.on_arrival(request)
        policy.on_finish(request)
    context.retained.clear()
    a1, b1 = turn("A", 1, 10.0), turn("B", 1, 2.0)
    policy.on_arrival(a1)
    policy.on_arrival(b1)
    assert policy.choose_victim([b1, a1]) is a1
    assert policy.choose_victim([a1, b1]) is b1


def admitting(policy: ContinuumPolicy) -> None:
    """The scheduler's admission phase begins with ``select_queue``."""
    policy.select_queue(policy.create_queue(), policy.create_queue())


def test_admissions_wait_for_unpinned_victims_then_pins_go_latest_job_first():
    policy, context = make_policy()
    for job, arrival in (("A", 0.0), ("B", 1.0), ("C", 2.0)):
        pin(policy, context, turn(job, 0, arrival), blocks=4)
    unpinned = turn("U", 0, 3.0)
    policy.on_arrival(unpinned)
    context.running = [unpinned]
    admitting(policy)
    assert not policy.reclaim_retained(4)
    assert context.released == []
    # Only a pinned job's turn runs: release pins, latest job first, until 6 blocks are free.
    b1 = turn("B", 1, 4.0)
    policy.on_arrival(b1)
    context.running = [b1]
    assert policy.reclaim_retained(6)
    assert context.released == ["C-t0", "B-t0"]
    assert policy.stats.released_reclaimed == 2
    assert set(context.retained) == {"A-t0"}
    # Nothing runs (the engine would stall): the rest goes too.
    context.running = []
    assert policy.reclaim_retained(100)
    assert context.released == ["C-t0", "B-t0", "A-t0"]
    assert not policy.reclaim_retained(1)


def sized_turn(job: str, k: int, arrival: float, num_tokens: int) -> Request:
    return Request(f"{job}-t{k}", list(range(num_tokens)), 4, arrival_time=arrival,
                   job_id=job, turn=k, is_last_turn=False, tool_name="grep")  # fmt: skip


def test_before_a_running_request_is_preempted_bets_are_released_cheapest_first():
    # Cold start (F = 1): a pin's expected saving is its reload time, which grows
    # with its context. D's TTL (1 s) passed while its next turn waits; C's next
    # turn is queued within its TTL (100 s, a certain hit); A and B wait for a tool.
    policy, context = make_policy(eta=0.0)
    policy.cold_start_ttl = 1.0
    pin(policy, context, sized_turn("D", 0, 0.0, 4000), blocks=4)
    policy.cold_start_ttl = 100.0
    pin(policy, context, sized_turn("A", 0, 1.0, 4000), blocks=4)
    pin(policy, context, sized_turn("B", 0, 2.0, 10), blocks=4)
    pin(policy, context, sized_turn("C", 0, 3.0, 10), blocks=4)
    policy.on_arrival(sized_turn("D", 1, 0.5, 4100))
    policy.on_arrival(sized_turn("C", 1, 0.5, 100))
    context.now = 2.0
    policy.on_step_start(2.0)
    assert set(context.retained) == {"A-t0", "B-t0", "C-t0", "D-t0"}
    unpinned = turn("U", 0, 4.0)
    policy.on_arrival(unpinned)
    context.running = [unpinned]
    for expected in (["D-t0"], ["D-t0", "B-t0"], ["D-t0", "B-t0", "A-t0"]):
        assert policy.reclaim_retained(4)
        assert context.released == expected
    # C's queued turn will hit its pin: U is preempted instead.
    assert not policy.reclaim_retained(4)
    assert set(context.retained) == {"C-t0"}
    assert policy.stats.released_for_running == policy.stats.released_reclaimed == 3


def test_the_queue_keeps_the_request_queue_contract_in_rank_order():
    policy, _ = make_policy()
    queue = policy.create_queue()
    assert isinstance(queue, ContinuumQueue)
    assert not queue and len(queue) == 0 and list(queue) == []
    early, late, later = turn("E", 0, 0.0), turn("L", 0, 1.0), turn("M", 0, 1.5)
    preempted = turn("P", 0, 2.0)
    preempted.num_preemptions = 1
    queue.add_request(late)
    queue.add_request(early)
    queue.prepend_request(preempted)  # a preempted request outranks every other class
    queue.add_request(later)
    assert len(queue) == 4 and ids(queue) == ["P-t0", "E-t0", "L-t0", "M-t0"]
    assert queue.peek_request() is preempted and len(queue) == 4  # peek takes nothing
    assert queue.pop_request() is preempted
    queue.remove_request(early)
    queue.remove_requests([later])
    assert ids(queue) == ["L-t0"]
    other = policy.create_queue()
    other.add_request(early)
    queue.prepend_requests(other)
    assert [queue.pop_request() for _ in range(2)] == [early, late]
    assert not queue and list(queue) == []
