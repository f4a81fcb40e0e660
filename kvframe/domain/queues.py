"""The waiting queues the host ships: FIFO, and sorted by a policy's key.

A scheduling policy gets one of these from :meth:`SchedulingPolicy.create_queue
<kvframe.contract.bases.SchedulingPolicy.create_queue>` unless it overrides it: a
:class:`FIFORequestQueue` (vLLM's FCFS order), or a :class:`SortedRequestQueue`
when the policy defines ``sort_key``. They are data structures, not policies:
the order they keep is arrival order or the key's, nothing else.

Both implement the :class:`RequestQueue` protocol, which a policy's own queue
implements too.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from kvframe.domain.request import Request

__all__ = ["FIFORequestQueue", "RequestQueue", "SortedRequestQueue"]


_T = TypeVar("_T")

# mypyc compiles this module (kvframe.hot_modules); interpreted classes subclass
# the queues (plugins' own orders), which a compiled class allows only when it says so.
try:
    from mypy_extensions import mypyc_attr
except ImportError:  # no mypy here, so nothing is compiled: the decorator does nothing

    def mypyc_attr(*_args: Any, **_kwargs: Any) -> Callable[[_T], _T]:  # type: ignore[no-redef, misc]
        return lambda cls: cls


class RequestQueue(Protocol):
    """A waiting queue. Its order is the scheduling policy's choice.

    The scheduler admits from the head (:meth:`peek_request` /
    :meth:`pop_request`), puts back requests it could not admit with
    :meth:`prepend_request`, and moves a whole skipped-waiting queue back with
    :meth:`prepend_requests`. Implementations live in the scheduling plugins
    (``fcfs``, ``priority``, ...).
    """

    def add_request(self, request: Request) -> None:
        """Insert a request where the policy says it belongs."""
        ...

    def pop_request(self) -> Request:
        """Remove and return the head. Raises ``IndexError`` when empty."""
        ...

    def peek_request(self) -> Request:
        """Return the head without removing it. Raises ``IndexError`` when empty."""
        ...

    def prepend_request(self, request: Request) -> None:
        """Put a request back at the head (a priority queue may just re-add it)."""
        ...

    def prepend_requests(self, requests: RequestQueue) -> None:
        """Put all of another queue's requests, in its order, ahead of this queue's."""
        ...

    def remove_request(self, request: Request) -> None:
        """Remove one request that is in the queue."""
        ...

    def remove_requests(self, requests: Iterable[Request]) -> None:
        """Remove several requests; ones not in the queue are ignored."""
        ...

    def __len__(self) -> int: ...

    def __bool__(self) -> bool: ...

    def __iter__(self) -> Iterator[Request]:
        """Iterate in admission order without changing the queue."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)
class FIFORequestQueue:
    """Requests in arrival order; putting back puts at the head. O(1) at both ends.

    The scheduler puts a request it could not admit back with
    :meth:`prepend_request`, so it is retried first. It also collects the
    requests skipped in one step by prepending each (which reverses them) and
    merges that queue back with :meth:`prepend_requests`, which prepends each
    in turn (reversing again): the skipped requests keep their order ahead of
    the older ones, as vLLM's ``extendleft`` does.
    """

    __slots__ = ("_deque",)

    def __init__(self) -> None:
        self._deque: deque[Request] = deque()

    def add_request(self, request: Request) -> None:
        self._deque.append(request)

    def pop_request(self) -> Request:
        if not self._deque:
            raise IndexError("pop from an empty queue")
        return self._deque.popleft()

    def peek_request(self) -> Request:
        if not self._deque:
            raise IndexError("peek from an empty queue")
        return self._deque[0]

    def prepend_request(self, request: Request) -> None:
        self._deque.appendleft(request)

    def prepend_requests(self, requests: RequestQueue) -> None:
        """Prepend each of ``requests`` in turn (so their order ends up reversed)."""
        self._deque.extendleft(requests)

    def remove_request(self, request: Request) -> None:
        self._deque.remove(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = requests if isinstance(requests, (set, frozenset)) else set(requests)
        kept = [request for request in self._deque if request not in drop]
        self._deque.clear()
        self._deque.extend(kept)

    def __len__(self) -> int:
        return len(self._deque)

    def __bool__(self) -> bool:
        return bool(self._deque)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._deque)

    def __repr__(self) -> str:
        return f"FIFORequestQueue({[r.request_id for r in self._deque]})"


@mypyc_attr(allow_interpreted_subclasses=True)
class SortedRequestQueue:
    """Requests ordered by ``key(request)``, smallest first; equal keys in arrival order.

    A binary heap of ``(key, sequence number, request)``: the sequence number
    makes equal keys first-in first-out and means requests themselves are
    never compared. The key is computed once, when a request is added (or put
    back), so it should depend on what does not change while a request
    waits. A sorted queue has no front: putting a request back re-adds it.
    ``remove_request`` is O(n) (the scheduler removes only on abort).
    """

    __slots__ = ("_counter", "_heap", "key")

    def __init__(self, key: Callable[[Request], Any]) -> None:
        self.key = key
        self._heap: list[tuple[Any, int, Request]] = []
        self._counter = itertools.count()

    def add_request(self, request: Request) -> None:
        heapq.heappush(self._heap, (self.key(request), next(self._counter), request))

    def pop_request(self) -> Request:
        if not self._heap:
            raise IndexError("pop from an empty queue")
        return heapq.heappop(self._heap)[2]

    def peek_request(self) -> Request:
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][2]

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: RequestQueue) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        for i, entry in enumerate(self._heap):
            if entry[2] is request:
                self._heap[i] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return
        raise ValueError(f"{request!r} is not in the queue")

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = requests if isinstance(requests, (set, frozenset)) else set(requests)
        self._heap = [entry for entry in self._heap if entry[2] not in drop]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Request]:
        """Requests in admission order (a sorted copy; the heap is untouched)."""
        return iter([entry[2] for entry in sorted(self._heap, key=lambda e: e[:2])])

    def __repr__(self) -> str:
        return f"SortedRequestQueue({[r.request_id for r in self]})"
