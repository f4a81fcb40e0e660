"""The routing plugin kind: which replica of a fleet an arriving request goes to.

A fleet (``kvframe run --replicas N``) runs N engine replicas on one virtual
clock; each replica is exactly the single engine kvframe simulates. When a
request arrives, the fleet asks the selected :class:`Router` where to send it.

A router sees only what a real router can know -- never a replica's internals:

* the request as a client sends it (:class:`RoutingRequest`): its prompt's
  block hashes computed as the replicas compute them, its length, priority and
  its job (session) id;
* the KV events each replica publishes (``BlockStored`` / ``BlockRemoved`` /
  ``AllBlocksCleared``, as vLLM's KV-event publisher emits them), delivered
  after a configurable delay, and only to routers that ask for them
  (:attr:`Router.uses_kv_events`);
* load reports (:class:`ReplicaLoad`) as replicas publish them at an interval;
* its own bookkeeping: what it sent where, and which of those requests the
  client has seen finish (:meth:`Router.on_finished`; the view's
  :meth:`FleetView.num_outstanding`).

The fleet hands the router a :class:`FleetView` built from copies of those
signals; no object reachable from it refers to an engine. The conformance suite
(``pytest --kvframe-plugin routing:NAME``) checks that a router's choices are a
function of its view, its own state and its seed.

Routers are called directly on the fleet's arrival path, never through pluggy.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol

import attrs

from kvframe.contract.bases import PluginBase

if TYPE_CHECKING:
    from kvframe.contract.records import KVEvent
    from kvframe.domain.tokens import BlockHash

__all__ = ["FleetInfo", "FleetView", "PublishedEvent", "ReplicaLoad", "Router", "RoutingRequest"]


class RoutingRequest:
    """An arriving request as the router sees it: what a client sends, nothing more.

    ``block_hashes`` are the chained hashes of the prompt's *full* blocks at the
    replicas' block size, computed with the replicas' own hash function, so
    they match the hashes in the replicas' KV events. They are computed on
    first read (a router that never reads them, such as round-robin, costs
    nothing).
    """

    __slots__ = (
        "_block_hashes",
        "_hash_prompt",
        "arrival_time",
        "job_id",
        "max_tokens",
        "num_prompt_tokens",
        "priority",
        "request_id",
        "turn",
    )

    def __init__(
        self,
        request_id: str,
        *,
        arrival_time: float,
        num_prompt_tokens: int,
        max_tokens: int,
        priority: int = 0,
        job_id: str | None = None,
        turn: int = 0,
        hash_prompt: Callable[[], Sequence[BlockHash]],
    ) -> None:
        self.request_id = request_id
        self.arrival_time = arrival_time
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens
        self.priority = priority
        self.job_id = job_id
        """The agentic job (multi-turn session) the request belongs to, if any:
        every turn of a job carries the same id, so a sticky router can use it."""
        self.turn = turn
        self._hash_prompt = hash_prompt
        self._block_hashes: tuple[BlockHash, ...] | None = None

    @property
    def block_hashes(self) -> tuple[BlockHash, ...]:
        """Chained hashes of the prompt's full blocks, as the replicas' KV events name them."""
        if self._block_hashes is None:
            self._block_hashes = tuple(self._hash_prompt())
        return self._block_hashes

    def __repr__(self) -> str:
        return (
            f"RoutingRequest({self.request_id!r}, arrival_time={self.arrival_time}, "
            f"num_prompt_tokens={self.num_prompt_tokens}, job_id={self.job_id!r})"
        )


@attrs.frozen(slots=True)
class ReplicaLoad:
    """One replica's load as it reported it (at the fleet's report interval)."""

    replica: int
    time: float
    """Virtual time of the report (the view may be up to one interval old)."""
    num_running: int
    num_waiting: int
    kv_usage: float
    """Fraction of the replica's GPU KV blocks in use, 0..1 (vLLM's ``kv_cache_usage``)."""
    num_active_blocks: int
    """KV blocks held by the replica's running requests (Dynamo's active blocks)."""


@attrs.frozen(slots=True)
class PublishedEvent:
    """A KV event as a router receives it: which replica published it, and when."""

    replica: int
    time: float
    """When the replica published it; the router receives it ``kv_event_delay`` later."""
    event: KVEvent


@attrs.frozen(slots=True)
class FleetInfo:
    """What a router is told once, before the first request (:meth:`Router.attach`)."""

    num_replicas: int
    block_size: int
    """Tokens per KV block on the replicas (the granularity of ``block_hashes``)."""
    seed: int
    """The run's seed: a router that draws at random seeds its generator from it."""
    role: str = "aggregated"
    """Which requests the router places (``--disagg``, :mod:`kvframe.fleet.disagg`):
    ``aggregated`` (every request, the whole fleet), ``prefill`` (arriving requests, over
    the prefill and aggregated replicas) or ``decode`` (requests whose prefill is done,
    over the decode replicas). A disaggregated fleet attaches one router per role, each
    with its pool's size: replica numbers are the pool's, so a router that ignores
    ``role`` serves either."""


class FleetView(Protocol):
    """What a router may read at an arrival: the fleet's published signals, as of now."""

    @property
    def now(self) -> float:
        """The arrival's virtual time."""
        ...

    @property
    def num_replicas(self) -> int: ...

    def loads(self) -> Sequence[ReplicaLoad]:
        """The latest load report of each replica, indexed by replica number."""
        ...

    def take_kv_events(self) -> Sequence[PublishedEvent]:
        """KV events delivered since the last call (published at least the delay ago),
        in publication order. Empty unless the router's ``uses_kv_events`` is set."""
        ...

    def take_kv_event_batches(self) -> Sequence[tuple[int, float, Sequence[KVEvent]]]:
        """:meth:`take_kv_events` as the replicas published them: ``(replica, publication
        time, events)`` per batch, in publication order, without a
        :class:`PublishedEvent` per event. The same events, taken the same way (either
        call takes what was delivered). Why: a fleet publishes about a million events on
        1,500 Mooncake requests, mostly one ``BlockRemoved`` per evicted block, and a
        router that indexes them all (``dynamo-kv``) pays for every wrapper."""
        ...

    def num_outstanding(self, replica: int) -> int:
        """Requests this router sent to ``replica`` that have not finished yet."""
        ...


class Router(PluginBase):
    """Chooses the replica for each arriving request, from a :class:`FleetView`.

    Constructed with its options only (``--router NAME:key=value``); :meth:`attach`
    follows once the fleet exists. :meth:`route` must return a replica number in
    ``range(view.num_replicas)`` and must depend only on the request, the view,
    the router's own state and the seed: the conformance suite replays a router
    on recorded views and requires the same choices. A minimal router::

        class RoundRobin(kvframe.Router):
            name = "rr"
            description = "Each replica in turn."

            def attach(self, fleet):
                self.n, self.next = fleet.num_replicas, 0

            def route(self, request, view):
                self.next = (self.next + 1) % self.n
                return self.next
    """

    kind: ClassVar[str] = "routing"

    uses_kv_events: ClassVar[bool] = False
    """Does the router read the replicas' KV events? The fleet makes replicas
    publish them only when it does (read once, when the fleet is built)."""

    uses_loads: ClassVar[bool] = True
    """Does the router read :meth:`FleetView.loads`? A router that does not (round-robin,
    random, consistent hashing) sets it false: the fleet then keeps no load reports, and
    replicas take runs of plain decode steps up to the next arrival instead of stopping
    at every report (a router that reads ``loads()`` anyway gets an error)."""

    uses_finishes: ClassVar[bool] = True
    """Does the router read what it learns of a request after routing it --
    :meth:`on_first_token`, :meth:`on_finished`, :meth:`FleetView.num_outstanding`?
    A router that does not (round-robin, random, consistent hashing) sets it false:
    with ``uses_kv_events`` and ``uses_loads`` also false it reads no replica state,
    so its choices follow from the requests in arrival order and its seed alone, and
    the fleet may run the replicas in parallel processes
    (:mod:`kvframe.fleet.parallel`, ``kvframe run --processes``). Such a router is not
    called back, and ``num_outstanding()`` raises an error."""

    def attach(self, fleet: FleetInfo) -> None:
        """Called once, before the first request, with the fleet's shape and seed."""

    @abc.abstractmethod
    def route(self, request: RoutingRequest, view: FleetView) -> int:
        """The replica (``0 <= r < view.num_replicas``) that serves ``request``."""

    def on_first_token(self, request_id: str, replica: int, now: float) -> None:
        """The client saw ``request_id``'s first output token at ``now``: its prefill is done.

        A real router sees it in-band, on the response stream (Dynamo's router
        drops the request's prompt tokens from the worker's prefill load here,
        ``mark_prefill_completed``). Called at most once per request, before
        :meth:`on_finished`; never for a request that finished without a token."""

    def on_finished(self, request_id: str, replica: int, now: float) -> None:
        """The client saw ``request_id``, sent to ``replica``, finish at ``now``."""
