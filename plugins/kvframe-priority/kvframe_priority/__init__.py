"""Priority scheduling, as vLLM V1's ``--scheduling-policy priority`` does it.

A request's rank is ``(priority, arrival_time, request_id)``; lower runs first
(vLLM's convention: priority 0 beats priority 1). Both waiting queues are heaps
on that rank, and between them the head with the lower rank goes first. The
preemption victim is the running request with the *largest*
``(priority, arrival_time)`` — the least important, latest arrival; among exact
ties the earliest in running order, as Python's ``max`` picks.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence

import kvframe
from kvframe.request import Request, RequestQueue

__all__ = ["PriorityPolicy", "PriorityQueue"]


def _victim_rank(request: Request) -> tuple[int, float]:
    return (request.priority, request.arrival_time)


class PriorityQueue:
    """A binary heap of requests ordered by ``Request.__lt__`` (priority, arrival, id).

    There is no "front" in a priority queue: prepending is adding.
    """

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[Request] = []

    def add_request(self, request: Request) -> None:
        heapq.heappush(self._heap, request)

    def pop_request(self) -> Request:
        if not self._heap:
            raise IndexError("pop from an empty queue")
        return heapq.heappop(self._heap)

    def peek_request(self) -> Request:
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0]

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: RequestQueue) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        self._heap.remove(request)
        heapq.heapify(self._heap)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        to_remove = requests if isinstance(requests, (set, frozenset)) else set(requests)
        self._heap = [r for r in self._heap if r not in to_remove]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Request]:
        """Requests in rank order (a sorted copy; the heap is untouched)."""
        return iter(sorted(self._heap))


class PriorityPolicy(kvframe.SchedulingPolicy):
    """Serve the lowest (priority, arrival) first; preempt the highest."""

    name = "priority"
    description = "Lowest priority value first, then arrival; preempts the least important."

    def create_queue(self) -> PriorityQueue:
        return PriorityQueue()

    def select_queue(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> RequestQueue:
        if waiting and skipped_waiting:
            return (
                waiting
                if waiting.peek_request() < skipped_waiting.peek_request()
                else skipped_waiting
            )
        return waiting if waiting else skipped_waiting

    def choose_victim(self, running: Sequence[Request]) -> Request:
        return max(running, key=_victim_rank)
