"""The connector seam between the scheduler and offload tiers, one model per vLLM release.

* :mod:`kvframe.offload.slots` -- vLLM 0.19.1's: the ``OffloadingConnector`` whose
  transfers are per-request lists each step, over a slot ledger ordered by an
  eviction plugin (``SlotOffloadManager``), with the reuse filter in front of it;
* :mod:`kvframe.offload.jobs` -- vLLM 0.33.0's (fidelity switch ``offload_jobs``):
  transfers as numbered jobs, over a request-scoped ledger that keeps the reuse
  filter inside and drives an eviction plugin's request-scoped form;
* :mod:`kvframe.offload.blocks`, :mod:`kvframe.offload.stats` -- what both share: the
  ledger's record of a block and the connector's counters.
"""
