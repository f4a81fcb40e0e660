"""Cost-model preset files: what ``kvframe calibrate`` writes and ``--cost-model FILE`` reads.

A JSON object (so it needs no TOML writer)::

    {"format": "kvframe-cost-model/3",
     "name": "calibrated-torch-tiny-cpu",
     "description": "...",
     "model": {"name": ..., "num_layers": ..., "num_kv_heads": ..., "head_dim": ...,
               "dtype_bytes": ..., "num_params": ..., "hidden_size": ...},
     "device": "cpu",
     "kv_memory_bytes": ...,
     "cost_model": {"form": "overlap", "per_step_s": ..., "per_prefill_token_s": ...,
                    "per_decode_seq_s": ..., "per_context_token_s": ...,
                    "per_prefill_seq_s": ..., "per_prefill_pair_s": ...,
                    "weight_read_s": ..., "per_prefill_step_s": ...,
                    "transfer_bytes_per_s": ...,
                    "transfer_latency_s": ..., "transfer_per_chunk_s": ...,
                    "transfer_layout": "cross-layer"},
     "calibration": {...}}

``calibration`` (the clock, the grid, the fit's residuals) is informational.
The model shape is the *measured* model's, so KV sizing in the sim matches
the run that was timed.

Format 2 added the two fitted-only terms (``per_prefill_seq_s``,
``per_prefill_pair_s``); a format-1 file has neither and still loads (both
0). Format 3 added the form (``"additive"`` or ``"overlap"``, see
:mod:`kvframe.domain.costs`), ``weight_read_s``, ``per_prefill_step_s`` and the layout-priced
transfers (``transfer_per_chunk_s``, ``transfer_layout``); a file of format
1 or 2 has none of them and loads as the ``additive`` form it was fitted
with, so its results reproduce. Any other key in ``cost_model`` is an error
rather than silently ignored: a typo there would otherwise change a run's
timing without a word.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from kvframe.domain.costs import CostModel, ModelShape
from kvframe.executors.presets import GpuSpec, Preset

__all__ = ["FORMAT", "load_cost_model_file", "write_cost_model_file"]

FORMAT = "kvframe-cost-model/3"
READABLE_FORMATS = ("kvframe-cost-model/1", "kvframe-cost-model/2", FORMAT)
_COST_FIELDS = tuple(f.name for f in attrs.fields(CostModel))
_TEXT_FIELDS = ("form", "transfer_layout")
"""The ``cost_model`` fields that are names, not numbers."""
_cache: dict[tuple[str, float], Preset] = {}


def load_cost_model_file(path: str | Path) -> Preset:
    """A :class:`Preset` from a cost-model file.

    :raises ValueError: naming the file and the missing or bad field.
    """
    path = Path(path)
    try:
        key = (str(path.resolve()), path.stat().st_mtime)
    except OSError as err:
        raise ValueError(f"cost-model file {path}: {err.strerror or err}") from None
    if key in _cache:
        return _cache[key]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"cost-model file {path}: not readable JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") not in READABLE_FORMATS:
        raise ValueError(
            f"cost-model file {path}: 'format' must be one of "
            f"{', '.join(map(repr, READABLE_FORMATS))}"
        )
    try:
        model = data["model"]
        shape = ModelShape(
            name=str(model["name"]),
            num_layers=int(model["num_layers"]),
            num_kv_heads=int(model["num_kv_heads"]),
            head_dim=int(model["head_dim"]),
            dtype_bytes=int(model["dtype_bytes"]),
            num_params=int(model["num_params"]),
            weight_dtype_bytes=float(model.get("weight_dtype_bytes", model["dtype_bytes"])),
            hidden_size=model.get("hidden_size"),
        )
        cost_model = CostModel(**_coefficients(data["cost_model"]))
        device = str(data.get("device", "unknown"))
        preset = Preset(
            name=str(data["name"]),
            description=str(data.get("description", "")),
            shape=shape,
            gpu=GpuSpec(
                name=device,
                peak_flops=0.0,
                hbm_bytes_per_s=0.0,
                memory_bytes=float(data["kv_memory_bytes"]),
                interconnect_bytes_per_s=0.0,
                host_link_bytes_per_s=cost_model.transfer_bytes_per_s,
            ),
            cost_model=cost_model,
            kv_memory_bytes=float(data["kv_memory_bytes"]),
            sources=(f"calibrated: {path.name}",),
        )
    except KeyError as err:
        raise ValueError(f"cost-model file {path}: missing field {err}") from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"cost-model file {path}: {err}") from None
    _cache[key] = preset
    return preset


def _coefficients(table: Any) -> dict[str, Any]:
    """The ``cost_model`` object's fields, refusing unknown keys and values of the
    wrong kind (the ``CostModel`` validators check the ranges and the names)."""
    if not isinstance(table, dict):
        raise ValueError("'cost_model' must be an object of coefficients")
    unknown = sorted(set(table) - set(_COST_FIELDS))
    if unknown:
        raise ValueError(
            f"unknown cost_model field(s) {', '.join(unknown)}; known: {', '.join(_COST_FIELDS)}"
        )
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "windowed":
            if not isinstance(value, list):
                raise ValueError(f"cost_model field windowed must be a list, got {value!r}")
            values[key] = value  # CostModel checks each (kind, span, read_s, pair_s)
            continue
        if key in _TEXT_FIELDS:
            if not isinstance(value, str):
                raise ValueError(f"cost_model field {key} must be a string, got {value!r}")
            values[key] = value
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"cost_model field {key} must be a number, got {value!r}")
        values[key] = float(value)
    return values


def write_cost_model_file(
    path: str | Path,
    *,
    name: str,
    description: str,
    shape: ModelShape,
    device: str,
    kv_memory_bytes: float,
    cost_model: CostModel,
    calibration: dict[str, Any],
) -> None:
    data = {
        "format": FORMAT,
        "name": name,
        "description": description,
        "model": _shape_fields(shape),
        "device": device,
        "kv_memory_bytes": kv_memory_bytes,
        "cost_model": _cost_fields(cost_model),
        "calibration": calibration,
    }
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def _cost_fields(cost_model: CostModel) -> dict[str, Any]:
    """The coefficients to write: a full-attention model's file keeps the fields it had
    before hybrid models (no empty ``windowed``, no zero ``per_state_seq_s``)."""
    fields = attrs.asdict(cost_model)
    if not cost_model.windowed:
        del fields["windowed"]
    if not cost_model.per_state_seq_s:
        del fields["per_state_seq_s"]
    return fields


def _shape_fields(shape: ModelShape) -> dict[str, Any]:
    """The model shape to write; a dense full-attention model's as before hybrid models."""
    fields = attrs.asdict(shape)
    if shape.active_params is None:
        del fields["active_params"]
    if not shape.layers:
        del fields["layers"]
    return fields
