"""The host's request queues, and scheduling policies built on the base's defaults."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import kvframe
from kvframe.domain.queues import FIFORequestQueue, SortedRequestQueue
from kvframe.domain.request import Request
from kvframe.testing import SchedulingPolicySuite

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugin-authors.md"

# Operations on a queue: add a new request (with a key), pop, prepend a new
# one, remove one by position, remove several, or merge another queue in front.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3)),
        st.tuples(st.just("pop")),
        st.tuples(st.just("prepend"), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, 20)),
        st.tuples(st.just("remove_many"), st.lists(st.integers(0, 20), max_size=3)),
        st.tuples(st.just("merge"), st.lists(st.integers(0, 3), max_size=3)),
    ),
    max_size=40,
)


def run(queue_factory, model_insert, operations) -> None:
    """Drive a queue and a plain-list model; they must agree after every operation."""
    queue = queue_factory()
    model: list[Request] = []
    counter = iter(range(10_000))

    def new(priority: int) -> Request:
        return Request(f"r{next(counter)}", [1], 1, priority=priority)

    for op in operations:
        if op[0] == "add":
            request = new(op[1])
            queue.add_request(request)
            model_insert(model, request, front=False)
        elif op[0] == "pop":
            if model:
                assert queue.peek_request() is model[0]
                assert queue.pop_request() is model.pop(0)
        elif op[0] == "prepend":
            request = new(op[1])
            queue.prepend_request(request)
            model_insert(model, request, front=True)
        elif op[0] == "remove" and model:
            request = model.pop(op[1] % len(model))
            queue.remove_request(request)
        elif op[0] == "remove_many" and model:
            doomed = {model[i % len(model)] for i in op[1]}
            queue.remove_requests(doomed)
            model[:] = [r for r in model if r not in doomed]
        elif op[0] == "merge":
            other = queue_factory()
            for priority in op[1]:
                other.prepend_request(new(priority))  # as the scheduler fills it
            for request in other:
                model_insert(model, request, front=True)
            queue.prepend_requests(other)
        assert list(queue) == model
        assert len(queue) == len(model) and bool(queue) == bool(model)


def fifo_insert(model: list[Request], request: Request, *, front: bool) -> None:
    if front:
        model.insert(0, request)
    else:
        model.append(request)


def sorted_insert(model: list[Request], request: Request, *, front: bool) -> None:
    # Equal keys keep arrival order, whatever "front" says.
    position = sum(1 for r in model if r.priority <= request.priority)
    model.insert(position, request)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(ops)
def test_fifo_queue_matches_a_list(operations) -> None:
    run(FIFORequestQueue, fifo_insert, operations)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(ops)
def test_sorted_queue_matches_a_stable_sorted_list(operations) -> None:
    run(lambda: SortedRequestQueue(lambda r: r.priority), sorted_insert, operations)


def test_a_policy_without_overrides_is_fcfs() -> None:
    class Plain(kvframe.SchedulingPolicy):
        name = "plain"

    policy = Plain()
    waiting, skipped = policy.create_queue(), policy.create_queue()
    assert isinstance(waiting, FIFORequestQueue)
    a, b = Request("a", [1], 1), Request("b", [1], 1)
    waiting.add_request(a)
    assert policy.select_queue(waiting, skipped) is waiting
    skipped.add_request(b)
    assert policy.select_queue(waiting, skipped) is skipped  # skipped ones are older
    assert policy.choose_victim([a, b]) is b


def test_a_sort_key_orders_queues_selection_and_victims() -> None:
    class Urgent(kvframe.SchedulingPolicy):
        name = "urgent"

        def sort_key(self, request):
            return request.priority

    policy = Urgent()
    waiting, skipped = policy.create_queue(), policy.create_queue()
    assert isinstance(waiting, SortedRequestQueue)
    low, high, mid = (Request(n, [1], 1, priority=p) for n, p in [("l", 5), ("h", 0), ("m", 2)])
    waiting.add_request(low)
    skipped.add_request(mid)
    assert policy.select_queue(waiting, skipped) is skipped
    waiting.add_request(high)
    assert policy.select_queue(waiting, skipped) is waiting
    assert policy.choose_victim([high, low, mid]) is low


def _docs_policy() -> type[kvframe.SchedulingPolicy]:
    """The one-class scheduling policy shown in docs/plugin-authors.md, as written there."""
    text = DOCS.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (source,) = [b for b in blocks if "class ShortestPromptFirst" in b]
    module = types.ModuleType("kvframe_docs_spf")
    sys.modules[module.__name__] = module
    exec(compile(source, str(DOCS), "exec"), module.__dict__)
    return module.ShortestPromptFirst


class TestTheDocsOneClassPolicy(SchedulingPolicySuite):
    """The documented few-line policy passes the whole scheduling conformance suite."""

    plugin = _docs_policy()
    max_examples = 10
