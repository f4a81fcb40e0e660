"""Every cost-model preset by name: the derived ones and the calibrated files kvframe ships.

Derived presets (:mod:`kvframe.executors.presets`) are computed from a model's
shape and a GPU's datasheet; calibrated ones are cost-model files
(:mod:`kvframe.executors.cost_model_file`) measured on a real executor. This
module is the one place that knows both, so neither of those imports the other.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import attrs

from kvframe.executors.cost_model_file import load_cost_model_file
from kvframe.executors.model_presets import model_preset_names, model_presets
from kvframe.executors.presets import PRESETS, Preset

__all__ = ["CALIBRATED_DIR", "calibrated_preset_names", "get_preset", "preset_names"]


CALIBRATED_DIR = Path(__file__).resolve().parents[1] / "data" / "cost_models"
"""Cost-model files shipped with kvframe (``kvframe calibrate`` output), one preset each:
measured on a real executor rather than derived. ``--preset NAME`` loads ``NAME.json``."""


def calibrated_preset_names() -> list[str]:
    return sorted(path.stem for path in CALIBRATED_DIR.glob("*.json"))


def preset_names() -> list[str]:
    return sorted({*PRESETS, *model_preset_names(), *calibrated_preset_names()})


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (case-insensitive).

    :raises ValueError: listing the presets and suggesting the closest name.
    """
    key = name.strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    if key in model_preset_names():
        return model_presets()[key]
    if key in calibrated_preset_names():
        return attrs.evolve(load_cost_model_file(CALIBRATED_DIR / f"{key}.json"), name=key)
    names = preset_names()
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.4)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown cost-model preset {name!r}{hint} (available: {', '.join(names)})")
