"""What differs between the vLLM releases the bridge runs on: 0.19.1 and 0.33.0.

The scheduler bridge (:mod:`kvframe_vllm.scheduler`) is one class for both
releases; every place where vLLM's interface changed between them is answered
here, read once at import from the running vLLM's version, so the bridge's
per-step code calls a plain function and never tests a version string:

* **the fidelity target**: kvframe's core follows the running release's rules
  (``SchedulerConfig.fidelity``, ``docs/fidelity.md`` switches A, B, D), so
  the bridge makes the decisions of the vLLM it is loaded into;
* **construction**: 0.33's engine passes ``hash_block_size`` (the block size
  the request hasher uses); kvframe hashes whole scheduler blocks, so another
  value is refused;
* **resumed requests under Model Runner V2** (fidelity switch C,
  ``Fidelity.resumed_sent_as_new``, set from :func:`uses_v2_model_runner`: vLLM's
  default runner since 0.33, opt-in with ``VLLM_USE_V2_MODEL_RUNNER=1`` in
  0.19.1): a request resumed from preemption is sent in
  ``scheduled_new_reqs``, after the new ones, with its whole token list as
  ``prefill_token_ids`` and its whole block table; new requests carry
  ``prefill_token_ids`` too; ``all_token_ids`` of cached requests is not sent;
* **prefix-hit accounting**: 0.19.1 keeps ``Request.num_cached_tokens`` and
  puts it in every ``EngineCoreOutput``; 0.33 keeps a ``PrefillStats`` on the
  request, set at first admission, and hands it out once, with the request's
  first output (vLLM PR #48860);
* **scheduler stats**: 0.19.1's ``SchedulerStats`` has ``encoder_cache_usage``;
  0.33 dropped it and lists requests per KV-fetch stage (all at 0: the bridge
  fetches no KV) and counts deferred (skipped) waiting requests apart: the
  streaming-input sessions that waited for input since their last admission
  (:mod:`kvframe_vllm.sessions`);
* **streaming input**: kvframe's core follows the release's rules (fidelity
  switch S); vLLM's request takes each chunk through vLLM's own
  ``_update_request_as_session``, whichever release it is;
* **resetting a connector that is not there**
  (``reset_prefix_cache(reset_connector=True)`` with no KV connector, which
  0.33's pause and sleep always ask for): 0.19.1 warns and reports failure,
  0.33 treats it as a no-op success;
* **requests preempted by a reset** (``reset_prefix_cache`` with running
  requests): 0.33 lists them in the next step's ``preempted_req_ids``
  (its ``reset_preempted_req_ids``), 0.19.1 only the step's own preemptions;
* **prefix-cache lookup counters** (``SchedulerStats.prefix_cache_stats``):
  0.19.1 counts every lookup, 0.33 one per admission (first admission, or
  re-admission after a preemption);
* **tokens in flight when a reset preempts a running request** (async
  scheduling): 0.19.1 drops the request's next sampled token, whatever its
  step in flight was; 0.33 drops exactly its tokens in flight (none when that
  step was a partial prefill chunk);
* **the KV connector's scheduler calls** (``--kv-transfer-config`` with the
  OffloadingConnector): 0.33 also tells the connector of every new request,
  finishes a request through ``request_finished_all_groups`` with its status
  set, and hands it a block-state view while it builds its metadata
  (:mod:`kvframe_vllm.tier033`); 0.19.1's calls are :mod:`kvframe_vllm.tier`'s;
* **the cascade-attention hint** (``SchedulerOutput.num_common_prefix_blocks``):
  0.19.1 sends, per KV-cache group, the leading blocks of the first running
  request that every request holding blocks shares; 0.33 removed cascade
  attention and sends an empty list;
* **KV events** (``--kv-events-config``): 0.33's ``BlockStored`` also carries
  the KV-cache group (``group_idx``), its spec kind (``"full_attention"``) and
  sliding window, and the storing request's ``session_id``; its
  ``BlockRemoved`` the group. 0.19.1's events have none of these fields;
* **cache-creation tokens of a request that finishes with its first output**
  (0.33's ``PrefillStats.finalize``): 0.33 counts the blocks the request
  cached before it frees them, so the bridge notes them before kvframe's core
  frees the request (0.19.1 has no such count);
* **a streaming-input session's block hashes when it takes a chunk**: 0.33's
  ``_update_request_as_session`` drops the hashes past the tokens it keeps
  (``del session.block_hashes[keep_end // self.hash_block_size :]``); 0.19.1's
  keeps them, so a block filled by the discarded sampled token keeps that
  token's hash while it is computed with the chunk's -- vLLM 0.19.1 then caches
  it under a hash of tokens it does not hold, and a later prompt with the
  discarded token is served the chunk's KV. The bridge drops and recomputes
  them on 0.19.1 too (:func:`session_hashes_kept`; a documented departure,
  docs/vllm.md "Streaming input");
* **finish_requests** returns ``(request id, client index)`` pairs in 0.19.1,
  the vLLM ``Request`` objects in 0.33.

Only vLLM 0.19 and 0.33 are accepted: the bridge is checked step by step
against those two (``tools/differential --bridge``), and an interface it has
not been checked against is refused when the scheduler is built, naming the
supported releases, rather than half-working.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import vllm

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.request import Request

__all__ = [
    "INTERFACE_033",
    "SUPPORTED",
    "VLLM_VERSION",
    "cached_tokens_output",
    "common_prefix_blocks",
    "event_fields",
    "event_session_id",
    "fidelity_target",
    "finish_result",
    "lookups_counted_at_admission",
    "prefill_stats_pending",
    "record_first_admission",
    "reset_preemptions_reported",
    "reset_without_connector_succeeds",
    "session_hashes_kept",
    "stale_tokens_dropped",
    "stats_fields",
    "tier_connector",
    "uses_v2_model_runner",
]

VLLM_VERSION: str = vllm.__version__
"""The running vLLM's version string (``"0.33.0"``, ``"0.19.1+cpu"``)."""

SUPPORTED: dict[tuple[int, int], str] = {(0, 19): "0.19.1", (0, 33): "0.33.0"}
"""vLLM (major, minor) -> the kvframe fidelity target the bridge runs for it."""


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (-1, -1)


def fidelity_target(version: str = VLLM_VERSION) -> str | None:
    """kvframe's fidelity target for vLLM ``version``, or None when unsupported."""
    return SUPPORTED.get(_major_minor(version))


INTERFACE_033: bool = _major_minor(VLLM_VERSION) >= (0, 33)
"""The running vLLM has 0.33's scheduler interface (see the module docstring)."""


def unsupported_version_message(version: str = VLLM_VERSION) -> str | None:
    """Why the bridge refuses this vLLM, or None when it is supported."""
    if fidelity_target(version) is not None:
        return None
    return (
        f"kvframe-vllm supports vLLM 0.19.1 and 0.33.0, not vLLM {version}: install one "
        "of those (pip install vllm==0.33.0), or leave --scheduler-cls unset to run "
        "vLLM's own scheduler"
    )


def uses_v2_model_runner(vllm_config: VllmConfig) -> bool:
    """Whether the worker is vLLM's Model Runner V2 (it reads the step differently)."""
    if INTERFACE_033:
        return bool(vllm_config.use_v2_model_runner)
    import vllm.envs as envs

    return bool(envs.VLLM_USE_V2_MODEL_RUNNER)


def record_first_admission(request: Request, local_tokens: int, external_tokens: int) -> None:
    """Record a request's prefix hits at its first admission, where the release keeps them.

    0.19.1's ``num_cached_tokens`` is kept in step by the bridge every step; 0.33
    sets ``prefill_stats`` here once, as its scheduler does (only while the
    request has never been preempted and its stats were not yet handed out).
    """
    if not INTERFACE_033:
        return
    stats = request.prefill_stats
    if stats is not None and request.num_preemptions <= 0:
        stats.set(
            num_prompt_tokens=request.num_prompt_tokens,
            num_local_cached_tokens=local_tokens,
            num_external_cached_tokens=external_tokens,
        )


def cached_tokens_output(request: Request, cached_tokens: Callable[[str], int]) -> dict[str, Any]:
    """The ``EngineCoreOutput`` keywords carrying a request's prefix hits.

    ``cached_tokens(request_id)``: the tokens of the request now held in hashed
    blocks (0.33's ``estimate_cached_tokens``, which ``PrefillStats.finalize``
    turns into cache-creation tokens); called once per request, with its first
    output, under 0.33 only (it walks the request's block table).
    """
    if not INTERFACE_033:
        return {"num_cached_tokens": request.num_cached_tokens}
    stats = request.take_prefill_stats()
    if stats is not None:
        stats.finalize(cached_tokens(request.request_id))
    return {"prefill_stats": stats}


def _prefill_stats_pending_033(request: Request) -> bool:
    return request.prefill_stats is not None


def _no_prefill_stats(request: Request) -> bool:
    return False


prefill_stats_pending: Callable[[Request], bool] = (
    _prefill_stats_pending_033 if INTERFACE_033 else _no_prefill_stats
)
"""Whether ``request``'s first output will carry ``PrefillStats`` whose cache-creation
count reads its blocks (0.33; never under 0.19.1). Chosen once, at import."""


def _common_prefix_blocks_019(kv_cache_manager: Any, running: Sequence[Any]) -> list[int]:
    # vLLM 0.19.1's Scheduler.schedule: [0] per group with nothing running, else
    # get_num_common_prefix_blocks of the first running request (one group here).
    if not running:
        return [0]
    return [kv_cache_manager.get_num_common_prefix_blocks(running[0].request_id)]


def _no_common_prefix_blocks(kv_cache_manager: Any, running: Sequence[Any]) -> list[int]:
    return []  # 0.33: cascade attention removed, the field left at its default


common_prefix_blocks: Callable[[Any, Sequence[Any]], list[int]] = (
    _no_common_prefix_blocks if INTERFACE_033 else _common_prefix_blocks_019
)
"""``SchedulerOutput.num_common_prefix_blocks`` from kvframe's KV-cache manager and
its running requests after the step was scheduled. Chosen once, at import."""


def event_fields(kv_cache_config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keywords the running release adds to every ``BlockStored`` and
    ``BlockRemoved`` (one KV-cache group: group 0), read once when the bridge is built.

    0.33 annotates stored blocks with the group's spec kind and sliding window
    (``KVCacheManager.take_events``) and removed ones with the group; 0.19.1's
    events have no such fields.
    """
    if not INTERFACE_033:
        return {}, {}
    from vllm.v1.kv_cache_interface import (
        get_kv_cache_spec_kind,
        get_kv_cache_spec_sliding_window,
    )

    spec = kv_cache_config.kv_cache_groups[0].kv_cache_spec
    stored = {
        "group_idx": 0,
        "kv_cache_spec_kind": get_kv_cache_spec_kind(spec).value,
        "kv_cache_spec_sliding_window": get_kv_cache_spec_sliding_window(spec),
        "session_id": None,  # the storing request's: the ledger fills it per event
    }
    return stored, {"group_idx": 0}


def _session_id_033(request: Request) -> Any:
    return request.session_id


def _no_session_id(request: Request) -> Any:
    return None


event_session_id: Callable[[Request], Any] = _session_id_033 if INTERFACE_033 else _no_session_id
"""The ``session_id`` a ``BlockStored`` names: the storing request's (0.33; 0.19.1 has
no such field, and the ledger leaves it out). Chosen once, at import."""


def _rehash_past_kept(request: Request, kept_tokens: int, block_size: int) -> None:
    # What 0.33's _update_request_as_session does and 0.19.1's does not: the
    # hashes of blocks past the kept tokens go, and are computed again from the
    # session's tokens now (its new chunk in place of the discarded token).
    del request.block_hashes[kept_tokens // block_size :]
    request.update_block_hashes()


def _hashes_already_kept(request: Request, kept_tokens: int, block_size: int) -> None:
    return None  # 0.33 dropped them itself


session_hashes_kept: Callable[[Request, int, int], None] = (
    _hashes_already_kept if INTERFACE_033 else _rehash_past_kept
)
"""After vLLM's ``_update_request_as_session`` kept ``kept_tokens`` of a session's
tokens: make its block hashes those of its tokens (0.19.1 leaves the hash of a block
filled by the discarded sampled token). Chosen once, at import."""


def lookups_counted_at_admission() -> bool:
    """Whether the prefix-cache stats count a lookup per admission (0.33), not per call."""
    return INTERFACE_033


def reset_preemptions_reported() -> bool:
    """Whether the next step's ``preempted_req_ids`` lists a reset's preemptions (0.33)."""
    return INTERFACE_033


def reset_without_connector_succeeds() -> bool:
    """Whether ``reset_connector`` with no KV connector leaves the reset's result as is
    (0.33) rather than failing it (0.19.1)."""
    return INTERFACE_033


def stale_tokens_dropped(in_flight: int) -> int:
    """How many next sampled tokens a request drops when a reset preempts it with
    ``in_flight`` tokens in flight (async scheduling): 1 always (0.19.1), exactly
    ``in_flight`` (0.33)."""
    return in_flight if INTERFACE_033 else 1


def stats_fields(deferred: int = 0) -> dict[str, Any]:
    """The ``SchedulerStats`` keywords only one release has: 0.19.1's encoder usage,
    0.33's per-stage KV-fetch counts (every stage listed, at 0: nothing is fetched)
    and its skipped-waiting count (``deferred``: sessions waiting for input)."""
    if INTERFACE_033:
        from vllm.v1.metrics.stats import KV_FETCH_STAGES

        return {
            "num_kv_fetch_reqs_by_stage": dict.fromkeys(KV_FETCH_STAGES, 0),
            "num_skipped_waiting_reqs": deferred,
        }
    return {"encoder_cache_usage": 0.0}


def tier_connector(
    connector: Any, requests: dict[str, Request], block_ids: Callable[[str], list[int]]
) -> Any:
    """kvframe's view of vLLM's KV connector, making the running release's calls.

    ``requests``: the bridge's vLLM requests by id; ``block_ids(request_id)``:
    the request's block table in kvframe's core (0.33's block-state view).
    """
    if INTERFACE_033:
        from kvframe_vllm.tier033 import VllmConnector033

        return VllmConnector033(connector, requests, block_ids)
    from kvframe_vllm.tier import VllmConnector

    return VllmConnector(connector, requests)


def finish_result(requests: Sequence[Request]) -> list[Any]:
    """``finish_requests``' return value: ids and client indices, or the requests (0.33)."""
    if INTERFACE_033:
        return list(requests)
    return [(r.request_id, r.client_index) for r in requests]
