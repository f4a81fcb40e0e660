"""Types an offload tier implements: the scheduler-side ledger and the worker-side mover.

These follow vLLM V1's ``OffloadingManager`` and ``OffloadingHandler`` split: the
manager runs next to the scheduler and never touches tensors; the handler runs on
the worker and moves bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from kvframe.events import BlockHash, KVEvent


@attrs.frozen(slots=True)
class OffloadContext:
    """What the host knows when it builds a tier: block geometry and model shape."""

    gpu_block_size: int
    """Tokens per GPU block."""
    kv_bytes_per_token: int
    """KV bytes for one token across all layers (K and V)."""
    num_gpu_blocks: int


@attrs.frozen(slots=True)
class PrepareStoreResult:
    """Slots to write for a store, and what was evicted to make room."""

    block_hashes_to_store: tuple[BlockHash, ...]
    slot_ids: tuple[int, ...]
    evicted_block_hashes: tuple[BlockHash, ...]


class OffloadManager(Protocol):
    """Scheduler-side ledger of an offload tier (which blocks it holds, ref counts)."""

    def lookup(self, block_hashes: Sequence[BlockHash]) -> int:
        """Length of the leading run of hashes that are stored and ready."""
        ...

    def prepare_load(self, block_hashes: Sequence[BlockHash]) -> Sequence[int]:
        """Pin the blocks for an in-flight load; return their slot ids."""
        ...

    def touch(self, block_hashes: Sequence[BlockHash]) -> None:
        """Feed the eviction policy a use of these blocks."""
        ...

    def prepare_store(self, block_hashes: Sequence[BlockHash]) -> PrepareStoreResult | None:
        """Allocate not-ready slots for new hashes, evicting atomically; None if impossible."""
        ...

    def complete_load(self, block_hashes: Sequence[BlockHash]) -> None: ...

    def complete_store(self, block_hashes: Sequence[BlockHash], success: bool = True) -> None: ...

    def take_events(self) -> Iterable[KVEvent]: ...


class TransferHandler(Protocol):
    """Worker-side mover of block bytes between the device KV cache and the tier."""

    def start_transfers(
        self, loads: Sequence[tuple[int, int]], stores: Sequence[tuple[int, int]]
    ) -> int:
        """Start copies of (gpu block id, tier slot id) pairs; return a transfer id."""
        ...

    def finished_transfers(self) -> Sequence[int]:
        """Ids of transfers that completed since the last call."""
        ...
