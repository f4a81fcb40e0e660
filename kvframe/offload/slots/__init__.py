"""vLLM 0.19.1's offload model: per-step transfer lists over a slot ledger.

:mod:`~kvframe.offload.slots.connector` (``OffloadingConnector``, vLLM's
``OffloadingConnectorScheduler``), :mod:`~kvframe.offload.slots.manager`
(``SlotOffloadManager``, ``FilteredOffloadManager``) and
:mod:`~kvframe.offload.slots.worker` (``OffloadWorker``, ``SimTransferHandler``).
"""
