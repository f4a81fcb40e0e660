"""What the scheduler hands the executor each step, and what the executor hands back.

The split follows vLLM V1: a request scheduled for the first time (or resumed
after preemption, which the worker treats as new) carries its full data; a
request that was already running carries only what changed — its new block ids
and counters — because the worker keeps the rest from earlier steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs


@attrs.define(slots=True)
class NewRequestData:
    """A request the worker has not seen (or must rebuild): everything it needs."""

    req_id: str
    prompt_token_ids: Sequence[int]
    block_ids: list[int]
    num_computed_tokens: int


@attrs.define(slots=True)
class CachedRequestData:
    """Requests the worker already holds: parallel lists, one entry per request.

    ``new_block_ids[i]`` is ``None`` when request ``i`` got no new blocks.
    ``resumed_req_ids`` are requests re-admitted after preemption in this step;
    their ``new_block_ids`` entry holds their whole (new) block table.
    """

    req_ids: list[str] = attrs.Factory(list)
    resumed_req_ids: set[str] = attrs.Factory(set)
    new_block_ids: list[list[int] | None] = attrs.Factory(list)
    num_computed_tokens: list[int] = attrs.Factory(list)
    num_output_tokens: list[int] = attrs.Factory(list)

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)


@attrs.define(slots=True)
class PrefixHit:
    """Prefix-cache hits of one request at its first admission."""

    req_id: str
    num_prompt_tokens: int
    local_hit_tokens: int
    external_hit_tokens: int


@attrs.define(slots=True)
class SchedulerOutput:
    """One step's decision.

    ``num_scheduled_tokens`` is ordered as vLLM orders it: running requests in
    running order, then newly admitted ones in admission order.
    ``finished_req_ids`` are requests that finished *since the previous step*
    (the worker frees their state).
    """

    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]
    preempted_req_ids: set[str]
    finished_req_ids: set[str]
    first_admissions: list[PrefixHit] = attrs.Factory(list)
    """Requests admitted for the first time this step, with their prefix hits."""
    recomputed_tokens: dict[str, int] = attrs.Factory(dict)
    """Requests re-admitted after a preemption this step: tokens they had computed
    before it that the prefix cache did not give back (computed again)."""
    kv_connector_metadata: object | None = None


@attrs.define(slots=True)
class KVConnectorOutput:
    """Transfers the worker side of a connector finished during the step."""

    finished_sending: set[str] = attrs.Factory(set)
    finished_recving: set[str] = attrs.Factory(set)
    completed_jobs: list[int] = attrs.Factory(list)
    """Transfer jobs that landed, by id: vLLM 0.33.0's connector completes a job's
    chunks when it lands (``OffloadingWorkerMetadata.completed_jobs``); empty
    under 0.19.1's, which learns per request from the two sets above."""
    invalid_block_ids: set[int] = attrs.Factory(set)
    """GPU blocks an asynchronous load failed to fill (vLLM's ``invalid_block_ids``):
    the requests loading into them recompute from the first such block, or fail,
    by :attr:`SchedulerConfig.kv_load_failure_policy
    <kvframe.core.scheduler_config.SchedulerConfig.kv_load_failure_policy>`
    (:mod:`kvframe.core.load_failures`)."""


@attrs.define(slots=True)
class ModelRunnerOutput:
    """What the executor reports after running a step.

    ``sampled_token_ids`` maps a request id to the tokens it produced this step:
    empty or absent for a partial prefill chunk, one token normally, up to
    ``1 + accepted drafts`` with speculative decoding. ``draft_token_ids`` are
    the drafts proposed for the *next* step.
    """

    sampled_token_ids: Mapping[str, list[int]]
    draft_token_ids: Mapping[str, list[int]] | None = None
    kv_connector_output: KVConnectorOutput | None = None
