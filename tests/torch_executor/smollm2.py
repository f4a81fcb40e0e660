"""The installed SmolLM2 file for tests, or a clean skip saying how to install it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvframe.executors.torch.models import ModelNotInstalledError, resolve_model

EXECUTOR = "torch:model=smollm2,dtype=float32"


def smollm2_path() -> Path:
    """The GGUF file; skips the test when the package or the ``model`` extra is absent."""
    pytest.importorskip("gguf", reason="the model extra (gguf) is not installed")
    pytest.importorskip("tokenizers", reason="the model extra (tokenizers) is not installed")
    try:
        return resolve_model("smollm2")
    except ModelNotInstalledError as err:
        pytest.skip(str(err))
