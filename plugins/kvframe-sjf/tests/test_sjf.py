"""SJF: shortest remaining prompt first, linear aging, and the bound on overtaking."""

from __future__ import annotations

import pytest
from kvframe_sjf import SJFPolicy

import kvframe
from kvframe import Request


def request(rid: str, tokens: int, arrival: float) -> Request:
    return Request(rid, list(range(tokens)), 1, arrival_time=arrival)


def order(policy: SJFPolicy, requests: list[Request]) -> list[str]:
    queue = policy.create_queue()
    for r in requests:
        queue.add_request(r)
    return [queue.pop_request().request_id for _ in requests]


def test_is_a_scheduling_policy_selected_as_sjf() -> None:
    assert issubclass(SJFPolicy, kvframe.SchedulingPolicy)
    assert SJFPolicy.name == "sjf"


def test_simultaneous_arrivals_go_shortest_first_ties_first_come() -> None:
    requests = [request("long", 4000, 0.0), request("short", 100, 0.0), request("mid", 900, 0.0)]
    requests.append(request("short-too", 100, 0.0))
    assert order(SJFPolicy(), requests) == ["short", "short-too", "mid", "long"]


def test_each_second_waited_is_worth_tokens_per_s_tokens() -> None:
    # 3,000 tokens more, arrived 2 s earlier: at 1,000 tokens/s it still goes after the
    # short one (2 s of credit < 3 s of extra prefill); at 2,000 tokens/s it goes first.
    requests = [request("early-long", 3100, 0.0), request("late-short", 100, 2.0)]
    assert order(SJFPolicy(tokens_per_s=1000), requests) == ["late-short", "early-long"]
    assert order(SJFPolicy(tokens_per_s=2000), requests) == ["early-long", "late-short"]


def test_a_long_prompt_is_overtaken_only_by_requests_within_max_wait_s() -> None:
    # A 1M-token prompt at t=0 and a short request every second after it: the
    # shorts arriving within max_wait_s go first, none arriving later does.
    long = request("long", 1_000_000, 0.0)
    shorts = [request(f"s{t}", 10, float(t)) for t in range(1, 30)]
    served = order(SJFPolicy(max_wait_s=10.0), [long, *shorts])
    # long's key is capped at 0 + 10; s10's is 10 + 10/1000, so s1..s9 go first.
    assert served == [*(f"s{t}" for t in range(1, 10)), "long", *(f"s{t}" for t in range(10, 30))]
    # Without the cap (a huge max_wait_s) the same stream starves it.
    assert order(SJFPolicy(max_wait_s=1e9), [long, *shorts])[-1] == "long"


def test_a_preempted_request_counts_its_whole_context_again() -> None:
    policy = SJFPolicy()
    r = request("r", 500, 3.0)
    r.num_computed_tokens = 400  # part-way through a chunked prefill
    assert policy.sort_key(r) == pytest.approx(3.0 + 100 / 1000)
    r.num_computed_tokens = 0  # recompute preemption: all of it again
    assert policy.sort_key(r) == pytest.approx(3.0 + 500 / 1000)


def test_the_victim_is_the_running_request_with_the_largest_key() -> None:
    running = [request("a", 100, 0.0), request("b", 5000, 0.0), request("c", 200, 1.0)]
    assert SJFPolicy().choose_victim(running).request_id == "b"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tokens_per_s": 0.0}, "tokens_per_s must be > 0, not 0.0"),
        ({"max_wait_s": -1.0}, "max_wait_s must be >= 0, not -1.0"),
    ],
)
def test_rejects_bad_options(options: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        SJFPolicy(**options)
    assert str(caught.value) == message
