"""The scheduler half of offloading: vLLM 0.19's ``OffloadingConnectorScheduler``.

Host code with no policy in it: *what* to keep and evict is the
:class:`~kvframe.contract.offload.OffloadManager`'s business (and through it the
eviction policy's and reuse filter's); this class only turns the scheduler's
calls into manager calls and per-step transfer lists for the worker, exactly
as ``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``
does. The rules it mirrors, because they decide hit counts:

* **Units.** An offloaded block covers ``block_size_factor`` GPU blocks and is
  named by the hash of its last GPU block. Only whole offloaded blocks are
  looked up, loaded or stored.
* **Lookup** (``get_num_new_matched_tokens``). Every full offloaded block of the
  request is *touched* first (also the ones the GPU prefix cache already
  holds: a GPU hit is a use the tier's policy should hear about). If fewer
  than one offloaded block's worth of tokens lies between the GPU hit and the
  request's last full offloaded block, the answer is 0. Otherwise the manager
  looks up the hashes from the offloaded block containing the GPU hit's end;
  the hit is the tokens from the GPU hit's end to the end of the leading ready
  run, and a hit shorter than one offloaded block counts as 0. A hit may
  reach the request's last token: the scheduler then recomputes that token
  after the load, as vLLM's does. A hit is always loaded asynchronously.
* **No load races a load.** With the GPU prefix cache on, a hit whose blocks
  are being loaded for another request answers ``None`` (ask again next
  step): once that load lands the GPU cache serves them.
* **Stores.** Each step, for each scheduled request, the full offloaded blocks
  its tokens reach after the step and that its per-request cursor has not
  passed are handed to ``prepare_store``; the cursor then moves past them
  whether or not the manager kept them all, so a block is offered once. A
  refused store (``None``) leaves the cursor, to be retried next step. The
  worker defers the copies to the start of the next step, when the step
  that computed those tokens has written them.
* **Tier view** (:meth:`OffloadingConnector.tier_view`): scheduling policies
  may ask, read-only, how much of a request's context the tier holds and
  what loading it would take (:class:`~kvframe.contract.views.TierView`). The answer
  uses the tier's ``lookup`` *behind* any reuse filter (a peek is not a
  sighting) and never touches the eviction policy, so asking changes nothing.
* **Completion**, as in vLLM 0.19: a request's stored blocks become ready
  (``complete_store``) when the worker reports the request in
  ``finished_sending`` -- after it finished and all its stores landed -- or
  at once when it is preempted (the worker flushes its stores first).
  Loads complete on ``finished_recving``. A finished request that ever had a
  store keeps its GPU blocks until ``finished_sending``.
* **Other connectors** (:class:`~kvframe.contract.offload.ConnectorSemantics`,
  chosen by the tier). With synchronous loads a hit is answered as not
  asynchronous, the request runs in this step, and its load is complete when
  the metadata is built (the worker finishes it before the forward pass); a hit
  reaching the request's last token gives back its last offloaded block, so
  that a token is left to compute. With blocking stores a store is complete
  when the metadata is built (the worker finishes it within the step), so no
  finished request waits for ``finished_sending``. Without output stores only
  blocks wholly inside the prompt are offered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import attrs

from kvframe.contract.offload import ConnectorSemantics
from kvframe.offload.slots.manager import FilteredOffloadManager
from kvframe.offload.stats import OffloadStats

if TYPE_CHECKING:
    from kvframe.contract.offload import OffloadManager
    from kvframe.contract.records import KVEvent
    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.scheduler_output import KVConnectorOutput, SchedulerOutput
    from kvframe.domain.request import Request
    from kvframe.domain.tokens import BlockHash

__all__ = [
    "ConnectorTierView",
    "OffloadConnectorMetadata",
    "OffloadingConnector",
    "TransferSpec",
]


@attrs.define(slots=True)
class TransferSpec:
    """One request's copy for one step: ``gpu_block_ids[i]`` <-> ``host_block_ids[i]``.

    Host block index ``slot * block_size_factor + j`` is the ``j``-th GPU block of
    the offloaded block in ``slot`` (see :class:`~kvframe.contract.offload.TransferHandler`).
    """

    gpu_block_ids: list[int]
    host_block_ids: list[int]

    def pairs(self) -> list[tuple[int, int]]:
        return list(zip(self.gpu_block_ids, self.host_block_ids, strict=True))


@attrs.define(slots=True)
class OffloadConnectorMetadata:
    """What the worker does this step (vLLM's ``OffloadingConnectorMetadata``)."""

    reqs_to_load: dict[str, TransferSpec]
    """Loads to start now; the request waits for them."""
    reqs_to_store: dict[str, TransferSpec]
    """Stores of blocks this step computes: the worker starts them next step."""
    reqs_to_flush: set[str]
    """Preempted requests: their in-flight stores must land before their blocks are reused."""


class OffloadingConnector:
    """The :class:`~kvframe.core.connector.SchedulerConnector` of an offload tier.

    :param manager: the tier's ledger (possibly a
        :class:`~kvframe.offload.slots.manager.FilteredOffloadManager`).
    :param gpu_block_size: tokens per GPU block.
    :param block_size_factor: GPU blocks per offloaded block;
        ``manager.block_size`` must be ``gpu_block_size * block_size_factor``.
    :param enable_prefix_caching: whether the GPU prefix cache is on; only then
        are in-flight loads tracked to keep a second load of the same blocks
        from racing (vLLM's condition).
    :param load_time: seconds a load of ``n`` tokens takes (the executor's
        transfer model); without it the connector offers no :meth:`tier_view`.
    :param semantics: when transfers happen (the tier's choice); vLLM's native
        connector by default.
    """

    def __init__(
        self,
        manager: OffloadManager,
        *,
        gpu_block_size: int,
        block_size_factor: int = 1,
        enable_prefix_caching: bool = True,
        load_time: Callable[[int], float] | None = None,
        semantics: ConnectorSemantics | None = None,
    ) -> None:
        if block_size_factor < 1:
            raise ValueError(f"block_size_factor must be >= 1, not {block_size_factor}")
        if manager.block_size != gpu_block_size * block_size_factor:
            raise ValueError(
                f"the tier's block size {manager.block_size} is not {block_size_factor} "
                f"GPU blocks of {gpu_block_size} tokens"
            )
        self.manager = manager
        self.semantics = semantics if semantics is not None else ConnectorSemantics()
        # The tier view peeks behind the reuse filter: its lookups are sightings.
        self._peek_manager = (
            manager.backing if isinstance(manager, FilteredOffloadManager) else manager
        )
        self._load_time = load_time
        self.gpu_block_size = gpu_block_size
        self.block_size_factor = block_size_factor
        self.offloaded_block_size = gpu_block_size * block_size_factor
        self.stats = OffloadStats()
        self._requests: dict[str, Request] = {}
        self._request_block_ids: dict[str, list[int]] = {}
        """Each scheduled request's GPU block table, rebuilt from the step outputs."""
        self._reqs_to_load: dict[str, TransferSpec] = {}
        self._next_stored_block_idx: dict[str, int] = {}
        # Stores refused for want of room: request id -> (first block, end
        # block, the manager's store_clock value below which a retry of the
        # same or a longer run of blocks must be refused too).
        self._store_waits: dict[str, tuple[int, int, int]] = {}
        """The store cursor: index of the next offloaded block to offer."""
        self._blocks_being_loaded: set[BlockHash] | None = set() if enable_prefix_caching else None
        # Hashes per request in insertion order (dicts, not sets): completing
        # them in a hash-seed-dependent order would make runs irreproducible.
        self._reqs_being_stored: dict[str, dict[BlockHash, None]] = {}
        """Requests that ever had a store (key kept until ``finished_sending``)."""
        self._reqs_being_loaded: dict[str, dict[BlockHash, None]] = {}
        self._sync_local_tokens: dict[str, int] = {}
        """Synchronous loads: the GPU hit (tokens) each pending load starts after."""

    # -- helpers ---------------------------------------------------------------

    def _hashes(self, request: Request, start: int = 0, end: int | None = None) -> list:
        """Hashes naming offloaded blocks ``start .. end - 1``: each one's last GPU block's.

        A slice (a C-level copy), not an iterator: the store path asks for a
        request's pending hashes on every step it is refused."""
        factor = self.block_size_factor
        stop = factor * end if end else None
        return request.block_hashes[factor * start + factor - 1 : stop : factor]

    @property
    def busy(self) -> bool:
        """Transfers are planned or in flight, or a finished request's store is pending."""
        return bool(self._reqs_being_stored or self._reqs_being_loaded or self._reqs_to_load)

    # -- the read-only tier view ----------------------------------------------

    def tier_view(self) -> ConnectorTierView | None:
        """The :class:`~kvframe.contract.views.TierView` policies get (``None``: no load model)."""
        return ConnectorTierView(self) if self._load_time is not None else None

    def num_tier_tokens(self, request: Request) -> int:
        """Leading tokens of ``request`` the tier holds or is storing for it (no side effects).

        Ready blocks come from the tier's ``lookup`` behind any reuse filter;
        blocks of this request whose store was accepted but has not landed
        count too. Stops at the first block that is neither.
        """
        hashes = self._hashes(request)
        pending = self._reqs_being_stored.get(request.request_id) or {}
        lookup = self._peek_manager.lookup
        held = 0
        num_blocks = len(hashes)
        while held < num_blocks:
            if hashes[held] in pending:
                held += 1
                continue
            hits = lookup(hashes[held:]) or 0  # None: not known yet, count nothing
            if hits <= 0:
                break
            held += hits
        return held * self.offloaded_block_size

    def estimate_load_time(self, num_tokens: int) -> float:
        """Seconds a load of ``num_tokens`` tokens takes, on the transfer model given."""
        if num_tokens <= 0 or self._load_time is None:
            return 0.0
        return self._load_time(num_tokens)

    # -- SchedulerConnector ----------------------------------------------------

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        manager = self.manager
        size = self.offloaded_block_size
        num_blocks = request.num_tokens // size
        manager.touch(self._hashes(request))
        self.stats.num_lookups += 1

        full_block_tokens = size * num_blocks
        if full_block_tokens - num_computed_tokens < size:
            return 0, False
        start = num_computed_tokens // size
        hits = manager.lookup(self._hashes(request, start))
        if hits is None:
            return None, False
        if hits == 0:
            return 0, False
        num_hit_tokens = size * (start + hits) - num_computed_tokens
        is_async = self.semantics.async_load
        if not is_async and num_computed_tokens + num_hit_tokens >= request.num_tokens:
            # Run now: at least one token must be left to compute.
            num_hit_tokens -= size
        if num_hit_tokens < size:
            return 0, False
        loading = self._blocks_being_loaded
        if loading and any(h in loading for h in self._hashes(request, start, start + hits)):
            self.stats.num_delayed_for_load += 1
            return None, False
        if not is_async:
            # Allocation hashes this step's blocks at once: remember where the load starts.
            self._sync_local_tokens[request.request_id] = num_computed_tokens
        return num_hit_tokens, is_async

    def update_state_after_alloc(
        self, request: Request, blocks: Sequence[KVCacheBlock], num_external_tokens: int
    ) -> None:
        request_id = request.request_id
        self._requests[request_id] = request
        # The block table is rebuilt from the step's output in build_connector_meta.
        self._request_block_ids[request_id] = []
        if num_external_tokens == 0:
            return
        local = self._sync_local_tokens.pop(request_id, None)
        if local is None:
            num_computed_gpu_blocks = sum(block.block_hash is not None for block in blocks)
        else:
            num_computed_gpu_blocks = local // self.gpu_block_size
        num_computed_tokens = num_computed_gpu_blocks * self.gpu_block_size
        full_block_tokens = num_computed_tokens + num_external_tokens
        size = self.offloaded_block_size
        if full_block_tokens % size:
            raise RuntimeError(
                f"request {request_id!r}: a load of {num_external_tokens} tokens after "
                f"{num_computed_tokens} computed does not end on an offloaded block"
            )
        pending = blocks[num_computed_gpu_blocks:]
        if local is not None:
            # The blocks after the loaded ones are computed in this very step.
            pending = pending[: num_external_tokens // self.gpu_block_size]
        if len(pending) * self.gpu_block_size != num_external_tokens:
            raise RuntimeError(
                f"request {request_id!r}: {len(pending)} GPU blocks reserved for "
                f"{num_external_tokens} external tokens"
            )
        start = num_computed_tokens // size
        num_blocks = full_block_tokens // size
        hashes = self._hashes(request, start, num_blocks)
        slots = self.manager.prepare_load(hashes)
        factor = self.block_size_factor
        host = [slot * factor + j for slot in slots for j in range(factor)]
        # The GPU hit may end inside the first offloaded block: skip its head.
        host = host[len(host) - len(pending) :]
        self._reqs_to_load[request_id] = TransferSpec([b.block_id for b in pending], host)
        self._reqs_being_loaded.setdefault(request_id, {}).update(dict.fromkeys(hashes))
        self._next_stored_block_idx[request_id] = num_blocks
        if self._blocks_being_loaded is not None:
            self._blocks_being_loaded.update(hashes)
        self.stats.num_load_requests += 1
        self.stats.num_loaded_blocks += len(hashes)

    def _reqs_to_store(self, output: SchedulerOutput) -> dict[str, TransferSpec]:
        reqs_to_store: dict[str, TransferSpec] = {}
        block_tables = self._request_block_ids
        requests = self._requests
        next_stored = self._next_stored_block_idx
        num_scheduled = output.num_scheduled_tokens
        size = self.offloaded_block_size
        cached = output.scheduled_cached_reqs
        resumed = cached.resumed_req_ids
        for new_request in output.scheduled_new_reqs:
            block_tables[new_request.req_id] += new_request.block_ids
        for request_id, new_block_ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
            if request_id in resumed:
                block_tables[request_id] = []
            if new_block_ids:
                block_tables[request_id] += new_block_ids
        store_waits = self._store_waits
        store_outputs = self.semantics.store_outputs
        clock: int | None = None  # the manager's store_clock; only a store changes it here
        # Every scheduled request, new ones first (vLLM's order). Most steps
        # complete no offloaded block for most requests (a decode step adds
        # one token): the first test rejects them before anything else.
        for request_id in (
            *(r.req_id for r in output.scheduled_new_reqs),
            *cached.req_ids,
        ):
            request = requests[request_id]
            start = next_stored.get(request_id, 0)
            reached = request.num_computed_tokens + num_scheduled[request_id]
            if reached < size * (start + 1):
                continue
            if not store_outputs:
                reached = min(reached, request.num_prompt_tokens)
            num_blocks = min(reached, request.num_tokens) // size
            if num_blocks <= start:
                continue
            wait = store_waits.get(request_id)
            if wait is not None and wait[0] == start and num_blocks >= wait[1]:
                if clock is None:
                    clock = self.manager.store_clock
                if clock < wait[2]:
                    # Bound to be refused again (SlotOffloadManager.store_clock):
                    # the same outcome as asking, without walking the hashes.
                    self.stats.num_store_refused += 1
                    continue
            self._store(request, start, num_blocks, reqs_to_store)
            clock = None
        return reqs_to_store

    def _store(
        self, request: Request, start: int, num_blocks: int, reqs_to_store: dict[str, TransferSpec]
    ) -> None:
        """Offer offloaded blocks ``start .. num_blocks - 1`` of ``request`` to the manager."""
        request_id = request.request_id
        manager = self.manager
        wait = self._store_waits.get(request_id)
        new_hashes = self._hashes(request, start, num_blocks)
        result = manager.prepare_store(new_hashes)
        if result is None:
            self.stats.num_store_refused += 1
            refused = getattr(manager, "refused_new_blocks", 0)
            if refused:
                self._store_waits[request_id] = (start, num_blocks, refused + manager.num_inserted)
            return
        if wait is not None:
            del self._store_waits[request_id]
        self._next_stored_block_idx[request_id] = num_blocks
        if result.evicted_block_hashes:
            self.stats.num_evicted_blocks += len(result.evicted_block_hashes)
        stored = result.block_hashes_to_store
        if not stored:
            return
        manager.touch(self._hashes(request, 0, num_blocks))
        factor = self.block_size_factor
        block_ids = self._request_block_ids[request_id]
        slots = result.slot_ids
        if len(stored) == len(new_hashes):
            # Every offered block is new (the usual case): the stored hashes
            # are ``new_hashes`` themselves, in order (a subsequence of the
            # same length), so the GPU blocks are one slice.
            gpu = block_ids[start * factor : num_blocks * factor]
            if factor == 1:
                host = list(slots)
            else:
                host = [slot * factor + j for slot in slots for j in range(factor)]
        else:
            slot_of = dict(zip(stored, slots, strict=True))
            gpu = []
            host = []
            for index, block_hash in enumerate(new_hashes):
                slot = slot_of.get(block_hash)
                if slot is None:
                    continue
                first_gpu = (start + index) * factor
                base = slot * factor
                gpu.extend(block_ids[first_gpu : first_gpu + factor])
                host.extend(range(base, base + factor))
        reqs_to_store[request_id] = TransferSpec(gpu, host)
        self._reqs_being_stored.setdefault(request_id, {}).update(dict.fromkeys(stored))
        self.stats.num_stored_blocks += len(stored)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> OffloadConnectorMetadata:
        meta = OffloadConnectorMetadata(
            reqs_to_load=self._reqs_to_load,
            reqs_to_store=self._reqs_to_store(scheduler_output),
            reqs_to_flush=set(scheduler_output.preempted_req_ids),
        )
        self._reqs_to_load = {}
        semantics = self.semantics
        if not semantics.async_load:
            # The worker finishes these loads before the step's forward pass.
            for request_id in sorted(meta.reqs_to_load):
                self._complete_load(request_id)
        if semantics.blocking_store:
            # ... and these stores before the step ends.
            for request_id in meta.reqs_to_store:
                hashes = self._reqs_being_stored.pop(request_id, None)
                if hashes:
                    self.manager.complete_store(list(hashes))
        # The worker flushes a preempted request's stores before the step runs,
        # so they are complete now (vLLM completes them here too).
        for request_id in sorted(scheduler_output.preempted_req_ids):
            hashes = self._reqs_being_stored.get(request_id)
            if hashes:
                self.manager.complete_store(list(hashes))
                hashes.clear()
        return meta

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        # Sorted: the worker reports sets, and their order depends on the hash seed.
        for request_id in sorted(output.finished_sending):
            hashes = self._reqs_being_stored.pop(request_id, None)
            if hashes:
                self.manager.complete_store(list(hashes))
        for request_id in sorted(output.finished_recving):
            self._complete_load(request_id)

    def _complete_load(self, request_id: str) -> None:
        hashes = self._reqs_being_loaded.pop(request_id, None)
        if hashes:
            if self._blocks_being_loaded:
                self._blocks_being_loaded.difference_update(hashes)
            self.manager.complete_load(list(hashes))

    def request_finished(self, request: Request, block_ids: Sequence[int]) -> bool:
        request_id = request.request_id
        self._requests.pop(request_id, None)
        self._request_block_ids.pop(request_id, None)
        self._next_stored_block_idx.pop(request_id, None)
        self._store_waits.pop(request_id, None)
        self._sync_local_tokens.pop(request_id, None)
        return request_id in self._reqs_being_stored

    def take_events(self) -> Iterable[KVEvent]:
        return self.manager.take_events()


class ConnectorTierView:
    """The :class:`~kvframe.contract.views.TierView` of an :class:`OffloadingConnector`.

    A separate object so that a policy holding it can only ask, never call the
    connector's scheduler-side methods.
    """

    __slots__ = ("_connector",)

    def __init__(self, connector: OffloadingConnector) -> None:
        self._connector = connector

    @property
    def medium(self) -> str:
        return self._connector.manager.medium

    @property
    def block_size(self) -> int:
        return self._connector.offloaded_block_size

    def num_cached_tokens(self, request: Request) -> int:
        return self._connector.num_tier_tokens(request)

    def load_time(self, num_tokens: int) -> float:
        return self._connector.estimate_load_time(num_tokens)
