"""The ``cpu`` offload spec: a host-DRAM tier with a pluggable eviction policy.

vLLM 0.19's ``CPUOffloadingSpec`` (``vllm/v1/kv_offload/cpu/spec.py``) with
kvframe config strings::

    --offload cpu:capacity=8GiB
    --offload cpu:capacity=8GiB,eviction=arc,block_size_factor=4
    --offload "cpu:capacity=8GiB,eviction='arc:variant=paper'"
    --offload cpu:capacity=8GiB --reuse-filter threshold:store_threshold=2

vLLM's ``store_threshold`` / ``max_tracker_size`` are not options of the spec:
the ``threshold`` reuse filter is selected through the reuse-filter extension
point (``--reuse-filter``), the one way kvframe attaches a filter to any tier.

Sizing, as in vLLM: an offloaded block is ``block_size_factor`` GPU blocks, so
it takes ``block_size_factor * gpu_block_size * kv_bytes_per_token`` bytes, and
the tier has ``capacity // that`` slots (the remainder is unused).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import kvframe
from kvframe import Bytes, SlotOffloadManager

if TYPE_CHECKING:
    from kvframe import OffloadContext, OffloadManager, TransferHandler

__all__ = ["CPUOffloadSpec"]


class CPUOffloadSpec(kvframe.OffloadSpec):
    """Offload KV blocks to host DRAM; slots ordered by an eviction policy plugin."""

    name = "cpu"
    description = "Host-DRAM KV tier (vLLM's CPUOffloadingSpec); eviction policy by config string."

    def __init__(
        self,
        *,
        capacity: Bytes,
        eviction: str = "lru",
        block_size_factor: int = 1,
    ) -> None:
        """
        :param capacity: bytes of DRAM for the tier (``8GiB``); vLLM's
            ``cpu_bytes_to_use``.
        :param eviction: config string of the eviction policy (``lru``, ``arc``,
            ``'arc:variant=paper'``); vLLM's ``eviction_policy``.
        :param block_size_factor: GPU blocks per offloaded block; vLLM's
            ``block_size`` divided by the GPU block size.
        """
        if capacity <= 0:
            raise ValueError(f"capacity must be a positive number of bytes, not {capacity}")
        if block_size_factor < 1:
            raise ValueError(f"block_size_factor must be >= 1, not {block_size_factor}")
        self.capacity = capacity
        self.block_size_factor = block_size_factor
        # Resolve now so a typo in the policy's name or options is reported when
        # the configuration is read, not when the engine starts.
        self.eviction = kvframe.get_registry().resolve("eviction", eviction)

    def offloaded_block_bytes(self, context: OffloadContext) -> int:
        """Bytes of one offloaded block (``block_size_factor`` GPU blocks)."""
        return context.gpu_block_bytes * self.block_size_factor

    def num_blocks(self, context: OffloadContext) -> int:
        """Slots the tier has: whole offloaded blocks that fit in ``capacity``."""
        block_bytes = self.offloaded_block_bytes(context)
        return self.capacity // block_bytes if block_bytes > 0 else 0

    def request_scoped_slots(self, context: OffloadContext) -> kvframe.RequestScopedSlots:
        """vLLM 0.33.0's CPU tier of the same size, its chunks ordered by the eviction
        policy's request-scoped form (:meth:`kvframe.OffloadSpec.request_scoped_slots`)."""
        eviction = self.eviction
        return kvframe.RequestScopedSlots(
            eviction=eviction.cls,
            eviction_name=eviction.name,
            eviction_options=eviction.options,
            num_blocks=self.num_blocks(context),
            block_size_factor=self.block_size_factor,
        )

    def create_manager(self, context: OffloadContext) -> OffloadManager:
        """The tier's slot manager.

        :raises ValueError: when ``capacity`` holds no whole block: a tier with
            zero slots would store nothing, and the run would silently measure
            no tier at all.
        """
        num_blocks = self.num_blocks(context)
        if num_blocks < 1:
            block_bytes = self.offloaded_block_bytes(context)
            raise ValueError(
                f"capacity={self.capacity} bytes holds no block: one offloaded block "
                f"({self.block_size_factor} GPU block(s) of {context.gpu_block_size} tokens) "
                f"takes {block_bytes} bytes; give at least capacity={block_bytes}"
            )
        return SlotOffloadManager(
            self.eviction.create(num_blocks),
            num_blocks,
            block_size=context.gpu_block_size * self.block_size_factor,
            medium="CPU",
            enable_events=context.enable_events,
        )

    def create_transfer_handler(self, context: OffloadContext) -> TransferHandler:
        """A :class:`~kvframe_cpu_offload.torch_handler.TorchTransferHandler` for the tier's slots.

        Its host buffer has ``num_blocks * block_size_factor`` rows, one per GPU
        block an offloaded block covers (the contract's host block index); it is
        allocated when the worker registers its KV tensors, whose shapes give a
        row's bytes. torch is imported here, not with the plugin, so that
        listing plugins and the scheduler side never pay for it.
        """
        from kvframe_cpu_offload.torch_handler import TorchTransferHandler

        return TorchTransferHandler(self.num_blocks(context) * self.block_size_factor)
