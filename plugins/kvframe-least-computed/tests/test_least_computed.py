"""least-computed: FCFS order, and the victim whose recompute costs least."""

from __future__ import annotations

from kvframe_least_computed import LeastComputedPolicy

import kvframe
from kvframe import Request


def running(*computed: int) -> list[Request]:
    requests = []
    for i, n in enumerate(computed):
        r = Request(f"r{i}", list(range(1000)), 8)
        r.num_computed_tokens = n
        requests.append(r)
    return requests


def test_is_a_scheduling_policy_selected_as_least_computed() -> None:
    assert issubclass(LeastComputedPolicy, kvframe.SchedulingPolicy)
    assert LeastComputedPolicy.name == "least-computed"


def test_the_victim_has_computed_the_fewest_tokens() -> None:
    assert LeastComputedPolicy().choose_victim(running(900, 120, 640)).request_id == "r1"


def test_among_equal_counts_the_last_admitted_is_the_victim() -> None:
    assert LeastComputedPolicy().choose_victim(running(300, 100, 100, 500)).request_id == "r2"
    # With every count equal it is vLLM's FCFS victim exactly.
    assert LeastComputedPolicy().choose_victim(running(7, 7, 7)).request_id == "r2"


def test_the_waiting_order_is_fcfs() -> None:
    policy = LeastComputedPolicy()
    queue = policy.create_queue()
    for r in running(0, 0, 0):
        queue.add_request(r)
    assert [queue.pop_request().request_id for _ in range(3)] == ["r0", "r1", "r2"]
