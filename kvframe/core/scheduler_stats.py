"""The counters a scheduler keeps across steps (:attr:`Scheduler.stats
<kvframe.core.scheduler.Scheduler.stats>`), in a module of their own so that the
scheduler's phases (:mod:`kvframe.core.admission`, :mod:`kvframe.core.finishing`)
can name them without importing the scheduler."""

from __future__ import annotations

import attrs

__all__ = ["SchedulerStats"]


@attrs.define(slots=True)
class SchedulerStats:
    """Counters the scheduler keeps across steps (names follow vLLM's metrics).

    Prefix-cache queries and hits are counted once per admission, not once per
    step a request waits (vLLM's own stats count a waiting request again on
    every step it fails to be admitted).
    """

    num_steps: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    """Prompt tokens looked up at first admissions."""
    prefix_cache_hits: int = 0
    """Of those, tokens found in the GPU prefix cache."""
    connector_prefix_cache_queries: int = 0
    connector_prefix_cache_hits: int = 0
    """Tokens found in an offload tier beyond the GPU hit, at first admissions."""
    preempted_prefix_cache_queries: int = 0
    preempted_prefix_cache_hits: int = 0
    """Lookups and hits when preempted requests were re-admitted."""
    preempted_external_prefix_cache_hits: int = 0
    """Of those hits, tokens an offload tier supplied beyond the GPU hit (issue 50: a tier
    that only ever served preempted requests reported 0 hit tokens beside GiB loaded)."""
    num_recomputed_tokens: int = 0
    """Tokens computed before a preemption and computed again after it."""
    num_retentions: int = 0
    num_retentions_expired: int = 0
    num_retentions_released: int = 0
    num_aborted: int = 0
    num_loaded_requests_released: int = 0
    """Waiting requests whose loaded blocks were freed to break an admission stall."""
    num_failed_kv_loads: int = 0
    """Requests whose asynchronous KV load reported invalid blocks
    (:mod:`kvframe.core.load_failures`): recomputed or failed, by policy."""
    num_failed_kv_load_tokens: int = 0
    """Tokens those failed loads had promised and that must be recomputed (vLLM's
    ``total_affected_tokens``)."""
