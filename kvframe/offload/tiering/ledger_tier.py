"""A simulated tier below DRAM: capacity, an eviction policy, a reuse filter, a link.

:class:`LedgerTier` keeps its chunks in a
:class:`~kvframe.offload.jobs.manager.RequestScopedOffloadManager` of its own --
the same ledger as the DRAM tier, so any eviction plugin's request-scoped form
and the ``threshold`` reuse filter work below DRAM unchanged -- and times its
copies on a :class:`~kvframe.offload.tiering.link.Link`. It stands for a local
disk, an object store, or (one link shared by every replica) a remote store.

Semantics, where vLLM 0.33.0's file-system tier decides the same (``fs/manager.py``):

* a chunk being written is not found (the file is written aside and renamed):
  ``lookup`` answers ``MISS`` until its store job has landed;
* a store skips chunks already present, evicts by the policy when the tier is
  full (chunks being read are not evictable), and fails whole when nothing can
  be evicted;
* a load copies its keys in order and stops at the first one the tier no longer
  has (evicted since the lookup): the ones before it succeed (``successful_keys``);
* a chunk whose load failed is dropped from the tier, so no lookup finds it
  again (the file-system tier marks it a miss: without that a request would
  promote, fail and promote again for ever, vLLM issue #49176).

Departures: vLLM's file-system tier has no capacity and never evicts (files
outlive the engine); an object store's eviction is the store's own business.
Here capacity and eviction are explicit so their cost can be measured.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING

import attrs

from kvframe.contract.request_scoped import RequestAccess
from kvframe.offload.jobs.manager import LookupResult
from kvframe.offload.tiering.base import JobResult, SecondaryTier

if TYPE_CHECKING:
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager
    from kvframe.offload.tiering.base import TierJob
    from kvframe.offload.tiering.link import Link

__all__ = ["LedgerTier"]


@attrs.define(slots=True, eq=False)
class _Flight:
    """A job in flight: the tier keys it holds, and when it lands."""

    job: TierJob
    keys: tuple[Hashable, ...]
    """Store: the keys this tier allocated. Load: the keys it pinned."""
    ok: bool
    """False: the job fails whole (no room, or an injected fault)."""
    partial: bool
    """A load that found only a prefix of its keys: those succeed, the rest fail."""
    submitted_at: float
    done_at: float | None
    forced: bool | None = None
    """The harness's verdict (``finish``), overriding the clock."""


class LedgerTier(SecondaryTier):
    """A tier of ``ledger.num_chunks`` chunks below DRAM.

    :param name: the tier's name in metrics and events (``disk``, ``store``).
    :param ledger: the tier's chunks, ordered by its eviction policy.
    :param link: the path its copies take; ``None`` with ``clock=None``: jobs
        land only when :meth:`finish` says so (tests and the differential).
    :param clock: the simulated time now, in seconds.
    :param chunk_bytes: bytes of one chunk.
    :param fault: ``fault(job)`` true makes that job fail (tests of failures).
    :param request_level: vLLM's ``OffloadPolicy.REQUEST_LEVEL``.
    :param loads: False: a *publish-only* tier -- the engine writes to it (for
        others, e.g. the other replicas of a fleet sharing it) but never loads
        from it (every lookup misses).
    """

    def __init__(
        self,
        name: str,
        ledger: RequestScopedOffloadManager,
        *,
        link: Link | None = None,
        clock: Callable[[], float] | None = None,
        chunk_bytes: int = 0,
        fault: Callable[[TierJob], bool] | None = None,
        request_level: bool = False,
        loads: bool = True,
    ) -> None:
        if (link is None) != (clock is None):
            raise ValueError(f"tier {name!r}: give both a link and a clock, or neither")
        self.name = name
        self.ledger = ledger
        self.link = link
        self.clock = clock
        self.chunk_bytes = chunk_bytes
        self.fault = fault
        self.request_level = request_level
        self.loads = loads
        self._accesses: dict[str, RequestAccess] = {}
        self._flights: dict[int, _Flight] = {}
        self._events: list[tuple[str, tuple[Hashable, ...]]] = []
        self.queued_s = 0.0
        """Seconds this front's copies waited for the link (others' copies on a shared one)."""

    def _access(self, access: RequestAccess) -> RequestAccess:
        """The tier's own context for the request (its ledger's policy state is its own)."""
        own = self._accesses.get(access.request_id)
        if own is None:
            own = self._accesses[access.request_id] = RequestAccess(
                access.request_id, access.positions
            )
            self.ledger.on_new_request(own)
        return own

    # -- SecondaryTier ---------------------------------------------------------------

    def on_new_request(self, access: RequestAccess) -> None:
        self._access(access)

    def lookup(self, key: Hashable, access: RequestAccess) -> LookupResult:
        if not self.loads:
            return LookupResult.MISS
        answer = self.ledger.lookup(key, self._access(access))
        return LookupResult.HIT if answer is LookupResult.HIT else LookupResult.MISS

    def submit_store(self, job: TierJob) -> None:
        result = self.ledger.prepare_store(job.keys, self._access(job.access))
        ok = result is not None and not (self.fault is not None and self.fault(job))
        keys = result.keys_to_store if result is not None else ()
        if result is not None and result.evicted_keys:
            self._events.append(("removed", result.evicted_keys))
        self._fly(job, keys, ok, partial=False)

    def _fly(self, job: TierJob, keys: tuple[Hashable, ...], ok: bool, *, partial: bool) -> None:
        now = self.clock() if self.clock is not None else 0.0
        done_at = None
        if self.link is not None:
            self.queued_s += max(0.0, self.link.busy_until - now)
            done_at = self.link.reserve(now, len(keys) * self.chunk_bytes)
        self._flights[job.job_id] = _Flight(job, keys, ok, partial, now, done_at)

    def submit_load(self, job: TierJob) -> None:
        own = self._access(job.access)
        pinned: list[Hashable] = []
        for key in job.keys:
            if self.ledger.lookup(key, own) is not LookupResult.HIT:
                break
            pinned.append(key)
        self.ledger.prepare_load(pinned, own)
        ok = not (self.fault is not None and self.fault(job))
        self._fly(job, tuple(pinned), ok, partial=len(pinned) < len(job.keys))

    def finish(self, job_id: int, success: bool = True) -> None:
        """Land ``job_id`` at the next :meth:`finished_jobs` (``success=False``: it fails)."""
        self._flights[job_id].forced = success

    def pending_job_ids(self) -> list[int]:
        """Jobs in flight not yet told to land, in submission order."""
        return [job_id for job_id, f in self._flights.items() if f.forced is None]

    def finished_jobs(self) -> Iterable[JobResult]:
        now = self.clock() if self.clock is not None else None
        done = [
            flight
            for flight in self._flights.values()
            if flight.forced is not None
            or (now is not None and flight.done_at is not None and flight.done_at <= now)
        ]
        return [self._land(flight) for flight in done]

    def _land(self, flight: _Flight) -> JobResult:
        del self._flights[flight.job.job_id]
        job = flight.job
        own = self._accesses.get(job.access.request_id) or RequestAccess(job.access.request_id)
        ok = flight.ok and flight.forced is not False
        nbytes = len(flight.keys) * self.chunk_bytes if ok else 0
        took = (flight.done_at - flight.submitted_at) if flight.done_at is not None else 0.0
        if job.is_promotion:
            self.ledger.complete_load(flight.keys, own)
            if not ok:
                dropped = self.ledger.discard(flight.keys)
                if dropped:
                    self._events.append(("removed", tuple(dropped)))
            if ok and flight.partial:
                return JobResult(job.job_id, False, flight.keys or None, nbytes, took)
            return JobResult(job.job_id, ok, None, nbytes, took)
        self.ledger.complete_store(flight.keys, own, ok)
        if ok and flight.keys:
            self._events.append(("stored", flight.keys))
        return JobResult(job.job_id, ok, None, nbytes, took)

    def has_pending_work(self) -> bool:
        return bool(self._flights)

    def next_landing(self) -> float:
        """When the earliest timed job in flight lands (``inf`` if none)."""
        times = [f.done_at for f in self._flights.values() if f.done_at is not None]
        return min(times, default=float("inf"))

    def on_request_finished(self, access: RequestAccess) -> None:
        own = self._accesses.pop(access.request_id, None)
        if own is not None:
            self.ledger.on_request_finished(own)

    def take_events(self) -> list[tuple[str, tuple[Hashable, ...]]]:
        events, self._events = self._events, []
        return events
