"""Cost-model presets for the models of :mod:`kvframe.models`: a model on named hardware.

A model preset is :meth:`~kvframe.executors.presets.Preset.derive` on the model's
:class:`~kvframe.domain.costs.ModelShape` (from its ``config.json``: per-kind layers,
active and total parameters, weight bytes) and a GPU, so its coefficients come from
the same roofline as the Llama presets (``docs/cost-model.md``, "Hybrid and
mixture-of-experts models"). ``--model NAME`` alone picks the model's own hardware
(:data:`MODEL_HARDWARE`); with ``--preset P`` (a derived preset) the model runs on
``P``'s GPU, tensor parallelism, efficiency factors and form. The Llama presets are
untouched: ``--model llama-3.1-8b`` is ``llama3.1-8b-h100`` itself.
"""

from __future__ import annotations

import functools

import attrs

from kvframe.executors.presets import (
    _EFFICIENCY,
    _SOURCES_H100,
    _SOURCES_H200,
    H100_SXM,
    H200_SXM,
    PRESETS,
    GpuSpec,
    Preset,
)
from kvframe.models import ModelArchitecture, load_model
from kvframe.models.catalog import MODEL_NAMES

__all__ = ["MODEL_HARDWARE", "model_preset", "model_preset_names", "model_presets"]


@attrs.frozen(slots=True)
class _Hardware:
    preset: str
    gpu: GpuSpec
    tensor_parallel_size: int
    description: str


MODEL_HARDWARE: dict[str, _Hardware] = {
    # gpt-oss-20b: 12.8 GiB of weights (MXFP4 experts): one H100.
    "gpt-oss-20b": _Hardware("gpt-oss-20b-h100", H100_SXM, 1, "gpt-oss-20b on one H100 SXM 80GB"),
    # gpt-oss-120b: 60.8 GiB of weights, "fits on a single 80GB GPU" (the model card).
    "gpt-oss-120b": _Hardware(
        "gpt-oss-120b-h100", H100_SXM, 1, "gpt-oss-120b on one H100 SXM 80GB"
    ),
    # Gemma-3-27B, bf16: 50.3 GiB of weights.
    "gemma-3-27b": _Hardware("gemma-3-27b-h100", H100_SXM, 1, "Gemma-3-27B, bf16, one H100"),
    # Llama-4-Scout, bf16: 200.7 GiB of weights -- four H100 with tensor parallelism 4.
    "llama-4-scout": _Hardware(
        "llama-4-scout-4xh100", H100_SXM, 4, "Llama-4-Scout-17B-16E, bf16, 4 x H100 (TP 4)"
    ),
    # Qwen3-Next-80B-A3B, bf16: 148.4 GiB of weights -- two H200 with tensor parallelism 2.
    "qwen3-next-80b-a3b": _Hardware(
        "qwen3-next-80b-a3b-2xh200", H200_SXM, 2, "Qwen3-Next-80B-A3B, bf16, 2 x H200 (TP 2)"
    ),
}
"""The hardware each bundled model runs on when ``--model`` names no preset."""

_DEFAULT_FOR_LLAMA = "llama3.1-8b-h100"


def model_preset(model: str | ModelArchitecture, base: Preset | None = None) -> Preset:
    """``model`` (a bundled name, a config.json path, or an architecture) on ``base``'s
    hardware, or on the model's own (:data:`MODEL_HARDWARE`) without one.

    :raises ValueError: for a calibrated ``base`` (its coefficients were measured on
        its own model), or a model that does not fit the hardware.
    """
    arch = load_model(model) if isinstance(model, str) else model
    if base is None:
        if arch.name == "llama-3.1-8b":
            return PRESETS[_DEFAULT_FOR_LLAMA]
        hardware = MODEL_HARDWARE.get(arch.name)
        if hardware is None:
            base = PRESETS[_DEFAULT_FOR_LLAMA]
        else:
            return _derive(
                arch,
                hardware.preset,
                hardware.description,
                hardware.gpu,
                hardware.tensor_parallel_size,
            )
    if base.gpu.peak_flops <= 0:
        raise ValueError(
            f"--model {arch.name}: preset {base.name!r} is calibrated on its own model; "
            "give a derived preset (the GPU and parallelism) or none"
        )
    return _derive(
        arch,
        f"{arch.name}@{base.name}",
        f"{arch.name} on the hardware of {base.name}",
        base.gpu,
        base.tensor_parallel_size,
        base=base,
    )


def _derive(
    arch: ModelArchitecture,
    name: str,
    description: str,
    gpu: GpuSpec,
    tensor_parallel_size: int,
    base: Preset | None = None,
) -> Preset:
    sources = (arch.source, *(_SOURCES_H200 if gpu is H200_SXM else _SOURCES_H100), _EFFICIENCY)
    options = (
        {}
        if base is None
        else {
            "efficiency": base.efficiency,
            "form": base.cost_model.form,
        }
    )
    try:
        return Preset.derive(
            name,
            description,
            arch.model_shape(),
            gpu,
            tensor_parallel_size=tensor_parallel_size,
            sources=sources,
            **options,
        )
    except ValueError as error:
        raise ValueError(
            f"--model {arch.name}: {error}; name hardware with more memory with --preset "
            "(a derived preset, e.g. llama3.1-70b-4xh100: four H100 with TP 4)"
        ) from None


@functools.cache
def model_presets() -> dict[str, Preset]:
    """The bundled models on their own hardware, by preset name (built on first use:
    reading the models' config.json files stays out of ``import kvframe``)."""
    presets = {}
    for model in MODEL_NAMES:
        if model in MODEL_HARDWARE:
            preset = model_preset(model)
            presets[preset.name] = preset
    return presets


def model_preset_names() -> list[str]:
    return [hardware.preset for hardware in MODEL_HARDWARE.values()]
