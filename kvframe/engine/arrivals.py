"""When each request of a workload reaches the engine.

Two kinds of arrival:

* **open loop** -- a request arrives at its spec's ``arrival_time``, whatever
  the engine is doing (every request of a trace, the first turn of an agentic
  job);
* **closed loop** -- a later turn of an agentic job arrives a tool-call
  duration after the job's previous turn *finishes*: at
  ``max(spec.arrival_time, previous finish + previous tool_duration)``, the
  spec's own arrival being the earliest it may come (see docs/workloads.md).

:class:`ArrivalQueue` merges both into one stream in time order. The engine
asks for :attr:`ArrivalQueue.next_time` once per step (a float compare when
nothing is due) and pops what is due; it reports finished turns with
:meth:`ArrivalQueue.turn_finished` so the job's next turn can be released.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvframe.workloads.spec import RequestSpec

__all__ = ["ArrivalQueue"]

_NEVER = math.inf


class ArrivalQueue:
    """The requests not yet arrived, open-loop ones in file order and released turns.

    :param specs: the workload's specs in non-decreasing ``arrival_time``.

    Within a job, the turn with the lowest number is open loop; the others are
    held until the turn before them finishes.
    """

    __slots__ = ("_held", "_in_flight", "_index", "_open", "_released", "_seq", "next_time")

    def __init__(self, specs: Sequence[RequestSpec]) -> None:
        held: dict[str, list[RequestSpec]] = {}
        for spec in specs:
            if spec.job_id is not None:
                held.setdefault(spec.job_id, []).append(spec)
        followers: set[int] = set()
        self._held: dict[str, deque[RequestSpec]] = {}
        for job_id, turns in held.items():
            if len(turns) < 2:
                continue
            turns.sort(key=lambda s: s.turn)
            followers.update(id(s) for s in turns[1:])
            self._held[job_id] = deque(turns[1:])
        self._open: Sequence[RequestSpec] = (
            [s for s in specs if id(s) not in followers] if followers else specs
        )
        self._index = 0
        self._released: list[tuple[float, int, RequestSpec]] = []
        self._seq = itertools.count()
        self._in_flight: dict[str, RequestSpec] = {}
        self.next_time = _NEVER
        """Arrival time of the next request (``inf`` when none is known yet)."""
        self._update_next()

    def _update_next(self) -> None:
        open_next = (
            self._open[self._index].arrival_time if self._index < len(self._open) else _NEVER
        )
        released_next = self._released[0][0] if self._released else _NEVER
        self.next_time = min(open_next, released_next)

    def pop_due(self, now: float) -> list[tuple[float, RequestSpec]]:
        """``(arrival time, spec)`` of every request arriving at or before ``now``, in order."""
        due: list[tuple[float, RequestSpec]] = []
        open_specs = self._open
        released = self._released
        while True:
            open_next = (
                open_specs[self._index].arrival_time if self._index < len(open_specs) else _NEVER
            )
            released_next = released[0][0] if released else _NEVER
            if open_next <= released_next and open_next <= now:
                due.append((open_next, open_specs[self._index]))
                self._index += 1
            elif released_next <= now:
                arrival, _, spec = heapq.heappop(released)
                due.append((arrival, spec))
            else:
                break
        for _, spec in due:
            if spec.job_id is not None and spec.job_id in self._held:
                self._in_flight[spec.job_id] = spec
        self._update_next()
        return due

    def turn_finished(self, job_id: str, now: float) -> float | None:
        """A turn of ``job_id`` left the engine at ``now``: release the job's next turn.

        :return: the next turn's arrival time, or ``None`` if the job has no
            held turn (its last turn finished, or it is not multi-turn).
        """
        turns = self._held.get(job_id)
        if not turns:
            return None
        finished = self._in_flight.pop(job_id, None)
        gap = (finished.tool_duration or 0.0) if finished is not None else 0.0
        spec = turns.popleft()
        if not turns:
            del self._held[job_id]
        arrival = max(spec.arrival_time, now + gap)
        heapq.heappush(self._released, (arrival, next(self._seq), spec))
        self._update_next()
        return arrival

    @property
    def num_pending(self) -> int:
        """Requests that have not arrived: open-loop, released and still held turns."""
        held = sum(len(turns) for turns in self._held.values())
        return len(self._open) - self._index + len(self._released) + held

    @property
    def exhausted(self) -> bool:
        """No arrival is known now (held turns may still be released later)."""
        return self.next_time == _NEVER

    @property
    def has_held(self) -> bool:
        """Whether some turn waits for its job's previous turn (O(1), unlike :attr:`num_held`)."""
        return bool(self._held)

    @property
    def num_held(self) -> int:
        """Turns waiting for their job's previous turn to finish."""
        return sum(len(turns) for turns in self._held.values())

    def __bool__(self) -> bool:
        return self.next_time != _NEVER or bool(self._held)
