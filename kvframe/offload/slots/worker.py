"""The worker half of offloading, and the sim executor's model of the copies.

:class:`OffloadWorker` is vLLM 0.19's ``OffloadingConnectorWorker`` without the
tensors: it turns each step's
:class:`~kvframe.offload.slots.connector.OffloadConnectorMetadata`
into transfers on a :class:`~kvframe.contract.offload.TransferHandler` and
reports which requests' transfers are done. Its calls, in a step's order:

1. :meth:`OffloadWorker.start_step` -- submit the stores deferred from the
   previous step (their KV was written by that step), wait for the stores of
   requests preempted this step (their GPU blocks are about to be reused:
   vLLM's ``handle_preemptions``), then start this step's loads;
2. the model runs;
3. :meth:`OffloadWorker.end_step` -- defer this step's stores to the next
   step's start (vLLM: "so that offloading starts AFTER transfers related to
   token sampling"), then collect finished transfers into a
   :class:`~kvframe.core.scheduler_output.KVConnectorOutput`. A finished
   request is reported in ``finished_sending`` once all its stores landed
   (at once if it had stores and none is pending); a load in
   ``finished_recving`` when it lands.

:class:`SimTransferHandler` is the sim executor's handler: no bytes move; a
transfer of ``n`` bytes in ``k`` copies (``k`` from the cost model's block layout,
:mod:`kvframe.domain.transfers`) takes
:meth:`~kvframe.domain.costs.CostModel.transfer_time` on one of two copy
engines, host-to-device for loads and device-to-host for stores (a PCIe link
is full duplex and a GPU has a copy engine each way).
Each engine runs its transfers one after another in submission order, so a
transfer ends at ``max(submitted, engine free) + transfer_time(bytes)``.
Completion is observed at the end of a step (or when the engine's clock
jumps to it during an idle gap). Everything is deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kvframe.core.scheduler_output import KVConnectorOutput
from kvframe.domain.transfers import num_chunks

if TYPE_CHECKING:
    from kvframe.contract.offload import ConnectorSemantics, TransferHandler, TransferPricing
    from kvframe.domain.costs import CostModel
    from kvframe.offload.slots.connector import OffloadConnectorMetadata

__all__ = ["OffloadWorker", "SimTransferHandler"]


class OffloadWorker:
    """Runs the connector's transfer lists on a handler and reports finished requests."""

    def __init__(
        self, handler: TransferHandler, semantics: ConnectorSemantics | None = None
    ) -> None:
        self.handler = handler
        self.sync_loads = semantics is not None and not semantics.async_load
        self.blocking_stores = semantics is not None and semantics.blocking_store
        self._waited: set[int] = set()
        """Transfers already waited for (synchronous): not reported when they finish."""
        self._jobs: dict[int, tuple[str, bool]] = {}
        """transfer id -> (request id, is a store)."""
        self._load_job: dict[str, int] = {}
        self._store_jobs: dict[str, set[int]] = {}
        """Requests that ever had a store -> their pending store transfers."""
        self._unsubmitted_stores: list[tuple[str, list[tuple[int, int]]]] = []
        self._finished_waiting_for_store: set[str] = set()

    @property
    def busy(self) -> bool:
        """Transfers are pending, or a request's stores must still be reported."""
        return bool(self._jobs or self._unsubmitted_stores or self._store_jobs)

    @property
    def has_deferred_stores(self) -> bool:
        """Stores wait for the next step's start to be submitted. Never so after a step
        that scheduled nothing: its start submitted them, and it offers none itself."""
        return bool(self._unsubmitted_stores)

    def _submit_stores(self) -> None:
        start = self.handler.start_transfers
        jobs = self._jobs
        for request_id, pairs in self._unsubmitted_stores:
            job = start((), pairs)
            jobs[job] = (request_id, True)
            self._store_jobs[request_id].add(job)
        self._unsubmitted_stores.clear()

    def start_step(self, metadata: OffloadConnectorMetadata | None) -> None:
        """Before the forward pass: deferred stores, the preemption barrier, loads."""
        if self._unsubmitted_stores:
            self._submit_stores()
        if metadata is None:
            return
        if metadata.reqs_to_flush:
            pending: list[int] = []
            for request_id in sorted(metadata.reqs_to_flush):
                pending.extend(self._store_jobs.get(request_id, ()))
            if pending:
                self.handler.wait(pending)
        if self.sync_loads:
            self._run_now([spec.pairs() for spec in metadata.reqs_to_load.values()], ())
            return
        for request_id, spec in metadata.reqs_to_load.items():
            if request_id in self._load_job:
                raise RuntimeError(f"request {request_id!r} already has a load in flight")
            job = self.handler.start_transfers(spec.pairs(), ())
            self._jobs[job] = (request_id, False)
            self._load_job[request_id] = job

    def end_step(
        self, metadata: OffloadConnectorMetadata | None, finished_req_ids: Iterable[str]
    ) -> KVConnectorOutput:
        """After the forward pass: defer this step's stores, report finished transfers."""
        if metadata is not None and self.blocking_stores:
            self._run_now((), [spec.pairs() for spec in metadata.reqs_to_store.values()])
        elif metadata is not None:
            for request_id, spec in metadata.reqs_to_store.items():
                self._store_jobs.setdefault(request_id, set())
                self._unsubmitted_stores.append((request_id, spec.pairs()))
        output = KVConnectorOutput()
        sending = output.finished_sending
        waited = self._waited
        for job in self.handler.finished_transfers():
            if job in waited:
                waited.discard(job)
                continue
            request_id, is_store = self._jobs.pop(job)
            if is_store:
                jobs = self._store_jobs[request_id]
                jobs.discard(job)
                if jobs:
                    continue
                if request_id in self._finished_waiting_for_store:
                    self._finished_waiting_for_store.discard(request_id)
                    sending.add(request_id)
                    del self._store_jobs[request_id]
            else:
                del self._load_job[request_id]
                output.finished_recving.add(request_id)
        unsubmitted = {request_id for request_id, _ in self._unsubmitted_stores}
        for request_id in finished_req_ids:
            jobs = self._store_jobs.get(request_id)
            if jobs is None:
                continue
            if jobs or request_id in unsubmitted:
                self._finished_waiting_for_store.add(request_id)
            else:
                sending.add(request_id)
                del self._store_jobs[request_id]
        return output

    def _run_now(
        self, loads: Sequence[list[tuple[int, int]]], stores: Sequence[list[tuple[int, int]]]
    ) -> None:
        """Start these transfers (one per request) and wait until all have landed."""
        start = self.handler.start_transfers
        jobs = [start(pairs, ()) for pairs in loads if pairs]
        jobs += [start((), pairs) for pairs in stores if pairs]
        if jobs:
            self._waited.update(jobs)
            self.handler.wait(jobs)


class SimTransferHandler:
    """Transfers that take time on a cost model's link and move no bytes.

    :param cost_model: supplies ``transfer_time(bytes, chunks)`` (bandwidth,
        latency, per-copy cost) and the block layout that decides the chunks.
    :param gpu_block_bytes: bytes one (gpu block, host block) pair moves.
    :param num_layers: the model's layers (per-layer layouts copy each layer apart).
    :param pricing: the tier's own price of a transfer
        (:meth:`kvframe.OffloadSpec.transfer_pricing`); ``None``: the cost model's.
    """

    def __init__(
        self,
        cost_model: CostModel,
        gpu_block_bytes: int,
        num_layers: int = 1,
        pricing: TransferPricing | None = None,
    ) -> None:
        self.cost_model = cost_model
        self.pricing = pricing
        self.gpu_block_bytes = gpu_block_bytes
        self.num_layers = num_layers
        self.now = 0.0
        """The virtual time; the executor sets it at a step's start and end."""
        self._engine_free_at = [0.0, 0.0]
        """When the host-to-device (0) and device-to-host (1) engines are idle."""
        self._pending: list[tuple[float, int]] = []
        """Heap of (finish time, transfer id)."""
        self._finish: dict[int, float] = {}
        self._next_id = 0
        self.bytes_loaded = 0
        self.bytes_stored = 0
        self.num_loads = 0
        self.num_stores = 0
        self.transfer_time_s = 0.0
        """Sum of transfer durations (busy time of both engines)."""

    def register_kv_caches(self, kv_caches: Sequence[Any]) -> None:
        """Nothing to register: the sim has no tensors."""

    def start_transfers(
        self, loads: Sequence[tuple[int, int]], stores: Sequence[tuple[int, int]]
    ) -> int:
        finish = self.now
        for direction, pairs in ((0, loads), (1, stores)):
            if not pairs:
                continue
            num_bytes = len(pairs) * self.gpu_block_bytes
            if self.pricing is not None:
                duration = self.pricing.transfer_time(direction == 1, len(pairs), num_bytes)
            else:
                chunks = num_chunks(self.cost_model.transfer_layout, len(pairs), self.num_layers)
                duration = self.cost_model.transfer_time(num_bytes, chunks)
            end = max(self.now, self._engine_free_at[direction]) + duration
            self._engine_free_at[direction] = end
            finish = max(finish, end)
            self.transfer_time_s += duration
            if direction == 0:
                self.bytes_loaded += num_bytes
                self.num_loads += 1
            else:
                self.bytes_stored += num_bytes
                self.num_stores += 1
        job = self._next_id
        self._next_id += 1
        self._finish[job] = finish
        heapq.heappush(self._pending, (finish, job))
        return job

    def finished_transfers(self) -> list[int]:
        done: list[int] = []
        pending = self._pending
        now = self.now
        while pending and pending[0][0] <= now:
            done.append(heapq.heappop(pending)[1])
        for job in done:
            del self._finish[job]
        return done

    def wait(self, transfer_ids: Iterable[int]) -> None:
        """The step stalls until these are done: move the clock to the last one's end."""
        finish = self._finish
        self.now = max([self.now, *(finish[j] for j in transfer_ids if j in finish)])

    def next_completion(self) -> float:
        """When the earliest pending transfer ends (``inf`` if none)."""
        return self._pending[0][0] if self._pending else math.inf
