"""Model shapes from Hugging Face ``config.json``: per-layer KV-cache specs, parameter
counts, and the KV-cache groups and pool size each vLLM release computes for them.

* :mod:`kvframe.models.architecture` -- :class:`ModelArchitecture`, a model's layers
  (full attention, sliding window, chunked local, MLA, Mamba / linear-attention
  state) and its parameters (total, for weight memory; active, for compute);
* :mod:`kvframe.models.hf_config` -- :func:`architecture_from_config`, a
  ``config.json`` mapping into an architecture, with errors that name the field
  and the file;
* :mod:`kvframe.models.kv_groups` -- vLLM's ``get_kv_cache_config*`` of 0.19.1 and
  0.33.0: :func:`kv_cache_config_for` is the one function the engine calls for a
  :class:`~kvframe.domain.kv_cache_spec.KVCacheConfig`;
* :mod:`kvframe.models.catalog` -- the bundled presets (``--model gpt-oss-120b``)
  and ``--model-config PATH``.

This package stands beside :mod:`kvframe.config` on the floor above the domain: it
imports only :mod:`kvframe.domain`, and the executors (cost models) and the engine
build on it.
"""

from __future__ import annotations

from kvframe.models.architecture import LayerKind, ModelArchitecture
from kvframe.models.catalog import MODEL_NAMES, load_model, model_names
from kvframe.models.errors import ModelConfigError
from kvframe.models.hf_config import architecture_from_config
from kvframe.models.kv_groups import KVGroupOptions, kv_cache_config_for

__all__ = [
    "MODEL_NAMES",
    "KVGroupOptions",
    "LayerKind",
    "ModelArchitecture",
    "ModelConfigError",
    "architecture_from_config",
    "kv_cache_config_for",
    "load_model",
    "model_names",
]
