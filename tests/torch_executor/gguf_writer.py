"""Writing small Llama GGUF files for tests, the way llama.cpp's converter lays them out.

The Q/K row reordering here is written from llama.cpp's documented convention
(each head's two halves become interleaved pairs), independently of
:func:`kvframe.executors.torch.gguf_file.unpermute_qk`, so a test that writes
with this and loads with kvframe checks the two against each other.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kvframe.executors.torch.model import LlamaConfig

gguf = __import__("pytest").importorskip("gguf")
import numpy as np  # noqa: E402  (a dependency of gguf)

_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def halves_to_pairs(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """HF row order (per head: first half, second half) -> llama.cpp's (pairs ``2i, 2i+1``)."""
    d = weight.shape[0] // heads
    per_head = weight.reshape(heads, 2, d // 2, weight.shape[1])
    return per_head.permute(0, 2, 1, 3).reshape(weight.shape)


def gguf_name(hf: str) -> str:
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf in fixed:
        return fixed[hf]
    _, _, index, rest = hf.split(".", 3)
    return f"blk.{index}.{_LAYER[rest]}"


def write_llama_gguf(
    path: Path,
    config: LlamaConfig,
    weights: dict[str, torch.Tensor],
    *,
    arch: str = "llama",
    quantize: dict[str, str] | None = None,
) -> Path:
    """Write ``weights`` (HF names, float) as a llama GGUF; ``quantize`` maps HF names to types.

    A type gguf can quantize (``Q8_0``) is quantized for real; any other is
    written as zero bytes of the right size (enough for tests that must refuse it).
    """
    quantize = quantize or {}
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(config.num_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_heads)
    writer.add_head_count_kv(config.num_kv_heads)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_rope_dimension_count(config.head_dim)
    for name, tensor in weights.items():
        if name.endswith("q_proj.weight"):
            tensor = halves_to_pairs(tensor, config.num_heads)
        elif name.endswith("k_proj.weight"):
            tensor = halves_to_pairs(tensor, config.num_kv_heads)
        array = tensor.to(torch.float32).numpy()
        kind = quantize.get(name)
        if kind is None:
            writer.add_tensor(gguf_name(name), array)
            continue
        qtype = gguf.GGMLQuantizationType[kind]
        try:
            data = gguf.quants.quantize(array, qtype)
        except NotImplementedError:
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
            rows, cols = array.shape
            data = np.zeros((rows, cols // block * type_size), dtype=np.uint8)
        writer.add_tensor(gguf_name(name), data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
