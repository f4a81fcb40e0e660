"""The bundled model shapes (``--model NAME``) and user files (``--model-config PATH``).

Each preset is an excerpt of the model card's ``config.json`` -- the fields
kvframe reads, nothing else -- shipped as package data under
``kvframe/data/models/`` with the card it came from in its ``_source`` field,
and read by the same :func:`~kvframe.models.hf_config.architecture_from_config`
that reads a user's file, so a preset is a config.json a user could have given.
"""

from __future__ import annotations

import difflib
import functools
import json
from pathlib import Path

from kvframe.models.architecture import ModelArchitecture
from kvframe.models.errors import ModelConfigError
from kvframe.models.hf_config import architecture_from_config

__all__ = ["MODELS_DIR", "MODEL_NAMES", "load_model", "load_model_config", "model_names"]

MODELS_DIR = Path(__file__).resolve().parents[1] / "data" / "models"

MODEL_NAMES: dict[str, str] = {
    "llama-3.1-8b": "llama-3.1-8b.json",
    "gpt-oss-20b": "gpt-oss-20b.json",
    "gpt-oss-120b": "gpt-oss-120b.json",
    "gemma-3-27b": "gemma-3-27b.json",
    "llama-4-scout": "llama-4-scout-17b-16e.json",
    "qwen3-next-80b-a3b": "qwen3-next-80b-a3b.json",
}
"""Preset name -> bundled config.json excerpt."""

_ALIASES = {
    "llama-4-scout-17b-16e": "llama-4-scout",
    "gemma-3-27b-it": "gemma-3-27b",
    "qwen3-next": "qwen3-next-80b-a3b",
    "qwen3-next-80b-a3b-instruct": "qwen3-next-80b-a3b",
}


def model_names() -> list[str]:
    return list(MODEL_NAMES)


def load_model_config(path: str | Path, *, name: str | None = None) -> ModelArchitecture:
    """The architecture of the ``config.json`` at ``path``.

    :raises ModelConfigError: naming the file, and the field where one is at fault.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ModelConfigError(str(path), None, f"cannot read it ({error.strerror})") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ModelConfigError(
            str(path), None, f"not JSON: {error.msg} at line {error.lineno}"
        ) from None
    return architecture_from_config(
        config, name=name or _default_name(config, path), source=str(path)
    )


def _default_name(config: object, path: Path) -> str:
    if isinstance(config, dict) and config.get("_name_or_path"):
        return str(config["_name_or_path"])
    return path.parent.name if path.name == "config.json" else path.stem


@functools.cache
def _preset(key: str) -> ModelArchitecture:
    return load_model_config(MODELS_DIR / MODEL_NAMES[key], name=key)


def load_model(name_or_path: str) -> ModelArchitecture:
    """A bundled preset by name (case-insensitive), or a ``config.json`` file's path.

    :raises ModelConfigError: for an unknown name (listing the presets, with the
        closest one) or a file that is not a readable config.json.
    """
    key = name_or_path.strip().lower()
    key = _ALIASES.get(key, key)
    if key in MODEL_NAMES:
        return _preset(key)
    if name_or_path.endswith(".json") or Path(name_or_path).is_file():
        return load_model_config(name_or_path)
    close = difflib.get_close_matches(key, list(MODEL_NAMES), n=1, cutoff=0.4)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ModelConfigError(
        "--model",
        None,
        f"unknown model {name_or_path!r}{hint} (presets: {', '.join(MODEL_NAMES)}; "
        "or give the path of a config.json)",
    )
