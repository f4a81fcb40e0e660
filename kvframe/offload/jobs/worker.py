"""The worker half of offloading under vLLM 0.33.0: transfers run and reported as jobs.

:class:`JobOffloadWorker` is vLLM 0.33.0's ``OffloadingConnectorWorker``
without the tensors, the worker of
:class:`~kvframe.offload.jobs.connector.JobOffloadingConnector` (0.19.1's is
:class:`~kvframe.offload.slots.worker.OffloadWorker`). Its calls, in a step's order:

1. :meth:`JobOffloadWorker.start_step` -- ``handle_preemptions``: this step's
   flushed store jobs join the stores deferred from the previous step, all of
   them are submitted, and the flushed jobs are waited for (their source
   blocks are about to be rewritten); then ``start_kv_transfers``: this
   step's loads are submitted;
2. the model runs;
3. :meth:`JobOffloadWorker.end_step` -- ``prepare_store_kv``: the step's other
   store jobs are deferred to the next step's start; then every job that
   landed is reported by id in
   :attr:`~kvframe.core.scheduler_output.KVConnectorOutput.completed_jobs`,
   and a landed load's request in ``finished_recving``. A store never puts a
   request in ``finished_sending``: the connector fences a finished request's
   stores itself.

Any :class:`~kvframe.contract.offload.TransferHandler` runs the copies (the
sim executor's :class:`~kvframe.offload.slots.worker.SimTransferHandler`, or a
tier's own); the handler numbers its transfers, this class maps them to jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kvframe.core.scheduler_output import KVConnectorOutput

if TYPE_CHECKING:
    from kvframe.contract.offload import TransferHandler
    from kvframe.offload.jobs.connector import JobConnectorMetadata, TransferJob

__all__ = ["JobOffloadWorker"]


class JobOffloadWorker:
    """Runs a job connector's transfers on a handler and reports the jobs that landed."""

    def __init__(self, handler: TransferHandler) -> None:
        self.handler = handler
        self._jobs: dict[int, tuple[int, str | None]] = {}
        """handler transfer id -> (connector job id, request id for a load, else None)."""
        self._unsubmitted: list[tuple[int, TransferJob]] = []
        """Store jobs deferred to the next step's start, in job order."""

    @property
    def busy(self) -> bool:
        """Transfers are in flight or stores wait to be submitted."""
        return bool(self._jobs or self._unsubmitted)

    @property
    def has_deferred_stores(self) -> bool:
        """Store jobs wait for the next step's start to be submitted."""
        return bool(self._unsubmitted)

    def _submit_stores(self) -> list[int]:
        start = self.handler.start_transfers
        submitted = []
        for job_id, job in self._unsubmitted:
            transfer = start((), job.pairs())
            self._jobs[transfer] = (job_id, None)
            submitted.append(transfer)
        self._unsubmitted.clear()
        return submitted

    def start_step(self, metadata: JobConnectorMetadata | None) -> None:
        """Before the forward pass: flushed and deferred stores, the flush barrier, loads."""
        flush = metadata.jobs_to_flush if metadata is not None else set()
        if metadata is not None and flush:
            for job_id in sorted(flush):
                job = metadata.store_jobs.pop(job_id, None)
                if job is not None:
                    self._unsubmitted.append((job_id, job))
        if self._unsubmitted:
            self._submit_stores()
        if metadata is None:
            return
        if flush:
            pending = [t for t, (job_id, _) in self._jobs.items() if job_id in flush]
            if pending:
                self.handler.wait(pending)
        start = self.handler.start_transfers
        for job_id, job in metadata.load_jobs.items():
            self._jobs[start(job.pairs(), ())] = (job_id, job.request_id)

    def end_step(
        self, metadata: JobConnectorMetadata | None, finished_req_ids: Iterable[str] = ()
    ) -> KVConnectorOutput:
        """After the forward pass: defer this step's stores, report the jobs that landed.

        ``finished_req_ids`` is accepted for the executors' common call and unused:
        0.33.0's worker reports no request as finished sending.
        """
        if metadata is not None:
            self._unsubmitted.extend(metadata.store_jobs.items())
        output = KVConnectorOutput()
        landed: list[int] = []
        for transfer in self.handler.finished_transfers():
            job_id, load_of = self._jobs.pop(transfer)
            landed.append(job_id)
            if load_of is not None:
                output.finished_recving.add(load_of)
        output.completed_jobs = sorted(landed)
        return output
