"""The load-only routers: round-robin, random and least-loaded.

None of them reads a request's blocks, so none computes its hashes
(:attr:`kvframe.RoutingRequest.block_hashes` is lazy).

* ``round-robin``: replica ``i mod N`` for the ``i``-th request, starting at 0,
  as Dynamo's ``PushRouter`` does with ``round_robin`` (an atomic counter over
  the instance list).
* ``random``: uniform over the replicas, from a ``random.Random`` seeded with
  the run's seed (:attr:`kvframe.FleetInfo.seed`), so a run replays exactly.
* ``least-loaded``: the replica whose last load report counted the fewest
  requests (running + waiting), plus the requests this router sent it after
  that report (the report cannot know them yet); ties go to the lower KV usage,
  then the lower replica number.
"""

from __future__ import annotations

import random
from collections import deque

import kvframe
from kvframe import FleetInfo, FleetView, RoutingRequest

__all__ = ["LeastLoadedRouter", "RandomRouter", "RoundRobinRouter"]


class RoundRobinRouter(kvframe.Router):
    """Each replica in turn, starting with replica 0."""

    name = "round-robin"
    description = "Each replica in turn (Dynamo's round_robin)."
    uses_loads = False
    uses_finishes = False

    def __init__(self) -> None:
        self._num_replicas = 1
        self._next = 0

    def attach(self, fleet: FleetInfo) -> None:
        self._num_replicas = fleet.num_replicas
        self._next = 0

    def route(self, request: RoutingRequest, view: FleetView) -> int:
        chosen = self._next
        self._next = (chosen + 1) % self._num_replicas
        return chosen


class RandomRouter(kvframe.Router):
    """Uniformly at random, seeded from the run's seed."""

    name = "random"
    description = "A replica uniformly at random, seeded from the run's seed."
    uses_loads = False
    uses_finishes = False

    def __init__(self) -> None:
        self._num_replicas = 1
        self._rng = random.Random(0)

    def attach(self, fleet: FleetInfo) -> None:
        self._num_replicas = fleet.num_replicas
        self._rng = random.Random(fleet.seed)

    def route(self, request: RoutingRequest, view: FleetView) -> int:
        return self._rng.randrange(self._num_replicas)


class LeastLoadedRouter(kvframe.Router):
    """Fewest requests by the last load report plus those sent since."""

    name = "least-loaded"
    description = "Fewest running+waiting requests (last report + sent since); ties: KV usage."

    def __init__(self) -> None:
        self._sent: list[deque[float]] = []

    def attach(self, fleet: FleetInfo) -> None:
        self._sent = [deque() for _ in range(fleet.num_replicas)]
        """Per replica, when this router sent it requests that no report has counted yet."""

    def route(self, request: RoutingRequest, view: FleetView) -> int:
        loads = view.loads()
        best: tuple[int, float, int] | None = None
        for replica in range(view.num_replicas):
            sent = self._sent[replica]
            if replica < len(loads):
                load = loads[replica]
                while sent and sent[0] <= load.time:
                    sent.popleft()  # the report already counts it
                key = (load.num_running + load.num_waiting + len(sent), load.kv_usage, replica)
            else:  # no report yet: what this router sent it and has not seen finish
                key = (view.num_outstanding(replica), 0.0, replica)
            if best is None or key < best:
                best = key
        chosen = best[2] if best is not None else 0
        self._sent[chosen].append(view.now)
        return chosen
