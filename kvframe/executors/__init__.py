"""Executors: what runs a scheduled step.

``sim`` advances a virtual clock with a :class:`~kvframe.domain.costs.CostModel`;
``torch`` runs a small decoder on real paged KV tensors. This package's
``__init__`` re-exports only the torch-free cost-model pieces, so importing it
stays cheap.
"""

from __future__ import annotations

from kvframe.domain.costs import CostModel, ModelShape, num_gpu_blocks_for
from kvframe.executors.catalog import get_preset, preset_names
from kvframe.executors.presets import PRESETS, Preset

__all__ = [
    "PRESETS",
    "CostModel",
    "ModelShape",
    "Preset",
    "get_preset",
    "num_gpu_blocks_for",
    "preset_names",
]
