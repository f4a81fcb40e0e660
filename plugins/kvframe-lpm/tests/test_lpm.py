"""LPM: the longest cached prefix first at each look, aging, and the bound on waiting."""

from __future__ import annotations

import pytest
from kvframe_lpm import LPMPolicy

import kvframe
from kvframe import Request


class Context:
    """The two things the queue reads: the clock and the GPU prefix cache's answer."""

    def __init__(self) -> None:
        self.now = 0.0
        self.cached: dict[str, int] = {}

    def num_cached_tokens(self, request: Request) -> int:
        return self.cached.get(request.request_id, 0)


def request(rid: str, arrival: float = 0.0) -> Request:
    return Request(rid, list(range(64)), 1, arrival_time=arrival)


def queue_with(policy: LPMPolicy, *requests: Request):
    queue = policy.create_queue()
    for r in requests:
        queue.add_request(r)
    return queue


def ids(queue) -> list[str]:
    return [r.request_id for r in queue]


def test_is_a_scheduling_policy_selected_as_lpm() -> None:
    assert issubclass(LPMPolicy, kvframe.SchedulingPolicy)
    assert LPMPolicy.name == "lpm"


def test_the_longest_cached_prefix_goes_first_and_the_order_follows_the_cache() -> None:
    policy, context = LPMPolicy(tokens_per_s=0.0), Context()
    policy.attach(context)  # type: ignore[arg-type]
    queue = queue_with(policy, request("a"), request("b"), request("c"))
    assert ids(queue) == ["a", "b", "c"]  # nothing cached: first come, first served
    context.cached = {"b": 32, "c": 48}
    assert ids(queue) == ["c", "b", "a"]
    assert queue.peek_request().request_id == "c"
    context.cached = {"b": 48, "c": 48}  # a tie: arrival order
    assert queue.pop_request().request_id == "b"
    assert ids(queue) == ["c", "a"]


def test_each_second_waited_is_worth_tokens_per_s_cached_tokens() -> None:
    policy, context = LPMPolicy(tokens_per_s=10.0, max_wait_s=100.0), Context()
    policy.attach(context)  # type: ignore[arg-type]
    queue = queue_with(policy, request("miss", 0.0), request("hit", 5.0))
    context.cached = {"hit": 32}
    context.now = 5.0  # miss: 0 + 10 * 5 = 50 > hit: 32 + 0
    assert ids(queue) == ["miss", "hit"]
    context.cached = {"hit": 64}  # 64 > 50
    assert ids(queue) == ["hit", "miss"]


def test_a_cache_missing_request_waits_at_most_max_wait_s() -> None:
    policy, context = LPMPolicy(tokens_per_s=0.0, max_wait_s=10.0), Context()
    policy.attach(context)  # type: ignore[arg-type]
    queue = queue_with(policy, request("miss", 0.0), request("hit1", 1.0), request("hit2", 2.0))
    context.cached = {"hit1": 48, "hit2": 48}
    context.now = 9.9
    assert ids(queue) == ["hit1", "hit2", "miss"]
    context.now = 10.0  # overdue: before every request that is not
    assert ids(queue) == ["miss", "hit1", "hit2"]
    context.now = 12.0  # all overdue: first come, first served
    assert ids(queue) == ["miss", "hit1", "hit2"]


def test_past_max_sorted_waiting_requests_it_is_first_come_first_served() -> None:
    policy, context = LPMPolicy(max_sorted=2), Context()
    policy.attach(context)  # type: ignore[arg-type]
    context.cached = {"c": 64}
    queue = queue_with(policy, request("a"), request("b"), request("c"))
    assert ids(queue) == ["a", "b", "c"]
    queue.remove_request(queue.peek_request())
    assert ids(queue) == ["c", "b"]


def test_put_back_requests_go_to_the_head_among_equals() -> None:
    policy, context = LPMPolicy(tokens_per_s=0.0), Context()
    policy.attach(context)  # type: ignore[arg-type]
    queue = queue_with(policy, request("a"), request("b"))
    head = queue.pop_request()
    queue.add_request(request("c"))
    queue.prepend_request(head)
    assert ids(queue) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tokens_per_s": -1.0}, "tokens_per_s must be >= 0, not -1.0"),
        ({"max_wait_s": -1.0}, "max_wait_s must be >= 0, not -1.0"),
        ({"max_sorted": 0}, "max_sorted must be >= 1, not 0"),
    ],
)
def test_rejects_bad_options(options: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        LPMPolicy(**options)
    assert str(caught.value) == message


def test_the_scheduler_answers_how_much_of_a_request_is_cached() -> None:
    """SchedulerContext.num_cached_tokens on a real engine: what admission would hit."""
    from kvframe.engine import Engine, EngineConfig
    from kvframe.host.registry import PluginRegistry
    from kvframe.workloads.spec import RequestSpec, SyntheticPrompt

    seen: list[tuple[str, int]] = []

    class Probe(LPMPolicy):
        name = "lpm-probe"

        def on_arrival(self, request: Request) -> None:
            assert self.context is not None
            seen.append((request.request_id, self.context.num_cached_tokens(request)))

    specs = [
        RequestSpec(
            request_id=rid,
            prompt=SyntheticPrompt(length, "doc", 128, key=rid),
            max_tokens=2,
            arrival_time=arrival,
        )
        for rid, length, arrival in (("a", 160, 0.0), ("b", 150, 5.0), ("c", 128, 6.0))
    ]
    registry = PluginRegistry(entry_points=())
    registry.register_class(Probe)
    config = EngineConfig(scheduling="lpm-probe", num_gpu_blocks=64, block_size=16)
    Engine.from_config(config, registry).run(specs)
    # b finds a's 8 document blocks; c is the document alone: its last block is
    # always computed, so 7 blocks.
    assert seen == [("a", 0), ("b", 128), ("c", 112)]
