"""The sim executor's cost model: how long a step and a KV transfer take.

The sim executor has no tensors; it advances a virtual clock by
:meth:`CostModel.step_time` per engine step and by :meth:`CostModel.transfer_time`
per offload transfer. A step is priced from five quantities of what it does
(prefill tokens, decode sequences, context tokens, prefill chunks, prefill
query-key pairs), in one of two *forms*:

``overlap`` (the derived presets since the H200 measurement)
    the structure of the hardware: a step runs the linear layers (compute
    ``per_prefill_token_s`` per token, prefill and decode alike, overlapped
    with streaming the weights once, ``weight_read_s``: their ``max``), then
    attention (compute ``per_prefill_pair_s`` per prefill query-key pair,
    overlapped with streaming the cached K and V, ``per_context_token_s`` per
    context token: their ``max``), plus fixed costs per step, per step with a
    prefill chunk and per decoding sequence. Kernels of one kind overlap their
    arithmetic with their memory traffic; kernels of different kinds run one
    after the other, so the two ``max`` terms add.

``additive`` (every result before it; still selectable)
    all terms added, the form of a roofline's two regimes glued together. It
    over-prices steps where compute and weight reads overlap (large decode
    batches, up to 1.5x on an H200) and, with ``per_prefill_pair_s`` 0 as in
    the derived presets before, under-prices prefill after a long cached
    context (0.42x-0.56x after 16k cached tokens).

Either form costs a few multiply-adds and at most two comparisons per step,
and its coefficients can be fitted to a real engine's step timings
(``kvframe calibrate``). Measured accuracy is in ``docs/cost-model.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import attrs

from kvframe.domain.transfers import check_layout

__all__ = [
    "COST_FORMS",
    "WINDOW_KINDS",
    "AttentionLayers",
    "CostModel",
    "ModelShape",
    "chunked_context",
    "chunked_prefill_pairs",
    "num_gpu_blocks_for",
    "prefill_pairs",
    "sliding_context",
    "sliding_prefill_pairs",
]

COST_FORMS = ("additive", "overlap")
"""The step-time forms :class:`CostModel` knows (see the module docstring)."""


def _positive(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


def _form(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    if value not in COST_FORMS:
        raise ValueError(f"form must be one of {', '.join(COST_FORMS)}, got {value!r}")


def _layout(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    check_layout(value)


def _non_negative(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def _check_windowed(value: tuple[tuple[Any, ...], ...]) -> None:
    for item in value:
        if len(item) != 4:
            raise ValueError(
                f"windowed: each entry is (kind, span, per_context_token_s, "
                f"per_prefill_pair_s), got {item!r}"
            )
        kind, span, context_s, pair_s = item
        if kind not in ("sliding_window", "chunked_local"):
            raise ValueError(
                f"windowed: kind must be sliding_window or chunked_local, got {kind!r}"
            )
        if not (isinstance(span, int) and span > 0):
            raise ValueError(f"windowed: span must be an integer > 0, got {span!r}")
        numbers = (context_s, pair_s)
        if not all(isinstance(x, int | float) and x >= 0 and math.isfinite(x) for x in numbers):
            raise ValueError(f"windowed: coefficients must be finite numbers >= 0, got {item!r}")


WINDOW_KINDS = ("sliding_window", "chunked_local")
"""The attention kinds whose reads do not grow with the context (:class:`AttentionLayers`)."""

_LAYER_KINDS = ("full", *WINDOW_KINDS, "state")


def _layer_kind(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    if value not in _LAYER_KINDS:
        raise ValueError(f"kind must be one of {', '.join(_LAYER_KINDS)}, got {value!r}")


@attrs.frozen(slots=True, kw_only=True)
class AttentionLayers:
    """The layers of one kind of a hybrid model, as the cost model prices them.

    ``full``: every cached token is read (the Llama presets' only kind);
    ``sliding_window``: at most the last ``span`` tokens; ``chunked_local``: only
    the tokens of the current ``span``-token chunk; ``state``: Mamba /
    linear-attention layers, a constant ``state_bytes`` per request read and
    written each step, whatever the context.
    """

    kind: str = attrs.field(validator=_layer_kind)
    num_layers: int = attrs.field(validator=_positive)
    kv_bytes_per_token: int = attrs.field(default=0, validator=_non_negative)
    """K and V of one token over these ``num_layers`` layers."""
    query_width: int = attrs.field(default=0, validator=_non_negative)
    """Query heads x head dim: a query-key pair costs ``4 x query_width`` FLOPs per layer."""
    span: int | None = None
    """The window (``sliding_window``) or chunk (``chunked_local``) in tokens."""
    state_bytes: int = attrs.field(default=0, validator=_non_negative)
    """``state``: one request's state over these layers."""

    def __attrs_post_init__(self) -> None:
        if self.kind in WINDOW_KINDS and not (self.span and self.span > 0):
            raise ValueError(f"{self.kind} layers need a span > 0, got {self.span!r}")


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
    active_params: int | None = None
    """Parameters one token's forward pass multiplies (a mixture of experts runs only
    its selected experts); ``None``: all of ``num_params``. Compute is priced by
    this, weight memory by ``num_params``."""
    layers: tuple[AttentionLayers, ...] = attrs.field(default=(), converter=tuple)
    """A hybrid model's layers by kind (:mod:`kvframe.models`); empty: every one of
    ``num_layers`` layers is full attention of ``num_kv_heads x head_dim`` (Llama)."""

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for one token in every layer: ``layers x kv_heads x head_dim x 2 x dtype``
        (a hybrid model: the sum over its attention layers of every kind)."""
        if self.layers:
            return sum(group.kv_bytes_per_token for group in self.layers)
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * self.dtype_bytes

    @property
    def compute_params(self) -> int:
        """The parameters compute is priced by: :attr:`active_params`, else all."""
        return self.num_params if self.active_params is None else self.active_params

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


def sliding_context(num_cached: int, window: int) -> int:
    """Cached tokens a sliding-window layer reads for the next token: at most the window."""
    return num_cached if num_cached < window else window


def chunked_context(num_cached: int, chunk: int) -> int:
    """Cached tokens a chunked-local layer reads for the next token: those of its chunk."""
    return num_cached % chunk


def _sliding_pairs_upto(num_tokens: int, window: int) -> int:
    """Query-key pairs of the first ``num_tokens`` positions under a ``window``."""
    if num_tokens <= window:
        return num_tokens * (num_tokens + 1) // 2
    return window * (window + 1) // 2 + (num_tokens - window) * window


def _chunked_pairs_upto(num_tokens: int, chunk: int) -> int:
    """Query-key pairs of the first ``num_tokens`` positions in ``chunk``-token chunks."""
    whole, rest = divmod(num_tokens, chunk)
    return whole * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2


def sliding_prefill_pairs(num_tokens: int, num_cached: int, window: int) -> int:
    """:func:`prefill_pairs` for a sliding-window layer: token ``p`` attends to
    ``min(p + 1, window)`` keys."""
    return _sliding_pairs_upto(num_cached + num_tokens, window) - _sliding_pairs_upto(
        num_cached, window
    )


def chunked_prefill_pairs(num_tokens: int, num_cached: int, chunk: int) -> int:
    """:func:`prefill_pairs` for a chunked-local layer: token ``p`` attends to the
    ``p mod chunk + 1`` keys of its own chunk."""
    return _chunked_pairs_upto(num_cached + num_tokens, chunk) - _chunked_pairs_upto(
        num_cached, chunk
    )


def prefill_pairs(num_tokens: int, num_cached: int) -> int:
    """Query-key pairs causal attention computes for a chunk of ``num_tokens``
    after ``num_cached`` tokens already in the KV cache: token ``i`` of the
    chunk attends to ``num_cached + i + 1`` keys, so
    ``num_tokens x num_cached + num_tokens x (num_tokens + 1) / 2``.
    """
    return num_tokens * num_cached + num_tokens * (num_tokens + 1) // 2


@attrs.frozen(slots=True, kw_only=True)
class CostModel:
    """Seconds per engine step and per KV transfer.

    All coefficients are in seconds (or bytes per second). What each step
    coefficient multiplies depends on :attr:`form` (module docstring; the
    formulas are in :meth:`step_time`). See :mod:`kvframe.executors.presets`
    for derived values and :doc:`/cost-model` for how to fit your own.
    """

    per_step_s: float = attrs.field(validator=_non_negative)
    """Paid by every step that runs a forward pass: kernel launches, scheduler
    and sampler overhead (``additive``: also the weight reads)."""
    per_prefill_token_s: float = attrs.field(validator=_non_negative)
    """``additive``: per token computed in a prompt chunk. ``overlap``: the
    linear layers' compute per token, prefill and decode tokens alike
    (``2 x params`` FLOPs at the achieved FLOP/s)."""
    per_decode_seq_s: float = attrs.field(validator=_non_negative)
    """``additive``: per request generating one token (its matmul FLOPs and
    sampling). ``overlap``: per request generating, its overhead only
    (sampling, output processing); its FLOPs are in ``per_prefill_token_s``."""
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
    :func:`prefill_pairs`). 0 in the ``additive`` derived presets."""
    form: str = attrs.field(default="additive", validator=_form)
    """``"additive"`` or ``"overlap"``: how the terms combine (module docstring)."""
    weight_read_s: float = attrs.field(default=0.0, validator=_non_negative)
    """``overlap`` only: streaming the weights once, the bandwidth side of the
    linear layers (``weight bytes / achieved HBM bandwidth``)."""
    per_prefill_step_s: float = attrs.field(default=0.0, validator=_non_negative)
    """``overlap`` only: paid once by a step with any prefill chunk, however
    many: such a step runs outside the full CUDA graph of a decode-only step
    (vLLM: piecewise graphs, attention eager), so it pays more launches."""
    transfer_per_chunk_s: float = attrs.field(default=0.0, validator=_non_negative)
    """Fixed cost of each separate copy in a transfer (one ``cudaMemcpyAsync``);
    how many copies a transfer takes follows from :attr:`transfer_layout`."""
    transfer_layout: str = attrs.field(default="contiguous", validator=_layout)
    """The KV block layout this model's transfers assume, one of
    :data:`kvframe.domain.transfers.BLOCK_LAYOUTS`."""
    windowed: tuple[tuple[str, int, float, float], ...] = attrs.field(
        default=(),
        converter=lambda value: tuple(tuple(item) for item in value),
        validator=lambda _i, _a, v: _check_windowed(v),
    )
    """A hybrid model's windowed attention layers, one ``(kind, span,
    per_context_token_s, per_prefill_pair_s)`` per kind (``sliding_window``:
    reads at most ``span`` cached tokens; ``chunked_local``: the cached tokens of
    its ``span``-token chunk). ``per_context_token_s`` and ``per_prefill_pair_s``
    above are then the full-attention layers' alone. Empty for a model whose
    every layer is full attention. Priced per request by :meth:`hybrid_attention`."""
    per_state_seq_s: float = attrs.field(default=0.0, validator=_non_negative)
    """Mamba / linear-attention layers: reading and writing one request's constant
    state, per scheduled request per step (no growth with the context)."""

    @property
    def is_hybrid(self) -> bool:
        """Whether steps need :meth:`hybrid_attention` (windowed layers or Mamba state)."""
        return bool(self.windowed) or self.per_state_seq_s > 0

    def hybrid_attention(self, spans: Iterable[tuple[int, int]]) -> tuple[float, float]:
        """Seconds of the windowed layers' attention and the Mamba state traffic for a
        step, one ``(num_cached, num_prefill)`` per scheduled request (its computed
        tokens before the step, and its prefill chunk's tokens, 0 for a request
        decoding): ``(compute, memory)``, the two sides :meth:`step_time` takes as
        ``extra_pair_s`` and ``extra_read_s``. As for full attention, pairs are
        priced for prefill chunks only and reads for every request."""
        pair_s = read_s = 0.0
        seqs = 0
        for num_cached, num_new in spans:
            seqs += 1
            for kind, span, context_s, pairs_s in self.windowed:
                if kind == "sliding_window":
                    read_s += context_s * sliding_context(num_cached, span)
                    pair_s += pairs_s * sliding_prefill_pairs(num_new, num_cached, span)
                else:
                    read_s += context_s * chunked_context(num_cached, span)
                    pair_s += pairs_s * chunked_prefill_pairs(num_new, num_cached, span)
        return pair_s, read_s + self.per_state_seq_s * seqs

    def step_time(
        self,
        num_prefill_tokens: int,
        num_decode_seqs: int,
        num_context_tokens: int,
        num_prefill_seqs: int = 0,
        num_prefill_pairs: int = 0,
    ) -> float:
        """Duration of one step.

        ``additive``::

            per_step_s + per_prefill_token_s x prefill + per_decode_seq_s x decode
            + per_context_token_s x context + per_prefill_seq_s x prefill_seqs
            + per_prefill_pair_s x pairs

        ``overlap``::

            per_step_s + per_prefill_step_s x (1 if prefill_seqs else 0)
            + per_prefill_seq_s x prefill_seqs + per_decode_seq_s x decode
            + max(per_prefill_token_s x (prefill + decode), weight_read_s)
            + max(per_prefill_pair_s x pairs, per_context_token_s x context)

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
        counts = (
            num_prefill_tokens,
            num_decode_seqs,
            num_context_tokens,
            num_prefill_seqs,
            num_prefill_pairs,
        )
        if self.form == "overlap":
            return self._overlap_step_time(*counts)
        return self._additive_step_time(*counts)

    def hybrid_step_time(
        self, counts: tuple[int, int, int, int, int], extra_pair_s: float, extra_read_s: float
    ) -> float:
        """:meth:`step_time` of a hybrid model: ``counts`` are step_time's five
        arguments, ``extra_pair_s`` / ``extra_read_s`` the windowed layers' compute and
        their reads plus the Mamba state traffic (:meth:`hybrid_attention`), added to the
        attention's two sides (``overlap``: inside its ``max``). A method of its own so
        that a full-attention model's :meth:`step_time` stays as it was."""
        prefill, decode, context, seqs, pairs = counts
        if prefill <= 0 and decode <= 0:
            return 0.0
        if self.form != "overlap":
            return self._additive_step_time(*counts) + extra_pair_s + extra_read_s
        linear = max(self.per_prefill_token_s * (prefill + decode), self.weight_read_s)
        attention = max(
            self.per_prefill_pair_s * pairs + extra_pair_s,
            self.per_context_token_s * context + extra_read_s,
        )
        return (
            self.per_step_s
            + (self.per_prefill_step_s if seqs > 0 else 0.0)
            + self.per_prefill_seq_s * seqs
            + self.per_decode_seq_s * decode
            + linear
            + attention
        )

    def _overlap_step_time(
        self, prefill: int, decode: int, context: int, seqs: int, pairs: int
    ) -> float:
        """:meth:`step_time` of the ``overlap`` form, for a step that schedules something
        (``prefill`` tokens, ``decode`` seqs, ``context`` tokens, prefill ``seqs``, ``pairs``)."""
        linear = self.per_prefill_token_s * (prefill + decode)
        if linear < self.weight_read_s:
            linear = self.weight_read_s
        attention = self.per_prefill_pair_s * pairs
        reads = self.per_context_token_s * context
        if attention < reads:
            attention = reads
        return (
            self.per_step_s
            + (self.per_prefill_step_s if seqs > 0 else 0.0)
            + self.per_prefill_seq_s * seqs
            + self.per_decode_seq_s * decode
            + linear
            + attention
        )

    def _additive_step_time(
        self, prefill: int, decode: int, context: int, seqs: int, pairs: int
    ) -> float:
        """:meth:`step_time` of the ``additive`` form, for a step that schedules something."""
        seconds = (
            self.per_step_s
            + self.per_prefill_token_s * prefill
            + self.per_decode_seq_s * decode
            + self.per_context_token_s * context
        )
        if self.per_prefill_seq_s or self.per_prefill_pair_s:
            # Only fitted models have these terms; skipping them otherwise keeps
            # the derived presets' arithmetic (hence every result) bit-identical.
            seconds += self.per_prefill_seq_s * seqs + self.per_prefill_pair_s * pairs
        return seconds

    def transfer_time(self, num_bytes: int, num_chunks: int = 1) -> float:
        """Duration of moving ``num_bytes`` between device and host in one batch
        of ``num_chunks`` separate copies (:func:`kvframe.domain.transfers.num_chunks`)."""
        if num_bytes <= 0:
            return 0.0
        seconds = self.transfer_latency_s + num_bytes / self.transfer_bytes_per_s
        if self.transfer_per_chunk_s:
            seconds += self.transfer_per_chunk_s * num_chunks
        return seconds
