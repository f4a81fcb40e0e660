"""Loading Llama GGUF files: names, dequantization, the Q/K row order, and bad files.

Everything here uses small files written by :mod:`.gguf_writer`; the real
SmolLM2 file is tested in ``test_smollm2.py`` and against transformers in
``test_smollm2_reference.py``.
"""

from __future__ import annotations

import math

import attrs
import pytest
import torch

from kvframe.config import ConfigError
from kvframe.engine import Engine
from kvframe.engine.config import EngineConfig
from kvframe.executors.torch.checkpoint import save_checkpoint
from kvframe.executors.torch.gguf_file import GGUFError, load_gguf, read_gguf, unpermute_qk
from kvframe.executors.torch.model import MODEL_PRESETS, random_weights

from .gguf_writer import halves_to_pairs, write_llama_gguf
from .invariance import REFERENCE, run, shared_prefix_workload

CONFIG = MODEL_PRESETS["tiny"]


@pytest.fixture(scope="module")
def weights():
    return random_weights(CONFIG, seed=3, dtype=torch.float32)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, weights):
    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", CONFIG, weights)


def test_f32_file_loads_to_the_written_weights(tiny_gguf, weights):
    config, loaded = load_gguf(tiny_gguf)
    # GGUF stores the epsilon as float32.
    assert config.rms_norm_eps == pytest.approx(CONFIG.rms_norm_eps, rel=1e-6)
    assert attrs.evolve(config, rms_norm_eps=CONFIG.rms_norm_eps) == CONFIG
    assert sorted(loaded) == sorted(weights)
    for name, tensor in weights.items():
        assert torch.equal(loaded[name], tensor), name


def test_unpermute_inverts_the_converters_row_order():
    rows = torch.arange(4 * 8 * 3, dtype=torch.float32).reshape(4 * 8, 3)
    assert torch.equal(unpermute_qk(halves_to_pairs(rows, 4), 4), rows)
    # Pair i of a head in GGUF is rows (i, i + d/2) of Hugging Face's layout.
    assert halves_to_pairs(rows, 4)[:4, 0].tolist() == [0.0, 12.0, 3.0, 15.0]


def test_pair_rotation_on_gguf_rows_equals_half_rotation_on_hf_rows():
    """Why the rows are reordered: llama.cpp rotates adjacent pairs, Hugging Face halves.

    Projecting with the GGUF rows and rotating pairs gives the same vector as
    projecting with the Hugging Face rows and rotating halves, reordered -- so
    after :func:`unpermute_qk` our ``rotate_half`` model computes what llama.cpp does.
    """
    torch.manual_seed(0)
    heads, d, hidden, pos = 2, 8, 5, 7.0
    w_hf = torch.randn(heads * d, hidden, dtype=torch.float64)
    x = torch.randn(hidden, dtype=torch.float64)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    cos, sin = torch.cos(pos * inv), torch.sin(pos * inv)
    q = (w_hf @ x).view(heads, d)
    a, b = q[:, : d // 2], q[:, d // 2 :]
    halves = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    p = (halves_to_pairs(w_hf, heads) @ x).view(heads, d // 2, 2)
    pairs = torch.stack(
        [p[..., 0] * cos - p[..., 1] * sin, p[..., 1] * cos + p[..., 0] * sin], dim=-1
    )
    assert torch.allclose(
        pairs.reshape(heads, d), halves_to_pairs(halves.reshape(-1, 1), heads).view(heads, d)
    )


def test_gguf_and_safetensors_of_one_model_generate_the_same_tokens(tmp_path, tiny_gguf, weights):
    save_checkpoint(
        tmp_path / "ckpt",
        {
            "vocab_size": CONFIG.vocab_size,
            "hidden_size": CONFIG.hidden_size,
            "intermediate_size": CONFIG.intermediate_size,
            "num_hidden_layers": CONFIG.num_layers,
            "num_attention_heads": CONFIG.num_heads,
            "num_key_value_heads": CONFIG.num_kv_heads,
            "max_position_embeddings": CONFIG.max_position_embeddings,
        },
        weights,
    )
    specs = shared_prefix_workload(6, seed=2)
    from_gguf = run(specs, f"torch:model={tiny_gguf}", **REFERENCE)
    from_dir = run(specs, f"torch:checkpoint={tmp_path / 'ckpt'}", **REFERENCE)
    assert from_gguf.outputs == from_dir.outputs
    assert from_gguf.logits == from_dir.logits


def test_q8_0_tensors_are_dequantized(tmp_path, weights):
    path = write_llama_gguf(
        tmp_path / "q8.gguf",
        CONFIG,
        weights,
        quantize={"model.layers.0.mlp.up_proj.weight": "Q8_0"},
    )
    _, loaded = load_gguf(path)
    original = weights["model.layers.0.mlp.up_proj.weight"]
    error = (loaded["model.layers.0.mlp.up_proj.weight"] - original).abs().max().item()
    # Q8_0: 32 values share one scale, max|x| / 127; half a step is the worst rounding.
    assert 0 < error <= original.abs().max().item() / 127 / 2 * 1.01


def test_another_architecture_is_refused(tmp_path, weights):
    path = write_llama_gguf(tmp_path / "gpt2.gguf", CONFIG, weights, arch="gpt2")
    with pytest.raises(GGUFError) as err:
        read_gguf(path)
    assert str(err.value) == (
        f"{path}: general.architecture is 'gpt2'; the torch executor runs only 'llama' GGUF files"
    )


def test_unsupported_quantization_type_is_refused(tmp_path, weights):
    path = write_llama_gguf(
        tmp_path / "q81.gguf",
        CONFIG,
        weights,
        quantize={"model.layers.1.mlp.down_proj.weight": "Q8_1"},
    )
    with pytest.raises(GGUFError) as err:
        read_gguf(path)
    assert str(err.value) == (
        f"{path}: tensor blk.1.ffn_down.weight is quantized as Q8_1, which kvframe does not "
        "dequantize; supported types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1"
    )


@pytest.mark.parametrize("keep", [0.5, 0.02])
def test_truncated_file_is_refused(tmp_path, tiny_gguf, keep):
    data = tiny_gguf.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: math.floor(len(data) * keep)])
    with pytest.raises(GGUFError, match=r"^.*cut\.gguf: truncated"):
        read_gguf(path)


def test_not_a_gguf_file_is_refused(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(GGUFError) as err:
        read_gguf(path)
    assert str(err.value) == f"{path}: not a GGUF file (it does not start with the bytes 'GGUF')"


def test_engine_refuses_a_bad_file_before_any_work(tmp_path, weights):
    path = write_llama_gguf(tmp_path / "gpt2.gguf", CONFIG, weights, arch="gpt2")
    with pytest.raises(ConfigError) as err:
        Engine.from_config(EngineConfig(executor=f"torch:model={path}"))
    assert err.value.message == (
        f"{path.resolve()}: general.architecture is 'gpt2'; the torch executor runs only "
        "'llama' GGUF files"
    )
