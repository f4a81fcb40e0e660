"""Longest prefix match first, with aging: SGLang's ``lpm`` without its starvation.

Proposal: SGLang's cache-aware ``lpm`` schedule (the waiting request with the
longest cached prefix goes first, so shared prefixes are used while they are
cached), whose cache-missing requests starve: about 5% of requests make about
75% of the TTFT (sgl-project/sglang issue #31954). Session/prefix affinity is
also among the orderings of vLLM's scheduler-plugin RFC (#51608, #51384).

The order is decided when the scheduler looks at the queue, from the GPU
prefix cache as it is then (:meth:`kvframe.SchedulerContext.num_cached_tokens`),
as SGLang recomputes it every round:

* a request that has waited ``max_wait_s`` or more is *overdue*: overdue
  requests go first, first come first served -- the bound on starvation;
* the others by ``cached_tokens + tokens_per_s * waited``, largest first
  (each second waited is worth ``tokens_per_s`` cached tokens: aging);
* ties, and requests put back at the head, first come first served.

With more than ``max_sorted`` requests waiting the queue is served first come,
first served, as SGLang falls back to FCFS above 128 waiting requests: the
order costs one prefix lookup per waiting request each time it is asked for.
The victim of a preemption is vLLM's FCFS victim (the last admitted).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

import kvframe
from kvframe import Request, RequestQueue, SchedulerContext

__all__ = ["LPMPolicy", "LPMQueue"]


class LPMQueue:
    """Waiting requests in arrival order, served in the policy's order at each look.

    Each entry carries a sequence number: the arrival order, and the tie
    break. A request put back at the head gets a number below every other
    (it was admitted first before).
    """

    __slots__ = ("_entries", "_first", "_next", "policy")

    def __init__(self, policy: LPMPolicy) -> None:
        self.policy = policy
        self._entries: dict[Request, int] = {}
        self._next = itertools.count()
        self._first = itertools.count(-1, -1)

    def _ordered(self) -> list[Request]:
        entries = self._entries
        by_arrival = sorted(entries, key=entries.__getitem__)
        context = self.policy.context
        if context is None or len(entries) > self.policy.max_sorted:
            return by_arrival
        now, cached = context.now, context.num_cached_tokens
        max_wait, rate = self.policy.max_wait_s, self.policy.tokens_per_s

        def rank(request: Request) -> tuple[int, float, int]:
            waited = now - request.arrival_time
            if waited >= max_wait:
                return (0, 0.0, entries[request])
            return (1, -(cached(request) + rate * waited), entries[request])

        return sorted(by_arrival, key=rank)

    def add_request(self, request: Request) -> None:
        self._entries[request] = next(self._next)

    def pop_request(self) -> Request:
        if not self._entries:
            raise IndexError("pop from an empty queue")
        head = self._ordered()[0]
        del self._entries[head]
        return head

    def peek_request(self) -> Request:
        if not self._entries:
            raise IndexError("peek from an empty queue")
        return self._ordered()[0]

    def prepend_request(self, request: Request) -> None:
        self._entries[request] = next(self._first)

    def prepend_requests(self, requests: RequestQueue) -> None:
        for request in list(requests):
            self.prepend_request(request)

    def remove_request(self, request: Request) -> None:
        del self._entries[request]

    def remove_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self._entries.pop(request, None)

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._ordered())


class LPMPolicy(kvframe.SchedulingPolicy):
    """The waiting request with the longest cached prefix first; overdue ones before all."""

    name = "lpm"
    description = "Longest cached prefix first, aged; requests waiting max_wait_s go first."

    allows_decode_runs = False
    """Step by step: the order reads the prefix cache, where a decode run caches the
    blocks its decodes fill only when the run ends."""

    def __init__(
        self, *, tokens_per_s: float = 1000.0, max_wait_s: float = 10.0, max_sorted: int = 128
    ) -> None:
        if not tokens_per_s >= 0:
            raise ValueError(f"tokens_per_s must be >= 0, not {tokens_per_s}")
        if not max_wait_s >= 0:
            raise ValueError(f"max_wait_s must be >= 0, not {max_wait_s}")
        if max_sorted < 1:
            raise ValueError(f"max_sorted must be >= 1, not {max_sorted}")
        self.tokens_per_s = tokens_per_s
        self.max_wait_s = max_wait_s
        self.max_sorted = max_sorted
        self.context: SchedulerContext | None = None

    def attach(self, context: SchedulerContext) -> None:
        self.context = context

    def create_queue(self) -> RequestQueue:
        return LPMQueue(self)
