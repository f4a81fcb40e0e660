"""What a router may know, and when: the fleet's published signals and the view built from them.

Replicas publish four kinds of signal, each stamped with the virtual time it
was published (the end of the step that produced it):

* **first tokens** -- the client sees a request's first output token (its
  prefill is done); the router's :meth:`~kvframe.Router.on_first_token` is
  called then (once per request, before its finish);
* **finishes** -- the client sees a request finish at its finish time; the
  router's :meth:`~kvframe.Router.on_finished` is called then, and the view's
  :meth:`~kvframe.contract.routing.FleetView.num_outstanding` counts it;
* **KV events** -- the block pool's ``BlockStored`` / ``BlockRemoved`` /
  ``AllBlocksCleared`` of one step, delivered ``kv_event_delay`` seconds after
  publication (only when the router's ``uses_kv_events`` is set);
* **load reports** -- a :class:`~kvframe.contract.routing.ReplicaLoad` taken at
  the end of the first step that ends at or after each report time (every
  ``load_report_interval`` seconds; 0: after every step).

:class:`SignalBoard` keeps them in one queue ordered by delivery time and
hands out those due before each routing decision, so a router never sees a
signal from its future. :class:`View` is the
:class:`~kvframe.contract.routing.FleetView` a router reads: lists of copies
(frozen records and integers), nothing that refers to an engine.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvframe.contract.routing import PublishedEvent, ReplicaLoad

if TYPE_CHECKING:
    from kvframe.contract.records import KVEvent
    from kvframe.contract.routing import Router

__all__ = ["SignalBoard", "View"]

_FINISH, _EVENTS, _LOAD, _FIRST = 0, 1, 2, 3


class View:
    """The :class:`~kvframe.contract.routing.FleetView` of one fleet run.

    The same object is passed at every arrival (its ``now`` moves); read it
    during :meth:`~kvframe.Router.route`, do not keep references into it.
    """

    __slots__ = (
        "_events",
        "_loads",
        "_outstanding",
        "_router_name",
        "_uses_finishes",
        "_uses_loads",
        "now",
    )

    def __init__(
        self, num_replicas: int, *, router_name: str, uses_loads: bool, uses_finishes: bool = True
    ) -> None:
        self.now = 0.0
        self._loads = [ReplicaLoad(r, 0.0, 0, 0, 0.0, 0) for r in range(num_replicas)]
        self._events: list[tuple[int, float, Sequence[KVEvent]]] = []
        """Delivered KV events as published: (replica, time, one step's events)."""
        self._outstanding = [0] * num_replicas
        self._router_name = router_name
        self._uses_loads = uses_loads
        self._uses_finishes = uses_finishes

    @property
    def num_replicas(self) -> int:
        return len(self._outstanding)

    def loads(self) -> Sequence[ReplicaLoad]:
        """The latest load report of each replica (time 0, all zero, before its first)."""
        if not self._uses_loads:
            raise RuntimeError(
                f"router {self._router_name!r} read view.loads() but declares "
                "uses_loads = False: the fleet keeps no load reports for it; set "
                "uses_loads = True on the router class"
            )
        return tuple(self._loads)

    def take_kv_events(self) -> Sequence[PublishedEvent]:
        """KV events delivered since the last call, in publication order."""
        batches, self._events = self._events, []
        return [
            PublishedEvent(replica, time, event)
            for replica, time, events in batches
            for event in events
        ]

    def take_kv_event_batches(self) -> Sequence[tuple[int, float, Sequence[KVEvent]]]:
        """:meth:`take_kv_events` as published, without a :class:`PublishedEvent` per event:
        ``(replica, time, events)`` per step, in publication order.

        Why: a fleet's replicas publish about a million events on 1,500 Mooncake
        requests (mostly one ``BlockRemoved`` per evicted block); wrapping each cost a
        ``dynamo-kv`` fleet about as much as its index did (``benchmarks/fleet_scale.py``);
        ``dynamo-kv`` reads these, with :meth:`kvframe.KVPrefixIndex.apply_all`.
        """
        batches, self._events = self._events, []
        return batches

    def num_outstanding(self, replica: int) -> int:
        """Requests this router sent to ``replica`` that it has not seen finish."""
        if not self._uses_finishes:
            raise RuntimeError(
                f"router {self._router_name!r} read view.num_outstanding() but declares "
                "uses_finishes = False: the fleet tells it no finishes; set "
                "uses_finishes = True on the router class"
            )
        return self._outstanding[replica]


class SignalBoard:
    """Signals published by replicas, delivered to the view and the router in time order.

    :param kv_event_delay: seconds between a KV event's publication and its delivery.
    """

    __slots__ = ("_delay", "_finishes", "_pending", "_router", "_seq", "view")

    def __init__(self, view: View, router: Router, *, kv_event_delay: float) -> None:
        self.view = view
        self._router = router
        self._finishes = bool(router.uses_finishes)
        """Whether first tokens and finishes reach the router (``uses_finishes``)."""
        self._delay = kv_event_delay
        self._pending: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()

    # -- publication (the fleet, after a replica's step) ------------------------

    def sent(self, replica: int) -> None:
        """The router sent a request to ``replica``."""
        self.view._outstanding[replica] += 1

    def first_token(self, request_id: str, replica: int, time: float) -> None:
        """``request_id`` produced its first token on ``replica`` (the client sees it at once)."""
        if not self._finishes:
            return
        heapq.heappush(self._pending, (time, next(self._seq), _FIRST, (request_id, replica)))

    def finished(self, request_id: str, replica: int, time: float) -> None:
        if not self._finishes:
            return
        heapq.heappush(self._pending, (time, next(self._seq), _FINISH, (request_id, replica)))

    def kv_events(self, replica: int, time: float, events: Sequence[KVEvent]) -> None:
        published = (replica, time, events)
        heapq.heappush(self._pending, (time + self._delay, next(self._seq), _EVENTS, published))

    def load(self, report: ReplicaLoad) -> None:
        heapq.heappush(self._pending, (report.time, next(self._seq), _LOAD, report))

    # -- delivery (before each routing decision) --------------------------------

    def deliver(self, now: float) -> None:
        """Deliver every signal due at or before ``now``; the view's clock becomes ``now``."""
        pending = self._pending
        view = self.view
        while pending and pending[0][0] <= now:
            time, _, kind, payload = heapq.heappop(pending)
            if kind == _FINISH:
                request_id, replica = payload  # type: ignore[misc]
                view._outstanding[replica] -= 1
                self._router.on_finished(request_id, replica, time)
            elif kind == _FIRST:
                request_id, replica = payload  # type: ignore[misc]
                self._router.on_first_token(request_id, replica, time)
            elif kind == _EVENTS:
                view._events.append(payload)  # type: ignore[arg-type]
            else:
                report: ReplicaLoad = payload  # type: ignore[assignment]
                view._loads[report.replica] = report
        view.now = now

    def drain(self) -> None:
        """Deliver everything left (the run is over: the router sees its last finishes)."""
        self.deliver(math.inf)
