"""``kvframe run`` with an approximate B200 preset: the GPU of the paper's main figure.

The Continuum paper's SWE-bench curve that docs/continuum.md compares with is
Llama-3.1-8B on a B200; kvframe's presets stop at the H200. This script adds
``llama3.1-8b-b200-approx``, derived like the H100 and H200 presets from a
datasheet (HGX B200 at 1,000 W: BF16 dense 2.25 PFLOPS, HBM3e 8 TB/s, 180 GB
per GPU as DGX B200 lists it; NVLink and the host link taken as the H200's)
with the same *assumed* efficiency factors -- no B200 was measured, so its
step times are a what-if, not a calibration -- and then runs the CLI with the
arguments given:

    .venv/bin/python examples/agentic_continuum/paper/b200_what_if.py \\
        swe.jsonl --preset llama3.1-8b-b200-approx --scheduler fcfs \\
        --offload lmcache:capacity=200GB --max-num-batched-tokens 2048
"""

from __future__ import annotations

import sys

from kvframe.executors.presets import LLAMA_3_1_8B, PRESETS, GpuSpec, Preset

B200_HGX = GpuSpec(
    name="B200-HGX-180GB",
    # HGX B200 (1,000 W): BF16 Tensor Core 2.25 PFLOPS dense (4.5 sparse).
    peak_flops=2.25e15,
    # HBM3e 8 TB/s.
    hbm_bytes_per_s=8e12,
    # DGX B200: 1,440 GB of HBM3e for 8 GPUs, 180 GB each.
    memory_bytes=180e9,
    # Taken as the H200's (only tensor-parallel runs and the native tier use them).
    interconnect_bytes_per_s=450e9,
    host_link_bytes_per_s=64e9,
)

NAME = "llama3.1-8b-b200-approx"


def register() -> None:
    """Add the preset under :data:`NAME` (for this process only)."""
    PRESETS[NAME] = Preset.derive(
        NAME,
        "Llama-3.1-8B, bf16, on one B200 (datasheet figures, assumed efficiencies)",
        LLAMA_3_1_8B,
        B200_HGX,
        sources=("NVIDIA HGX/DGX B200 datasheet figures", "efficiency factors: assumptions"),
    )


if __name__ == "__main__":
    register()
    from kvframe.cli.main import main

    sys.exit(main(["run", *sys.argv[1:]]))
