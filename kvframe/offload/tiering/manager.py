"""The tier chain GPU -> DRAM -> tiers below: vLLM 0.33.0's ``TieringOffloadingManager``.

A drop-in for :class:`~kvframe.offload.jobs.manager.RequestScopedOffloadManager`
under :class:`~kvframe.offload.jobs.connector.JobOffloadingConnector`: the
connector talks to DRAM (the *primary* tier) only, and this manager moves
chunks between DRAM and the secondary tiers behind its back. The decisions,
call for call as in vLLM 0.33.0 (``vllm/v1/kv_offload/tiering/manager.py``;
``tests/offload/tiering_differential_v033.py`` checks them against it):

* **Lookup**: finished tier jobs are collected first (once per step); a DRAM
  ``HIT`` / ``HIT_PENDING`` answers at once; on a DRAM miss the tiers are asked
  in order and the first ``HIT`` is *promoted*: a DRAM slot is taken at once
  (DRAM's ``prepare_store``, so the promotion may evict, and is filtered by
  DRAM's reuse tracker), the chunk answers ``HIT_PENDING``, and the load is
  submitted at the step's end, batched per (tier, request). A promotion DRAM
  has no room for answers ``MISS``. A tier answering ``RETRY`` makes the
  lookup ``RETRY`` unless a later tier hits.
* **Store**: ``prepare_store`` collects finished jobs first (always, so
  eviction sees the freshest releases) and offers DRAM; when the GPU -> DRAM
  copy lands (``complete_store``, success) the chunks *cascade* to every tier:
  one job per tier, each pinning the DRAM slots (``prepare_load`` without
  recording an access) until the tier reports it.
* **Finished jobs**: a promotion makes its chunks readable in DRAM (or drops
  the ones that failed, which then recompute); a cascade unpins its slots.
* **Finish**: a request's tiers hear ``on_request_finished`` only once its
  pending GPU -> DRAM stores have completed (their completion may cascade).
* **Request-level tiers** get the chunks already in DRAM cascaded too, at the
  offer; one still being written is parked and retried at each step's end.

Not modelled (see ``docs/tiering.md``): back-pressure detectors, the tier-poll
thread and external (peer) requests, cache resets, ``touch``, load-tier filters.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

import attrs

from kvframe.offload.jobs.manager import LookupResult
from kvframe.offload.tiering.base import TierJob, TierStats

if TYPE_CHECKING:
    from kvframe.contract.request_scoped import RequestAccess
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager, RequestStoreResult
    from kvframe.offload.tiering.base import JobResult, SecondaryTier

__all__ = ["TieringOffloadManager"]

_HIT = LookupResult.HIT
_HIT_PENDING = LookupResult.HIT_PENDING
_MISS = LookupResult.MISS
_RETRY = LookupResult.RETRY


@attrs.define(slots=True, eq=False)
class _PendingPromotion:
    """Chunks awaiting one batched ``submit_load`` for a (tier, request)."""

    access: RequestAccess
    keys: list[Hashable] = attrs.Factory(list)
    slot_ids: list[int] = attrs.Factory(list)


@attrs.define(slots=True, eq=False)
class _RequestState:
    """One request's chain state (vLLM's ``RequestState``)."""

    access: RequestAccess
    pending_primary_stores: int = 0
    is_finished: bool = False
    request_level_tiers: list[int] | None = None
    pending_cascade_keys: list[Hashable] = attrs.Factory(list)


class TieringOffloadManager:
    """DRAM (``primary``) with ``tiers`` below it, in lookup order.

    :param primary: the DRAM tier's ledger; the chain is its only user.
    :param tiers: the secondary tiers, asked in this order on a DRAM miss.
    :param chunk_bytes: bytes of one chunk, for the per-tier byte counters.
    """

    def __init__(
        self,
        primary: RequestScopedOffloadManager,
        tiers: Sequence[SecondaryTier] = (),
        *,
        chunk_bytes: int = 0,
    ) -> None:
        self.primary = primary
        self.tiers = list(tiers)
        self.chunk_bytes = chunk_bytes
        self.stats = [TierStats(tier.name) for tier in self.tiers]
        self._next_job_id = 0
        self._jobs: dict[int, tuple[TierJob, int]] = {}
        self._pending_promotions: dict[int, dict[str, _PendingPromotion]] = {}
        self._processed_this_step = False
        self._requests: dict[str, _RequestState] = {}
        self.load_sources: dict[str, dict[Hashable, str]] = {}
        """Per request, the tier each promoted chunk came from (per-tier hit metrics)."""

    # -- jobs --------------------------------------------------------------------

    def _new_job(
        self,
        keys: Sequence[Hashable],
        slots: Sequence[int],
        promotion: bool,
        access: RequestAccess,
        tier_idx: int,
    ) -> TierJob:
        job = TierJob(self._next_job_id, tuple(keys), tuple(slots), promotion, access)
        self._next_job_id += 1
        self._jobs[job.job_id] = (job, tier_idx)
        return job

    def _maybe_process_finished_jobs(self) -> None:
        if self._processed_this_step:
            return
        self._processed_this_step = True
        self._process_finished_jobs()

    def _process_finished_jobs(self) -> None:
        for tier_idx, tier in enumerate(self.tiers):
            for result in tier.finished_jobs():
                entry = self._jobs.pop(result.job_id, None)
                if entry is None or entry[1] != tier_idx:
                    raise RuntimeError(
                        f"tier #{tier_idx} ({tier.name}) reported job {result.job_id}, "
                        "which is not its job in flight"
                    )
                job = entry[0]
                stats = self.stats[tier_idx]
                if job.is_promotion:
                    stats.read_bytes += result.transfer_bytes
                    stats.read_s += result.transfer_s
                    self._complete_promotion(job, tier_idx, result)
                else:
                    stats.write_bytes += result.transfer_bytes
                    stats.write_s += result.transfer_s
                    stats.cascade_failures += not result.success
                    self.primary.complete_load(job.keys, job.access)

    def _complete_promotion(self, job: TierJob, tier_idx: int, result: JobResult) -> None:
        if result.success:
            good: Collection[Hashable] = job.keys
            failed: Collection[Hashable] = ()
        else:
            self.stats[tier_idx].promotion_failures += 1
            good = result.successful_keys or ()
            if not set(good) <= set(job.keys):
                raise RuntimeError(f"promotion job {job.job_id} reported keys it was not given")
            kept = set(good)
            failed = [key for key in job.keys if key not in kept]
            sources = self.load_sources.get(job.access.request_id)
            if sources is not None:
                name = self.tiers[tier_idx].name
                for key in failed:
                    if sources.get(key) == name:
                        del sources[key]
        if good:
            self.primary.complete_store(good, job.access, True)
        if failed:
            self.primary.complete_store(failed, job.access, False)

    # -- lookup and promotion ------------------------------------------------------

    def lookup(self, key: Hashable, access: RequestAccess) -> LookupResult:
        """DRAM first; on a DRAM miss, the first tier that hits is promoted (``HIT_PENDING``)."""
        self._maybe_process_finished_jobs()
        answer = self.primary.lookup(key, access)
        if answer is _HIT or answer is _HIT_PENDING:
            return answer
        any_retry = False
        for tier_idx, tier in enumerate(self.tiers):
            result = tier.lookup(key, access)
            stats = self.stats[tier_idx]
            stats.chunk_queries += 1
            if result is _HIT:
                stats.chunk_hits += 1
                return _HIT_PENDING if self._initiate_promotion(tier_idx, key, access) else _MISS
            any_retry |= result is _RETRY
        return _RETRY if any_retry else _MISS

    def _initiate_promotion(self, tier_idx: int, key: Hashable, access: RequestAccess) -> bool:
        result = self.primary.prepare_store([key], access)
        if result is None:
            self.stats[tier_idx].promotion_allocation_failures += 1
            return False
        name = self.tiers[tier_idx].name
        sources = self.load_sources.setdefault(access.request_id, {})
        for promoted in result.keys_to_store:
            sources[promoted] = name
        by_request = self._pending_promotions.setdefault(tier_idx, {})
        entry = by_request.get(access.request_id)
        if entry is None:
            entry = by_request[access.request_id] = _PendingPromotion(access)
        entry.keys.extend(result.keys_to_store)
        entry.slot_ids.extend(result.slot_ids)
        return True

    def _flush_pending_promotions(self) -> None:
        for tier_idx, by_request in self._pending_promotions.items():
            tier = self.tiers[tier_idx]
            stats = self.stats[tier_idx]
            for entry in by_request.values():
                job = self._new_job(entry.keys, entry.slot_ids, True, entry.access, tier_idx)
                stats.promotions += 1
                stats.promoted_chunks += len(entry.keys)
                tier.submit_load(job)
        self._pending_promotions.clear()

    # -- loads to the GPU ------------------------------------------------------------

    def prepare_load(
        self, keys: Sequence[Hashable], access: RequestAccess, *, record_access: bool = True
    ) -> tuple[int, ...]:
        """Pin DRAM chunks (all ``HIT`` this step) for a load to the GPU."""
        return self.primary.prepare_load(keys, access, record_access=record_access)

    def complete_load(self, keys: Iterable[Hashable], access: RequestAccess) -> None:
        self.primary.complete_load(keys, access)

    # -- stores and cascades ------------------------------------------------------------

    def prepare_store(
        self, keys: Iterable[Hashable], access: RequestAccess
    ) -> RequestStoreResult | None:
        """Offer DRAM ``keys`` after collecting finished jobs (their releases may make room)."""
        keys = list(keys)
        self._processed_this_step = True
        self._process_finished_jobs()
        result = self.primary.prepare_store(keys, access)
        if result is None:
            return None
        state = self._requests[access.request_id]
        if result.keys_to_store:
            state.pending_primary_stores += 1
        if state.request_level_tiers:
            stored = set(result.keys_to_store)
            resident = [key for key in keys if key not in stored]
            if resident:
                self._cascade_resident(resident, state)
        return result

    def _cascade_resident(self, keys: Sequence[Hashable], state: _RequestState) -> None:
        """Cascade chunks already in DRAM to the request-level tiers; park those being written."""
        ready = []
        for key in keys:
            answer = self.primary.lookup(key, state.access)
            if answer is _HIT:
                ready.append(key)
            elif answer is _HIT_PENDING:
                state.pending_cascade_keys.append(key)
        if not ready:
            return
        for tier_idx in state.request_level_tiers or ():
            self._cascade(ready, state.access, tier_idx)

    def _cascade(self, keys: Sequence[Hashable], access: RequestAccess, tier_idx: int) -> None:
        slots = self.primary.prepare_load(keys, access, record_access=False)
        job = self._new_job(keys, slots, False, access, tier_idx)
        stats = self.stats[tier_idx]
        stats.cascades += 1
        stats.cascaded_chunks += len(keys)
        self.tiers[tier_idx].submit_store(job)

    def complete_store(
        self, keys: Iterable[Hashable], access: RequestAccess, success: bool = True
    ) -> None:
        """The GPU -> DRAM copy landed: on success, cascade the chunks to every tier."""
        keys = list(keys)
        self.primary.complete_store(keys, access, success)
        if success:
            for tier_idx in range(len(self.tiers)):
                self._cascade(keys, access, tier_idx)
        state = self._requests[access.request_id]
        if state.pending_primary_stores <= 0:
            raise RuntimeError(f"request {access.request_id!r}: a store completed twice")
        state.pending_primary_stores -= 1
        self._maybe_finalize(access.request_id)

    # -- requests and steps ------------------------------------------------------------

    def on_new_request(self, access: RequestAccess) -> None:
        """Register the request with DRAM and every tier; note the request-level ones."""
        self.primary.on_new_request(access)
        state = _RequestState(access)
        for tier_idx, tier in enumerate(self.tiers):
            tier.on_new_request(access)
            if tier.request_level:
                if state.request_level_tiers is None:
                    state.request_level_tiers = []
                state.request_level_tiers.append(tier_idx)
        self._requests[access.request_id] = state

    def on_request_finished(self, access: RequestAccess) -> None:
        self.primary.on_request_finished(access)
        state = self._requests.get(access.request_id)
        if state is None:
            return
        state.is_finished = True
        self._maybe_finalize(access.request_id)

    def _maybe_finalize(self, request_id: str) -> None:
        state = self._requests[request_id]
        if not state.is_finished or state.pending_primary_stores or state.pending_cascade_keys:
            return
        for tier in self.tiers:
            tier.on_request_finished(state.access)
        self.load_sources.pop(request_id, None)
        del self._requests[request_id]

    def on_schedule_end(self) -> None:
        """The step's end: collect jobs, submit the step's promotions, retry parked cascades."""
        self._maybe_process_finished_jobs()
        self._processed_this_step = False
        self._flush_pending_promotions()
        for request_id, state in list(self._requests.items()):
            if not state.pending_cascade_keys:
                continue
            keys, state.pending_cascade_keys = state.pending_cascade_keys, []
            self._cascade_resident(keys, state)
            self._maybe_finalize(request_id)
        for tier in self.tiers:
            tier.on_schedule_end()

    def has_pending_work(self) -> bool:
        """Jobs in flight, parked cascades, or a tier's own work keep the engine stepping."""
        return (
            bool(self._jobs)
            or any(state.pending_cascade_keys for state in self._requests.values())
            or any(tier.has_pending_work() for tier in self.tiers)
        )

    def take_events(self) -> list[tuple[str, str, tuple[Hashable, ...]]]:
        """``(tier name, "stored" | "removed", keys)`` of every tier since the last call."""
        return [(tier.name, kind, keys) for tier in self.tiers for kind, keys in tier.take_events()]
