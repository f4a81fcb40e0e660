"""Validated settings of the scheduler and its KV cache (vLLM's SchedulerConfig + CacheConfig)."""

from __future__ import annotations

import attrs

from kvframe.core.compiled import check_core
from kvframe.domain.fidelity import DEFAULT_VLLM, Fidelity, fidelity_for
from kvframe.domain.kv_cache_spec import KVCacheConfig


def _positive(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _non_negative(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp"})
"""vLLM's ``SpeculativeConfig.use_eagle()`` methods."""
SPECULATIVE_METHODS = frozenset({*EAGLE_METHODS, "draft_model", "ngram", "ngram_gpu", "suffix"})


@attrs.frozen(slots=True, kw_only=True)
class SchedulerConfig:
    """The knobs vLLM V1's scheduler reads, with vLLM's names and meanings.

    ``num_gpu_blocks`` counts the null block, as vLLM's ``num_blocks`` does, so
    ``num_gpu_blocks - 1`` blocks are usable by requests.
    """

    block_size: int = attrs.field(default=16, validator=_positive)
    num_gpu_blocks: int = attrs.field(validator=_positive)
    max_num_batched_tokens: int = attrs.field(default=8192, validator=_positive)
    """The per-step token budget shared by prefill and decode."""
    max_num_seqs: int = attrs.field(default=256, validator=_positive)
    """At most this many requests are RUNNING at once."""
    max_model_len: int = attrs.field(default=131072, validator=_positive)
    long_prefill_token_threshold: int = attrs.field(default=0, validator=_non_negative)
    """Cap on tokens one request gets per step (0: no cap), vLLM's chunking threshold."""
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    reserve_full_sequence: bool = True
    """Admit a waiting request only if blocks for all its current tokens (the whole
    prompt, not just the first chunk) are free now. vLLM's
    ``scheduler_reserve_full_isl``, on by default as in vLLM 0.19."""
    rollback_uncomputed_blocks: bool = False
    """Apply vLLM's PR #43569: when a request already scheduled in a step is preempted
    later in the same step, drop the prefix-cache registrations of the blocks whose
    tokens it was given but never computed. Off (vLLM 0.19.1's behaviour): those
    blocks stay cached and may be served as hits whose K/V was never written
    (counted as ``prefix_cache_uncomputed_hits``; :mod:`kvframe.core.uncomputed`)."""
    num_speculative_tokens: int = attrs.field(default=0, validator=_non_negative)
    """Draft tokens proposed per step for each running request."""
    speculative_method: str = attrs.field(
        default="draft_model", validator=attrs.validators.in_(SPECULATIVE_METHODS)
    )
    """vLLM's ``speculative_config.method``. It decides two things the scheduler
    sees: lookahead slots (``num_speculative_tokens`` per running request) are
    reserved only for methods that run a draft model on the KV cache (EAGLE
    variants and ``draft_model``; ngram and suffix get none), and EAGLE variants
    drop the last block of every prefix-cache hit (the drafter needs its hidden
    states recomputed)."""
    hash_seed: int = 0
    """Seed of the chained block hash root (vLLM's ``PYTHONHASHSEED`` role)."""
    enable_kv_cache_events: bool = False
    async_scheduling: bool = False
    """vLLM's asynchronous scheduling (``--async-scheduling``, vLLM's default in 0.19.1
    and 0.33.0): step N+1 is scheduled before step N's sampled tokens come back, so a
    request about to sample carries an output *placeholder* for its in-flight token
    (``Request.num_output_placeholders``), is scheduled on from it, and has its new
    blocks cached only when the token arrives. The core then decides as vLLM's
    ``AsyncScheduler`` does; the caller must apply each step's output one step late
    (:mod:`kvframe.engine.batch_queue`). See docs/fidelity.md."""
    kv_load_failure_policy: str = attrs.field(
        default="fail", validator=attrs.validators.in_(("fail", "recompute"))
    )
    """What a failed asynchronous KV load does (vLLM's ``KVTransferConfig.
    kv_load_failure_policy``, default ``"fail"`` in 0.19.1 and 0.33.0): ``"fail"``
    finishes the request with ``FINISHED_ERROR``; ``"recompute"`` keeps the valid
    prefix and recomputes from the first invalid block
    (:mod:`kvframe.core.load_failures`)."""
    fidelity: Fidelity = attrs.field(default=DEFAULT_VLLM, converter=fidelity_for)
    """The vLLM release whose rules the core follows (a :class:`Fidelity`, or a
    release name such as ``"0.33"``); see ``docs/fidelity.md``."""
    core: str = attrs.field(default="auto", validator=lambda _i, _a, v: check_core(v, "core"))
    """Which block pool runs: ``auto`` (the compiled core where built, else Python;
    ``KVFRAME_CORE`` decides when set), ``python`` or ``compiled``
    (:mod:`kvframe.core.compiled`). The decisions are the same either way."""

    kv_cache_config: KVCacheConfig | None = None
    """The model's KV-cache groups (:mod:`kvframe.domain.kv_cache_spec`); ``None``: one
    full-attention group of ``num_gpu_blocks`` blocks of ``block_size`` tokens. With
    several groups (a hybrid model: sliding window, chunked local attention, Mamba)
    the scheduler manages them as vLLM's ``HybridKVCacheCoordinator`` does
    (:mod:`kvframe.core.kv_cache_coordinator`); ``num_blocks`` must equal
    ``num_gpu_blocks``."""

    @property
    def is_hybrid(self) -> bool:
        """Several KV-cache groups (the hybrid coordinator), not the one-group path."""
        return self.kv_cache_config is not None and self.kv_cache_config.is_hybrid

    @property
    def use_eagle(self) -> bool:
        """Speculative decoding with an EAGLE-style drafter (drops the last hit block)."""
        return self.num_speculative_tokens > 0 and self.speculative_method in EAGLE_METHODS

    @property
    def num_lookahead_tokens(self) -> int:
        """Slots reserved per running request for drafts: vLLM's rule (EAGLE or draft model)."""
        if self.use_eagle or self.speculative_method == "draft_model":
            return self.num_speculative_tokens
        return 0

    def __attrs_post_init__(self) -> None:
        if self.num_gpu_blocks < 2:
            raise ValueError(
                "num_gpu_blocks must be >= 2 (block 0 is the null block), "
                f"got {self.num_gpu_blocks}"
            )
        if self.kv_cache_config is not None:
            self._check_kv_cache_config(self.kv_cache_config)
        if self.async_scheduling and self.num_speculative_tokens:
            raise ValueError(
                "async_scheduling with num_speculative_tokens > 0 is not modelled: vLLM's "
                "async scheduler takes draft tokens from the worker, which kvframe does not "
                "play; use synchronous scheduling with speculative decoding"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                "with chunked prefill disabled, max_num_batched_tokens "
                f"({self.max_num_batched_tokens}) must be >= max_model_len "
                f"({self.max_model_len}) or long prompts could never be scheduled"
            )

    def _check_kv_cache_config(self, kv: KVCacheConfig) -> None:
        """The groups must describe the pool this config sizes, and one group must be
        the full-attention path the rest of the config describes."""
        if kv.num_blocks != self.num_gpu_blocks:
            raise ValueError(
                f"kv_cache_config.num_blocks ({kv.num_blocks}) must equal num_gpu_blocks "
                f"({self.num_gpu_blocks}): both count the pool's blocks, null block included"
            )
        if not kv.is_hybrid:
            spec = kv.groups[0].spec
            if spec.kind != "full_attention" or spec.block_size != self.block_size:
                raise ValueError(
                    f"kv_cache_config: a single group must be full attention with block_size "
                    f"{self.block_size} (got {type(spec).__name__}, block_size "
                    f"{spec.block_size}); one sliding-window or Mamba group is not modelled"
                )
        elif self.rollback_uncomputed_blocks:
            raise ValueError(
                "rollback_uncomputed_blocks is not modelled for KV-cache groups (kv_cache_config "
                "with several groups)"
            )
