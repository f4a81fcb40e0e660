"""vLLM 0.33.0's ``CPUOffloadingManager``: a tier ledger whose accesses are request-scoped.

vLLM 0.33.0 rewrote the CPU tier's manager (``vllm/v1/kv_offload/cpu/manager.py``)
around *requests*: every call carries the request's context, a lookup answers
per key (:class:`LookupResult`), the reuse filter lives inside the manager and
counts store *offers* (``store_threshold``), and the cache policy hears of a
request's accesses as they happen (``on_request_access``, ``on_store_miss``)
and commits them once, when the request finishes (``on_request_finished``,
vLLM PR #51787, since 0.31). :class:`SlotOffloadManager` stays vLLM 0.19.1's
manager; this module is 0.33.0's, for the 0.33 fidelity target's tier
(``docs/fidelity.md``, "The tier under vLLM 0.33.0", items 6, 7, 10-14).

The policy is an eviction plugin's request-scoped form
(:class:`kvframe.RequestScopedPolicy`, the plugin contract's
:attr:`kvframe.EvictionPolicy.request_scoped_form`): vLLM 0.33.0's
``CachePolicy`` with kvframe's names. The bundled forms are
``kvframe_lru.RankLRUPolicy`` and ``kvframe_arc.RequestARCPolicy``. A
request's context is a :class:`kvframe.RequestAccess`, which also carries the token
position of each key (the end of its chunk), as vLLM's ``ReqContext`` does.

Semantics, call for call as in 0.33.0 (``tests/offload/manager_differential_v033.py``
checks them against vLLM 0.33.0 in its reference environment):

* chunks are handed out fresh in increasing order, then from a free list,
  most recently freed first;
* ``prepare_store`` first counts the offer in the reuse tracker (keys
  already tracked are bumped and protected from the tracker's own eviction
  in this call), splits the offer into new keys and ready resident ones
  (the request's reuses), filters the new keys by the threshold, tells the
  policy of the request's new store misses, records the request's accesses,
  and only then evicts (every offered key protected) and inserts;
* the policy's ``mark_evictable`` / ``mark_non_evictable`` follow every
  ``ref_cnt`` change to and from 0.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

import attrs

from kvframe.offload.blocks import OffloadBlock

if TYPE_CHECKING:
    from kvframe.contract.request_scoped import RequestAccess, RequestScopedPolicy

__all__ = [
    "LookupResult",
    "RequestScopedOffloadManager",
    "RequestStoreResult",
]


class LookupResult(enum.Enum):
    """One key's answer (vLLM 0.33.0's ``LookupResult``).

    ``RETRY`` arises only from a tier chain
    (:class:`kvframe.offload.tiering.TieringOffloadManager`): a tier below DRAM
    cannot answer yet, so the connector defers the request.
    """

    MISS = "miss"
    HIT = "hit"
    HIT_PENDING = "hit-pending"
    """In the tier but still being written: a connector defers the request."""
    RETRY = "retry"
    """A tier below DRAM is busy answering: ask again next step (not a hit)."""


@attrs.define(slots=True, frozen=True)
class RequestStoreResult:
    """What ``prepare_store`` kept: ``keys_to_store[i]`` goes to ``slot_ids[i]``."""

    keys_to_store: tuple[Hashable, ...]
    slot_ids: tuple[int, ...]
    evicted_keys: tuple[Hashable, ...]


@attrs.define(slots=True, eq=False)
class _CacheAccess:
    """The keys one request has touched, for the policy's commit at its finish."""

    owner: object
    generation: int
    keys: list[Hashable] = attrs.field(factory=list)
    seen: set[Hashable] = attrs.field(factory=set)
    inserted: set[Hashable] = attrs.field(factory=set)
    reused: set[Hashable] = attrs.field(factory=set)
    store_misses: set[Hashable] = attrs.field(factory=set)
    finished: bool = False


class RequestScopedOffloadManager:
    """A tier of ``num_chunks`` slots, vLLM 0.33.0's ``CPUOffloadingManager`` call for call.

    :param policy: the cache policy, empty; the manager is its only user.
    :param num_chunks: slots in the tier.
    :param store_threshold: with 2 or more, a chunk new to the tier is stored
        only once it has been offered that many times (0 or 1: every offer).
    :param max_tracker_size: keys the reuse tracker remembers.
    """

    def __init__(
        self,
        policy: RequestScopedPolicy,
        num_chunks: int,
        *,
        store_threshold: int = 0,
        max_tracker_size: int = 64_000,
    ) -> None:
        if num_chunks < 0:
            raise ValueError(f"num_chunks must be >= 0, not {num_chunks}")
        if max_tracker_size < 1:
            raise ValueError(f"max_tracker_size must be >= 1, not {max_tracker_size}")
        self.policy = policy
        self.num_chunks = num_chunks
        self.store_threshold = store_threshold
        self.max_tracker_size = max_tracker_size
        self._num_allocated = 0
        self._free_slots: list[int] = []
        self._num_evictable = 0
        self._generation = 0
        self.counts: OrderedDict[Hashable, int] | None = (
            OrderedDict() if store_threshold >= 2 else None
        )
        """The reuse tracker: offers per key, least recently offered first."""

    # -- helpers ---------------------------------------------------------------

    @property
    def num_free_chunks(self) -> int:
        return len(self._free_slots) + self.num_chunks - self._num_allocated

    def _allocate(self, n: int) -> list[OffloadBlock]:
        fresh = min(n, self.num_chunks - self._num_allocated)
        blocks = [OffloadBlock(self._num_allocated + i) for i in range(fresh)]
        self._num_allocated += fresh
        blocks.extend(OffloadBlock(self._free_slots.pop()) for _ in range(n - fresh))
        return blocks

    def _record_offers(self, keys: Sequence[Hashable]) -> None:
        """Count one offer of each key; keys already tracked are not aged out by it."""
        counts = self.counts
        assert counts is not None
        protected: set[Hashable] = set()
        for key in keys:
            if key in counts:
                counts.move_to_end(key)
                counts[key] += 1
                protected.add(key)
        unprotected = len(counts) - len(protected)
        for key in keys:
            if key in counts:
                continue
            if len(counts) >= self.max_tracker_size:
                if unprotected == 0:
                    continue
                # The oldest entry is unprotected: every protected one was just moved back.
                counts.popitem(last=False)
                unprotected -= 1
            counts[key] = 1

    def _state(self, access: RequestAccess) -> _CacheAccess:
        state = access.manager_state
        if (
            not isinstance(state, _CacheAccess)
            or state.owner is not self
            or state.generation != self._generation
        ):
            state = _CacheAccess(owner=self, generation=self._generation)
            access.manager_state = state
        return state

    def _record_access(
        self,
        keys: Iterable[Hashable],
        access: RequestAccess,
        reused: Iterable[Hashable] = (),
    ) -> None:
        state = self._state(access)
        new_keys = []
        for key in keys:
            if key in state.seen:
                continue
            if state.finished:
                raise RuntimeError(
                    f"request {access.request_id!r}: a new tier key after its finish"
                )
            state.keys.append(key)
            state.seen.add(key)
            new_keys.append(key)
        if new_keys:
            self.policy.on_request_access(new_keys, access)
        # Re-reading a chunk this request inserted is not a second access.
        state.reused.update(key for key in reused if key not in state.inserted)

    # -- the manager -------------------------------------------------------------

    def on_new_request(self, access: RequestAccess) -> None:
        self._state(access)

    def lookup(self, key: Hashable, access: RequestAccess) -> LookupResult:
        block = self.policy.get(key)
        if block is None:
            return LookupResult.MISS
        return LookupResult.HIT if block.ref_cnt >= 0 else LookupResult.HIT_PENDING

    def prepare_load(
        self, keys: Sequence[Hashable], access: RequestAccess, *, record_access: bool = True
    ) -> tuple[int, ...]:
        """Pin ``keys`` (all ready) for a load; their slots, in order.

        ``record_access=False`` pins without telling the policy: a tier chain's
        cascade reads a chunk to copy it down, which is no request's access
        (vLLM 0.33.0's ``CPUPrimaryTierOffloadingManager.prepare_read``).
        """
        policy = self.policy
        blocks = []
        for key in keys:
            block = policy.get(key)
            if block is None or block.ref_cnt < 0:
                raise RuntimeError(f"request {access.request_id!r}: load of a chunk not ready")
            if block.ref_cnt == 0:
                policy.mark_non_evictable(key)
                self._num_evictable -= 1
            block.ref_cnt += 1
            blocks.append(block)
        if record_access:
            self._record_access(keys, access, reused=keys)
        return tuple(block.slot_id for block in blocks)

    def complete_load(self, keys: Iterable[Hashable], access: RequestAccess) -> None:
        policy = self.policy
        for key in keys:
            block = policy.get(key)
            if block is None or block.ref_cnt <= 0:
                raise RuntimeError(f"request {access.request_id!r}: a load completed twice")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self._num_evictable += 1
                policy.mark_evictable(key)

    def prepare_store(
        self, keys: Iterable[Hashable], access: RequestAccess
    ) -> RequestStoreResult | None:
        """Offer ``keys``; ``None`` when the tier cannot make room (nothing changes then)."""
        keys = list(keys)
        policy = self.policy
        counts = self.counts
        if counts is not None:
            self._record_offers(keys)
        to_store: list[Hashable] = []
        ready: list[Hashable] = []
        for key in keys:
            block = policy.get(key)
            if block is None:
                to_store.append(key)
            elif block.ref_cnt >= 0:
                ready.append(key)
        if counts is not None:
            threshold = self.store_threshold
            to_store = [key for key in to_store if counts.get(key, 0) >= threshold]
        state = self._state(access)
        misses = [key for key in to_store if key not in state.store_misses]
        if misses:
            policy.on_store_miss(misses, access)
            state.store_misses.update(misses)
        recorded = set(to_store)
        recorded.update(ready)
        self._record_access([key for key in keys if key in recorded], access, reused=ready)
        if not to_store:
            return RequestStoreResult((), (), ())
        to_evict = len(to_store) - self.num_free_chunks
        evicted: list[Hashable] = []
        if to_evict > 0:
            if to_evict > self._num_evictable:
                return None
            victims = policy.evict(to_evict, set(keys))
            if victims is None:
                return None
            self._num_evictable -= len(victims)
            for key, block in victims:
                self._free_slots.append(block.slot_id)
                evicted.append(key)
        blocks = self._allocate(len(to_store))
        for key, block in zip(to_store, blocks, strict=True):
            policy.insert(key, block, access)
        state.inserted.update(to_store)
        return RequestStoreResult(
            tuple(to_store), tuple(block.slot_id for block in blocks), tuple(evicted)
        )

    def complete_store(
        self, keys: Iterable[Hashable], access: RequestAccess, success: bool = True
    ) -> None:
        """Make stored chunks readable, or (``success=False``) drop them and free their slots."""
        policy = self.policy
        for key in keys:
            block = policy.get(key)
            if block is None or block.ref_cnt >= 0:
                continue
            if success:
                block.ref_cnt = 0
                self._num_evictable += 1
                policy.mark_evictable(key)
            else:
                policy.remove(key)
                self._free_slots.append(block.slot_id)

    def on_request_finished(self, access: RequestAccess) -> None:
        """Commit the request's accesses to the policy, head to tail (once)."""
        state = access.manager_state
        if (
            not isinstance(state, _CacheAccess)
            or state.owner is not self
            or state.generation != self._generation
            or state.finished
        ):
            return
        state.finished = True
        keys = state.keys
        positions = access.positions
        if all(key in positions for key in keys):
            keys = sorted(keys, key=positions.__getitem__)
        self.policy.on_request_finished(
            keys, state.inserted - state.reused, set(state.reused), access
        )

    def discard(self, keys: Iterable[Hashable]) -> list[Hashable]:
        """Drop ready, idle chunks -- a tier whose copy of them proved unreadable -- so
        that no lookup finds them again; chunks in use or being written stay. The dropped."""
        policy = self.policy
        dropped = []
        for key in keys:
            block = policy.get(key)
            if block is None or block.ref_cnt != 0:
                continue
            policy.mark_non_evictable(key)
            self._num_evictable -= 1
            policy.remove(key)
            self._free_slots.append(block.slot_id)
            dropped.append(key)
        return dropped

    def on_schedule_end(self) -> None:
        """The step's last call; nothing to do for DRAM alone (a tier chain flushes here)."""

    def has_pending_work(self) -> bool:
        """DRAM alone holds no work of its own between steps (a tier chain may)."""
        return False

    def reset(self) -> None:
        """Drop every chunk (vLLM's ``reset_cache``); requests' past accesses are forgotten."""
        self.policy.clear()
        self._generation += 1
        self._num_evictable = 0
        self._free_slots.clear()
        self._num_allocated = 0
