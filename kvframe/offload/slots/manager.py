"""Generic scheduler-side ledgers for offload tiers: slots ordered by an eviction policy.

:class:`SlotOffloadManager` is vLLM 0.19's ``CPUOffloadingManager``
(``vllm/v1/kv_offload/cpu/manager.py``) with the policy, the medium and the
geometry as parameters, so any tier made of fixed-size slots (pinned DRAM, a
file of blocks) gets the same bookkeeping. :class:`FilteredOffloadManager` is
vLLM's ``FilterReusedOffloadingManager`` with the filtering rule as a
:class:`kvframe.ReuseFilter`.

Neither knows a policy or a filter by name: the offload spec plugin builds them
(``cpu:capacity=8GiB,eviction=arc``) and hands the objects in. The host never
imports a plugin.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import filterfalse, islice
from typing import TYPE_CHECKING, cast

from kvframe.contract.offload import PrepareStoreResult
from kvframe.contract.records import BlockRemoved, BlockStored, KVEvent
from kvframe.domain.tokens import BlockHash
from kvframe.offload.blocks import OffloadBlock

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy, ReuseFilter
    from kvframe.contract.offload import OffloadManager

__all__ = [
    "FilteredOffloadManager",
    "OffloadStateError",
    "SlotOffloadManager",
]


class OffloadStateError(RuntimeError):
    """A caller broke the ledger's lifecycle (loading an absent block, unpinning twice).

    Raised before anything changes, so the ledger stays consistent.
    """


class SlotOffloadManager:
    """A tier of ``num_blocks`` slots whose occupants an eviction policy orders.

    The manager owns the slots, the ref counts and the events; the policy owns
    the eviction order (it is vLLM's ``CachePolicy``). The manager keeps its
    own hash -> block map of what it inserted and the policy has not evicted
    (by the policy contract, what ``policy.get`` answers), so a lookup is a
    dict read rather than a method call per hash. Semantics match vLLM 0.19's
    ``CPUOffloadingManager`` call for call:

    * slots are handed out fresh in increasing order until all have been used
      once, then from a free list, most recently freed first;
    * ``prepare_store`` skips hashes already present (ready *or* being written),
      evicts ``len(new) - free`` blocks through ``policy.evict`` with every hash
      of the call protected, frees their slots, then inserts the new blocks at
      ``ref_cnt == -1`` in request order;
    * ``complete_store`` only acts on blocks still being written; a failure
      removes them from the policy and frees their slots without an event;
    * events: one ``BlockRemoved`` per ``prepare_store`` that evicted, one
      ``BlockStored`` per ``complete_store`` that made something ready, both
      with ``medium``; ``BlockStored.parent_block_hash`` is ``None`` (an
      offloaded block's parent is not tracked, as in vLLM).

    Where this class differs, it is stricter, never different on valid input:
    lifecycle violations raise :class:`OffloadStateError` *before* changing
    anything (vLLM asserts midway), a hash repeated within one
    ``prepare_store`` batch is stored once (vLLM would allocate two slots and
    leak one), and a store needing more slots than are free or idle is refused
    without asking the policy (which would have to refuse it: no victims
    outside ``ref_cnt == 0``, and a refusal changes nothing).
    """

    def __init__(
        self,
        policy: EvictionPolicy,
        num_blocks: int,
        *,
        block_size: int,
        medium: str = "CPU",
        enable_events: bool = True,
    ) -> None:
        """
        :param policy: the eviction policy, built for ``num_blocks`` blocks and
            empty; the manager is its only user.
        :param num_blocks: slots in the tier.
        :param block_size: tokens per offloaded block (reported in events).
        :param medium: the tier's name in KV events.
        :param enable_events: record events for :meth:`take_events`.
        """
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, not {num_blocks}")
        self.policy = policy
        self.num_blocks = num_blocks
        self._block_size = block_size
        self._medium = medium
        self._num_allocated = 0
        """Slots handed out at least once: ids ``0 .. _num_allocated - 1``."""
        self._free_slots: list[int] = []
        """Slots given back, reused last-in first-out."""
        self._blocks: dict[BlockHash, OffloadBlock] = {}
        """Every block inserted into the policy and not yet evicted or removed.

        The tier owns its blocks (see :class:`kvframe.EvictionPolicy`): by the
        contract ``policy.get(h)`` returns exactly this map's entry, so lookups
        read the dict directly instead of calling the policy per hash."""
        self._num_inserted = 0
        """Blocks ever inserted: see :attr:`store_clock`."""
        self.refused_new_blocks = 0
        """New hashes of the last store refused for want of room (0: refused by the policy)."""
        self._num_idle = 0
        """Blocks with ``ref_cnt == 0``: the most a policy can ever evict.

        Every ``ref_cnt`` change happens here, so the count is exact. It lets
        :meth:`prepare_store` answer a store that cannot fit without walking
        all its hashes or asking the policy (see there)."""
        self._events: list[KVEvent] | None = [] if enable_events else None
        from kvframe.contract.support import claimed_max_evictable

        self._max_evictable = claimed_max_evictable(policy)
        """``policy.max_evictable`` if the policy's class overrides it, else ``None``
        (the base's answer claims nothing: not worth a call per store)."""
        track_idle = getattr(policy, "track_idle", None)
        self._on_idle = policy.on_idle if track_idle is not None and track_idle() else None
        """``policy.on_idle`` if the policy accepted idle tracking, else ``None``.

        Why: every ``ref_cnt`` change happens here, so the manager can tell the
        policy which blocks became idle and the policy's ``evict`` can skip the
        blocks being written (most of a busy tier) without walking them (see
        :meth:`kvframe.EvictionPolicy.track_idle`). A policy without the
        method (a duck-typed one) is simply not told."""

    # -- geometry -------------------------------------------------------------

    @property
    def medium(self) -> str:
        return self._medium

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_free_blocks(self) -> int:
        """Slots a store can take without evicting."""
        return len(self._free_slots) + self.num_blocks - self._num_allocated

    @property
    def store_clock(self) -> int:
        """Free slots + idle blocks + blocks ever inserted.

        Why: a store of hashes ``L`` refused with ``c = refused_new_blocks``
        new hashes (more than free + idle slots), when ``inserted_then`` blocks
        had been inserted, still has more new hashes than free + idle slots
        for any ``L' ⊇ L`` while ``store_clock < c + inserted_then``:
        inserting a hash of ``L`` costs a slot of room and adds one insertion,
        so only slots freed or blocks becoming idle can let it through. A
        policy keeping the contract (it evicts idle blocks only) must then
        refuse it again; the connector uses this to skip retrying, every step,
        the stores of requests waiting for room.
        """
        return self.num_free_blocks + self._num_idle + self._num_inserted

    @property
    def num_inserted(self) -> int:
        return self._num_inserted

    # -- the OffloadManager protocol -----------------------------------------

    def lookup(self, block_hashes: Iterable[BlockHash]) -> int:
        get = self._blocks.get
        hits = 0
        for block_hash in block_hashes:
            block = get(block_hash)
            if block is None or block.ref_cnt < 0:
                break
            hits += 1
        return hits

    def prepare_load(self, block_hashes: Iterable[BlockHash]) -> tuple[int, ...]:
        blocks = []
        get = self._blocks.get
        for block_hash in block_hashes:
            block = get(block_hash)
            if block is None:
                raise OffloadStateError(f"cannot load block {block_hash!r}: not in the tier")
            if block.ref_cnt < 0:
                raise OffloadStateError(f"cannot load block {block_hash!r}: still being stored")
            blocks.append(block)
        for block in blocks:
            if block.ref_cnt == 0:
                self._num_idle -= 1
            block.ref_cnt += 1
        return tuple(block.slot_id for block in blocks)

    def touch(self, block_hashes: Iterable[BlockHash]) -> None:
        self.policy.touch(block_hashes)

    def complete_load(self, block_hashes: Iterable[BlockHash]) -> None:
        pinned = []
        get = self._blocks.get
        for block_hash in block_hashes:
            block = get(block_hash)
            if block is None:
                raise OffloadStateError(f"cannot complete load of {block_hash!r}: not in the tier")
            if block.ref_cnt <= 0:
                raise OffloadStateError(
                    f"cannot complete load of {block_hash!r}: it is not being loaded"
                )
            pinned.append((block_hash, block))
        idle = []
        for block_hash, block in pinned:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                idle.append(block_hash)
        if idle:
            self._num_idle += len(idle)
            if self._on_idle is not None:
                self._on_idle(idle)

    def prepare_store(self, block_hashes: Iterable[BlockHash]) -> PrepareStoreResult | None:
        requested = block_hashes if isinstance(block_hashes, list) else list(block_hashes)
        blocks = self._blocks
        if self._max_evictable is not None and self._refused_by_bound(requested):
            self.refused_new_blocks = 0
            return None
        # A store needs a slot per new hash: free ones, then idle blocks the
        # policy evicts. With more new hashes than that, a policy keeping the
        # contract (it evicts idle blocks only, and a refusal changes nothing)
        # must refuse, so the store is refused without asking it: that call
        # walked every block the policy holds (most of a busy tier is being
        # written) to find too few. The count is kept in
        # ``refused_new_blocks`` so that a caller retrying every step can skip
        # retries bound to fail as well (see ``store_clock``). The new hashes
        # are counted with set operations in C: a refused store names every
        # block its request has computed and not stored (800 on average at
        # 2,000 Mooncake requests), so the refusal builds only a set; the
        # ordered list of new hashes is made once the store is accepted.
        unique = set(requested)
        held = unique & blocks.keys()
        num_new = len(unique) - len(held)
        if num_new > self.num_free_blocks + self._num_idle:
            self.refused_new_blocks = num_new
            return None
        self.refused_new_blocks = 0
        if not num_new:
            return PrepareStoreResult((), (), ())
        evicted: tuple[BlockHash, ...] = ()
        num_to_evict = num_new - self.num_free_blocks
        if num_to_evict > 0:
            # The call's own hashes are protected: a block asked to be stored
            # that is already there must still be there afterwards.
            victims = self.policy.evict(num_to_evict, unique)
            if victims is None:
                return None
            self._num_idle -= len(victims)
            evicted = tuple([cast(BlockHash, h) for h, _ in victims])
            pop = blocks.pop
            for block_hash in evicted:
                pop(block_hash)
            self._free_slots += [cast(OffloadBlock, block).slot_id for _, block in victims]
            if self._events is not None:
                self._events.append(BlockRemoved(evicted, medium=self._medium))
        # Only now the ordered new hashes (a policy may refuse: arc does, and
        # the store is then retried every step).
        ordered = dict.fromkeys(requested)  # first occurrences, in request order
        new = list(ordered) if not held else [h for h in ordered if h not in held]
        slot_ids = self._allocate(num_new)
        self._num_inserted += num_new
        insert = self.policy.insert
        for block_hash, slot_id in zip(new, slot_ids, strict=True):
            block = OffloadBlock(slot_id)
            insert(block_hash, block)
            blocks[block_hash] = block
        return PrepareStoreResult(tuple(new), tuple(slot_ids), evicted)

    def _refused_by_bound(self, requested: list[BlockHash]) -> bool:
        """Whether the policy's :meth:`~kvframe.EvictionPolicy.max_evictable` proves that
        it would refuse this store, counting only as many new hashes as the proof needs.

        Only for a store whose hashes all fit in the free and idle slots: the
        room check of :meth:`prepare_store` passes for it, so the refusal it
        would get is the policy's (``refused_new_blocks == 0``), the answer
        given here. A store needs ``new - free`` victims, so finding
        ``bound + free + 1`` distinct new hashes shows that it needs more than
        the policy can give. Why: ``arc`` refused 28,000 stores at 2,000
        Mooncake requests, each naming ~900 pending hashes, with a bound of
        ~90 on average.
        """
        max_evictable = self._max_evictable
        free = self.num_free_blocks
        if max_evictable is None or len(requested) > free + self._num_idle:
            return False
        bound = max_evictable()
        if bound is None:
            return False
        need = bound + free + 1
        if need > len(requested):
            return False
        first_new = list(islice(filterfalse(self._blocks.__contains__, requested), need))
        return len(first_new) == need and len(set(first_new)) == need

    def complete_store(self, block_hashes: Iterable[BlockHash], success: bool = True) -> None:
        get = self._blocks.get
        if success:
            stored = []
            for block_hash in block_hashes:
                block = get(block_hash)
                if block is not None and block.ref_cnt < 0:
                    block.ref_cnt = 0
                    self._num_idle += 1
                    stored.append(block_hash)
            if stored:
                if self._on_idle is not None:
                    self._on_idle(stored)
                if self._events is not None:
                    self._events.append(
                        BlockStored(tuple(stored), None, self._block_size, medium=self._medium)
                    )
            return
        for block_hash in block_hashes:
            block = get(block_hash)
            if block is not None and block.ref_cnt < 0:
                self.policy.remove(block_hash)
                del self._blocks[block_hash]
                self._free_slots.append(block.slot_id)

    def take_events(self) -> list[KVEvent]:
        if not self._events:
            return []
        events, self._events = self._events, []
        return events

    # -- slots ----------------------------------------------------------------

    def _allocate(self, n: int) -> list[int]:
        """``n`` slots for new blocks: never-used ones first, then recently freed ones."""
        num_fresh = min(n, self.num_blocks - self._num_allocated)
        first = self._num_allocated
        slot_ids = list(range(first, first + num_fresh))
        self._num_allocated += num_fresh
        if n > num_fresh:
            # Last-in first-out: the most recently freed slot first.
            free_slots = self._free_slots
            taken = free_slots[len(free_slots) - (n - num_fresh) :]
            del free_slots[len(free_slots) - (n - num_fresh) :]
            taken.reverse()
            slot_ids += taken
        return slot_ids


class FilteredOffloadManager:
    """An :class:`OffloadManager` that stores only what a :class:`ReuseFilter` allows.

    vLLM's ``FilterReusedOffloadingManager``: ``lookup`` first shows the filter
    every hash it is given (all of them, hit or miss, not only the leading
    run), then asks the backing manager; ``prepare_store`` passes only the
    hashes the filter lets through. Everything else goes straight to the
    backing manager.

    Note what that implies, as in vLLM: the backing manager protects only the
    hashes that pass the filter, so an already-stored block of the same batch
    that the filter rejects may be evicted by that very store.
    """

    def __init__(self, backing: OffloadManager, reuse_filter: ReuseFilter) -> None:
        self.backing = backing
        self.reuse_filter = reuse_filter

    @property
    def medium(self) -> str:
        return self.backing.medium

    @property
    def block_size(self) -> int:
        return self.backing.block_size

    def lookup(self, block_hashes: Iterable[BlockHash]) -> int | None:
        hashes = block_hashes if isinstance(block_hashes, Sequence) else list(block_hashes)
        self.reuse_filter.on_lookup(hashes)
        return self.backing.lookup(hashes)

    def prepare_store(self, block_hashes: Iterable[BlockHash]) -> PrepareStoreResult | None:
        hashes = block_hashes if isinstance(block_hashes, Sequence) else list(block_hashes)
        return self.backing.prepare_store(self.reuse_filter.filter_store(hashes))

    def prepare_load(self, block_hashes: Iterable[BlockHash]) -> Sequence[int]:
        return self.backing.prepare_load(block_hashes)

    def touch(self, block_hashes: Iterable[BlockHash]) -> None:
        self.backing.touch(block_hashes)

    def complete_load(self, block_hashes: Iterable[BlockHash]) -> None:
        self.backing.complete_load(block_hashes)

    def complete_store(self, block_hashes: Iterable[BlockHash], success: bool = True) -> None:
        self.backing.complete_store(block_hashes, success)

    def take_events(self) -> Iterable[KVEvent]:
        return self.backing.take_events()
