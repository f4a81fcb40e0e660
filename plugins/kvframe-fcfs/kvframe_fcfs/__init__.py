"""First-come-first-served scheduling, as vLLM V1 does it by default.

* Waiting requests are served in arrival order; a preempted request goes back
  to the *head* of the queue (the core prepends it), so it resumes first.
* Requests that were skipped because they wait on the connector are older than
  anything in the waiting queue, so the skipped-waiting queue is served first.
* The victim of a preemption is the request at the tail of the running list:
  the one admitted last, whose loss wastes the least work under FCFS.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence

import kvframe
from kvframe.request import Request, RequestQueue

__all__ = ["FCFSPolicy", "FCFSQueue"]


class FCFSQueue:
    """A deque of requests in arrival order (O(1) at both ends)."""

    __slots__ = ("_deque",)

    def __init__(self) -> None:
        self._deque: deque[Request] = deque()

    def add_request(self, request: Request) -> None:
        self._deque.append(request)

    def pop_request(self) -> Request:
        return self._deque.popleft()

    def peek_request(self) -> Request:
        if not self._deque:
            raise IndexError("peek from an empty queue")
        return self._deque[0]

    def prepend_request(self, request: Request) -> None:
        self._deque.appendleft(request)

    def prepend_requests(self, requests: RequestQueue) -> None:
        """Put ``requests`` in front, each prepended in turn (so their order is reversed).

        The scheduler fills its per-step skipped queue with ``prepend_request``
        (reversed) and merges it back with this method (reversed again), so the
        skipped requests keep their order ahead of older skipped ones — exactly
        as vLLM's ``extendleft`` does.
        """
        self._deque.extendleft(requests)

    def remove_request(self, request: Request) -> None:
        self._deque.remove(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        to_remove = requests if isinstance(requests, (set, frozenset)) else set(requests)
        kept = [r for r in self._deque if r not in to_remove]
        self._deque.clear()
        self._deque.extend(kept)

    def __len__(self) -> int:
        return len(self._deque)

    def __bool__(self) -> bool:
        return bool(self._deque)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._deque)


class FCFSPolicy(kvframe.SchedulingPolicy):
    """Serve requests in arrival order; preempt the most recently admitted."""

    name = "fcfs"
    description = "First come, first served; preempts the newest running request (vLLM default)."

    def create_queue(self) -> FCFSQueue:
        return FCFSQueue()

    def select_queue(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> RequestQueue:
        return skipped_waiting if skipped_waiting else waiting

    def choose_victim(self, running: Sequence[Request]) -> Request:
        return running[-1]
