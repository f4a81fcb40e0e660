"""Which vLLM release the core decides like: one named switch per upstream change.

kvframe reproduces vLLM V1's scheduler step for step, but vLLM's decisions moved
between releases. A :class:`Fidelity` names the target release and holds one
boolean per behaviour that differs between the targets kvframe supports, so a
run can follow the vLLM a user deploys (``--vllm 0.33``) or the project's
reference (``--vllm 0.19.1``, the default), and ``kvframe compare`` can put
the two side by side.

Each switch is a small, named change of one rule in the core -- not a second
scheduler. The core reads the switches once, when it is built, into plain
attributes or locals, so a step pays nothing for them. ``docs/fidelity.md``
lists every switch with its upstream pull request and a workload that shows it.

This module is on the lowest floor (it imports nothing from kvframe) so that
the core's configuration and the engine's settings can both name it.
"""

from __future__ import annotations

import attrs

__all__ = ["DEFAULT_VLLM", "VLLM_TARGETS", "Fidelity", "fidelity_for"]


@attrs.frozen(slots=True, kw_only=True)
class Fidelity:
    """The behaviour switches of one vLLM release (``True``: the newer rule).

    Build one with :func:`fidelity_for`; the fields exist so that a test or an
    experiment can flip one switch alone and see what it changes.
    """

    vllm: str
    """The release these switches describe (``"0.19.1"``, ``"0.33.0"``)."""
    threshold_needs_company: bool = False
    """A. ``long_prefill_token_threshold`` caps a request's chunk only when more
    than one request is running or waiting: a lone request, starving nobody,
    takes the whole budget (vLLM PR #57951, since 0.31.0)."""
    self_preemption_continues: bool = False
    """B. Under a policy whose victim need not be the last running request
    (vLLM's ``priority``), a running request that preempts itself lets the loop
    go on to the running requests after it, which may still fit in the blocks
    it freed; 0.19.1 ended the running loop there (new in vLLM 0.33.0)."""
    uncached_freed_first: bool = False
    """D. A freed block without a hash (never findable by the prefix cache) goes
    to the *front* of the free queue, so it is reused before any cached block
    is evicted; with prefix caching off every freed block goes to the front
    (vLLM PR #42656, since 0.24.0; PR #51482, since 0.28.0)."""
    resumed_sent_as_new: bool = False
    """C. The worker is told of a request resumed from preemption as of a new one:
    in ``scheduled_new_reqs``, after the new requests, with its whole token list
    (``prefill_token_ids``) and block table; new requests carry
    ``prefill_token_ids`` and cached ones no ``all_token_ids``. That is how vLLM's
    Model Runner V2 reads a step (the default worker since 0.33, vLLM PRs #44443
    and #53183; opt-in with ``VLLM_USE_V2_MODEL_RUNNER=1`` in 0.19.1). What the
    worker is told, not a decision: kvframe's executors read resumed requests as
    cached ones under either value. The vLLM bridge sets it from the worker the
    vLLM config selects and sends the step accordingly
    (``kvframe_vllm.scheduler``)."""
    victim_cursor_by_position: bool = False
    """E. When a preemption victim sits before the running loop's cursor, the
    cursor moves back one whatever the victim was doing this step (vLLM PR
    #49206, fixing #49097, since 0.28.0). 0.19.1 moved it back only for a victim
    already scheduled this step, so removing an earlier victim that was skipped
    (under asynchronous scheduling: a request whose in-flight token reaches
    ``max_tokens``) made the loop skip the request after the current one for
    that step. Synchronous runs of vLLM's policies never have such a victim."""
    empty_step_keeps_queue: bool = False
    """Asynchronous scheduling, the engine's batch queue: after a step that
    schedules nothing while requests remain, with room in the queue, the engine
    core schedules again instead of first applying the output in flight
    (``model_executed or scheduler.has_requests()`` in 0.33.0's
    ``EngineCore.step_with_batch_queue``; 0.19.1 returned early only after a
    step that ran tokens). Read by :mod:`kvframe.engine.batch_queue`."""
    reserve_for_inflight_prefills: bool = False
    """T16. A request whose prefix a connector loads asynchronously is admitted
    only if its blocks fit in the free blocks less what the prefills in flight
    (mid-prefill, or waiting for their own load) still need for their whole
    sequence (``Scheduler._inflight_prefill_reserved_blocks`` in vLLM 0.33.0;
    upstream pull request not identified). Without a connector that loads
    asynchronously it changes nothing. The ``T`` rows of docs/fidelity.md are
    the offload tier's; this switch is also shown on its own, on a scripted
    connector (``tests/scheduler/test_inflight_reservation.py``)."""
    holding_queue_first: bool = False
    """T20. Waiting requests that hold KV blocks (an asynchronous load in flight or
    landed) wait in a queue of their own that is always looked at first (vLLM
    0.33.0's ``kv_holding_waiting``, under ``fcfs`` and ``priority`` alike); a
    request set aside for the step *without* blocks -- its connector lookup not
    ready, or a policy's ``may_admit`` refusing it -- goes back to the front of
    the waiting queue, behind any request preempted since. 0.19.1 kept both kinds
    in one skipped-waiting queue, looked at first under ``fcfs`` and compared
    head to head with the waiting queue under ``priority``. A policy with its
    own ``select_queue`` keeps choosing between the two queues. Upstream pull
    request not identified. Without a connector that defers or loads
    asynchronously, and without ``may_admit``, no request is ever set aside."""
    cached_tokens_at_admission: bool = False
    """T21. A request whose prefix a connector loads asynchronously reports as its
    cached tokens (``num_cached_tokens``, the first admission's prefix hit) what
    its admitting lookup found, local plus external, its last token included when
    the whole prompt was found (vLLM 0.33.0 sets ``Request.prefill_stats`` there;
    the field left the Request with PR #48860). 0.19.1 set ``num_cached_tokens``
    when the request first ran after its load, one token less after a full hit
    (the last token is recomputed). Accounting only: nothing scheduled changes."""
    offload_jobs: bool = False
    """T1-T12. An offload tier runs vLLM 0.33.0's ``OffloadingConnector``
    (:class:`kvframe.offload.jobs.connector.JobOffloadingConnector`) over 0.33.0's
    ``CPUOffloadingManager`` (:class:`kvframe.offload.jobs.manager.RequestScopedOffloadManager`)
    with the request-scoped forms of ``lru`` / ``arc``: transfers are numbered
    jobs completed one by one, a finished request frees its blocks at once and
    its last stores are fenced, only the prompt is offloaded, a lookup answers
    per key (a chunk still being written defers the request) and restarts the
    store cursor, recency is committed once per request at its finish (rows 1-12
    of docs/fidelity.md's tier table; vLLM PRs #43797 and #51787 among them).
    Off: 0.19.1's connector, ledger and policies. Read when the engine or the
    differential harness builds a tier."""
    defer_block_free: bool = False
    """T22. Asynchronous scheduling with an offload tier: a finished or preempted
    request's blocks that a step in flight may still write go back to the pool
    only when that step's output is applied (tail first, as at once), and the
    running loop stops rather than preempt a victim whose blocks could not be freed
    now (vLLM 0.33.0's ``Scheduler.defer_block_free``, set for ``max_concurrent_batches
    > 1`` and a KV-consumer connector: ``_free_request_blocks``,
    ``_request_blocks_can_be_freed``, ``_drain_deferred_frees``; upstream pull request
    not identified). Synchronous runs and runs without a connector never defer.
    :mod:`kvframe.core.deferred_frees`."""
    sessions_resume_from_frontier: bool = False
    """S. Streaming-input sessions (:mod:`kvframe.core.sessions`), vLLM 0.33.0's
    rules: a session that stops drops the work in flight (its computed tokens
    fall back to the known ones, the tokens in flight are discarded when they
    arrive) and resumes with every output token but the last sampled one and
    the new chunk's ``max_tokens``; a session waiting for input holds a
    sequence slot (``max_num_seqs``); a session resumed from its queued chunk
    when it stops rejoins the queue of requests holding blocks (kvframe's
    skipped-waiting queue, 0.33.0's block-holding queue under T20), not the
    waiting queue. 0.19.1 keeps the output
    tokens up to ``num_computed_tokens``, the first chunk's ``max_tokens``,
    the tokens in flight, and requeues such a session at the back of the
    waiting queue (``Scheduler._update_request_as_session`` in both)."""
    failed_load_keeps_external_count: bool = False
    """L. An asynchronous KV load that reports invalid blocks (a failed transfer,
    :mod:`kvframe.core.load_failures`) leaves the request's
    ``num_external_computed_tokens`` as it was; 0.19.1 lowered it by the tokens
    lost (``Scheduler._update_requests_with_invalid_blocks``; upstream pull request
    not identified). Accounting only: no decision reads it after a failure."""
    held_requests_keep_engine: bool = False
    """Finished requests whose blocks a transfer still holds (a prefill-side request
    waiting for its send, an aborted load still landing) count as requests the
    scheduler has (``has_requests``), so the engine keeps stepping until the
    transfer lands, and the batch queue schedules again after an empty step while
    one is held (vLLM 0.33.0's ``Scheduler.has_finished_requests``: "finished
    requests waiting on delayed connector cleanup"; upstream pull request not
    identified). 0.19.1 counted only the finished ids the next output reports."""
    groups_admission_cap: bool = False
    """G1. KV-cache groups (a hybrid model): the full-sequence admission check
    (``reserve_full_sequence``) counts a sliding-window or chunked-local group's
    blocks at most at what that group ever holds at once -- its window (or chunk)
    plus the tokens a step in flight may add, one block more for a window that
    straddles blocks (vLLM 0.33.0's ``max_admission_blocks_per_request``,
    ``apply_admission_cap=True``; upstream pull request not identified). 0.19.1
    asked for the whole sequence in every group, so a long prompt of a model with
    five sliding layers per full one needed six times its full-attention blocks
    free to be admitted. Read once by :mod:`kvframe.core.kv_cache_coordinator`."""
    groups_skip_processed_only: bool = False
    """G2. KV-cache groups under asynchronous scheduling: blocks leave a sliding window
    (or chunk) only for tokens whose step has been applied, the computed tokens less
    those in flight (vLLM 0.33.0's ``remove_skipped_blocks(processed_computed_tokens)``
    with ``Request.num_in_flight_tokens``; upstream pull request not identified).
    0.19.1 freed them for every computed token, in flight or not. Synchronous runs
    have no token in flight: the switch changes nothing there.
    :class:`kvframe.core.kv_cache_coordinator.InflightTokens`."""
    groups_mamba_caching_needs_align: bool = False
    """G3. A Mamba group with prefix caching on needs ``mamba_cache_mode="align"``: vLLM
    0.33.0 refuses ``"none"`` ("Mamba prefix caching requires mamba_cache_mode='align'"),
    and so does kvframe under it. 0.19.1 ran it, caching the attention groups while
    the Mamba group (one block of ``max_model_len``) never hits."""
    hybrid_kept_with_kv_events: bool = False
    """M1. KV events on (``--kv-events-config``; kvframe's fleets publish them) no longer
    turn vLLM's hybrid KV-cache manager off: a hybrid model keeps one group per layer
    kind. 0.19.1 disabled it ("Hybrid KV cache manager is not compatible with KV
    events", ``VllmConfig.__post_init__``), so a sliding-window or chunked model runs
    with every layer as full attention. Read by :mod:`kvframe.models.kv_groups`."""
    hybrid_kept_with_hma_connector: bool = False
    """M2. A KV connector that supports the hybrid manager (``SupportsHMA``: vLLM
    0.33.0's ``OffloadingConnector`` among them) leaves it on; 0.19.1 turned it off
    for any ``--kv-transfer-config`` unless asked not to. Read by
    :mod:`kvframe.models.kv_groups`."""
    mamba_block_aligned_to_block_size: bool = False
    """M3. A Mamba hybrid's attention block size is the smallest multiple of
    ``max(kernel block, block_size)`` whose page holds a Mamba state
    (``Platform._align_hybrid_block_size``); 0.19.1 took the smallest multiple of
    the kernel block (16), or of ``lcm(mamba chunk, 16)`` in Mamba cache mode "all"
    (``HybridAttentionMambaModelConfig``). Read by :mod:`kvframe.models.kv_groups`."""
    mamba_prefix_cache_align_only: bool = False
    """M4. Prefix caching on selects Mamba cache mode "align" for every Mamba model;
    0.19.1 selected "all" for models that support Mamba prefix caching
    (``MambaModelConfig.verify_and_update_config``). Read by
    :mod:`kvframe.models.kv_groups`."""


_TARGETS: dict[str, Fidelity] = {
    "0.19.1": Fidelity(vllm="0.19.1"),
    "0.33.0": Fidelity(
        vllm="0.33.0",
        threshold_needs_company=True,
        self_preemption_continues=True,
        uncached_freed_first=True,
        resumed_sent_as_new=True,
        victim_cursor_by_position=True,
        empty_step_keeps_queue=True,
        reserve_for_inflight_prefills=True,
        holding_queue_first=True,
        cached_tokens_at_admission=True,
        offload_jobs=True,
        defer_block_free=True,
        sessions_resume_from_frontier=True,
        failed_load_keeps_external_count=True,
        held_requests_keep_engine=True,
        groups_admission_cap=True,
        groups_skip_processed_only=True,
        groups_mamba_caching_needs_align=True,
        hybrid_kept_with_kv_events=True,
        hybrid_kept_with_hma_connector=True,
        mamba_block_aligned_to_block_size=True,
        mamba_prefix_cache_align_only=True,
    ),
}

VLLM_TARGETS: tuple[str, ...] = tuple(_TARGETS)
"""The releases a run can follow, oldest first."""

DEFAULT_VLLM = "0.19.1"
"""The default target: the release the differential harness proves kvframe
against on every workload, tier and async included (see docs/fidelity.md)."""

_ALIASES = {"0.19": "0.19.1", "0.33": "0.33.0"}


def fidelity_for(vllm: str | Fidelity) -> Fidelity:
    """The switches of release ``vllm`` (``"0.33"`` and ``"0.33.0"`` are the same).

    :raises ValueError: for a release kvframe has no switches for, naming the
        ones it has.
    """
    if isinstance(vllm, Fidelity):
        return vllm
    name = _ALIASES.get(str(vllm).strip(), str(vllm).strip())
    try:
        return _TARGETS[name]
    except KeyError:
        raise ValueError(
            f"unknown vLLM fidelity target {vllm!r}; kvframe follows "
            + " or ".join(VLLM_TARGETS)
            + " (0.33 is short for 0.33.0)"
        ) from None
