"""Loading a Llama-architecture GGUF file (llama.cpp's format) as the torch executor's model.

GGUF holds the architecture as metadata (``llama.block_count``, ...), the
tokenizer (``tokenizer.ggml.*``) and every tensor, usually block-quantized.
The ``gguf`` package (the ``model`` extra) parses the file and dequantizes each
tensor to float32 numpy; this module checks and translates:

* **Everything is checked before anything is dequantized**: the magic, the
  architecture (``llama`` only), each tensor's name, shape and quantization
  type, and that every tensor's bytes lie inside the file (a truncated
  download is named as such). The reader itself fails on a truncated header
  with numpy reshape errors; those are re-raised as :class:`GGUFError`.
* **Names** are mapped to the Hugging Face names the model code uses
  (``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``).
* **Q and K rows are un-permuted.** llama.cpp rotates *adjacent* pairs of a
  head's dimensions (``x[2i], x[2i+1]``), Hugging Face's Llama rotates the
  two *halves* (``x[i], x[i + d/2]``, the ``rotate_half`` convention our
  model uses). llama.cpp's converter therefore reorders each head's rows of
  ``q_proj``/``k_proj`` from halves to interleaved pairs; :func:`unpermute_qk`
  undoes it, so the same attention code runs both formats. Getting this
  wrong still produces fluent-looking logits for position 0 only, so the
  transformers reference test (``tests/torch_executor/test_smollm2_reference.py``)
  is what proves it.

Dequantized tensors are cached per file (path, size, mtime) for the process,
so tests and calibration that build many engines read the file once.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from kvframe.executors.torch.model import LlamaConfig, expected_weight_shapes

__all__ = [
    "SUPPORTED_TYPES",
    "GGUFError",
    "GGUFModel",
    "load_gguf",
    "read_gguf",
    "unpermute_qk",
]

SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
"""Quantization types we dequantize (gguf's numpy code, checked by our tests)."""

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_INSTALL_HINT = "pip install 'kvframe[model]'"


class GGUFError(ValueError):
    """A GGUF file that cannot be loaded as a Llama model; the message names the file."""


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor name; ``None`` when it is not a Llama tensor."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
    return None


def unpermute_qk(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's reordering of a q/k projection's rows (see the module docstring).

    Within each head, GGUF row ``2i + j`` (pair ``i``, member ``j``) is Hugging
    Face row ``j * d/2 + i``.
    """
    rows = weight.shape[0]
    head_dim = rows // num_heads
    return (
        weight.reshape(num_heads, head_dim // 2, 2, *weight.shape[1:])
        .transpose(1, 2)
        .reshape(weight.shape)
    )


def _gguf_module() -> Any:
    try:
        import gguf
    except ImportError:
        raise GGUFError(
            f"reading GGUF files needs the gguf package, which is not installed: {_INSTALL_HINT}"
        ) from None
    return gguf


class GGUFModel:
    """A checked GGUF file: its config, tokenizer metadata and (not yet dequantized) tensors."""

    def __init__(self, path: Path, config: LlamaConfig, reader: Any, tensors: dict[str, Any]):
        self.path = path
        self.config = config
        self.reader = reader
        self.tensors = tensors
        """Hugging Face name -> the reader's tensor."""

    def field(self, key: str, default: Any = None) -> Any:
        """A metadata value (``tokenizer.ggml.tokens``, ...), decoded; ``default`` if absent."""
        field = self.reader.fields.get(key)
        return default if field is None else field.contents()


def read_gguf(path: str | Path) -> GGUFModel:
    """Parse and check ``path`` without dequantizing anything (cached per file).

    Parsing the metadata of a 100 MB file takes seconds (the vocabulary is
    tens of thousands of small fields), and the weights and the tokenizer
    both need it, hence the cache.

    :raises GGUFError: not a GGUF file, truncated, another architecture, an
        unsupported quantization type, a missing / unexpected / mis-shaped tensor.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise GGUFError(f"GGUF file {path} does not exist")
    stat = path.stat()
    return _read_cached(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _read_cached(path: Path, size: int, mtime_ns: int) -> GGUFModel:
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise GGUFError(f"{path}: not a GGUF file (it does not start with the bytes 'GGUF')")
    gguf = _gguf_module()
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OverflowError) as err:
        raise GGUFError(f"{path}: truncated or corrupt GGUF file ({err})") from None
    for tensor in reader.tensors:
        if tensor.data_offset + tensor.n_bytes > size:
            raise GGUFError(
                f"{path}: truncated GGUF file: tensor {tensor.name} needs bytes up to "
                f"{tensor.data_offset + tensor.n_bytes}, the file has {size}"
            )

    def meta(key: str, default: Any = None) -> Any:
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    arch = meta("general.architecture")
    if arch != "llama":
        raise GGUFError(
            f"{path}: general.architecture is {arch!r}; the torch executor runs only "
            "'llama' GGUF files"
        )
    config = _config(path, meta, {t.name for t in reader.tensors})
    expected = expected_weight_shapes(config)
    tensors: dict[str, Any] = {}
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            raise GGUFError(f"{path}: unexpected tensor {tensor.name} in a llama GGUF file")
        kind = tensor.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            raise GGUFError(
                f"{path}: tensor {tensor.name} is quantized as {kind}, which kvframe does not "
                f"dequantize; supported types: {', '.join(SUPPORTED_TYPES)}"
            )
        shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
        if name not in expected or shape != expected[name]:
            raise GGUFError(
                f"{path}: tensor {tensor.name} has shape {shape}, the metadata implies "
                f"{expected.get(name)}"
            )
        tensors[name] = tensor
    missing = [name for name in expected if name not in tensors]
    if missing:
        raise GGUFError(f"{path}: missing tensors {', '.join(missing[:5])}")
    return GGUFModel(path, config, reader, tensors)


def _config(path: Path, meta: Any, names: set[str]) -> LlamaConfig:
    """The architecture from ``llama.*`` metadata; fails on what the model does not implement."""
    required = {
        "hidden_size": "llama.embedding_length",
        "intermediate_size": "llama.feed_forward_length",
        "num_layers": "llama.block_count",
        "num_heads": "llama.attention.head_count",
    }
    missing = [key for key in required.values() if meta(key) is None]
    if missing:
        raise GGUFError(f"{path}: metadata lacks {', '.join(missing)}")
    kwargs: dict[str, Any] = {ours: int(meta(key)) for ours, key in required.items()}
    kwargs["num_kv_heads"] = int(meta("llama.attention.head_count_kv", kwargs["num_heads"]))
    tokens = meta("tokenizer.ggml.tokens")
    vocab = meta("llama.vocab_size", len(tokens) if tokens is not None else None)
    if vocab is None:
        raise GGUFError(f"{path}: metadata gives neither llama.vocab_size nor a vocabulary")
    kwargs["vocab_size"] = int(vocab)
    head_dim = int(meta("llama.attention.key_length", 0)) or (
        kwargs["hidden_size"] // kwargs["num_heads"]
    )
    kwargs["head_dim"] = head_dim
    rotary = meta("llama.rope.dimension_count")
    if rotary is not None and int(rotary) != head_dim:
        raise GGUFError(
            f"{path}: partial rotary embeddings (rope.dimension_count {rotary} of head_dim "
            f"{head_dim}) are not implemented"
        )
    scaling = meta("llama.rope.scaling.type")
    if scaling not in (None, "none"):
        raise GGUFError(f"{path}: rope scaling {scaling!r} is not implemented")
    for ours, key, kind in (
        ("rope_theta", "llama.rope.freq_base", float),
        ("rms_norm_eps", "llama.attention.layer_norm_rms_epsilon", float),
        ("max_position_embeddings", "llama.context_length", int),
    ):
        value = meta(key)
        if value is not None:
            kwargs[ours] = kind(value)
    kwargs["tie_word_embeddings"] = "output.weight" not in names
    eos = meta("tokenizer.ggml.eos_token_id")
    kwargs["eos_token_id"] = None if eos is None else int(eos)
    try:
        return LlamaConfig(**kwargs)
    except ValueError as err:
        raise GGUFError(f"{path}: {err}") from None


def dequantize(model: GGUFModel) -> dict[str, torch.Tensor]:
    """Every tensor as float32, Hugging Face-named, Q/K rows un-permuted."""
    gguf = _gguf_module()
    import numpy as np  # a dependency of gguf

    config = model.config
    weights: dict[str, torch.Tensor] = {}
    for name, tensor in model.tensors.items():
        # F32 tensors come back as read-only views of the memory map: copy.
        array = np.array(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float32)
        weight = torch.from_numpy(array).reshape(expected_weight_shapes(config)[name])
        if name.endswith("self_attn.q_proj.weight"):
            weight = unpermute_qk(weight, config.num_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            weight = unpermute_qk(weight, config.num_kv_heads)
        weights[name] = weight.contiguous()
    return weights


@functools.lru_cache(maxsize=2)
def _cached(path: str, size: int, mtime_ns: int) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    model = read_gguf(path)
    return model.config, dequantize(model)


def load_gguf(
    path: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """The config and weights of a Llama GGUF file, in ``dtype`` (cached per file).

    :raises GGUFError: see :func:`read_gguf`.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise GGUFError(f"GGUF file {path} does not exist")
    stat = path.stat()
    config, weights = _cached(str(path), stat.st_size, stat.st_mtime_ns)
    return config, {name: w.to(dtype) for name, w in weights.items()}
