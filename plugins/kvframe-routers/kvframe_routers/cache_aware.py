"""SGLang router's cache-aware rule: an approximate prefix tree per worker, balance thresholds.

The rule of ``sgl-router/src/policies/cache_aware.rs`` (``CacheAwarePolicy::
select_worker``) and its tree (``tree.rs``), on block hashes instead of
characters:

1. ``load(w)``: requests this router sent ``w`` that have not finished
   (SGLang's ``worker.load()``: its in-flight count). The fleet is
   *imbalanced* when ``max - min > balance_abs_threshold`` **and**
   ``max > min * balance_rel_threshold``; then the least-loaded worker wins
   (the first of equals), and the request is still inserted into its tree.
2. Otherwise the tree is matched: the deepest of the request's leading blocks
   that *any* worker was sent (the tree is the union of the workers' trees;
   hashes are chained, so each names its prefix). ``match_rate`` = matched
   blocks / the request's blocks (0 for a prompt shorter than a block). Above
   ``cache_threshold``, the worker that owns the deepest matched block wins
   (SGLang takes the first key of a hash map; here, the lowest replica
   number); at or below, the worker with the smallest tree (fewest blocks) --
   the most room, by SGLang's reckoning.
3. The chosen worker's tree gets the request's blocks, all stamped ``now``.
   Matching refreshes the stamps of the chosen worker along the matched path.

Eviction: every ``eviction_interval`` seconds of virtual time (checked at each
arrival), a worker whose tree holds more than ``max_tree_size`` blocks loses
its least recently stamped blocks, deepest first among equals (SGLang evicts
LRU leaves by timestamp), until it is back at the limit. SGLang counts
characters (default 2**26); here the unit is blocks, same default.

The tree is built from routing decisions only: no KV event is read, exactly as
SGLang's router works without any signal from its workers.
"""

from __future__ import annotations

import heapq

import kvframe
from kvframe import FleetInfo, FleetView, RoutingRequest

__all__ = ["CacheAwareRouter"]


class CacheAwareRouter(kvframe.Router):
    """SGLang router's cache-aware policy (approximate tree, balance thresholds)."""

    name = "cache-aware"
    description = "SGLang router's cache-aware rule: approximate prefix tree per worker, balancing."
    uses_loads = False  # its loads are its own in-flight counts

    def __init__(
        self,
        *,
        cache_threshold: float = 0.3,
        balance_abs_threshold: int = 64,
        balance_rel_threshold: float = 1.5,
        eviction_interval: float = 120.0,
        max_tree_size: int = 2**26,
    ) -> None:
        """Defaults are SGLang router's (``CacheAwareConfig::default``)."""
        if not 0.0 <= cache_threshold <= 1.0:
            raise ValueError(
                f"cache-aware: cache_threshold must be in [0, 1], not {cache_threshold}"
            )
        if balance_abs_threshold < 0 or balance_rel_threshold < 0:
            raise ValueError("cache-aware: balance thresholds must be >= 0")
        if eviction_interval <= 0 or max_tree_size < 0:
            raise ValueError("cache-aware: eviction_interval must be > 0 and max_tree_size >= 0")
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.eviction_interval = eviction_interval
        self.max_tree_size = max_tree_size
        self._trees: list[dict[bytes, tuple[float, int]]] = [{}]
        """Per worker: block hash -> (last stamp, depth)."""
        self._owners: dict[bytes, int] = {}
        """Block hash -> bit mask of the workers whose tree holds it."""
        self._next_eviction = eviction_interval

    def attach(self, fleet: FleetInfo) -> None:
        self._trees = [{} for _ in range(fleet.num_replicas)]
        self._owners = {}
        self._next_eviction = self.eviction_interval

    def route(self, request: RoutingRequest, view: FleetView) -> int:
        now = view.now
        if now >= self._next_eviction:
            self._evict()
            while self._next_eviction <= now:
                self._next_eviction += self.eviction_interval
        hashes = request.block_hashes
        loads = [view.num_outstanding(r) for r in range(view.num_replicas)]
        high, low = max(loads), min(loads)
        if high - low > self.balance_abs_threshold and high > low * self.balance_rel_threshold:
            chosen = loads.index(low)
        else:
            chosen = self._by_cache(hashes, now)
        self._insert(chosen, hashes, now)
        return chosen

    def _by_cache(self, hashes: tuple[bytes, ...], now: float) -> int:
        owners = self._owners
        depth, deepest_mask = 0, 0
        for block_hash in hashes:
            mask = owners.get(block_hash, 0)
            if not mask:
                break
            depth += 1
            deepest_mask = mask
        match_rate = depth / len(hashes) if hashes else 0.0
        if match_rate > self.cache_threshold:
            chosen = (deepest_mask & -deepest_mask).bit_length() - 1
            tree = self._trees[chosen]
            for i in range(depth):  # refresh the chosen worker's stamps on the path
                if hashes[i] in tree:
                    tree[hashes[i]] = (now, i)
            return chosen
        sizes = [len(tree) for tree in self._trees]
        return sizes.index(min(sizes))

    def _insert(self, worker: int, hashes: tuple[bytes, ...], now: float) -> None:
        tree, owners, bit = self._trees[worker], self._owners, 1 << worker
        for depth, block_hash in enumerate(hashes):
            if block_hash not in tree:
                owners[block_hash] = owners.get(block_hash, 0) | bit
            tree[block_hash] = (now, depth)

    def _evict(self) -> None:
        for worker, tree in enumerate(self._trees):
            excess = len(tree) - self.max_tree_size
            if excess <= 0:
                continue
            keep = ~(1 << worker)
            oldest = heapq.nsmallest(excess, tree.items(), key=lambda kv: (kv[1][0], -kv[1][1]))
            for block_hash, _ in oldest:
                del tree[block_hash]
                mask = self._owners[block_hash] & keep
                if mask:
                    self._owners[block_hash] = mask
                else:
                    del self._owners[block_hash]
