"""A scheduling policy's :class:`~kvframe.domain.queues.RequestQueue`, checked on short runs.

The scheduler reads a queue two ways: it admits from the head (``peek`` /
``pop``), and it *iterates* it (stats, the retention and abort paths, the
suite's own bookkeeping), trusting that iteration lists the requests in the
order they would be admitted. It also hands one queue to another
(``prepend_requests`` with the per-step skipped queue, a path only a connector
reaches) and removes requests given as any iterable. A queue that gets one of
these wrong runs fine until the one path that needs it.

So every sequence of up to :data:`DEPTH` calls from a small alphabet (add the
next request, pop, put the last popped request back, prepend a second queue
of two new requests, remove the head, remove the middle request and one
never added, given as an iterator) is run on a fresh queue, and after the last call:

* ``len`` and iteration agree with what was added and not taken out;
* ``peek_request`` is the first request iteration lists;
* popping everything admits exactly the iteration order;
* an empty queue's ``pop_request`` / ``peek_request`` raise ``IndexError``.

The requests' priorities and arrival times disagree with their ids' order,
so a queue that ranks (priority) and one that keeps arrival order (FCFS) are
both exercised where it matters.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from kvframe.testing.common import ContractViolation, PluginTarget

__all__ = ["DEPTH", "check_all_short_queue_sequences"]

DEPTH = 5

ALPHABET = ("add", "pop", "prepend", "prepend_queue", "remove", "remove_iter")

_REQUESTS = 10


def _requests() -> list[Any]:
    from kvframe.domain.request import Request

    return [
        Request(f"q{i}", [1, 2, 3], 1, arrival_time=float((i * 7) % 5), priority=(i * 2) % 3)
        for i in range(_REQUESTS)
    ]


def _describe(request: Any) -> str:
    return f"{request.request_id}(priority {request.priority}, arrival {request.arrival_time:g})"


class _QueueRun:
    def __init__(self, target: PluginTarget, requests: list[Any]) -> None:
        self.policy = target.create()
        self.queue = self.policy.create_queue()
        self.requests = requests
        self.next = 0
        self.held: list[Any] = []
        self.popped: list[Any] = []
        self.calls: list[str] = []

    def fail(self, what: str, rule: str) -> ContractViolation:
        return ContractViolation(
            f"rule: {rule}\nafter create_queue(), {', '.join(self.calls) or '(no calls)'}\n{what}"
        )

    def call(self, text: str, fn: Any, *args: Any, log: bool = True) -> Any:
        if log:
            self.calls.append(text)
        try:
            return fn(*args)
        except Exception as err:
            raise self.fail(
                f"then {text} raised {type(err).__name__}: {err}",
                "a RequestQueue accepts every call the scheduler makes (kvframe.domain.request."
                "RequestQueue): prepend_requests gets another queue of the policy's, "
                "remove_requests any iterable",
            ) from err

    def applies(self, step: str) -> bool:
        fresh = _REQUESTS - self.next
        if step == "add":
            return fresh >= 1
        if step == "prepend_queue":
            return fresh >= 2
        if step == "prepend":
            return bool(self.popped)
        return bool(self.held)

    def do(self, step: str) -> None:
        queue = self.queue
        if step == "add":
            request = self.requests[self.next]
            self.next += 1
            self.call(f"add_request({_describe(request)})", queue.add_request, request)
            self.held.append(request)
        elif step == "pop":
            request = self.call("pop_request()", queue.pop_request)
            if not any(request is r for r in self.held):
                raise self.fail(
                    f"then pop_request() returned {request!r}, which is not in the queue",
                    "pop_request removes and returns the head",
                )
            self.held.remove(request)
            self.popped.append(request)
        elif step == "prepend":
            request = self.popped.pop()
            self.call(f"prepend_request({request.request_id})", queue.prepend_request, request)
            self.held.append(request)
        elif step == "prepend_queue":
            other = self.policy.create_queue()
            batch = self.requests[self.next : self.next + 2]
            self.next += 2
            for request in batch:
                other.prepend_request(request)
            names = ", ".join(_describe(r) for r in batch)
            self.call(f"prepend_requests(<a queue of {names}>)", queue.prepend_requests, other)
            self.held.extend(batch)
        elif step == "remove":
            listed = list(queue)
            request = listed[0] if listed else self.held[-1]
            self.call(f"remove_request({request.request_id})", queue.remove_request, request)
            self.held = [r for r in self.held if r is not request]
        else:  # remove_iter: one held request and one never added, as a generator
            listed = list(queue)
            request = listed[len(listed) // 2] if listed else self.held[0]
            absent = self.requests[-1] if self.next < _REQUESTS else None
            gone = [request] if absent is None else [request, absent]
            self.call(
                f"remove_requests(<iterator over {', '.join(r.request_id for r in gone)}>)",
                queue.remove_requests,
                (r for r in gone),
            )
            self.held = [r for r in self.held if r is not request]

    def check(self) -> None:
        __tracebackhide__ = True
        queue = self.queue
        listed = list(queue)
        ids = sorted(r.request_id for r in self.held)
        if len(queue) != len(self.held) or sorted(r.request_id for r in listed) != ids:
            raise self.fail(
                f"then len() is {len(queue)} and iteration lists "
                f"{[r.request_id for r in listed]}, but the queue holds {ids}",
                "len and iteration list exactly the requests added and not taken out",
            )
        if bool(queue) != bool(self.held):
            raise self.fail(
                f"then bool(queue) is {bool(queue)} with {len(self.held)} request(s) in it",
                "a queue is true exactly when it holds requests",
            )
        if listed:
            head = self.call("peek_request()", queue.peek_request, log=False)
            if head is not listed[0]:
                raise self.fail(
                    f"then peek_request() is {head.request_id} but iteration lists "
                    f"{[r.request_id for r in listed]}",
                    "a RequestQueue iterates in the order it will admit: its head first",
                )
        admitted = [self.call("pop_request()", queue.pop_request, log=False) for _ in listed]
        if [r.request_id for r in admitted] != [r.request_id for r in listed]:
            raise self.fail(
                f"then iteration listed {[r.request_id for r in listed]}, but popping "
                f"everything admitted {[r.request_id for r in admitted]}",
                "a RequestQueue iterates in the order it will admit",
            )
        for name in ("pop_request", "peek_request"):
            try:
                getattr(queue, name)()
            except IndexError:
                continue
            except Exception as err:
                raise self.fail(
                    f"then, empty, {name}() raised {type(err).__name__}: {err}",
                    "an empty queue's pop_request / peek_request raise IndexError",
                ) from err
            raise self.fail(
                f"then, empty, {name}() returned instead of raising IndexError",
                "an empty queue's pop_request / peek_request raise IndexError",
            )


def _run(target: PluginTarget, requests: list[Any], steps: Sequence[str]) -> _QueueRun:
    run = _QueueRun(target, requests)
    for step in steps:
        run.do(step)
    return run


def check_all_short_queue_sequences(target: PluginTarget) -> int:
    """Check every applicable sequence of up to :data:`DEPTH` calls; return how many."""
    __tracebackhide__ = True
    requests = _requests()
    checked = 0
    # Breadth first: the first failure found is one of the shortest.
    stack: deque[tuple[str, ...]] = deque([()])
    while stack:
        steps = stack.popleft()
        run = _run(target, requests, steps)
        run.check()
        checked += 1
        if len(steps) == DEPTH:
            continue
        state = _run(target, requests, steps)
        for step in ALPHABET:
            if state.applies(step):
                stack.append((*steps, step))
    return checked
