"""Immutable records that the engine hands to tracers and that the block pool emits.

They are plain frozen attrs classes so that a tracer can keep them, serialise them
(``attrs.asdict``) or compare them without worrying that the engine will mutate
them later. Every record carries the engine step it belongs to and the virtual
time of that step, so a trace can be replayed in order.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from kvframe.domain.tokens import BlockHash

# --------------------------------------------------------------------------
# KV events: emitted by a KV tier (the GPU block pool or an offload tier) when
# a block becomes findable by hash or stops being findable.
# --------------------------------------------------------------------------


@attrs.frozen(slots=True)
class BlockStored:
    """Blocks became findable in a tier's prefix cache.

    ``parent_block_hash`` is the hash of the block preceding the first of
    ``block_hashes`` (``None`` for a prompt's first block), so a consumer can
    rebuild the radix tree the hashes form.
    """

    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    block_size: int
    medium: str = "GPU"
    group_idx: int | None = None
    """The KV-cache group the blocks belong to (a hybrid model's core sets it, as
    vLLM 0.33.0 does; ``None``: one group)."""
    kv_cache_spec_kind: str | None = None
    """The group's spec kind (``"sliding_window"``, ...), vLLM 0.33.0's field."""


@attrs.frozen(slots=True)
class BlockRemoved:
    """Blocks stopped being findable in a tier (evicted or reset)."""

    block_hashes: tuple[BlockHash, ...]
    medium: str = "GPU"
    group_idx: int | None = None
    """The KV-cache group the blocks belonged to (hybrid models; ``None``: one group)."""


@attrs.frozen(slots=True)
class AllBlocksCleared:
    """The tier's whole prefix cache was reset."""

    medium: str = "GPU"


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


# --------------------------------------------------------------------------
# Trace records: what the engine reports at its trace points.
# --------------------------------------------------------------------------


@attrs.frozen(slots=True)
class StepSnapshot:
    """State at the start of a step, before the scheduler decides anything."""

    step: int
    now: float
    num_waiting: int
    num_skipped_waiting: int
    num_running: int
    num_retained: int
    num_free_blocks: int
    num_cached_blocks: int
    kv_usage: float


@attrs.frozen(slots=True)
class PrefixCacheEvent:
    """One request's prefix-cache lookup, reported once at its first admission."""

    step: int
    now: float
    request_id: str
    num_prompt_tokens: int
    local_hit_tokens: int
    external_hit_tokens: int


@attrs.frozen(slots=True)
class StepDecision:
    """What the scheduler decided in one step."""

    step: int
    now: float
    num_scheduled_tokens: Mapping[str, int]
    new_request_ids: tuple[str, ...]
    resumed_request_ids: tuple[str, ...]
    preempted_request_ids: tuple[str, ...]
    finished_request_ids: tuple[str, ...]

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


@attrs.frozen(slots=True)
class RequestFinished:
    """A request left the engine (finished, length-capped or aborted)."""

    step: int
    now: float
    request_id: str
    status: str
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int
    num_preemptions: int
    arrival_time: float
    first_token_time: float | None
    finish_time: float
