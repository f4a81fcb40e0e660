"""The ``lmcache`` offload spec: a CPU tier behind an LMCache-style connector.

The Continuum paper's offload baseline (arXiv 2511.02230, §5) is vLLM 0.10.2
with LMCache 0.3.7, whose vLLM connector differs from vLLM 0.19's native
``OffloadingConnector`` (kvframe's ``cpu`` tier) in *when* bytes move:

* **Synchronous loads.** The connector answers a hit as not asynchronous; the
  request is scheduled in the same step, and the worker loads its chunks in
  ``start_load_kv`` before the forward pass, so the step containing the load
  is longer by the load's transfer time (the native connector overlaps it
  with other requests' steps).
* **Blocking saves.** ``wait_for_save`` runs at the end of the step that
  computed the KV, so the store's transfer time adds to that step (the native
  connector defers stores to the next step and overlaps them).
* **256-token chunks.** LMCache's ``chunk_size`` (default 256): the tier's
  block is a chunk, ``chunk_size / gpu_block_size`` GPU blocks; only whole
  chunks are stored and loaded.
* **Prompt-only saving.** Decode-phase KV is not saved (LMCache's connector
  skips it unless ``save_decode_cache`` is set); a turn's outputs reach the
  tier when they are part of the next turn's prompt.

::

    --offload lmcache:capacity=200GiB
    --offload lmcache:capacity=200GiB,eviction=arc,chunk_size=512

The timing is carried out by kvframe's connector and worker through
:class:`kvframe.ConnectorSemantics`; this class only chooses it, sizes the
tier and picks its eviction policy (LMCache's local CPU backend evicts LRU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import kvframe
from kvframe import Bytes, ConnectorSemantics, SlotOffloadManager

if TYPE_CHECKING:
    from kvframe import OffloadContext, OffloadManager, TransferHandler

__all__ = ["LMCacheOffloadSpec"]

LMCACHE_SEMANTICS = ConnectorSemantics(async_load=False, blocking_store=True, store_outputs=False)
"""LMCache 0.3's vLLM connector: load before the forward pass, block on saves, prompt only."""


class LMCacheOffloadSpec(kvframe.OffloadSpec):
    """A CPU tier of ``chunk_size``-token chunks moved as LMCache's connector moves them."""

    name = "lmcache"
    description = (
        "LMCache-style CPU tier: synchronous loads, blocking saves, 256-token chunks, prompt only."
    )

    def __init__(self, *, capacity: Bytes, chunk_size: int = 256, eviction: str = "lru") -> None:
        """
        :param capacity: bytes of CPU DRAM (LMCache's ``max_local_cpu_size``).
        :param chunk_size: tokens per chunk (LMCache's ``chunk_size``); a
            multiple of the GPU block size.
        :param eviction: config string of the eviction policy over chunks
            (``lru``, LMCache's local CPU backend's; ``arc``, ...).
        """
        if capacity <= 0:
            raise ValueError(f"capacity must be a positive number of bytes, not {capacity}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive number of tokens, not {chunk_size}")
        self.capacity = capacity
        self.chunk_size = chunk_size
        # Resolved now so that a typo is reported when the configuration is read.
        self.eviction = kvframe.get_registry().resolve("eviction", eviction)

    def connector_semantics(self) -> ConnectorSemantics:
        """Synchronous loads, blocking saves, no decode-phase saves."""
        return LMCACHE_SEMANTICS

    def block_size_factor(self, context: OffloadContext) -> int:
        """GPU blocks per chunk.

        :raises ValueError: when a chunk is not a whole number of GPU blocks.
        """
        factor, rest = divmod(self.chunk_size, context.gpu_block_size)
        if rest or factor < 1:
            raise ValueError(
                f"chunk_size={self.chunk_size} is not a whole number of "
                f"{context.gpu_block_size}-token GPU blocks"
            )
        return factor

    def chunk_bytes(self, context: OffloadContext) -> int:
        """Bytes of one chunk's KV."""
        return self.chunk_size * context.kv_bytes_per_token

    def num_blocks(self, context: OffloadContext) -> int:
        """Whole chunks that fit in ``capacity``."""
        chunk = self.chunk_bytes(context)
        return self.capacity // chunk if chunk > 0 else 0

    def create_manager(self, context: OffloadContext) -> OffloadManager:
        """The tier's ledger: one slot per chunk, ordered by the eviction policy.

        :raises ValueError: when the chunk size does not fit the GPU block size,
            or ``capacity`` holds no chunk (the run would measure no tier).
        """
        factor = self.block_size_factor(context)
        num_blocks = self.num_blocks(context)
        if num_blocks < 1:
            raise ValueError(
                f"capacity={self.capacity} bytes holds no chunk: one {self.chunk_size}-token "
                f"chunk takes {self.chunk_bytes(context)} bytes; give at least "
                f"capacity={self.chunk_bytes(context)}"
            )
        return SlotOffloadManager(
            self.eviction.create(num_blocks),
            num_blocks,
            block_size=context.gpu_block_size * factor,
            medium="CPU",
            enable_events=context.enable_events,
        )

    def create_transfer_handler(self, context: OffloadContext) -> TransferHandler:
        """The ``cpu`` tier's torch handler over this tier's rows: the bytes move the same
        way, only when they move differs (the connector's business)."""
        from kvframe_cpu_offload.torch_handler import TorchTransferHandler

        return TorchTransferHandler(self.num_blocks(context) * self.block_size_factor(context))
