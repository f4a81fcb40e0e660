"""Hybrid-model workloads: several KV-cache groups, built by hand (no model needed).

vLLM's ``Scheduler`` takes a ``KVCacheConfig`` directly, so a hybrid model's
groups -- gpt-oss's sliding window and full attention, Gemma 3's five sliding
layers per full one, Llama 4's chunked local attention, a Mamba hybrid -- can be
given to it without weights; kvframe's core takes the same groups through
``SchedulerConfig.kv_cache_config``. Each workload's ``config["kv_cache_groups"]``
lists one entry per group::

    {"kind": "sliding_window", "sliding_window": 128}
    {"kind": "full_attention"}
    {"kind": "chunked_local_attention", "attention_chunk_size": 256}
    {"kind": "mamba"}            # block size max_model_len: one block per request

Every attention group has the workload's block size; the Mamba group's is
``max_model_len`` (vLLM's ``mamba_cache_mode="none"``). Both drivers build their
own release's spec classes from these entries (``kvframe_driver.kv_cache_config``,
``vllm_driver._kv_cache_groups``). The requests are the standard workloads'
(``workloads.py``), with pools sized so that every request fits on its own.
"""

from __future__ import annotations

import random
from typing import Any

from workloads import (
    DEFAULT_NUM_REQUESTS,
    Workload,
    _chunked_requests,
    _config,
    _prefix_requests,
    _pressure_requests,
    validate,
)

_SW128 = {"kind": "sliding_window", "sliding_window": 128}
_SW1024 = {"kind": "sliding_window", "sliding_window": 1024}
_FULL = {"kind": "full_attention"}
_CHUNK256 = {"kind": "chunked_local_attention", "attention_chunk_size": 256}
_MAMBA = {"kind": "mamba"}

MODELS: dict[str, list[dict[str, Any]]] = {
    "gptoss": [_SW128, _FULL],
    "gemma3": [_SW1024] * 5 + [_FULL],
    "llama4": [_CHUNK256] * 3 + [_FULL],
    "mamba": [_MAMBA, _FULL],
}
"""Group lists: gpt-oss-like (sliding 128 + full, 1:1), Gemma-3-like (sliding 1,024,
5:1), Llama-4-like (chunked local attention, 8,192 scaled down to 256, 3:1), and a
Mamba hybrid (one state block per request + full attention)."""

_PREFIX = dict(max_num_batched_tokens=1024, max_num_seqs=32, max_model_len=2048)
_PRESSURE = dict(max_num_batched_tokens=256, max_num_seqs=24, max_model_len=1024)
_CHUNKED = dict(
    max_num_batched_tokens=192, max_num_seqs=16, max_model_len=3072, long_prefill_token_threshold=80
)

HYBRID_WORKLOADS: dict[str, tuple[Any, dict[str, Any], str, str]] = {
    "hybrid-gptoss-prefix": (_prefix_requests, dict(_PREFIX, num_gpu_blocks=400), "gptoss", ""),
    "hybrid-gptoss-pressure": (
        _pressure_requests,
        dict(_PRESSURE, num_gpu_blocks=120),
        "gptoss",
        "",
    ),
    "hybrid-gemma3-chunked": (_chunked_requests, dict(_CHUNKED, num_gpu_blocks=1200), "gemma3", ""),
    "hybrid-llama4-prefix": (_prefix_requests, dict(_PREFIX, num_gpu_blocks=520), "llama4", ""),
    "hybrid-mamba-pressure": (_pressure_requests, dict(_PRESSURE, num_gpu_blocks=100), "mamba", ""),
}
"""name -> (request generator, config, model, description); each has a ``-nocache``
variant (prefix caching off). The pressure pools preempt; the prefix ones evict."""

HYBRID_NAMES: tuple[str, ...] = tuple(
    name + suffix for name in HYBRID_WORKLOADS for suffix in ("", "-nocache")
)

REFUSED: dict[str, tuple[str, ...]] = {"0.33.0": ("hybrid-mamba-pressure",)}
"""Workloads a release refuses to build (both vLLM and kvframe under its fidelity):
0.33.0 asks mamba_cache_mode 'align' for Mamba prefix caching (switch G3)."""


def hybrid_names(release: str) -> tuple[str, ...]:
    """The hybrid workloads release ``release`` runs."""
    refused = REFUSED.get(release, ())
    return tuple(name for name in HYBRID_NAMES if name not in refused)


def _blocks_needed(groups: list[dict[str, Any]], tokens: int, block_size: int) -> int:
    """Blocks vLLM 0.19.1's full-sequence admission check asks of a request of ``tokens``
    tokens: the whole sequence in every attention group (no window taken off; vLLM
    0.33.0 caps the sliding and chunked groups), one block for Mamba state."""
    full = -(-tokens // block_size)
    return sum(1 if group["kind"] == "mamba" else full for group in groups)


def generate_hybrid(
    name: str, policy: str, num_requests: int = DEFAULT_NUM_REQUESTS, seed: int = 0
) -> Workload:
    """Hybrid workload ``name`` (of :data:`HYBRID_NAMES`) under ``policy``."""
    base = name.removesuffix("-nocache")
    try:
        gen, overrides, model, _ = HYBRID_WORKLOADS[base]
    except KeyError:
        raise ValueError(
            f"unknown hybrid workload {name!r}; known: {', '.join(HYBRID_NAMES)}"
        ) from None
    rng = random.Random(f"kvframe-differential:{base}:{num_requests}:{seed}")
    config = _config(policy, **overrides, enable_prefix_caching=not name.endswith("-nocache"))
    config["kv_cache_groups"] = [dict(g) for g in MODELS[model]]
    workload = {"name": f"{name}-{policy}", "config": config, "requests": gen(rng, num_requests)}
    validate(workload)
    usable = config["num_gpu_blocks"] - 1
    for req in workload["requests"]:
        longest = min(len(req["prompt_token_ids"]) + req["max_tokens"], config["max_model_len"])
        if _blocks_needed(config["kv_cache_groups"], longest, config["block_size"]) > usable:
            raise ValueError(f"{name}: {req['request_id']} can never fit {usable} blocks")
    return workload


def hybrid_workloads(
    names: list[str] | None, policies: tuple[str, ...] | list[str], num_requests: int, seed: int
) -> list[Workload]:
    """Every requested hybrid workload under every requested policy."""
    return [
        generate_hybrid(name, policy, num_requests, seed)
        for name in (names or HYBRID_NAMES)
        for policy in policies
    ]
