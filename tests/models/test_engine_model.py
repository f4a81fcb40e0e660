"""``--model`` through the engine config, the sim executor and ``kvframe analyze``."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import attrs
import pytest

from kvframe.cli.main import main
from kvframe.engine import Engine, EngineConfig
from kvframe.workloads import RequestSpec


def _spec(request_id: str, num_prompt: int, max_tokens: int) -> RequestSpec:
    base = 1000 * (zlib.crc32(request_id.encode()) % 100_000 + 1)
    prompt = [base + i for i in range(num_prompt)]
    return RequestSpec(request_id=request_id, prompt=prompt, max_tokens=max_tokens)


def test_hybrid_models_run_on_the_groups_or_are_refused_naming_them() -> None:
    """gpt-oss's two groups go to the core's hybrid coordinator; a Mamba hybrid whose
    groups the core does not model yet (Mamba prefix caching) is refused by name."""
    config = EngineConfig(model="gpt-oss-120b").scheduler_config()
    assert config.kv_cache_config is not None and config.is_hybrid
    assert config.num_gpu_blocks == config.kv_cache_config.num_blocks
    with pytest.raises(ValueError, match="MambaSpec"):
        EngineConfig(model="qwen3-next-80b-a3b", vllm="0.33")


def test_a_hybrid_model_vllm_runs_as_one_group_runs() -> None:
    """gpt-oss with KV events under 0.19.1 and Llama 4 Scout (chunked attention turns
    vLLM's hybrid manager off) have one group; the engine config builds."""
    config = EngineConfig(model="llama-4-scout")
    assert not config.kv_cache_config().is_hybrid
    assert config.preset_object.name == "llama-4-scout-4xh100"
    assert config.describe()["model"] == "llama-4-scout"
    events = EngineConfig(model="llama-3.1-8b").kv_cache_config(kv_events=True)
    assert not events.is_hybrid


def test_llama_by_model_is_the_default_preset() -> None:
    """--model llama-3.1-8b is the default preset itself: same pool, same cost model."""
    by_model, default = EngineConfig(model="llama-3.1-8b"), EngineConfig()
    assert by_model.preset_object is default.preset_object
    assert by_model.resolved_num_gpu_blocks() == default.resolved_num_gpu_blocks()
    assert "model" not in default.describe()


def test_a_bad_config_json_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 4}))
    with pytest.raises(ValueError, match=r"config.json: field 'hidden_size'"):
        EngineConfig(model=str(path))


def test_windowed_layers_make_long_contexts_cheaper() -> None:
    """Llama 4 Scout on its hardware, once with its chunked layers priced as chunked and
    once as if every layer read the whole context: long decodes cost less chunked."""
    config = EngineConfig(model="llama-4-scout", num_gpu_blocks=4000)
    specs = [_spec(f"r{i}", 12_000, 40) for i in range(4)]
    chunked = Engine.from_config(config).run(specs)
    engine = Engine.from_config(config)
    cost = engine.executor.cost_model  # 12 full layers, 36 chunked: as 48 full
    full = attrs.evolve(
        cost,
        windowed=(),
        per_context_token_s=cost.per_context_token_s * 4,
        per_prefill_pair_s=cost.per_prefill_pair_s * 4,
    )
    assert engine.executor.supports_decode_runs is False
    flat = Engine.from_config(config)
    flat.executor.cost_model = full
    flat.executor._hybrid = False
    as_full = flat.run(specs)
    assert (
        chunked.counters["simulated_duration_seconds"]
        < (as_full.counters["simulated_duration_seconds"])
    )
    assert chunked.counters["num_steps"] == as_full.counters["num_steps"]


def test_analyze_refuses_a_hybrid_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "mooncake:conversation", "--model", "gemma-3-27b", "--limit", "5"])
    assert code == 2
    err = capsys.readouterr().err
    assert "gemma-3-27b is a hybrid model" in err and "7 groups" in err
