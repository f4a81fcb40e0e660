"""FCFS as vLLM V1 does it: arrival order, preempted requests first, tail victim."""

from __future__ import annotations

from kvframe_fcfs import FCFSPolicy, FCFSQueue

from kvframe.domain.request import Request


def req(request_id: str, arrival: float = 0.0) -> Request:
    return Request(request_id, [1, 2, 3], 4, arrival_time=arrival)


def ids(queue) -> list[str]:
    return [r.request_id for r in queue]


def test_queue_serves_in_arrival_order_and_prepends_at_the_head():
    q = FCFSQueue()
    for rid in "abc":
        q.add_request(req(rid))
    assert q.peek_request().request_id == "a"
    assert q.pop_request().request_id == "a"
    q.prepend_request(req("p"))
    assert ids(q) == ["p", "b", "c"]


def test_prepend_requests_restores_the_order_a_step_skipped_them_in():
    # The scheduler prepends each skipped request to a per-step queue (reversing
    # them) and merges that queue back with prepend_requests (reversing again).
    older = FCFSQueue()
    older.add_request(req("old"))
    step_skipped = FCFSQueue()
    for rid in "xyz":
        step_skipped.prepend_request(req(rid))
    assert ids(step_skipped) == ["z", "y", "x"]
    older.prepend_requests(step_skipped)
    assert ids(older) == ["x", "y", "z", "old"]


def test_remove_requests_keeps_the_rest_in_order():
    q = FCFSQueue()
    rs = [req(rid) for rid in "abcd"]
    for r in rs:
        q.add_request(r)
    q.remove_requests([rs[1], rs[3]])
    assert ids(q) == ["a", "c"]
    q.remove_request(rs[0])
    assert ids(q) == ["c"] and len(q) == 1 and q


def test_skipped_waiting_is_served_first():
    policy = FCFSPolicy()
    waiting, skipped = policy.create_queue(), policy.create_queue()
    waiting.add_request(req("w"))
    assert policy.select_queue(waiting, skipped) is waiting
    skipped.add_request(req("s"))
    assert policy.select_queue(waiting, skipped) is skipped


def test_victim_is_the_tail_of_running():
    running = [req("a"), req("b"), req("c")]
    assert FCFSPolicy().choose_victim(running) is running[-1]


def test_the_name_fcfs_selects_this_policy_through_its_entry_point():
    # The installed entry point, not the class attribute, is what users select by.
    import kvframe

    resolved = kvframe.get_registry().resolve("scheduling", "fcfs")
    assert resolved.cls is FCFSPolicy
    policy = resolved.create()
    assert isinstance(policy, FCFSPolicy)
    running = [req("a"), req("b")]
    assert policy.choose_victim(running) is running[-1]
