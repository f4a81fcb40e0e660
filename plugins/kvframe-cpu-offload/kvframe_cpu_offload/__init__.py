"""kvframe's CPU-DRAM offload tier (``--offload cpu:...``) and the ``threshold`` reuse filter.

Importing this package does not import torch: the worker-side handler imports it
when it is built.
"""

from __future__ import annotations

from kvframe_cpu_offload.reuse import ThresholdReuseFilter
from kvframe_cpu_offload.spec import CPUOffloadSpec

__all__ = ["CPUOffloadSpec", "ThresholdReuseFilter"]
