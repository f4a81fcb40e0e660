"""The torch executor's plumbing: checkpoints, bad input, the CLI files (calibration elsewhere)."""

from __future__ import annotations

import json

import pytest
import torch

from kvframe.cli import main
from kvframe.config import ConfigError
from kvframe.engine import Engine
from kvframe.engine.config import EngineConfig
from kvframe.executors.torch.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from kvframe.executors.torch.model import MODEL_PRESETS, random_weights
from kvframe.executors.torch.outputs import first_difference, read_outputs

from .invariance import REFERENCE, run, shared_prefix_workload

TINY_CONFIG_JSON = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
}


def tiny_checkpoint(path, *, drop=None, reshape=None):
    weights = random_weights(MODEL_PRESETS["tiny"], 1, torch.float64)
    if drop:
        del weights[drop]
    if reshape:
        weights[reshape] = weights[reshape][:-1]
    save_checkpoint(path, TINY_CONFIG_JSON, weights)
    return path


def test_checkpoint_runs_the_same_model_as_its_random_weights(tmp_path):
    specs = shared_prefix_workload(6)
    seeded = run(specs, **REFERENCE)
    directory = tiny_checkpoint(tmp_path / "ckpt")
    loaded = run(specs, executor=f"torch:checkpoint={directory},dtype=float64", **REFERENCE)
    assert first_difference(seeded.outputs, loaded.outputs) is None


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ({"drop": "model.layers.1.mlp.up_proj.weight"}, "missing tensors model.layers.1.mlp.up"),
        ({"reshape": "model.layers.0.self_attn.k_proj.weight"}, "has shape (31, 64)"),
    ],
)
def test_broken_checkpoint_is_refused_naming_the_tensor(tmp_path, damage, message):
    directory = tiny_checkpoint(tmp_path / "ckpt", **damage)
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_checkpoint(directory)
    with pytest.raises(ConfigError, match="tensor"):
        Engine.from_config(EngineConfig(executor=f"torch:checkpoint={directory}"))


@pytest.mark.parametrize(
    ("executor", "message"),
    [
        ("torch:dtype=float8", "unknown dtype 'float8'"),
        ("torch:device=tpu", "unknown device 'tpu'"),
        ("torch:presett=tiny", "did you mean 'preset'"),
        ("torhc", "did you mean 'torch'"),
        ("torch:preset=huge", "unknown model preset 'huge'"),
    ],
)
def test_bad_executor_options_fail_before_any_work(executor, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(executor=executor)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ConfigError, match="CUDA is not available"):
        Engine.from_config(EngineConfig(executor="torch:device=cuda"))


def test_kv_cache_that_cannot_fit_memory_is_refused():
    # The default tiny model: a billion of its 8 KiB blocks is ~7.5 TiB. (A 64-layer
    # model made the same point but drew 3 GiB of random weights first: 76 s, 3.5 GB.)
    with pytest.raises(ConfigError, match="does not fit"):
        Engine.from_config(EngineConfig(executor="torch", num_gpu_blocks=1_000_000_000))


def test_run_writes_outputs_and_outputs_diff_compares_them(tmp_path, capsys):
    trace = tmp_path / "trace.jsonl"
    with trace.open("w") as f:
        for spec in shared_prefix_workload(6):
            f.write(
                json.dumps(
                    {
                        "request_id": spec.request_id,
                        "prompt_token_ids": list(spec.prompt_token_ids),
                        "max_tokens": spec.max_tokens,
                        "arrival": spec.arrival_time,
                    }
                )
                + "\n"
            )
    base = ["run", str(trace), "--executor", "torch:dtype=float64", "--num-gpu-blocks", "64"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    assert main([*base, "--no-prefix-caching", "--out", str(tmp_path / "b")]) == 0
    outputs = read_outputs(tmp_path / "a")
    assert len(outputs) == 6 and all(outputs.values())
    # Random weights have no tokenizer: token ids only, no "text".
    first = json.loads((tmp_path / "a" / "outputs.jsonl").read_text().splitlines()[0])
    assert sorted(first) == ["output_token_ids", "request_id", "run_id"]
    steps = (tmp_path / "a" / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("step,prefill_tokens") and len(steps) > 1
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert metrics["counters"]["torch_forward_steps"] == len(steps) - 1
    capsys.readouterr()
    assert main(["outputs-diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "identical: 6 requests" in capsys.readouterr().out
    # Damage one token of b: the diff names the request and the token.
    path = tmp_path / "b" / "outputs.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[0])
    record["output_token_ids"][0] += 1
    lines[0] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    assert main(["outputs-diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert f"request {record['request_id']!r} differs at generated token 0" in out
