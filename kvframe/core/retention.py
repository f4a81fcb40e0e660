"""Finished requests whose KV blocks the core keeps for a scheduling policy.

A policy's ``on_finish`` may return a deadline instead of letting the blocks go
(Continuum pins a turn's KV across an agent's tool call this way). The core then
holds the request's block references until the deadline passes or the policy
releases them, so the blocks stay hittable by the next request with the same
prefix and cannot be evicted meanwhile. Deadlines are kept in a heap so the
per-step expiry check costs O(1) when nothing expires.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from kvframe.domain.request import Request


@attrs.frozen(slots=True)
class Retention:
    """One retained request: its blocks are held until ``deadline`` (virtual time)."""

    request: Request
    deadline: float
    retained_at: float


class RetentionTable(Mapping[str, Retention]):
    """Retained requests by id, in retention order, with a deadline heap.

    Removal is lazy in the heap: a released entry's heap item is skipped when it
    surfaces, identified by its sequence number.
    """

    __slots__ = ("_by_id", "_heap", "_seq", "_seq_of")

    def __init__(self) -> None:
        self._by_id: dict[str, Retention] = {}
        self._seq_of: dict[str, int] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def add(self, retention: Retention) -> None:
        request_id = retention.request.request_id
        if request_id in self._by_id:
            raise ValueError(f"request {request_id!r} is already retained")
        seq = next(self._seq)
        self._by_id[request_id] = retention
        self._seq_of[request_id] = seq
        heapq.heappush(self._heap, (retention.deadline, seq, request_id))

    def pop(self, request_id: str) -> Retention:
        """Remove and return the retention of ``request_id`` (KeyError if absent)."""
        retention = self._by_id.pop(request_id)
        del self._seq_of[request_id]
        return retention

    def pop_expired(self, now: float) -> list[Retention]:
        """Remove and return every retention whose deadline is ``<= now``, earliest first."""
        expired: list[Retention] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, seq, request_id = heapq.heappop(heap)
            if self._seq_of.get(request_id) == seq:
                expired.append(self.pop(request_id))
        return expired

    def earliest(self) -> Retention | None:
        """The live retention with the earliest deadline (skipping released entries)."""
        heap = self._heap
        while heap:
            _, seq, request_id = heap[0]
            if self._seq_of.get(request_id) == seq:
                return self._by_id[request_id]
            heapq.heappop(heap)
        return None

    def __getitem__(self, request_id: str) -> Retention:
        return self._by_id[request_id]

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._by_id

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)
