"""vLLM 0.33.0's offload model: numbered transfer jobs over a request-scoped ledger.

:mod:`~kvframe.offload.jobs.connector` (``JobOffloadingConnector``),
:mod:`~kvframe.offload.jobs.manager` (``RequestScopedOffloadManager``, 0.33.0's
``CPUOffloadingManager``) and :mod:`~kvframe.offload.jobs.worker`
(``JobOffloadWorker``). Chosen under fidelity switch ``offload_jobs``
(``kvframe.engine.job_tier``).
"""
