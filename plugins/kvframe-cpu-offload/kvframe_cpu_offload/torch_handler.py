"""The ``cpu`` tier's worker side: copies KV blocks between device tensors and host DRAM.

:class:`TorchTransferHandler` implements
:class:`~kvframe.contract.offload.TransferHandler` with torch, as vLLM 0.19's
``CpuGpuOffloadingHandlers`` do (``vllm/v1/kv_offload/worker/cpu_gpu.py``).

Layout. ``register_kv_caches`` takes a sequence of device tensors (typically
one per layer) whose dimension 0 is the GPU block id, e.g. ``[num_gpu_blocks,
2, block_size, kv_heads, head_dim]`` (K and V *inside* a block). Each must be
contiguous, so that GPU block ``b`` of it is one run of ``block_bytes`` bytes;
the handler views it as ``uint8 [num_gpu_blocks, block_bytes]``. A layout with
K/V first (``[2, num_blocks, ...]``) is two tensors to this handler: pass
``kv[0]`` and ``kv[1]``. For every registered tensor the handler allocates a
host tensor ``uint8 [num_host_blocks, block_bytes]``, pinned when CUDA is
available (pageable host memory would make every copy synchronous and go
through a staging buffer), plain CPU memory otherwise. Host block index ``i``
(``slot * block_size_factor + j``, see the contract) is row ``i`` of each.

Batching. A call's pairs are split into *runs*: maximal stretches where both
the GPU block id and the host block index go up by one. Each run is one
slice-to-slice ``copy_`` per tensor, so a batch of consecutive blocks costs
one copy call per tensor, and every byte is read and written once (a
gather with ``index_select`` then a scatter with ``index_copy_`` moves each
byte twice through a temporary). ``strategy="gather"`` selects that
alternative; ``benchmarks/offload_copy.py`` measures both.

Completion. On CUDA, loads (host -> device) and stores (device -> host) run on
one side stream each, after the compute stream's work so far (a store must
read the KV the forward pass wrote); each direction of a transfer records an
event, ``finished_transfers`` polls ``Event.query()`` and ``wait`` synchronises
on the events. On CPU the copies are done when ``start_transfers`` returns;
their ids are reported by the next ``finished_transfers``.

This module imports torch at import time, so the plugin imports it only inside
:meth:`kvframe_cpu_offload.CPUOffloadSpec.create_transfer_handler`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import torch

__all__ = ["TorchTransferHandler", "coalesce_runs"]

Strategy = Literal["runs", "gather"]


def coalesce_runs(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Split (src, dst) pairs, in their order, into ``(src start, dst start, length)`` runs.

    A run extends while both ids go up by one, which is what a request's blocks
    usually look like (the tier hands out consecutive slots; the GPU allocator
    often consecutive blocks), so a batch is typically a handful of runs.
    """
    runs: list[tuple[int, int, int]] = []
    it = iter(pairs)
    for first in it:
        src0, dst0 = first
        length = 1
        for src, dst in it:
            if src == src0 + length and dst == dst0 + length:
                length += 1
                continue
            runs.append((src0, dst0, length))
            src0, dst0, length = src, dst, 1
        runs.append((src0, dst0, length))
    return runs


class _Transfer:
    """One ``start_transfers`` call in flight: its CUDA events (none on CPU)."""

    __slots__ = ("events",)

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def done(self) -> bool:
        return all(event.query() for event in self.events)

    def synchronize(self) -> None:
        for event in self.events:
            event.synchronize()


class TorchTransferHandler:
    """Moves GPU blocks to and from a host buffer of ``num_host_blocks`` blocks.

    :param num_host_blocks: rows of the host buffer: the tier's slots times its
        ``block_size_factor``.
    :param pin_memory: pin the host buffer; default: when CUDA is available.
    :param strategy: ``"runs"`` (slice copies of coalesced runs; the default,
        one pass over the bytes) or ``"gather"`` (one ``index_select`` and one
        ``index_copy_`` per tensor per direction).
    """

    def __init__(
        self,
        num_host_blocks: int,
        *,
        pin_memory: bool | None = None,
        strategy: Strategy = "runs",
    ) -> None:
        if num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, not {num_host_blocks}")
        if strategy not in ("runs", "gather"):
            raise ValueError(f"strategy must be 'runs' or 'gather', not {strategy!r}")
        self.num_host_blocks = num_host_blocks
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.strategy: Strategy = strategy
        self.device_caches: list[torch.Tensor] = []
        """The registered tensors viewed as ``uint8 [num_gpu_blocks, block_bytes]``."""
        self.host_caches: list[torch.Tensor] = []
        """One ``uint8 [num_host_blocks, block_bytes]`` host tensor per device tensor."""
        self.num_gpu_blocks = 0
        self._cuda_device: torch.device | None = None
        self._streams: tuple[Any, Any] | None = None
        """(load stream, store stream) on CUDA."""
        self._pending: dict[int, _Transfer] = {}
        """Transfer id -> transfer, in submission order, until reported finished."""
        self._next_id = 0
        self.bytes_loaded = 0
        self.bytes_stored = 0

    # -- registration -----------------------------------------------------

    def register_kv_caches(self, kv_caches: Sequence[Any]) -> None:
        """Take the device KV tensors (dimension 0: GPU block id) and allocate the host side."""
        if not kv_caches:
            raise ValueError("register_kv_caches needs at least one KV tensor")
        devices = {tensor.device for tensor in kv_caches}
        if len(devices) != 1:
            raise ValueError(f"the KV tensors are on several devices: {sorted(map(str, devices))}")
        num_blocks = {tensor.shape[0] for tensor in kv_caches}
        if len(num_blocks) != 1:
            raise ValueError(
                f"the KV tensors disagree on the number of GPU blocks (dimension 0): "
                f"{sorted(num_blocks)}"
            )
        device_caches: list[torch.Tensor] = []
        for i, tensor in enumerate(kv_caches):
            if not tensor.is_contiguous():
                raise ValueError(
                    f"KV tensor {i} (shape {tuple(tensor.shape)}) is not contiguous: a GPU block "
                    "must be one run of bytes (pass K and V as separate tensors if they come first)"
                )
            flat = tensor.reshape(tensor.shape[0], -1)
            device_caches.append(flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat)
        (device,) = devices
        self.num_gpu_blocks = next(iter(num_blocks))
        self.device_caches = device_caches
        self.host_caches = [
            torch.empty(
                (self.num_host_blocks, cache.shape[1]),
                dtype=torch.uint8,
                pin_memory=self.pin_memory and torch.cuda.is_available(),
            )
            for cache in device_caches
        ]
        if device.type == "cuda":
            self._cuda_device = device
            self._streams = (torch.cuda.Stream(device), torch.cuda.Stream(device))
        else:
            self._cuda_device = None
            self._streams = None

    @property
    def gpu_block_bytes(self) -> int:
        """Bytes one (GPU block, host block) pair moves: a block's bytes in every tensor."""
        return sum(cache.shape[1] for cache in self.device_caches)

    # -- transfers --------------------------------------------------------

    def start_transfers(
        self, loads: Sequence[tuple[int, int]], stores: Sequence[tuple[int, int]]
    ) -> int:
        """Copy ``loads`` host -> device and ``stores`` device -> host; return a transfer id.

        Stores are issued first: when one call has both, a store may read a GPU
        block that the compute stream wrote before a load into another block.
        """
        if (loads or stores) and not self.device_caches:
            raise RuntimeError("register_kv_caches must be called before the first transfer")
        self._check(loads, "loads")
        self._check(stores, "stores")
        events: list[Any] = []
        # (gpu, host) pairs: a store copies device[gpu] -> host[host].
        if stores:
            events.extend(self._copy(stores, to_host=True))
            self.bytes_stored += len(stores) * self.gpu_block_bytes
        if loads:
            events.extend(self._copy(loads, to_host=False))
            self.bytes_loaded += len(loads) * self.gpu_block_bytes
        job = self._next_id
        self._next_id += 1
        self._pending[job] = _Transfer(events)
        return job

    def _check(self, pairs: Sequence[tuple[int, int]], what: str) -> None:
        """Reject out-of-range ids before any byte moves (slicing would not)."""
        if not pairs:
            return
        gpu_ids = [gpu for gpu, _ in pairs]
        host_ids = [host for _, host in pairs]
        if min(gpu_ids) < 0 or max(gpu_ids) >= self.num_gpu_blocks:
            raise IndexError(
                f"{what}: a GPU block id is outside 0..{self.num_gpu_blocks - 1}: "
                f"{min(gpu_ids)}..{max(gpu_ids)}"
            )
        if min(host_ids) < 0 or max(host_ids) >= self.num_host_blocks:
            raise IndexError(
                f"{what}: a host block index is outside 0..{self.num_host_blocks - 1}: "
                f"{min(host_ids)}..{max(host_ids)}"
            )

    def _copy(self, pairs: Sequence[tuple[int, int]], *, to_host: bool) -> list[Any]:
        """Issue one direction's copies; on CUDA on its side stream, returning its event."""
        if self._streams is None:
            self._issue(pairs, to_host=to_host, non_blocking=False)
            return []
        stream = self._streams[1 if to_host else 0]
        # Order after the compute stream's work so far: a store reads KV the
        # forward pass wrote; a load must not land before earlier kernels that
        # still read the blocks' previous contents are done.
        stream.wait_stream(torch.cuda.current_stream(self._cuda_device))
        with torch.cuda.stream(stream):
            self._issue(pairs, to_host=to_host, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
        return [event]

    def _issue(
        self, pairs: Sequence[tuple[int, int]], *, to_host: bool, non_blocking: bool
    ) -> None:
        if self.strategy == "runs":
            runs = coalesce_runs(pairs)
            for device, host in zip(self.device_caches, self.host_caches, strict=True):
                for gpu, slot, n in runs:
                    if to_host:
                        host[slot : slot + n].copy_(
                            device[gpu : gpu + n], non_blocking=non_blocking
                        )
                    else:
                        device[gpu : gpu + n].copy_(
                            host[slot : slot + n], non_blocking=non_blocking
                        )
            return
        gpu_index = torch.tensor([gpu for gpu, _ in pairs], dtype=torch.long)
        host_index = torch.tensor([host for _, host in pairs], dtype=torch.long)
        if self._cuda_device is not None:
            device_index = gpu_index.to(self._cuda_device, non_blocking=non_blocking)
        else:
            device_index = gpu_index
        for device, host in zip(self.device_caches, self.host_caches, strict=True):
            if device.shape[1] % 8 == 0:
                # index_select / index_copy_ loop per element: 8-byte elements
                # are ~5x faster than bytes on CPU.
                device, host = device.view(torch.int64), host.view(torch.int64)
            if to_host:
                # Gather on the device, one copy across, scatter on the host.
                gathered = device.index_select(0, device_index)
                if gathered.device != host.device:
                    gathered = gathered.to("cpu")  # synchronous: index_copy_ reads it next
                host.index_copy_(0, host_index, gathered)
            else:
                gathered = host.index_select(0, host_index)
                if self._cuda_device is not None:
                    gathered = gathered.to(self._cuda_device, non_blocking=False)
                device.index_copy_(0, device_index, gathered)

    def finished_transfers(self) -> list[int]:
        """Ids whose copies have all landed, in submission order; each reported once."""
        done = [job for job, transfer in self._pending.items() if transfer.done()]
        for job in done:
            del self._pending[job]
        return done

    def wait(self, transfer_ids: Iterable[int]) -> None:
        """Block until these transfers have landed; the next poll still reports them."""
        for job in transfer_ids:
            transfer = self._pending.get(job)
            if transfer is not None:
                transfer.synchronize()
