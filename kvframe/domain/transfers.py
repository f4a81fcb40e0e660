"""How a KV block is laid out in memory, and so how many copies a transfer takes.

An offload transfer of ``n`` blocks is not one copy of ``n x block bytes``:
vLLM 0.19's ``swap_blocks`` issues one ``cudaMemcpyAsync`` per block *per KV
tensor*, and how many tensors a block is spread over depends on the attention
backend's layout. Each copy pays a fixed cost (about 3 us on an H200,
measured: ``kvframe/data/gpu/h200-llama3.1-8b/scatter_copy.csv``), which at
small chunks costs more than the bytes do. So the cost model prices a
transfer as ``chunks x per_chunk + bytes / bandwidth`` with the chunk count
from the layout:

============================  ====================================  ==========================
layout                        one block is                          copies for ``n`` blocks
============================  ====================================  ==========================
``contiguous``                part of one contiguous run            1 per transfer batch
``cross-layer``               one chunk across all layers, K and V  ``n``
``per-layer``                 one chunk per layer, K and V together ``n x layers``
``per-layer-kv-split``        one chunk per layer for K, one for V  ``2 x n x layers``
============================  ====================================  ==========================

For a 16-token block of Llama-3.1-8B the chunks are 2 MiB, 64 KiB and 32 KiB.
vLLM's OffloadingConnector asks the attention backend for cross-layer blocks
where it can; FlashAttention's default cache is per layer with K and V apart.
"""

from __future__ import annotations

__all__ = ["BLOCK_LAYOUTS", "check_layout", "chunk_bytes", "num_chunks"]

BLOCK_LAYOUTS = ("contiguous", "cross-layer", "per-layer", "per-layer-kv-split")
"""The layouts a cost model may name (``CostModel.transfer_layout``)."""

_CHUNKS_PER_BLOCK = {"cross-layer": 1, "per-layer": 1, "per-layer-kv-split": 2}
"""Chunks per block per layer (cross-layer: per block, all layers in one)."""


def check_layout(layout: str) -> str:
    """``layout`` if it is one of :data:`BLOCK_LAYOUTS`.

    :raises ValueError: naming the layout and listing the known ones.
    """
    if layout not in BLOCK_LAYOUTS:
        raise ValueError(f"unknown transfer layout {layout!r}; known: {', '.join(BLOCK_LAYOUTS)}")
    return layout


def num_chunks(layout: str, num_blocks: int, num_layers: int) -> int:
    """Separate copies a transfer of ``num_blocks`` blocks takes under ``layout``."""
    if num_blocks <= 0:
        return 0
    if layout == "contiguous":
        return 1
    if layout == "cross-layer":
        return num_blocks
    return num_blocks * num_layers * _CHUNKS_PER_BLOCK[layout]


def chunk_bytes(layout: str, block_bytes: int, num_layers: int) -> int:
    """Bytes of one copy of a block under ``layout`` (``contiguous``: the whole block)."""
    if layout in ("contiguous", "cross-layer"):
        return block_bytes
    return block_bytes // (num_layers * _CHUNKS_PER_BLOCK[layout])
