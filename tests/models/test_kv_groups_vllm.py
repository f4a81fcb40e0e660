"""kvframe's KV-cache groups and pool size against vLLM 0.19.1's and 0.33.0's own functions.

For every bundled model and for seeded random hybrid layer mixes, each release's
interpreter runs ``tests/models/vllm_kv_groups.py`` -- vLLM's Mamba block-size
alignment, ``get_kv_cache_groups`` and ``get_kv_cache_config_from_groups`` on
vLLM's own specs -- and the groups (spec type, layers, block size, page size),
the Mamba page and ``num_blocks`` must be kvframe's
(:func:`kvframe.models.kv_groups.kv_cache_config_for`). Where transformers reads
a preset's ``config.json`` into layer types, kvframe's reading must agree.
Skips without the reference interpreters (``KVFRAME_VLLM_PYTHON``,
``KVFRAME_VLLM033_PYTHON``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import attrs
import pytest
from vllm_reference import RELEASES, reference_python, run_script

from kvframe.domain.fidelity import fidelity_for
from kvframe.models.architecture import LayerKind, ModelArchitecture
from kvframe.models.catalog import MODEL_NAMES, MODELS_DIR, load_model
from kvframe.models.kv_groups import KVGroupOptions, hybrid_manager_enabled, kv_cache_config_for

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("vllm_kv_groups.py")
GiB = 1024**3
_SPEC_TYPES = {"state": "MambaSpec"}


def _mamba_fields(model: ModelArchitecture) -> dict[str, int] | None:
    """The gated-delta-net sizes behind kvframe's state shapes (the script rebuilds them
    with vLLM's ``MambaStateShapeCalculator``)."""
    if not model.mamba_state_shapes:
        return None
    (kernel_minus_1, conv_dim), (num_v, dim_v, dim_k) = model.mamba_state_shapes
    num_k = (conv_dim - num_v * dim_v) // (2 * dim_k)
    return {
        "num_k_heads": num_k,
        "num_v_heads": num_v,
        "head_k_dim": dim_k,
        "head_v_dim": dim_v,
        "conv_kernel": kernel_minus_1 + 1,
    }


def _case(model: ModelArchitecture, release: str, options: KVGroupOptions, **extra: Any) -> dict:
    hybrid, _ = hybrid_manager_enabled(model, fidelity_for(release), options)
    return {
        "layer_kinds": ["state" if k == LayerKind.STATE else k for k in model.layer_kinds],
        "num_kv_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "dtype_bytes": model.kv_dtype_bytes,
        "sliding_window": model.sliding_window,
        "chunk": model.attention_chunk_size,
        "mamba": _mamba_fields(model) if LayerKind.STATE in model.layer_kinds else None,
        "block_size": extra.get("block_size", 16),
        "kv_memory": extra.get("kv_memory", 40 * GiB),
        "enable_prefix_caching": options.enable_prefix_caching,
        "disable_hybrid": not hybrid,
        "max_model_len": options.max_model_len or model.max_position_embeddings,
        "hf_config": extra.get("hf_config"),
        "tp": options.tensor_parallel_size,
    }


def _kvframe(model: ModelArchitecture, release: str, options: KVGroupOptions, case: dict) -> dict:
    config = kv_cache_config_for(model, case["kv_memory"], case["block_size"], release, options)
    return {
        "groups": [
            [type(g.spec).__name__, g.spec.block_size, g.spec.page_size_bytes, list(g.layer_names)]
            for g in config.groups
        ],
        "num_blocks": config.num_blocks,
    }


def _random_model(rng: random.Random, index: int) -> ModelArchitecture:
    """A hybrid of 4-40 layers mixing two or three kinds, with random shapes."""
    kinds = rng.sample([LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED, LayerKind.STATE], 2)
    if rng.random() < 0.4:
        kinds.append(LayerKind.FULL)
    layers = [rng.choice(kinds) for _ in range(rng.randint(4, 40))]
    for kind in set(kinds):
        if kind not in layers:
            layers[rng.randrange(len(layers))] = kind
    num_v, dim = rng.choice([4, 8, 16, 32]), rng.choice([32, 64, 128])
    return ModelArchitecture(
        name=f"random-{index}",
        model_type="random",
        hidden_size=1024,
        num_attention_heads=16,
        num_kv_heads=rng.choice([1, 2, 4, 8]),
        head_dim=rng.choice([64, 128, 256]),
        layer_kinds=tuple(layers),
        total_params=10**9,
        active_params=10**9,
        weight_bytes=2e9,
        sliding_window=rng.choice([128, 512, 1024, 4096]),
        attention_chunk_size=rng.choice([2048, 8192]),
        mamba_state_shapes=((3, 2 * (num_v // 2) * dim + num_v * dim), (num_v, dim, dim)),
        mamba_state_dtype_bytes=(2, 2),
        max_position_embeddings=rng.choice([8192, 32768, 131072]),
    )


def _cases(release: str) -> list[tuple[str, ModelArchitecture, KVGroupOptions, dict]]:
    cases = []
    for name in MODEL_NAMES:
        model = load_model(name)
        hf_config = json.loads((MODELS_DIR / MODEL_NAMES[name]).read_text())
        for caching in (True, False):
            options = KVGroupOptions(enable_prefix_caching=caching)
            cases.append(
                (name, model, options, _case(model, release, options, hf_config=hf_config))
            )
        events = KVGroupOptions(kv_events=True)
        cases.append((f"{name}+events", model, events, _case(model, release, events)))
    rng = random.Random(46)
    for index in range(40):
        model = _random_model(rng, index)
        options = KVGroupOptions(
            enable_prefix_caching=rng.random() < 0.5,
            allow_chunked_local_hybrid=rng.random() < 0.7,
            tensor_parallel_size=rng.choice([1, 1, 2, 4]),
        )
        extra = {"block_size": rng.choice([16, 32, 64]), "kv_memory": rng.randint(1, 80) * GiB}
        cases.append((model.name, model, options, _case(model, release, options, **extra)))
    return cases


def _expected_layer_types(model: ModelArchitecture) -> list[str]:
    names = {LayerKind.STATE: "linear_attention"}
    return [names.get(kind, kind) for kind in model.layer_kinds]


@pytest.mark.parametrize("release", RELEASES)
def test_groups_and_num_blocks_are_vllms(release: str, tmp_path: Path) -> None:
    python = reference_python(release)
    cases = _cases(release)
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([case for *_, case in cases]))
    answer = run_script(python, SCRIPT, str(path))
    assert answer["vllm"].startswith(release[:4])
    compared = refusals = 0
    for (name, model, options, case), theirs in zip(cases, answer["results"], strict=True):
        if "refused" in theirs:
            with pytest.raises(ValueError):
                _kvframe(model, release, options, case)
            refusals += 1
            continue
        ours = _kvframe(model, release, options, case)
        theirs_groups = [[t, b, p, names] for t, b, p, names in theirs["groups"]]
        assert ours["groups"] == theirs_groups, f"{name} ({release}): groups differ"
        assert ours["num_blocks"] == theirs["num_blocks"], f"{name} ({release}): num_blocks"
        if model.mamba_state_shapes and theirs["mamba_state_bytes"] is not None:
            per_gpu = model.mamba_state_bytes // options.tensor_parallel_size
            assert per_gpu == theirs["mamba_state_bytes"], name
        if theirs["layer_types"] is not None:
            assert theirs["layer_types"] == _expected_layer_types(model), f"{name}: layer types"
        compared += 1
    # Most cases run; a few are refused by both (a Mamba hybrid without the hybrid manager).
    assert compared > 3 * refusals


def test_random_mixes_cover_every_kind() -> None:
    """The random models the differential test draws mix every kind of layer."""
    rng = random.Random(46)
    seen = set()
    for index in range(40):
        seen |= set(_random_model(rng, index).layer_kinds)
    assert seen == {LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED, LayerKind.STATE}


def test_the_cases_name_their_models() -> None:
    """Every preset is in the differential cases, with and without prefix caching."""
    names = [name for name, *_ in _cases("0.19.1")]
    for preset in MODEL_NAMES:
        assert names.count(preset) == 2
        assert f"{preset}+events" in names
    assert attrs.has(KVGroupOptions)
