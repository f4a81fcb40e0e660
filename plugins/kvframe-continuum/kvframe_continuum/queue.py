"""Continuum's waiting queue: program-level first-come-first-served.

A waiting request's rank is ``(class, job's first arrival, own arrival, seq)``:

* class 0 -- requests that were preempted (they already held the GPU once);
* class 1 -- turns of jobs that hold a pin (their context is still on the GPU:
  admitting them costs little and keeps the job going);
* class 2 -- everything else.

Within a class, jobs are served in the order they *first* arrived, so an
agent's later turns are not stuck behind jobs that started after it (plain FCFS
orders by the turn's own arrival, which puts every returning turn at the back).
A request without a job counts as a job of its own. ``seq`` (insertion order)
makes the order total.

Why a heap with lazy invalidation: the rank of a queued request changes when
its job gains or loses a pin. Re-ranking pushes a fresh entry and leaves the
old one in the heap, dead; dead entries are skipped when they surface and
swept out when they outnumber the live ones. Every operation stays O(log n)
amortised, with no scan of the queue.

A pin can also vanish without the policy being told (the core expires it at
its hard deadline, or releases it when its request is aborted). Such a job's
turn keeps class 1 until it reaches the head, where the queue checks the pin
again and demotes it if it is gone -- the only place where a stale class can
change a decision.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvframe import Request, RequestQueue

__all__ = ["PINNED", "PREEMPTED", "UNPINNED", "ContinuumQueue", "Rank"]

PREEMPTED = 0
PINNED = 1
UNPINNED = 2

Rank = tuple[int, float, float]
"""``(class, job's first arrival, request's arrival)``."""

# A heap entry: [class, job first arrival, arrival, seq, request]. Lists, not
# tuples, so the entry object itself identifies the live one; ``seq`` is unique
# per request insertion, so comparisons never reach the request.
_CLASS, _FIRST, _ARRIVAL, _SEQ, _REQUEST = range(5)


def _noop(request: Request) -> None:
    return None


class ContinuumQueue:
    """A heap of waiting requests ranked by program-level FCFS (see the module docstring).

    :param rank: the rank of a request now (the policy's view of preemption,
        pins and job arrivals).
    :param is_pinned: whether a job still holds a pin, checked for a class-1 head.
    :param on_pop: called with each request the scheduler pops.
    :param on_remove: called with each request removed (aborted or finished
        while waiting).
    :param seq: the insertion counter; the policy shares one between its queues
        so that exact ties compare the same way across them.
    """

    __slots__ = (
        "__weakref__",
        "_by_job",
        "_heap",
        "_is_pinned",
        "_live",
        "_on_pop",
        "_on_remove",
        "_rank",
        "_seq",
    )

    def __init__(
        self,
        rank: Callable[[Request], Rank],
        is_pinned: Callable[[str], bool],
        *,
        on_pop: Callable[[Request], None] = _noop,
        on_remove: Callable[[Request], None] = _noop,
        seq: Iterator[int] | None = None,
    ) -> None:
        self._rank = rank
        self._is_pinned = is_pinned
        self._on_pop = on_pop
        self._on_remove = on_remove
        self._heap: list[list] = []
        self._live: dict[str, list] = {}
        self._by_job: dict[str, set[str]] = {}
        self._seq = seq if seq is not None else itertools.count()

    # ---------------------------------------------------------------- internals

    def _push(self, rank: Rank, seq: int, request: Request) -> None:
        entry = [rank[0], rank[1], rank[2], seq, request]
        self._live[request.request_id] = entry
        heapq.heappush(self._heap, entry)

    def _clean_head(self) -> None:
        """Drop dead entries from the head and demote a class-1 head whose pin is gone."""
        heap = self._heap
        live = self._live
        while heap:
            head = heap[0]
            request = head[_REQUEST]
            if live.get(request.request_id) is not head:
                heapq.heappop(heap)
                continue
            if head[_CLASS] == PINNED and not self._is_pinned(request.job_id):
                heapq.heappop(heap)
                _, first, arrival = self._rank(request)
                self._push((UNPINNED, first, arrival), head[_SEQ], request)
                continue
            return

    def _forget(self, request: Request) -> None:
        job_id = request.job_id
        if job_id is not None:
            members = self._by_job.get(job_id)
            if members is not None:
                members.discard(request.request_id)
                if not members:
                    del self._by_job[job_id]

    def _maybe_compact(self) -> None:
        if len(self._heap) > 2 * len(self._live) + 64:
            live = self._live
            self._heap = [e for e in self._heap if live.get(e[_REQUEST].request_id) is e]
            heapq.heapify(self._heap)

    # ---------------------------------------------------------- RequestQueue API

    def add_request(self, request: Request) -> None:
        self._push(self._rank(request), next(self._seq), request)
        job_id = request.job_id
        if job_id is not None:
            members = self._by_job.get(job_id)
            if members is None:
                self._by_job[job_id] = {request.request_id}
            else:
                members.add(request.request_id)

    def pop_request(self) -> Request:
        self._clean_head()
        if not self._heap:
            raise IndexError("pop from an empty queue")
        request = heapq.heappop(self._heap)[_REQUEST]
        del self._live[request.request_id]
        self._forget(request)
        self._on_pop(request)
        return request

    def peek_request(self) -> Request:
        self._clean_head()
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][_REQUEST]

    def prepend_request(self, request: Request) -> None:
        """A ranked queue has no front: the rank decides (a preempted request is class 0)."""
        self.add_request(request)

    def prepend_requests(self, requests: RequestQueue) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        if self._live.pop(request.request_id, None) is None:
            raise ValueError(f"request {request.request_id!r} is not in the queue")
        self._forget(request)
        self._on_remove(request)
        self._maybe_compact()

    def remove_requests(self, requests: Iterable[Request]) -> None:
        live = self._live
        for request in requests:
            if live.pop(request.request_id, None) is not None:
                self._forget(request)
                self._on_remove(request)
        self._maybe_compact()

    def __len__(self) -> int:
        return len(self._live)

    def __bool__(self) -> bool:
        return bool(self._live)

    def __iter__(self) -> Iterator[Request]:
        """Requests in admission order (a sorted copy; the queue is untouched).

        Classes are shown as the head check would see them (a class-1 request
        whose pin is gone sorts as class 2).
        """
        is_pinned = self._is_pinned

        def key(entry: list) -> tuple:
            klass = entry[_CLASS]
            if klass == PINNED and not is_pinned(entry[_REQUEST].job_id):
                klass = UNPINNED
            return (klass, entry[_FIRST], entry[_ARRIVAL], entry[_SEQ])

        return iter([e[_REQUEST] for e in sorted(self._live.values(), key=key)])

    # ------------------------------------------------------------- for the policy

    def head_rank(self) -> tuple[int, float, float, int]:
        """The head's ``(class, job first arrival, arrival, seq)``; the queue must be non-empty."""
        self._clean_head()
        head = self._heap[0]
        return (head[_CLASS], head[_FIRST], head[_ARRIVAL], head[_SEQ])

    def rerank_job(self, job_id: str) -> None:
        """Recompute the rank of this job's queued requests (its pin came or went)."""
        members = self._by_job.get(job_id)
        if not members:
            return
        live = self._live
        for request_id in members:
            entry = live[request_id]
            request = entry[_REQUEST]
            rank = self._rank(request)
            if (entry[_CLASS], entry[_FIRST], entry[_ARRIVAL]) != rank:
                self._push(rank, entry[_SEQ], request)
        self._maybe_compact()

    def rank_of(self, request: Request) -> tuple[int, float, float, int] | None:
        """The stored rank of a queued request (``None`` if not queued); for tests and traces."""
        entry = self._live.get(request.request_id)
        if entry is None:
            return None
        return (entry[_CLASS], entry[_FIRST], entry[_ARRIVAL], entry[_SEQ])
