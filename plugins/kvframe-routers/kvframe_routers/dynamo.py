"""NVIDIA Dynamo 1.6's KV router: lowest cost of prefill still to compute plus active blocks.

The rule, from Dynamo's ``DefaultWorkerSelector::select_worker`` (``kv_router``
scheduler/selector) and ``ActiveSequences::potential_blocks_and_tokens``
(``sequence.rs``), per worker ``w`` for a request of ``isl`` prompt tokens
whose full blocks hash to ``h_1 .. h_n``:

* ``overlap(w)``: how many leading blocks ``w`` holds, from the indexer --
  fed by the workers' KV events (:class:`kvframe.KVPrefixIndex`, Dynamo's
  ``RadixTree``), or with ``use_kv_events=false`` predicted from the router's
  own decisions, each routed block assumed cached for ``ttl`` seconds
  (:class:`kvframe.ApproxPrefixIndex`, Dynamo's ``ApproxKvIndexer``);
* ``prefill_blocks(w) = (isl - overlap(w) * block_size + active_tokens(w)) / block_size``
  (a float, in blocks): the tokens the worker would still prefill for this
  request, plus ``active_tokens(w)``, the prefill tokens of the requests this
  router sent ``w`` that have no first token yet (each counted as its own
  ``isl - overlap * block_size`` when it was routed, dropped at
  :meth:`~kvframe.Router.on_first_token`; ``track_prefill_tokens=false`` leaves
  the term out, as Dynamo's ``router_track_prefill_tokens`` does);
* ``decode_blocks(w) = active_blocks(w) + new_blocks(w)``: the distinct blocks
  of the requests this router sent ``w`` that have not finished
  (reference-counted by hash, so shared prefixes count once), plus those of
  ``h_1 .. h_n`` not among them;
* ``cost(w) = overlap_score_weight * prefill_blocks(w) + decode_blocks(w)``.

With ``temperature == 0`` the lowest cost wins. A tie, as Dynamo 1.6 breaks
it (``select_from_logits``): when the tied workers' indexer sizes all equal,
a uniform draw among them (Dynamo's unseeded ``rand::rng``; here the router's
generator, seeded from the run's seed, over the tied replicas in order);
otherwise the tied worker with the fewest indexed blocks (the first of equals:
Dynamo's hash-map order, here the lowest replica number). With
``temperature > 0`` a worker is drawn from Dynamo's softmax over
``-cost / (max - min) / temperature`` (uniform when all costs are equal), with
a generator seeded from the run's seed.

``active_tokens`` relies on the fleet calling ``on_first_token`` (Dynamo's
``mark_prefill_completed``); a request's prefill tokens otherwise leave the
sum when it finishes.
"""

from __future__ import annotations

import math
import random
from collections import _count_elements  # type: ignore[attr-defined]
from collections.abc import Sequence

import kvframe
from kvframe import ApproxPrefixIndex, FleetInfo, FleetView, KVPrefixIndex, RoutingRequest

__all__ = ["DynamoKVRouter", "softmax_pick"]


def softmax_pick(costs: Sequence[float], temperature: float, rng: random.Random) -> int:
    """Dynamo's ``softmax_sample`` for ``temperature > 0``: lower cost, likelier.

    Costs are normalised by their range and negated, scaled by ``1/temperature``,
    and a uniform draw walks the cumulative probabilities in replica order.
    """
    low, high = min(costs), max(costs)
    if low == high:
        probabilities = [1.0 / len(costs)] * len(costs)
    else:
        scaled = [-(c / (high - low)) / temperature for c in costs]
        top = max(scaled)
        exps = [math.exp(s - top) for s in scaled]
        total = sum(exps)
        probabilities = [e / total for e in exps]
    sample = rng.random()
    cumulative = 0.0
    for replica, probability in enumerate(probabilities):
        cumulative += probability
        if sample <= cumulative:
            return replica
    return len(costs) - 1


class _ActiveSequences:
    """Per worker: the blocks of the requests sent to it that have not finished.

    Dynamo's ``ActiveSequences``: blocks are reference-counted by hash, so a
    prefix shared by several active requests counts once.

    Every request adds its blocks from the first, and a chained hash names its
    whole prefix, so the set is closed under prefixes: if a request's ``k``-th
    block is in it, so are the ``k - 1`` before. Which of a request's blocks
    are new is then a suffix, found by bisection in ``O(log n)`` lookups
    instead of one per block (a Mooncake prompt has hundreds of blocks, and
    this runs once per replica per arrival).
    """

    __slots__ = ("blocks", "requests")

    def __init__(self) -> None:
        self.blocks: dict[bytes, int] = {}
        self.requests: dict[str, tuple[bytes, ...]] = {}

    def new_blocks(self, hashes: Sequence[bytes]) -> int:
        """How many of ``hashes`` are not active (bisection, see the class docstring)."""
        blocks = self.blocks
        if not blocks:
            return len(hashes)
        low, high = 0, len(hashes)  # hashes[:low] are active, hashes[high:] are not
        while low < high:
            mid = (low + high) // 2
            if hashes[mid] in blocks:
                low = mid + 1
            else:
                high = mid
        return len(hashes) - low

    def add(self, request_id: str, hashes: tuple[bytes, ...]) -> None:
        _count_elements(self.blocks, hashes)  # Counter's counting loop, in C
        self.requests[request_id] = hashes

    def remove(self, request_id: str) -> None:
        hashes = self.requests.pop(request_id, None)
        if hashes is None:
            return
        blocks = self.blocks
        for h in hashes:
            left = blocks[h] - 1
            if left:
                blocks[h] = left
            else:
                del blocks[h]


class DynamoKVRouter(kvframe.Router):
    """Dynamo's KV router: overlap weight x prefill blocks + active blocks, lowest wins."""

    name = "dynamo-kv"
    description = (
        "NVIDIA Dynamo's KV router cost (overlap weight, temperature, KV events or approx)."
    )
    uses_kv_events = True
    uses_loads = False  # Dynamo's cost uses its own bookkeeping, not load reports

    def __init__(
        self,
        *,
        overlap_score_weight: float = 1.0,
        temperature: float = 0.0,
        use_kv_events: bool = True,
        ttl: float = 120.0,
        track_prefill_tokens: bool = True,
    ) -> None:
        """
        :param overlap_score_weight: weight of the prefill term (Dynamo's default 1.0).
        :param temperature: 0 picks the lowest cost; above 0, a seeded softmax draw.
        :param use_kv_events: index the replicas' KV events (true), or predict
            from this router's own decisions (Dynamo's approximate mode).
        :param ttl: approximate mode only: seconds a routed block counts as cached.
        :param track_prefill_tokens: count the prefill tokens of requests still
            in prefill (Dynamo's ``router_track_prefill_tokens``, default true).
        """
        if overlap_score_weight < 0 or not math.isfinite(overlap_score_weight):
            raise ValueError(
                f"dynamo-kv: overlap_score_weight must be finite and >= 0, "
                f"not {overlap_score_weight}"
            )
        if temperature < 0 or not math.isfinite(temperature):
            raise ValueError(f"dynamo-kv: temperature must be finite and >= 0, not {temperature}")
        if not ttl > 0:
            raise ValueError(f"dynamo-kv: ttl must be > 0 seconds, not {ttl}")
        self.overlap_score_weight = overlap_score_weight
        self.temperature = temperature
        self.uses_kv_events = use_kv_events  # the fleet reads it from the instance
        self.ttl = ttl
        self.track_prefill_tokens = track_prefill_tokens
        self._prefilling: list[dict[str, int]] = [{}]
        """Per worker: request id -> prefill tokens, until its first token."""
        self._prefill_load = [0]
        """Per worker: the sum of ``_prefilling``'s values (Dynamo's active_tokens)."""
        self._block_size = 16
        self._index: KVPrefixIndex | ApproxPrefixIndex = KVPrefixIndex(1)
        self._active: list[_ActiveSequences] = [_ActiveSequences()]
        self._rng = random.Random(0)
        self._overlaps: list[int] = [0]

    def attach(self, fleet: FleetInfo) -> None:
        n = fleet.num_replicas
        self._block_size = fleet.block_size
        self._index = (
            KVPrefixIndex(n) if self.uses_kv_events else ApproxPrefixIndex(n, ttl=self.ttl)
        )
        self._active = [_ActiveSequences() for _ in range(n)]
        self._prefilling = [{} for _ in range(n)]
        self._prefill_load = [0] * n
        self._rng = random.Random(fleet.seed)

    def costs(self, request: RoutingRequest, view: FleetView) -> list[float]:
        """Each replica's cost for ``request`` now (after taking the delivered KV events)."""
        index = self._index
        hashes = request.block_hashes
        if isinstance(index, KVPrefixIndex):
            for replica, _, events in view.take_kv_event_batches():
                index.apply_all(replica, events)
            overlaps = index.overlaps(hashes)
        else:
            overlaps = index.overlaps(hashes, view.now)
        isl, block_size, weight = (
            request.num_prompt_tokens,
            self._block_size,
            self.overlap_score_weight,
        )
        self._overlaps = overlaps
        costs = []
        for replica, overlap in enumerate(overlaps):
            prefill_tokens = max(isl - overlap * block_size, 0) + self._prefill_load[replica]
            active = self._active[replica]
            decode_blocks = len(active.blocks) + active.new_blocks(hashes)
            costs.append(weight * (prefill_tokens / block_size) + decode_blocks)
        return costs

    def route(self, request: RoutingRequest, view: FleetView) -> int:
        costs = self.costs(request, view)
        if self.temperature > 0:
            chosen = softmax_pick(costs, self.temperature, self._rng)
        else:
            chosen = self._break_tie(costs)
        hashes = request.block_hashes
        self._active[chosen].add(request.request_id, hashes)
        if self.track_prefill_tokens:
            tokens = max(request.num_prompt_tokens - self._overlaps[chosen] * self._block_size, 0)
            self._prefilling[chosen][request.request_id] = tokens
            self._prefill_load[chosen] += tokens
        if isinstance(self._index, ApproxPrefixIndex):
            self._index.record(chosen, hashes, view.now)
        return chosen

    def _break_tie(self, costs: list[float]) -> int:
        """The lowest-cost replica; among equals, Dynamo's tree-size rule or a seeded draw."""
        low = min(costs)
        tied = [r for r, c in enumerate(costs) if c == low]
        if len(tied) == 1:
            return tied[0]
        sizes = [self._index.size(r) for r in tied]
        if all(s == sizes[0] for s in sizes):
            return tied[self._rng.randrange(len(tied))]
        return tied[sizes.index(min(sizes))]

    def on_first_token(self, request_id: str, replica: int, now: float) -> None:
        if 0 <= replica < len(self._prefilling):
            self._prefill_load[replica] -= self._prefilling[replica].pop(request_id, 0)

    def on_finished(self, request_id: str, replica: int, now: float) -> None:
        self.on_first_token(request_id, replica, now)
        if 0 <= replica < len(self._active):
            self._active[replica].remove(request_id)
