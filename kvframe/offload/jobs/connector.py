"""The scheduler half of offloading under vLLM 0.33.0: transfers as numbered *jobs*.

vLLM 0.33.0 rewrote ``OffloadingConnectorScheduler``
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``)
around transfer jobs; :class:`~kvframe.offload.slots.connector.OffloadingConnector`
stays vLLM 0.19.1's. This is 0.33.0's, for the 0.33 fidelity target's tier,
over :class:`~kvframe.offload.jobs.manager.RequestScopedOffloadManager`
(0.33.0's ``CPUOffloadingManager``). The rules it mirrors, for one
full-attention group and one worker (``docs/fidelity.md``, "The tier under
vLLM 0.33.0", rows 1-9):

* **Jobs** (1). Every load and every store is a job numbered by one counter
  shared by loads and stores. A job's chunks complete (``complete_store`` /
  ``complete_load``) when the worker reports *that job* in
  :attr:`~kvframe.core.scheduler_output.KVConnectorOutput.completed_jobs`, so
  a running request's stored chunks can be hit while it still runs.
* **Finish** (2, 3). :meth:`request_finished` frees the GPU blocks at once
  (answers False). The request's last stores are offered the step *after* it
  finished (it is walked with the scheduled requests, after them, up to
  ``max(num_prompt_tokens, num_tokens - 1)`` tokens) from its already-freed
  blocks; every store job of a finished request is *fenced*: when one of its
  source blocks is allocated again (to anyone, a prefix hit taking it
  included) the job is flushed (``jobs_to_flush``: the worker lands it before
  the step runs). The request's accesses are committed to the tier's policy
  (``on_request_finished``) after those last offers.
* **Flushes** (4) name jobs: a preempted request's store jobs in flight, and
  the fenced jobs above.
* **Prompt only** (5). With ``offload_prompt_only`` (0.33.0's default, PR
  #43797) no token past the prompt is offered.
* **Lookup** (6, 8, 9). Every lookup restarts the request's store cursor at
  chunk 0 and forgets its block table (a re-admitted request offers its chunks
  again); a request with a job in flight answers ``None`` (ask again next
  step); otherwise the keys from the GPU hit's chunk on are looked up one by
  one until a miss: a ``HIT_PENDING`` among the hits answers ``None`` too, as
  does a hit whose chunks another request is loading (prefix caching on). A
  load moves the cursor past the loaded chunks (``OffloadPolicy.CHUNK_LEVEL``).
* A store that the manager cannot make room for leaves the cursor; an offer
  the manager takes nothing of (all resident, or filtered) moves it.

Not modelled (vLLM 0.33.0 has them off by default and the harness never
reaches them): synchronous loads within a byte budget, partial-tail chunks,
sliding-window and EAGLE groups, a retention interval, per-request load and
offload caps, cache resets, tiering managers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.contract.request_scoped import RequestAccess
from kvframe.domain.request import RequestStatus
from kvframe.offload.jobs.manager import LookupResult
from kvframe.offload.stats import OffloadStats

if TYPE_CHECKING:
    from kvframe.contract.records import KVEvent
    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.scheduler_output import KVConnectorOutput, SchedulerOutput
    from kvframe.domain.request import Request
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager

__all__ = ["JobConnectorMetadata", "JobOffloadingConnector", "TransferJob"]


@attrs.define(slots=True)
class TransferJob:
    """One job's copy: ``gpu_block_ids[i]`` <-> ``host_block_ids[i]``.

    Host block index ``slot * block_size_factor + j`` is the ``j``-th GPU block
    of the chunk in ``slot``, as in
    :class:`~kvframe.offload.slots.connector.TransferSpec`.
    """

    request_id: str
    gpu_block_ids: list[int]
    host_block_ids: list[int]

    def pairs(self) -> list[tuple[int, int]]:
        return list(zip(self.gpu_block_ids, self.host_block_ids, strict=True))


@attrs.define(slots=True)
class JobConnectorMetadata:
    """What the worker does this step (vLLM 0.33.0's ``OffloadingConnectorMetadata``)."""

    load_jobs: dict[int, TransferJob]
    """Loads to start now; the request waits for them."""
    store_jobs: dict[int, TransferJob]
    """Stores of blocks computed by this step (or freed by a finished request):
    the worker starts them next step, unless they are flushed."""
    jobs_to_flush: set[int]
    """Store jobs the worker must land before this step runs (their source
    blocks are about to be rewritten), this step's own stores included."""


@attrs.define(slots=True, eq=False)
class _Job:
    """The scheduler's view of one job in flight."""

    request_id: str
    keys: list[Any]
    is_store: bool
    source_block_ids: list[int] = attrs.Factory(list)
    """A store's GPU blocks, fenced once its request has finished."""


@attrs.define(slots=True, eq=False)
class _RequestState:
    """One request's offload state (vLLM 0.33.0's ``RequestOffloadState``)."""

    request: Request
    access: RequestAccess
    keys: list[Any] = attrs.Factory(list)
    """The request's chunk keys so far: the hash of each chunk's last GPU block."""
    block_ids: list[int] = attrs.Factory(list)
    """Its GPU block table as the scheduler's outputs told it."""
    next_stored_chunk: int = 0
    """The store cursor: the first chunk not yet offered."""
    local_tokens: int = 0
    """The GPU prefix hit its last lookup started from."""
    jobs: set[int] = attrs.Factory(set)
    """Jobs in flight: one load, or stores."""
    finished_signaled: bool = False


class JobOffloadingConnector:
    """The :class:`~kvframe.core.connector.SchedulerConnector` of a tier under vLLM 0.33.0.

    :param manager: the tier's ledger, a
        :class:`~kvframe.offload.jobs.manager.RequestScopedOffloadManager`.
    :param gpu_block_size: tokens per GPU block.
    :param block_size_factor: GPU blocks per chunk.
    :param enable_prefix_caching: whether the GPU prefix cache is on; only then
        is a hit whose chunks another request is loading deferred.
    :param offload_prompt_only: offer only chunks inside the prompt (vLLM
        0.33.0's default); False offers every full chunk, outputs included.
    """

    def __init__(
        self,
        manager: RequestScopedOffloadManager,
        *,
        gpu_block_size: int,
        block_size_factor: int = 1,
        enable_prefix_caching: bool = True,
        offload_prompt_only: bool = True,
    ) -> None:
        if block_size_factor < 1:
            raise ValueError(f"block_size_factor must be >= 1, not {block_size_factor}")
        if gpu_block_size < 1:
            raise ValueError(f"gpu_block_size must be >= 1, not {gpu_block_size}")
        self.manager = manager
        self.gpu_block_size = gpu_block_size
        self.block_size_factor = block_size_factor
        self.offloaded_block_size = gpu_block_size * block_size_factor
        self.offload_prompt_only = offload_prompt_only
        self.stats = OffloadStats()
        self._states: dict[str, _RequestState] = {}
        self._jobs: dict[int, _Job] = {}
        self._next_job = 0
        self._batch_load_jobs: dict[int, TransferJob] = {}
        self._batch_jobs_to_flush: set[int] = set()
        self._batch_allocated: set[int] = set()
        """GPU block ids allocated this step (the fence watches them)."""
        self._fenced: dict[int, set[int]] = {}
        """GPU block id -> store jobs of finished requests reading it."""
        self._chunks_being_loaded: set[Any] | None = set() if enable_prefix_caching else None
        self._finishing: set[str] = set()
        """Finished requests whose last stores the next step offers."""

    # -- helpers ---------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Jobs are in flight or planned, or a finished request's last stores are due
        (vLLM 0.33.0's engine keeps stepping for them: ``has_pending_push_work``
        and the scheduler's ``finished_req_ids``)."""
        return bool(
            self._jobs
            or self._batch_load_jobs
            or self._finishing
            or self.manager.has_pending_work()
        )

    def tier_view(self) -> None:
        """No :class:`~kvframe.contract.views.TierView` for policies under this connector yet."""
        return None

    def _state(self, request: Request) -> _RequestState:
        state = self._states.get(request.request_id)
        if state is None:
            # vLLM 0.33.0 builds it at add_request (``on_new_request``); kvframe's
            # scheduler first meets the connector at the request's first lookup,
            # before which nothing can touch the tier.
            state = _RequestState(request, RequestAccess(request.request_id))
            self.manager.on_new_request(state.access)
            self._states[request.request_id] = state
        return state

    def _update_keys(self, state: _RequestState) -> None:
        """Name the chunks the request's block hashes now complete."""
        keys = state.keys
        factor = self.block_size_factor
        hashes = state.request.block_hashes
        positions = state.access.positions
        size = self.offloaded_block_size
        for block_hash in hashes[factor * len(keys) + factor - 1 :: factor]:
            keys.append(block_hash)
            positions[block_hash] = len(keys) * size

    def _new_job(self, job: _Job) -> int:
        job_id = self._next_job
        self._next_job += 1
        self._jobs[job_id] = job
        self._states[job.request_id].jobs.add(job_id)
        return job_id

    def _host_ids(self, slots: Iterable[int]) -> list[int]:
        factor = self.block_size_factor
        return [slot * factor + j for slot in slots for j in range(factor)]

    # -- SchedulerConnector ----------------------------------------------------

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        state = self._state(request)
        state.block_ids.clear()
        state.next_stored_chunk = 0  # restarting at token 0: offer every chunk again
        if state.jobs:
            return None, False
        self._update_keys(state)
        state.local_tokens = num_computed_tokens
        self.stats.num_lookups += 1
        hits = self._lookup(state, num_computed_tokens)
        return hits, bool(hits)

    def _lookup(self, state: _RequestState, num_computed_tokens: int) -> int | None:
        size = self.offloaded_block_size
        keys = state.keys
        max_hit = min(state.request.num_tokens, len(keys) * size)
        if max_hit - num_computed_tokens < size:
            return 0
        start = num_computed_tokens // size
        end = min(-(-max_hit // size), len(keys))
        lookup = self.manager.lookup
        access = state.access
        hits = 0
        pending = False
        for key in keys[start:end]:
            answer = lookup(key, access)
            if answer is LookupResult.MISS:
                break
            if answer is LookupResult.RETRY:
                # A tier below DRAM cannot answer yet: not a hit; keep scanning so
                # the chain starts its other lookups, and ask again next step.
                pending = True
                continue
            hits += 1
            pending |= answer is LookupResult.HIT_PENDING
        if hits == 0:
            return 0
        if pending:
            return None
        max_hit = min(max_hit, size * (start + hits))
        num_hit_tokens = max_hit - num_computed_tokens
        if num_hit_tokens < size:
            return 0
        loading = self._chunks_being_loaded
        if loading:
            end = -(-(num_computed_tokens + num_hit_tokens) // size)
            if any(key in loading for key in keys[start:end]):
                self.stats.num_delayed_for_load += 1
                return None
        return num_hit_tokens

    def update_state_after_alloc(
        self, request: Request, blocks: Sequence[KVCacheBlock], num_external_tokens: int
    ) -> None:
        self._batch_allocated.update(b.block_id for b in blocks if b.block_id != 0)
        if num_external_tokens == 0:
            return
        state = self._states[request.request_id]
        gpu_size = self.gpu_block_size
        size = self.offloaded_block_size
        local = state.local_tokens
        num_cached_tokens = local + num_external_tokens
        num_gpu_blocks = -(-num_cached_tokens // gpu_size)
        if len(blocks) < num_gpu_blocks:
            raise RuntimeError(
                f"request {request.request_id!r}: {len(blocks)} GPU blocks for a load "
                f"reaching token {num_cached_tokens}"
            )
        load_start = num_gpu_blocks
        for i in range(-(-local // gpu_size), num_gpu_blocks):
            block = blocks[i]
            if not block.is_null and block.block_hash is None:
                load_start = i
                break
        num_chunks = -(-num_cached_tokens // size)
        keys: list[Any] = []
        if num_gpu_blocks > load_start:
            keys = state.keys[load_start // self.block_size_factor : num_chunks]
        # The CPU tier's policy is chunk-level: the loaded chunks are not offered again.
        state.next_stored_chunk = num_chunks
        slots = self.manager.prepare_load(keys, state.access)
        host = self._host_ids(slots)
        gpu = [b.block_id for b in blocks[load_start:num_gpu_blocks]]
        # The GPU hit may end inside the first chunk: skip its head.
        host = host[len(host) - len(gpu) :]
        if state.jobs:
            raise RuntimeError(f"request {request.request_id!r}: a load with jobs in flight")
        job_id = self._new_job(_Job(request.request_id, list(keys), is_store=False))
        self._batch_load_jobs[job_id] = TransferJob(request.request_id, gpu, host)
        if self._chunks_being_loaded is not None:
            self._chunks_being_loaded.update(keys)
        self.stats.num_load_requests += 1
        self.stats.num_loaded_blocks += len(keys)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> JobConnectorMetadata:
        self._update_block_tables(scheduler_output)
        flush = self._batch_jobs_to_flush
        # A preempted request's stores in flight land before its blocks are reused.
        for request_id in scheduler_output.preempted_req_ids:
            state = self._states.get(request_id)
            if state is not None:
                flush.update(state.jobs - self._batch_load_jobs.keys())
        # Stores of finished requests whose source blocks were just allocated again.
        fenced = self._fenced
        if fenced and not fenced.keys().isdisjoint(self._batch_allocated):
            for block_id in self._batch_allocated:
                flush.update(fenced.get(block_id, ()))
        finished = sorted(scheduler_output.finished_req_ids)
        meta = JobConnectorMetadata(
            load_jobs=self._batch_load_jobs,
            store_jobs=self._build_store_jobs(scheduler_output, finished),
            jobs_to_flush=flush,
        )
        # Every last offer of a finished request is made: commit its accesses.
        for request_id in finished:
            state = self._states.get(request_id)
            if state is None:
                continue
            state.finished_signaled = True
            self._finishing.discard(request_id)
            self.manager.on_request_finished(state.access)
            if not state.jobs:
                del self._states[request_id]
        self._batch_load_jobs = {}
        self._batch_jobs_to_flush = set()
        self._batch_allocated = set()
        # The step's last manager call (a tier chain submits its promotions here).
        self.manager.on_schedule_end()
        return meta

    def _update_block_tables(self, output: SchedulerOutput) -> None:
        states = self._states
        allocated = self._batch_allocated
        for new_request in output.scheduled_new_reqs:
            state = states[new_request.req_id]
            self._update_keys(state)
            ids = _flat(new_request.block_ids)
            state.block_ids[:] = ids
            allocated.update(b for b in ids if b != 0)
        cached = output.scheduled_cached_reqs
        resumed = cached.resumed_req_ids
        for request_id, new_block_ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
            state = states[request_id]
            self._update_keys(state)
            if request_id in resumed:
                state.block_ids.clear()
            ids = _flat(new_block_ids)
            if ids:
                state.block_ids += ids
                allocated.update(b for b in ids if b != 0)

    def _build_store_jobs(
        self, output: SchedulerOutput, finished: list[str]
    ) -> dict[int, TransferJob]:
        store_jobs: dict[int, TransferJob] = {}
        factor = self.block_size_factor
        size = self.offloaded_block_size
        num_scheduled = output.num_scheduled_tokens
        for request_id in chain(num_scheduled, finished):
            state = self._states.get(request_id)
            if state is None:
                continue
            request = state.request
            is_finished = request_id not in num_scheduled
            if is_finished:
                # The last sampled token's slot is never written: a chunk ending there
                # is not stored.
                reached = max(request.num_prompt_tokens, request.num_tokens - 1)
            else:
                reached = request.num_computed_tokens + num_scheduled[request_id]
            reached = min(reached, request.num_tokens)
            if self.offload_prompt_only:
                reached = min(reached, request.num_prompt_tokens)
            num_chunks = min(reached // size, len(state.block_ids) // factor, len(state.keys))
            start = state.next_stored_chunk
            if num_chunks <= start:
                state.next_stored_chunk = max(start, num_chunks)
                continue
            offered = state.keys[start:num_chunks]
            result = self.manager.prepare_store(offered, state.access)
            if result is None:
                self.stats.num_store_refused += 1
                continue
            if result.evicted_keys:
                self.stats.num_evicted_blocks += len(result.evicted_keys)
            state.next_stored_chunk = num_chunks
            if not result.keys_to_store:
                continue
            slot_of = dict(zip(result.keys_to_store, result.slot_ids, strict=True))
            gpu: list[int] = []
            slots: list[int] = []
            block_ids = state.block_ids
            for index, key in enumerate(offered):
                slot = slot_of.get(key)
                if slot is None:
                    continue
                first = (start + index) * factor
                gpu.extend(block_ids[first : first + factor])
                slots.append(slot)
            job_id = self._new_job(_Job(request_id, list(result.keys_to_store), True, gpu))
            store_jobs[job_id] = TransferJob(request_id, gpu, self._host_ids(slots))
            self.stats.num_stored_blocks += len(result.keys_to_store)
            if is_finished:
                for block_id in gpu:
                    self._fenced.setdefault(block_id, set()).add(job_id)
                    if block_id in self._batch_allocated:
                        self._batch_jobs_to_flush.add(job_id)
        return store_jobs

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        for job_id in sorted(output.completed_jobs):
            job = self._jobs.pop(job_id)
            state = self._states[job.request_id]
            if job.is_store:
                self.manager.complete_store(job.keys, state.access)
            else:
                self.manager.complete_load(job.keys, state.access)
                if self._chunks_being_loaded:
                    self._chunks_being_loaded.difference_update(job.keys)
            if self._fenced and RequestStatus.is_finished(state.request.status):
                self._unfence(job_id, job.source_block_ids)
            state.jobs.discard(job_id)
            if state.finished_signaled and not state.jobs:
                del self._states[job.request_id]

    def _unfence(self, job_id: int, block_ids: Iterable[int]) -> None:
        fenced = self._fenced
        for block_id in block_ids:
            jobs = fenced.get(block_id)
            if jobs is None:
                continue
            jobs.discard(job_id)
            if not jobs:
                del fenced[block_id]

    def request_finished(self, request: Request, block_ids: Sequence[int]) -> bool:
        state = self._states.get(request.request_id)
        if state is None:
            access = RequestAccess(request.request_id)
            self.manager.on_new_request(access)
            self.manager.on_request_finished(access)
            return False
        # The last token's hash, for the last offers next step.
        self._update_keys(state)
        self._finishing.add(request.request_id)
        for job_id in state.jobs:
            job = self._jobs[job_id]
            for block_id in job.source_block_ids:
                self._fenced.setdefault(block_id, set()).add(job_id)
        return False

    def take_events(self) -> Iterable[KVEvent]:
        return ()


def _flat(ids: Any) -> list[int]:
    """Block ids as a flat list whether given as one group or a tuple of groups."""
    if not ids:
        return []
    ids = list(ids)
    if isinstance(ids[0], (list, tuple)):
        return list(ids[0])
    return ids
