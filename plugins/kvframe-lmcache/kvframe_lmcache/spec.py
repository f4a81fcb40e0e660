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

* **LMCache's own transfer cost.** A transfer is one ``store()`` or
  ``retrieve()`` call of one request; it costs a fixed per-call overhead
  (token hashing, lookup, memory-object allocation, the copy kernels' launch),
  a per-chunk overhead, and its bytes at the throughput LMCache's log reports
  for its pinned-staging copies -- not the preset's link peak
  (:class:`LMCachePricing`; figures and sources in the plugin's README).

The timing is carried out by kvframe's connector and worker through
:class:`kvframe.ConnectorSemantics` and this tier's
:meth:`~LMCacheOffloadSpec.transfer_pricing`; this class chooses them, sizes
the tier and picks its eviction policy (LMCache's local CPU backend evicts LRU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

import kvframe
from kvframe import Bytes, ConnectorSemantics, SlotOffloadManager

if TYPE_CHECKING:
    from kvframe import OffloadContext, OffloadManager, TransferHandler

__all__ = ["LMCACHE_0_3_7", "LMCacheOffloadSpec", "LMCachePricing"]

GIB = 1024**3
"""LMCache's logs divide bytes by ``1024**3`` and print ``gb``: their GB/s are GiB/s."""


@attrs.frozen(slots=True, kw_only=True)
class LMCacheRates:
    """LMCache's measured costs of one ``store()`` / ``retrieve()`` call (README, sources)."""

    store_throughput: float
    """GiB/s of a store (GPU paged KV -> pinned CPU chunks), net of ``call_overhead``."""
    load_throughput: float
    """GiB/s of a retrieve (pinned CPU chunks -> GPU paged KV), net of ``call_overhead``."""
    call_overhead: float
    """Seconds per call, whatever its size."""
    chunk_overhead: float
    """Seconds per chunk of the call beyond what the throughputs already hold."""


LMCACHE_0_3_7 = LMCacheRates(
    # PR LMCache/LMCache#1740 (2025-10-08, the 0.3.7 window): "Stored 3866 ... size:
    # 0.5309 gb, cost 11.9537 ms" and "Retrieved 10010 ... size: 1.3747 gb, cost
    # 33.4281 ms", each less the per-call overhead below.
    store_throughput=0.5309 / (11.9537e-3 - 0.55e-3),
    load_throughput=1.3747 / (33.4281e-3 - 0.55e-3),
    # LMCache quickstart log (2025-09-30): "Retrieved 8 ... cost 0.55 ms", one chunk.
    call_overhead=0.55e-3,
    # Inside the logged calls above (16 and 40 chunks of 256 tokens): none beyond them.
    chunk_overhead=0.0,
)
"""The defaults: LMCache 0.3.7 as its maintainers' logs of that release window show it."""


@attrs.frozen(slots=True, kw_only=True)
class LMCachePricing:
    """One transfer's seconds as LMCache spends them (a ``TransferPricing``).

    ``call_overhead + chunks * chunk_overhead + bytes / throughput``, the
    chunks counted in ``chunk_size``-token chunks over the call's tokens and the
    throughput the direction's. A store and a retrieve are each one call per
    request per step (the adapter's ``wait_for_save`` / ``start_load_kv`` loop
    over requests), which is how the worker starts them.
    """

    gpu_block_size: int
    chunk_size: int
    rates: LMCacheRates

    def transfer_time(self, is_store: bool, num_gpu_blocks: int, num_bytes: int) -> float:
        """Seconds for one request's store (``is_store``) or retrieve of these blocks."""
        if num_gpu_blocks <= 0:
            return 0.0
        rates = self.rates
        chunks = -(-(num_gpu_blocks * self.gpu_block_size) // self.chunk_size)
        throughput = rates.store_throughput if is_store else rates.load_throughput
        return rates.call_overhead + chunks * rates.chunk_overhead + num_bytes / (throughput * GIB)


LMCACHE_SEMANTICS = ConnectorSemantics(async_load=False, blocking_store=True, store_outputs=False)
"""LMCache 0.3's vLLM connector: load before the forward pass, block on saves, prompt only."""


class LMCacheOffloadSpec(kvframe.OffloadSpec):
    """A CPU tier of ``chunk_size``-token chunks moved as LMCache's connector moves them."""

    name = "lmcache"
    description = (
        "LMCache-style CPU tier: synchronous loads, blocking saves, 256-token chunks, "
        "prompt only, LMCache 0.3.7's transfer costs."
    )

    def __init__(
        self,
        *,
        capacity: Bytes,
        chunk_size: int = 256,
        eviction: str = "lru",
        store_throughput: float = LMCACHE_0_3_7.store_throughput,
        load_throughput: float = LMCACHE_0_3_7.load_throughput,
        call_overhead: float = LMCACHE_0_3_7.call_overhead,
        chunk_overhead: float = LMCACHE_0_3_7.chunk_overhead,
    ) -> None:
        """
        :param capacity: bytes of CPU DRAM (LMCache's ``max_local_cpu_size``).
        :param chunk_size: tokens per chunk (LMCache's ``chunk_size``); a
            multiple of the GPU block size.
        :param eviction: config string of the eviction policy over chunks
            (``lru``, LMCache's local CPU backend's; ``arc``, ...).
        :param store_throughput: GiB/s of a store's bytes (LMCache's logged
            throughput, net of the per-call overhead).
        :param load_throughput: GiB/s of a retrieve's bytes (the same).
        :param call_overhead: seconds per ``store()`` / ``retrieve()`` call.
        :param chunk_overhead: seconds per chunk of a call, beyond the throughputs.
        """
        if capacity <= 0:
            raise ValueError(f"capacity must be a positive number of bytes, not {capacity}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive number of tokens, not {chunk_size}")
        throughputs = (("store_throughput", store_throughput), ("load_throughput", load_throughput))
        for name, value in throughputs:
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of GiB/s, not {value}")
        for name, value in (("call_overhead", call_overhead), ("chunk_overhead", chunk_overhead)):
            if not value >= 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, not {value}")
        self.capacity = capacity
        self.chunk_size = chunk_size
        self.rates = LMCacheRates(
            store_throughput=float(store_throughput),
            load_throughput=float(load_throughput),
            call_overhead=float(call_overhead),
            chunk_overhead=float(chunk_overhead),
        )
        # Resolved now so that a typo is reported when the configuration is read.
        self.eviction = kvframe.get_registry().resolve("eviction", eviction)

    def connector_semantics(self) -> ConnectorSemantics:
        """Synchronous loads, blocking saves, no decode-phase saves."""
        return LMCACHE_SEMANTICS

    def transfer_pricing(self, context: OffloadContext) -> LMCachePricing:
        """LMCache's cost of a transfer, instead of the preset's link."""
        return LMCachePricing(
            gpu_block_size=context.gpu_block_size, chunk_size=self.chunk_size, rates=self.rates
        )

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
