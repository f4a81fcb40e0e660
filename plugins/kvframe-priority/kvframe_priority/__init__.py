"""Priority scheduling, as vLLM V1's ``--scheduling-policy priority`` does it.

A request's rank is ``(priority, arrival_time, request_id)``; lower runs first
(vLLM's convention: priority 0 beats priority 1). Both waiting queues are heaps
on that rank, and between them the head with the lower rank goes first. The
preemption victim is the running request with the *largest*
``(priority, arrival_time)`` — the least important, latest arrival; among exact
ties the earliest in running order, as Python's ``max`` picks.
"""

from __future__ import annotations

from collections.abc import Sequence

import kvframe
from kvframe import Request, SortedRequestQueue

__all__ = ["PriorityPolicy", "PriorityQueue"]


def _victim_rank(request: Request) -> tuple[int, float]:
    return (request.priority, request.arrival_time)


def _rank(request: Request) -> tuple[int, float, str]:
    """vLLM's ``Request.__lt__``: priority, then arrival, then request id."""
    return (request.priority, request.arrival_time, request.request_id)


class PriorityQueue(SortedRequestQueue):
    """The host's sorted queue on :func:`_rank` (a binary heap).

    There is no "front" in a priority queue: prepending is adding.
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(_rank)


class PriorityPolicy(kvframe.SchedulingPolicy):
    """Serve the lowest (priority, arrival) first; preempt the highest.

    The sort key is all the base needs for the queues and for choosing
    between them (the head with the lower rank goes first). The victim is
    chosen on ``(priority, arrival_time)`` alone, as vLLM does, so exact ties
    go to the earliest in running order rather than to the largest id.
    """

    name = "priority"
    description = "Lowest priority value first, then arrival; preempts the least important."

    def sort_key(self, request: Request) -> tuple[int, float, str]:
        return _rank(request)

    def choose_victim(self, running: Sequence[Request]) -> Request:
        return max(running, key=_victim_rank)
