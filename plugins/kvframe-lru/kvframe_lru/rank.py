"""LRU as vLLM 0.33.0 orders it: a rank per chunk, committed when a request finishes.

vLLM 0.33.0's ``LRUCachePolicy`` (``vllm/v1/kv_offload/cpu/policies/lru.py``,
recency per request since PR #51787, 0.31) no longer moves a chunk to the
recent end on every touch. Each chunk has a rank ``(r, s)``; the least rank
is evicted first:

* a request draws one rank ``r`` from a global counter at its first cache
  access; a chunk it inserts gets ``(r, -position)``, so its tail precedes its
  head and all its chunks precede those of a request that began later;
* a request's first access to a resident chunk raises the chunk's rank to
  ``(r, -position)`` if that is higher (provisional recency while it runs);
* when the request finishes, every chunk it accessed gets a fresh rank
  ``(counter, 0)``, tail first, so its head is the most recent;
* a touch (and a store miss, through the base policy's default) gives each
  resident key a fresh rank, last key first.

The order differs from 0.19.1's (``LRUPolicy``): there, whichever request
touched last (every lookup touched all of a request's blocks, every store all
its blocks so far) held the most recent blocks; here a request still running
keeps its chunks ranked by when it *began*, until it finishes.

``evict(n, protected)`` takes the ``n`` least-ranked evictable chunks (in
order), all or nothing. vLLM keeps a lazily invalidated heap; the victims of
this class are the same ``n`` smallest ``(rank, key)`` pairs, found with
``heapq.nsmallest`` over the evictable chunks.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Any

__all__ = ["RankLRUPolicy"]


class _RequestRank:
    """The rank a request drew, tagged with the policy and cache generation it is for."""

    __slots__ = ("generation", "owner", "rank")

    def __init__(self, owner: object, generation: int, rank: int) -> None:
        self.owner = owner
        self.generation = generation
        self.rank = rank


class RankLRUPolicy:
    """vLLM 0.33.0's LRU cache policy, for ``RequestScopedOffloadManager``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.chunks: dict[Hashable, Any] = {}
        self._ranks: dict[Hashable, tuple[int, int]] = {}
        self._evictable: set[Hashable] = set()
        self._next_rank = 0
        self._generation = 0

    def _request_rank(self, access: Any) -> int:
        state = access.policy_state
        if (
            not isinstance(state, _RequestRank)
            or state.owner is not self
            or state.generation != self._generation
        ):
            self._next_rank += 1
            state = _RequestRank(self, self._generation, self._next_rank)
            access.policy_state = state
        return state.rank

    def _fresh_ranks(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            if key in self.chunks:
                self._next_rank += 1
                self._ranks[key] = (self._next_rank, 0)

    # -- the policy --------------------------------------------------------------

    def get(self, key: Hashable) -> Any:
        return self.chunks.get(key)

    def insert(self, key: Hashable, block: Any, access: Any) -> None:
        self.chunks[key] = block
        position = access.position(key)
        if position is None:
            self._next_rank += 1
            self._ranks[key] = (self._next_rank, 0)
        else:
            self._ranks[key] = (self._request_rank(access), -position)
        if block.ref_cnt == 0:
            self._evictable.add(key)

    def remove(self, key: Hashable) -> None:
        del self.chunks[key]
        self._ranks.pop(key, None)
        self._evictable.discard(key)

    def touch(self, keys: Iterable[Hashable], access: Any = None) -> None:
        self._fresh_ranks(reversed(list(keys)))

    def on_store_miss(self, keys: Sequence[Hashable], access: Any) -> None:
        # vLLM's base CachePolicy delegates a store miss to touch (a no-op on
        # keys not resident, which store misses are).
        self.touch(keys, access)

    def on_request_access(self, keys: Sequence[Hashable], access: Any) -> None:
        request_rank = self._request_rank(access)
        for key in keys:
            position = access.position(key)
            if position is None or key not in self.chunks:
                continue
            rank = (request_rank, -position)
            if self._ranks[key] < rank:
                self._ranks[key] = rank

    def on_request_finished(
        self,
        keys: Sequence[Hashable],
        insertion_only: Collection[Hashable],
        reused: Collection[Hashable],
        access: Any,
    ) -> None:
        self._fresh_ranks(reversed(list(keys)))

    def evict(self, n: int, protected: Collection[Hashable]) -> list[tuple[Hashable, Any]] | None:
        if n == 0:
            return []
        ranks = self._ranks
        candidates = heapq.nsmallest(
            n, ((ranks[key], key) for key in self._evictable if key not in protected)
        )
        if len(candidates) < n:
            return None
        victims = []
        for _, key in candidates:
            self._evictable.remove(key)
            del ranks[key]
            victims.append((key, self.chunks.pop(key)))
        return victims

    def mark_evictable(self, key: Hashable) -> None:
        self._evictable.add(key)

    def mark_non_evictable(self, key: Hashable) -> None:
        self._evictable.remove(key)

    def clear(self) -> None:
        self.chunks.clear()
        self._ranks.clear()
        self._evictable.clear()
        self._next_rank = 0
        self._generation += 1
