"""The sim executor's cost model: how long a step and a KV transfer take.

The sim executor has no tensors; it advances a virtual clock by
:meth:`CostModel.step_time` per engine step and by :meth:`CostModel.transfer_time`
per offload transfer. The model is deliberately *linear* in four step
quantities, because

* it is what a roofline gives in the two regimes a serving step lives in
  (compute-bound prefill, bandwidth-bound decode), see :mod:`.presets`;
* its coefficients can be fitted by least squares to the per-step timings of a
  real vLLM server, so a user can calibrate it for their own hardware;
* it is cheap: a step costs a few multiply-adds.

Four terms are the roofline's (fixed, prefill tokens, decode sequences,
context tokens); the derived presets use only those. Two more default to 0
and are there for fitted models (``kvframe calibrate``): a cost per request
with a prefill chunk (per-request overhead that decodes already pay through
``per_decode_seq_s``), and a cost per query-key pair of prefill attention
(quadratic in the chunk, and ``chunk x cached`` after a prefix hit), which a
small model on a CPU does not hide behind its matmuls.

Its known bias: the terms add where the hardware overlaps them. In a step that
is both weight-read-bound and compute-heavy (a decode batch near the roofline
ridge, ~200-300 sequences on an H100) it overestimates by up to the smaller of
the two terms. Prefill attention's quadratic FLOPs are not modelled (about +20%
at 12k-token prompts for an 8B model, more for longer ones); the context term
models the memory-bound KV reads that dominate decode attention.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

__all__ = ["CostModel", "ModelShape", "num_gpu_blocks_for", "prefill_pairs"]


def _positive(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


def _non_negative(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


@attrs.frozen(slots=True, kw_only=True)
class ModelShape:
    """The parts of a model's architecture that decide its KV footprint and cost.

    Field names follow Hugging Face ``config.json`` meanings: ``num_layers`` is
    ``num_hidden_layers``, ``num_kv_heads`` is ``num_key_value_heads`` (GQA),
    ``head_dim`` is ``hidden_size / num_attention_heads`` unless the config says.
    """

    name: str
    num_layers: int = attrs.field(validator=_positive)
    num_kv_heads: int = attrs.field(validator=_positive)
    head_dim: int = attrs.field(validator=_positive)
    dtype_bytes: int = attrs.field(default=2, validator=_positive)
    """Bytes per KV cache element (2 for bf16/fp16, 1 for an fp8 KV cache)."""
    num_params: int = attrs.field(validator=_positive)
    weight_dtype_bytes: float = attrs.field(default=2, validator=_positive)
    """Bytes per weight (2 for bf16; 1 for fp8 weights)."""
    hidden_size: int | None = None
    """Needed only to cost tensor-parallel all-reduces."""

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for one token in every layer: ``layers x kv_heads x head_dim x 2 x dtype``."""
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * self.dtype_bytes

    def kv_bytes_per_block(self, block_size: int) -> int:
        """Bytes one paged KV block of ``block_size`` tokens occupies across all layers."""
        return block_size * self.kv_bytes_per_token

    @property
    def weight_bytes(self) -> float:
        return self.num_params * self.weight_dtype_bytes


def num_gpu_blocks_for(kv_memory_bytes: float, block_size: int, shape: ModelShape) -> int:
    """How many KV blocks fit in ``kv_memory_bytes``, as vLLM sizes its cache.

    vLLM divides the memory left for KV by the bytes of one block across all
    layers and floors; the count includes the null block (block 0), matching
    ``SchedulerConfig.num_gpu_blocks``. With tensor parallelism pass the memory
    of all GPUs together: each holds ``num_kv_heads / tp`` heads, so the ratio
    is the same as per GPU when the heads divide evenly.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if kv_memory_bytes < 0:
        raise ValueError(f"kv_memory_bytes must be >= 0, got {kv_memory_bytes}")
    return int(kv_memory_bytes // shape.kv_bytes_per_block(block_size))


def prefill_pairs(num_tokens: int, num_cached: int) -> int:
    """Query-key pairs causal attention computes for a chunk of ``num_tokens``
    after ``num_cached`` tokens already in the KV cache: token ``i`` of the
    chunk attends to ``num_cached + i + 1`` keys, so
    ``num_tokens x num_cached + num_tokens x (num_tokens + 1) / 2``.
    """
    return num_tokens * num_cached + num_tokens * (num_tokens + 1) // 2


@attrs.frozen(slots=True, kw_only=True)
class CostModel:
    """Seconds per engine step and per KV transfer, linear in what a step does.

    All coefficients are in seconds (or bytes per second). See :mod:`.presets`
    for derived values and ``docs/cost-model.md`` for how to fit your own.
    """

    per_step_s: float = attrs.field(validator=_non_negative)
    """Paid by every step that runs a forward pass: weight reads when decode is
    memory-bound, kernel launches, scheduler and sampler overhead."""
    per_prefill_token_s: float = attrs.field(validator=_non_negative)
    """Per token computed in a prompt chunk (compute-bound: ~2 x params FLOPs)."""
    per_decode_seq_s: float = attrs.field(validator=_non_negative)
    """Per request generating one token this step (its matmul FLOPs + sampling)."""
    per_context_token_s: float = attrs.field(validator=_non_negative)
    """Per already-cached token that the step's attention reads (KV bytes / HBM bandwidth)."""
    transfer_bytes_per_s: float = attrs.field(validator=_positive)
    """Device <-> host bandwidth for offload transfers (PCIe)."""
    transfer_latency_s: float = attrs.field(default=0.0, validator=_non_negative)
    """Fixed cost of one transfer batch (launch, synchronisation)."""
    per_prefill_seq_s: float = attrs.field(default=0.0, validator=_non_negative)
    """Per request with a prefill chunk this step (its per-request overhead:
    attention set-up, block-table gather). 0 in the derived presets."""
    per_prefill_pair_s: float = attrs.field(default=0.0, validator=_non_negative)
    """Per query-key pair that prefill attention computes (see
    :func:`prefill_pairs`). 0 in the derived presets."""

    def step_time(
        self,
        num_prefill_tokens: int,
        num_decode_seqs: int,
        num_context_tokens: int,
        num_prefill_seqs: int = 0,
        num_prefill_pairs: int = 0,
    ) -> float:
        """Duration of one step.

        :param num_prefill_tokens: tokens scheduled this step for requests still
            in their prompt (including resumed, recomputing requests), plus any
            speculative tokens beyond the first of a decoding request.
        :param num_decode_seqs: requests scheduled for one new token in decode.
        :param num_context_tokens: over all scheduled requests, the tokens
            already in the KV cache that attention reads (each request's
            ``num_computed_tokens`` before the step).
        :param num_prefill_seqs: requests with a prefill chunk this step.
        :param num_prefill_pairs: over those chunks, :func:`prefill_pairs`.
        :returns: seconds; 0.0 for a step that schedules nothing, since no
            forward pass runs (the engine then jumps to the next arrival).
        """
        if num_prefill_tokens <= 0 and num_decode_seqs <= 0:
            return 0.0
        seconds = (
            self.per_step_s
            + self.per_prefill_token_s * num_prefill_tokens
            + self.per_decode_seq_s * num_decode_seqs
            + self.per_context_token_s * num_context_tokens
        )
        if self.per_prefill_seq_s or self.per_prefill_pair_s:
            # Only fitted models have these terms; skipping them otherwise keeps
            # the derived presets' arithmetic (hence every result) bit-identical.
            seconds += (
                self.per_prefill_seq_s * num_prefill_seqs
                + self.per_prefill_pair_s * num_prefill_pairs
            )
        return seconds

    def transfer_time(self, num_bytes: int) -> float:
        """Duration of moving ``num_bytes`` between device and host in one batch."""
        if num_bytes <= 0:
            return 0.0
        return self.transfer_latency_s + num_bytes / self.transfer_bytes_per_s
