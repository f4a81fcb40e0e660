"""Read a Hugging Face ``config.json`` into a :class:`ModelArchitecture`.

The fields read, per family (vLLM reads the same ones to build its layers):

* every decoder: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
  ``num_key_value_heads`` (default: the attention heads), ``head_dim`` (default
  ``hidden_size / num_attention_heads``), ``intermediate_size``, ``vocab_size``,
  ``tie_word_embeddings``, ``torch_dtype``, ``max_position_embeddings``,
  ``attention_bias``; a multimodal config's ``text_config`` is read instead of
  the top level (the vision tower's parameters are left out);
* which layer is which: ``layer_types`` (``full_attention``,
  ``sliding_attention``, ``chunked_attention``, ``linear_attention``) where the
  config lists them (gpt-oss, Qwen3-Next, recent Gemma 3); otherwise
  ``sliding_window_pattern`` (Gemma 3: every N-th layer global),
  ``no_rope_layers`` / ``attention_chunk_size`` (Llama 4: the RoPE layers are
  chunked local, the NoPE ones global; default every 4th layer NoPE),
  ``full_attention_interval`` (Qwen3-Next), ``kv_lora_rank`` (MLA, DeepSeek);
  ``sliding_window`` and ``attention_chunk_size`` give the spans;
* mixture of experts: ``num_local_experts`` / ``num_experts`` /
  ``n_routed_experts``, ``num_experts_per_tok`` (``experts_per_token``),
  ``moe_intermediate_size`` (else ``intermediate_size``), shared experts
  (``shared_expert_intermediate_size``, ``n_shared_experts``, Llama 4's one),
  which layers are sparse (``interleave_moe_layer_step``, ``decoder_sparse_step``,
  ``mlp_only_layers``, ``first_k_dense_replace``), Llama 4's dense
  ``intermediate_size_mlp``;
* Mamba / linear-attention state (Qwen3-Next's gated delta net):
  ``linear_num_key_heads``, ``linear_num_value_heads``, ``linear_key_head_dim``,
  ``linear_value_head_dim``, ``linear_conv_kernel_dim`` -- the conv and recurrent
  state shapes of vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``;
* MLA: ``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``,
  ``v_head_dim``, ``q_lora_rank``;
* weights: ``quantization_config.quant_method`` ``mxfp4`` (gpt-oss: expert
  weights 4.25 bits each, 4-bit values and one 8-bit scale per 32) or ``fp8``.

Parameter counts are the decoder's linear layers, embeddings and norms; they
match the model cards' totals to within a percent (``tests/models``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvframe.models.architecture import LayerKind, ModelArchitecture
from kvframe.models.errors import ModelConfigError

__all__ = ["architecture_from_config"]

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
_LAYER_TYPES = {
    "full_attention": LayerKind.FULL,
    "sliding_attention": LayerKind.SLIDING,
    "chunked_attention": LayerKind.CHUNKED,
    "linear_attention": LayerKind.STATE,
    "mamba": LayerKind.STATE,
}
_MXFP4_BYTES = 4.25 / 8
"""MXFP4: 4-bit elements with one shared 8-bit scale per block of 32."""


class _Fields:
    """A config mapping that names the file and the field in every error."""

    def __init__(self, config: Mapping[str, Any], source: str) -> None:
        self.config = config
        self.source = source

    def error(self, field: str | None, problem: str) -> ModelConfigError:
        return ModelConfigError(self.source, field, problem)

    def int(self, field: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.config.get(field, default)
        if value is None:
            raise self.error(field, "missing (needed for the model shape)")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(field, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def opt_int(self, field: str, *, minimum: int = 1) -> int | None:
        if self.config.get(field) is None:
            return None
        return self.int(field, minimum=minimum)

    def first_int(self, fields: tuple[str, ...], default: int = 0) -> int:
        for field in fields:
            if self.config.get(field) is not None:
                return self.int(field, minimum=0)
        return default

    def list(self, field: str) -> list[Any] | None:
        value = self.config.get(field)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(field, f"must be a list, got {type(value).__name__}")
        return value


def architecture_from_config(
    config: Mapping[str, Any], *, name: str | None = None, source: str = "config.json"
) -> ModelArchitecture:
    """The architecture a Hugging Face ``config.json`` mapping describes.

    :param name: the model's name (default: ``_name_or_path`` or the model type).
    :param source: where the mapping came from, named in every error.
    :raises ModelConfigError: naming ``source`` and the field that is missing or wrong.
    """
    if not isinstance(config, Mapping):
        raise ModelConfigError(source, None, "a config.json must hold a JSON object")
    outer = _Fields(config, source)
    text = config.get("text_config")
    if text is not None and not isinstance(text, Mapping):
        raise outer.error("text_config", "must be a JSON object")
    fields = _Fields({**config, **text} if text else config, source)
    model_type = str(fields.config.get("model_type") or config.get("model_type") or "")
    if not model_type:
        raise fields.error("model_type", "missing (kvframe needs it to read the layers)")
    kinds = _layer_kinds(fields, model_type)
    hidden = fields.int("hidden_size")
    heads = fields.int("num_attention_heads")
    head_dim = fields.int("head_dim", hidden // heads)
    counts = _param_counts(fields, model_type, kinds, head_dim)
    dtype = str(fields.config.get("torch_dtype") or fields.config.get("dtype") or "bfloat16")
    if dtype not in _DTYPE_BYTES:
        raise fields.error("torch_dtype", f"unknown dtype {dtype!r} ({', '.join(_DTYPE_BYTES)})")
    state = _mamba_state(fields, dtype) if LayerKind.STATE in kinds else ((), ())
    mla = None
    if LayerKind.MLA in kinds:
        mla = fields.int("kv_lora_rank") + fields.int("qk_rope_head_dim")
    return ModelArchitecture(
        name=name or str(config.get("_name_or_path") or model_type),
        model_type=model_type,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=fields.int("num_key_value_heads", heads),
        head_dim=head_dim,
        layer_kinds=kinds,
        total_params=counts[0],
        active_params=counts[1],
        weight_bytes=_weight_bytes(fields, counts, _DTYPE_BYTES[dtype]),
        kv_dtype_bytes=_DTYPE_BYTES[dtype],
        sliding_window=fields.opt_int("sliding_window") if LayerKind.SLIDING in kinds else None,
        attention_chunk_size=(
            fields.int("attention_chunk_size") if LayerKind.CHUNKED in kinds else None
        ),
        mla_latent_dim=mla,
        mamba_state_shapes=state[0],
        mamba_state_dtype_bytes=state[1],
        mamba_type="gdn_attention" if model_type == "qwen3_next" else "mamba2",
        mamba_chunk_size=fields.opt_int("mamba_chunk_size") or fields.opt_int("chunk_size"),
        max_position_embeddings=fields.opt_int("max_position_embeddings"),
        source=source,
    )


# -- which layer is which ------------------------------------------------------


def _layer_kinds(fields: _Fields, model_type: str) -> tuple[str, ...]:
    """Every layer's kind, from ``layer_types`` or the family's own fields."""
    num_layers = fields.int("num_hidden_layers")
    listed = fields.list("layer_types")
    if listed is not None:
        if len(listed) != num_layers:
            raise fields.error(
                "layer_types", f"lists {len(listed)} layers, num_hidden_layers is {num_layers}"
            )
        unknown = sorted({str(kind) for kind in listed} - set(_LAYER_TYPES))
        if unknown:
            raise fields.error(
                "layer_types", f"unknown layer types {unknown} (known: {', '.join(_LAYER_TYPES)})"
            )
        return tuple(_LAYER_TYPES[kind] for kind in listed)
    if fields.config.get("kv_lora_rank") is not None:
        return (LayerKind.MLA,) * num_layers
    if model_type.startswith("llama4"):
        return _llama4_kinds(fields, num_layers)
    pattern = fields.opt_int("sliding_window_pattern")
    if pattern is not None and fields.config.get("sliding_window") is not None:
        return tuple(
            LayerKind.FULL if (i + 1) % pattern == 0 else LayerKind.SLIDING
            for i in range(num_layers)
        )
    interval = fields.opt_int("full_attention_interval")
    if interval is not None:
        return tuple(
            LayerKind.FULL if (i + 1) % interval == 0 else LayerKind.STATE
            for i in range(num_layers)
        )
    if fields.config.get("sliding_window") is not None and (
        fields.config.get("use_sliding_window") or model_type == "mistral"
    ):
        return (LayerKind.SLIDING,) * num_layers
    return (LayerKind.FULL,) * num_layers


def _llama4_kinds(fields: _Fields, num_layers: int) -> tuple[str, ...]:
    """Llama 4: RoPE layers are chunked local, NoPE layers (``no_rope_layers`` 0) global.

    vLLM's ``Llama4Attention``: ``is_no_rope_layer = no_rope_layers[i] == 0`` and
    chunked local attention on the others when ``attention_chunk_size`` is set;
    ``no_rope_layers`` empty or absent: every ``no_rope_layer_interval``-th (4th) NoPE.
    """
    if fields.config.get("attention_chunk_size") is None:
        return (LayerKind.FULL,) * num_layers
    flags = fields.list("no_rope_layers") or []
    if not flags:
        interval = fields.int("no_rope_layer_interval", 4)
        flags = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if len(flags) != num_layers:
        raise fields.error(
            "no_rope_layers", f"lists {len(flags)} layers, num_hidden_layers is {num_layers}"
        )
    return tuple(LayerKind.CHUNKED if flag else LayerKind.FULL for flag in flags)


def _mamba_state(
    fields: _Fields, dtype: str
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """Qwen3-Next's gated-delta-net state per layer: the conv state
    ``(kernel - 1, 2 x key_heads x key_dim + value_heads x value_dim)`` and the
    recurrent state ``(value_heads, value_dim, key_dim)``, both in the model's
    dtype (vLLM's ``mamba_ssm_cache_dtype`` "auto")."""
    key_heads = fields.int("linear_num_key_heads")
    value_heads = fields.int("linear_num_value_heads")
    key_dim = fields.int("linear_key_head_dim")
    value_dim = fields.int("linear_value_head_dim")
    kernel = fields.int("linear_conv_kernel_dim")
    conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
    size = _DTYPE_BYTES[dtype]
    return ((kernel - 1, conv_dim), (value_heads, value_dim, key_dim)), (size, size)


# -- parameters ------------------------------------------------------------------


def _attention_params(fields: _Fields, model_type: str, kind: str, head_dim: int) -> int:
    """One attention (or linear-attention) layer's projections, biases and norms."""
    hidden = fields.int("hidden_size")
    heads = fields.int("num_attention_heads")
    kv_heads = fields.int("num_key_value_heads", heads)
    if kind == LayerKind.STATE:
        nk, nv = fields.int("linear_num_key_heads"), fields.int("linear_num_value_heads")
        dk, dv = fields.int("linear_key_head_dim"), fields.int("linear_value_head_dim")
        conv_dim = 2 * nk * dk + nv * dv
        in_proj = hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv
        conv = conv_dim * fields.int("linear_conv_kernel_dim")
        return in_proj + conv + 2 * nv + dv + nv * dv * hidden
    if kind == LayerKind.MLA:
        rope, nope = fields.int("qk_rope_head_dim"), fields.int("qk_nope_head_dim")
        v_dim, kv_rank = fields.int("v_head_dim"), fields.int("kv_lora_rank")
        q_rank = fields.opt_int("q_lora_rank")
        q_out = heads * (nope + rope)
        query = hidden * q_out if q_rank is None else hidden * q_rank + q_rank + q_rank * q_out
        kv = hidden * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v_dim)
        return query + kv + heads * v_dim * hidden
    q_out = heads * head_dim * (2 if model_type == "qwen3_next" else 1)  # gated attention
    params = hidden * q_out + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    if fields.config.get("attention_bias") or model_type.startswith("qwen2"):
        params += q_out + 2 * kv_heads * head_dim
        if fields.config.get("attention_bias"):
            params += hidden
    if model_type == "gpt_oss":
        params += heads  # attention sinks
    if model_type.startswith(("qwen3", "gemma3")) or fields.config.get("use_qk_norm"):
        params += 2 * head_dim
    return params


def _num_experts(fields: _Fields) -> int:
    return fields.first_int(("num_local_experts", "num_experts", "n_routed_experts"))


def _is_sparse_layer(fields: _Fields, model_type: str, index: int) -> bool:
    """Whether layer ``index`` has routed experts (the families' own rules)."""
    if not _num_experts(fields):
        return False
    if model_type.startswith("llama4"):
        step = fields.int("interleave_moe_layer_step", 1)
        return (index + 1) % step == 0
    if index in (fields.list("mlp_only_layers") or []):
        return False
    if fields.config.get("first_k_dense_replace") is not None:
        return index >= fields.int("first_k_dense_replace", minimum=0)
    step = fields.int("decoder_sparse_step", 1)
    return (index + 1) % step == 0


def _mlp_params(fields: _Fields, model_type: str, index: int) -> tuple[int, int, int]:
    """One layer's MLP: ``(total, active, expert weights)`` parameters."""
    hidden = fields.int("hidden_size")
    if not _is_sparse_layer(fields, model_type, index):
        dense = fields.int("intermediate_size_mlp", fields.config.get("intermediate_size"))
        return 3 * hidden * dense, 3 * hidden * dense, 0
    experts = _num_experts(fields)
    top_k = fields.first_int(("num_experts_per_tok", "experts_per_token"), 1)
    inter = fields.int("moe_intermediate_size", fields.config.get("intermediate_size"))
    per_expert = 3 * hidden * inter
    biases = 2 * inter + hidden if model_type == "gpt_oss" else 0
    router = hidden * experts + (experts if model_type == "gpt_oss" else 0)
    shared = fields.first_int(("shared_expert_intermediate_size",))
    shared_params = 3 * hidden * shared + (hidden if shared else 0)
    if model_type.startswith("llama4"):
        shared_params = 3 * hidden * inter
    n_shared = fields.first_int(("n_shared_experts",))
    shared_params += n_shared * per_expert
    total = experts * (per_expert + biases) + router + shared_params
    active = top_k * (per_expert + biases) + router + shared_params
    return total, active, experts * per_expert


def _param_counts(
    fields: _Fields, model_type: str, kinds: tuple[str, ...], head_dim: int
) -> tuple[int, int, int]:
    """``(total, active, expert weights)`` parameters of the decoder."""
    hidden = fields.int("hidden_size")
    tied = fields.config.get("tie_word_embeddings", model_type.startswith("gemma"))
    embeddings = fields.int("vocab_size") * hidden * (1 if tied else 2)
    total = active = embeddings + hidden  # the final norm
    experts = 0
    for index, kind in enumerate(kinds):
        attention = _attention_params(fields, model_type, kind, head_dim) + 2 * hidden
        mlp_total, mlp_active, mlp_experts = _mlp_params(fields, model_type, index)
        total += attention + mlp_total
        active += attention + mlp_active
        experts += mlp_experts
    return total, active, experts


def _weight_bytes(fields: _Fields, counts: tuple[int, int, int], dtype_bytes: int) -> float:
    """Bytes of the weights: ``quantization_config`` decides the experts' (MXFP4) or
    every linear layer's (FP8) element size; the rest is the model's dtype."""
    total, _, experts = counts
    quant = fields.config.get("quantization_config") or {}
    if not isinstance(quant, Mapping):
        raise fields.error("quantization_config", "must be a JSON object")
    method = str(quant.get("quant_method") or "")
    if method == "mxfp4":
        return experts * _MXFP4_BYTES + (total - experts) * dtype_bytes
    if method == "fp8":
        embeddings = fields.int("vocab_size") * fields.int("hidden_size")
        return (total - embeddings) * 1 + embeddings * dtype_bytes
    if method:
        raise fields.error(
            "quantization_config", f"quant_method {method!r} is not known (mxfp4, fp8)"
        )
    return float(total * dtype_bytes)
