"""Where a request's blocks go when it leaves: freed, retained, or held for a transfer.

A request finishes by stopping (:meth:`Scheduler.update_from_output
<kvframe.core.scheduler.Scheduler.update_from_output>`) or from outside
(:meth:`FinishingPhase.finish_requests`: an abort, a stop string the front end
found). Its blocks then go back to the pool -- when the scheduler's
:class:`~kvframe.core.deferred_frees.FreeRule` says so -- unless something
still holds them:

* the policy, which may *retain* them until a deadline (``on_finish``;
  :mod:`kvframe.core.retention`), and releases them or lets them expire;
* an outbound store the connector started (freed when it lands), or an
  inbound load into an aborted request's blocks (freed when it lands).

The same holders decide when a waiting phase that cannot allocate may free
blocks: retained blocks the policy gives up (:meth:`FinishingPhase._reclaim_retained`),
or, in a real deadlock, the landed load of another waiting request
(:meth:`FinishingPhase._release_loaded_waiting`).

:class:`FinishingPhase` is a base class of the scheduler, as
:class:`~kvframe.core.admission.AdmissionPhase` is, for the same reason: it
works on the scheduler's queues and tables; the class annotations list them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kvframe.core.retention import Retention
from kvframe.domain.request import RequestStatus

if TYPE_CHECKING:
    from kvframe.contract.bases import SchedulingPolicy
    from kvframe.core.connector import SchedulerConnector
    from kvframe.core.deferred_frees import FreeRule
    from kvframe.core.inflight import InflightPrefills, NoReservation
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.core.load_failures import LoadFailures
    from kvframe.core.retention import RetentionTable
    from kvframe.core.scheduler_output import KVConnectorOutput
    from kvframe.core.scheduler_stats import SchedulerStats
    from kvframe.core.sessions import Sessions
    from kvframe.domain.queues import RequestQueue
    from kvframe.domain.request import Request

__all__ = ["FinishingPhase"]

_WAITING = RequestStatus.WAITING
_PREEMPTED = RequestStatus.PREEMPTED
_RUNNING = RequestStatus.RUNNING
_WAITING_FOR_REMOTE_KVS = RequestStatus.WAITING_FOR_REMOTE_KVS
_WAITING_FOR_INPUT = RequestStatus.WAITING_FOR_STREAMING_REQ


class FinishingPhase:
    """Finishing, retention and transfer holds of :class:`~kvframe.core.scheduler.Scheduler`."""

    # What this part uses of the scheduler (set in Scheduler.__init__).
    policy: SchedulingPolicy
    connector: SchedulerConnector | None
    kv_cache_manager: KVCacheManager
    stats: SchedulerStats
    block_size: int
    requests: dict[str, Request]
    running: list[Request]
    waiting: RequestQueue
    skipped_waiting: RequestQueue
    retained: RetentionTable
    sessions: Sessions
    finished_req_ids: set[str]
    _now: float
    _frees: FreeRule
    _inflight: InflightPrefills | NoReservation
    _awaiting_store: dict[str, Request]
    _awaiting_load: dict[str, Request]
    _finished_recving: set[str]
    _load_failures: LoadFailures
    _computed_before_preemption: dict[str, int]
    _lookup_recorded: set[str]

    def finish_requests(
        self,
        request_ids: str | Iterable[str] | None,
        finished_status: RequestStatus = RequestStatus.FINISHED_ABORTED,
    ) -> list[Request]:
        """Finish requests from outside (abort). ``None`` finishes every request.

        Unknown or already finished ids are ignored. Finishing a retained
        request releases its blocks; ``None`` releases every retention too.
        The policy hears of each request finished here: ``on_abort`` for the
        abort status, ``on_finish`` for any other (which may retain the
        request's blocks, except under ``None``). Returns the requests that
        were finished.
        """
        if not RequestStatus.is_finished(finished_status):
            raise ValueError(f"{finished_status!r} is not a finished status")
        if isinstance(request_ids, str):
            ids: Iterable[str] = (request_ids,)
        elif request_ids is None:
            ids = [*self.retained, *self.requests]
        else:
            ids = dict.fromkeys(request_ids)  # unique, in the caller's order
        valid = self._take_out(ids)
        for request in valid:
            self._finish_from_outside(request, finished_status, request_ids is not None)
        return valid

    def _take_out(self, ids: Iterable[str]) -> list[Request]:
        """Release the retentions among ``ids`` and take the live requests among them
        out of the queues; returns those requests, in ``ids`` order."""
        running_to_remove: set[Request] = set()
        waiting_to_remove: list[Request] = []
        valid: list[Request] = []
        for request_id in ids:
            if request_id in self.retained:
                self._release_retention(request_id)
                continue
            request = self.requests.get(request_id)
            if request is None or request.is_finished():
                continue
            valid.append(request)
            if request.status == _RUNNING:
                running_to_remove.add(request)
            else:
                if request.status == _WAITING_FOR_INPUT:
                    self.sessions.num_waiting_for_input -= 1
                waiting_to_remove.append(request)
        if running_to_remove:
            self.running = [r for r in self.running if r not in running_to_remove]
        if waiting_to_remove:
            self.waiting.remove_requests(waiting_to_remove)
            self.skipped_waiting.remove_requests(waiting_to_remove)
        return valid

    def _finish_from_outside(
        self, request: Request, finished_status: RequestStatus, may_retain: bool
    ) -> None:
        """Finish one request taken out by :meth:`_take_out` with ``finished_status``."""
        # An in-flight load still writes into the request's blocks: keep
        # them until the worker reports the load done.
        loading = (
            request.status == _WAITING_FOR_REMOTE_KVS
            and request.request_id not in self._finished_recving
        )
        self._finished_recving.discard(request.request_id)
        self._load_failures.forget(request.request_id)
        if request.resumable:
            self.sessions.forget(request.request_id)
        request.status = finished_status
        if finished_status == RequestStatus.FINISHED_ABORTED:
            self.stats.num_aborted += 1
        if loading:
            self._awaiting_load[request.request_id] = request
        if finished_status == RequestStatus.FINISHED_ABORTED:
            self._on_finished(request, allow_retention=False)
            self.policy.on_abort(request)
        else:  # e.g. a stop string the front end found: a normal finish
            self._on_finished(request, allow_retention=may_retain, notify=True)

    def _on_finished(
        self, request: Request, *, allow_retention: bool, notify: bool | None = None
    ) -> None:
        """A request reached a finished status: free, or hand its blocks to their holders.

        ``notify`` (default: ``allow_retention``) calls the policy's
        ``on_finish``; its deadline is honoured only with ``allow_retention``.
        """
        request_id = request.request_id
        self.finished_req_ids.add(request_id)
        del self.requests[request_id]
        self._computed_before_preemption.pop(request_id, None)
        self._lookup_recorded.discard(request_id)
        self._inflight.discard(request_id)
        if self.connector is not None and self.connector.request_finished(
            request, self.kv_cache_manager.get_block_ids(request_id)
        ):
            self._awaiting_store[request_id] = request
        if allow_retention if notify is None else notify:
            deadline = self.policy.on_finish(request)
            if allow_retention and deadline is not None and deadline > self._now:
                self.retained.add(Retention(request, float(deadline), self._now))
                self.stats.num_retentions += 1
        self._free_if_unheld(request)

    def _free_if_unheld(self, request: Request) -> None:
        """Free a finished request's blocks unless a retention or a transfer still holds them."""
        request_id = request.request_id
        if (
            request_id in self.retained
            or request_id in self._awaiting_store
            or request_id in self._awaiting_load
        ):
            return
        self._frees.free_finished(request)

    def _release_retention(self, request_id: str) -> None:
        retention = self.retained.pop(request_id)
        self.stats.num_retentions_released += 1
        self._free_if_unheld(retention.request)

    def _expire_retentions(self) -> None:
        if not self.retained:
            return
        for retention in self.retained.pop_expired(self._now):
            self.stats.num_retentions_expired += 1
            self._free_if_unheld(retention.request)

    def _reclaim_retained(self, request: Request, num_new_tokens: int, *, stalled: bool) -> bool:
        """An allocation failed while blocks are retained: release some if told to.

        The policy decides first. If it keeps everything but the engine would
        otherwise make no progress (nothing running, nothing scheduled), the
        core releases the retention with the earliest deadline: retention must
        never deadlock the engine.
        """
        before = len(self.retained)
        blocks_needed = max(
            1,
            -(-(request.num_computed_tokens + num_new_tokens) // self.block_size)
            - len(self.kv_cache_manager.get_blocks(request.request_id)),
        )
        if self.policy.reclaim_retained(blocks_needed) and len(self.retained) < before:
            return True
        if stalled:
            earliest = self.retained.earliest()
            if earliest is not None:
                self._release_retention(earliest.request.request_id)
                return True
        return False

    def _update_from_kv_transfers(self, output: KVConnectorOutput) -> None:
        if self.connector is not None:
            self.connector.update_connector_output(output)
        # Sorted: these are sets, and freeing order decides eviction order.
        for request_id in sorted(output.finished_recving):
            if request_id in self._awaiting_load:
                self._free_if_unheld(self._awaiting_load.pop(request_id))
            elif request_id in self.requests:
                self._finished_recving.add(request_id)
        for request_id in sorted(output.finished_sending):
            request = self._awaiting_store.pop(request_id, None)
            if request is not None:
                self._free_if_unheld(request)

    def _transfer_will_unblock(self, step_skipped: RequestQueue | None) -> bool:
        """Whether a transfer in flight will change what can be admitted once it lands.

        A finished (or aborted) request's blocks wait for its store (or load)
        to land and are freed then; a waiting request's load that has not
        landed (``step_skipped`` holds those started in this very step) will
        make it admissible. vLLM 0.19.1 then schedules nothing for a step and
        goes on, so the stall breaker must not fire: only with none of these
        in flight is the admission stall a real deadlock.
        """
        if self._awaiting_store or self._awaiting_load:
            return True
        landed = self._finished_recving
        queues = (self.skipped_waiting, self.waiting, step_skipped or ())
        return any(
            r.status == _WAITING_FOR_REMOTE_KVS and r.request_id not in landed
            for queue in queues
            for r in queue
        )

    def _release_loaded_waiting(self, request: Request) -> bool:
        """Free the blocks of another waiting request whose load landed; True if one was found.

        Requests whose connector load completed wait with blocks but are not
        running. If two of them each hold part of the pool and need more, and
        nothing runs and no transfer is in flight (:meth:`_transfer_will_unblock`),
        neither can ever be admitted (vLLM has the same deadlock). This is
        called only then: the most recently queued such
        request gives its blocks back and will look its prefix up again (the
        loaded blocks were cached, so it usually hits them). Requests whose load
        is still in flight are left alone: the worker is writing their blocks.
        """
        kv = self.kv_cache_manager
        for queue in (self.skipped_waiting, self.waiting):
            for holder in reversed(list(queue)):
                holder_id = holder.request_id
                landed = holder_id in self._finished_recving
                if (
                    holder is request
                    or (holder.status == _WAITING_FOR_REMOTE_KVS and not landed)
                    or holder.num_computed_tokens == 0
                    or not kv.get_blocks(holder_id)
                ):
                    continue
                if landed:
                    # Loaded but not yet promoted: make the loaded blocks findable
                    # before letting them go, as promotion would have.
                    self._finished_recving.discard(holder_id)
                    self._load_failures.forget(holder_id)
                    kv.cache_blocks(holder, holder.num_computed_tokens)
                    holder.status = _PREEMPTED if holder.num_preemptions else _WAITING
                kv.free(holder)
                self._inflight.discard(holder_id)  # back to plain waiting, no blocks
                holder.num_computed_tokens = 0
                holder.num_external_computed_tokens = 0
                self.stats.num_loaded_requests_released += 1
                return True
        return False
