"""Priority scheduling as vLLM V1 does it."""

from __future__ import annotations

from kvframe_priority import PriorityPolicy, PriorityQueue

from kvframe.domain.request import Request


def req(request_id: str, priority: int, arrival: float) -> Request:
    return Request(request_id, [1, 2, 3], 4, priority=priority, arrival_time=arrival)


def test_queue_orders_by_priority_then_arrival_then_id():
    q = PriorityQueue()
    for r in [req("c", 1, 0.0), req("b", 0, 2.0), req("a", 0, 1.0), req("a2", 0, 1.0)]:
        q.add_request(r)
    assert [r.request_id for r in q] == ["a", "a2", "b", "c"]
    assert q.pop_request().request_id == "a"
    # prepend has no meaning in a priority queue: the request goes where it ranks.
    q.prepend_request(req("z", 5, 0.0))
    assert [r.request_id for r in q] == ["a2", "b", "c", "z"]


def test_iterating_does_not_change_the_queue():
    q = PriorityQueue()
    for i in range(5):
        q.add_request(req(f"r{i}", 5 - i, float(i)))
    first = [r.request_id for r in q]
    assert [r.request_id for r in q] == first and len(q) == 5


def test_remove_requests_keeps_the_heap_valid():
    q = PriorityQueue()
    rs = [req(f"r{i}", i % 3, float(i)) for i in range(9)]
    for r in rs:
        q.add_request(r)
    q.remove_requests(rs[::2])
    out = [q.pop_request() for _ in range(len(q))]
    assert out == sorted(rs[1::2])


def test_select_queue_compares_the_two_heads():
    policy = PriorityPolicy()
    waiting, skipped = policy.create_queue(), policy.create_queue()
    waiting.add_request(req("w", 1, 0.0))
    skipped.add_request(req("s", 0, 5.0))
    assert policy.select_queue(waiting, skipped) is skipped
    waiting.add_request(req("w0", 0, 1.0))
    assert policy.select_queue(waiting, skipped) is waiting


def test_victim_is_the_largest_priority_then_latest_arrival():
    policy = PriorityPolicy()
    a, b, c = req("a", 1, 5.0), req("b", 3, 1.0), req("c", 3, 2.0)
    assert policy.choose_victim([a, b, c]) is c
    # exact ties: the first in running order, as max() picks
    d, e = req("d", 3, 2.0), req("e", 3, 2.0)
    assert policy.choose_victim([d, e]) is d


def test_the_name_priority_selects_this_policy_through_its_entry_point():
    # The installed entry point, not the class attribute, is what users select by.
    import kvframe

    resolved = kvframe.get_registry().resolve("scheduling", "priority")
    assert resolved.cls is PriorityPolicy
    policy = resolved.create()
    assert isinstance(policy, PriorityPolicy)
    urgent, lax = req("u", 0, 1.0), req("l", 5, 0.0)
    assert policy.choose_victim([urgent, lax]) is lax
