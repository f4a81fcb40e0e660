"""Types an offload tier implements: the scheduler-side ledger and the worker-side mover.

These follow vLLM V1's ``OffloadingManager`` / ``OffloadingHandler`` split
(``vllm/v1/kv_offload/abstract.py``): the manager runs next to the scheduler and
never touches tensors; the handler runs on the worker and moves bytes.

Vocabulary. An *offloaded block* covers ``block_size_factor`` consecutive GPU
blocks (``OffloadManager.block_size`` tokens) and is named by the hash of its
*last* GPU block, which, hashes being chained, identifies the whole prefix up to
it. A tier has a fixed number of *slots*, each holding one offloaded block; slot
ids are what the worker side needs to find the bytes.

The ref-count lifecycle of a block in a tier (vLLM's ``BlockStatus``)::

    prepare_store ──> -1 (being written, not findable by lookup)
                        │ complete_store(success=True)      complete_store(False)
                        v                                     ──> slot freed
                        0 (ready: lookup finds it; evictable)
                        │ prepare_load ──> n > 0 (being read; not evictable)
                        │ <── complete_load (n - 1)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from kvframe.contract.records import KVEvent
    from kvframe.domain.tokens import BlockHash

__all__ = [
    "NO_TIER",
    "ConnectorSemantics",
    "NoTier",
    "OffloadContext",
    "OffloadManager",
    "PrepareStoreResult",
    "Tier",
    "TransferHandler",
    "TransferPricing",
]


@attrs.frozen(slots=True)
class ConnectorSemantics:
    """How the connector moves a tier's blocks relative to the forward pass.

    A tier chooses these (:meth:`kvframe.OffloadSpec.connector_semantics`); the
    host's connector and worker carry them out. The defaults are vLLM 0.19's
    native ``OffloadingConnector``. A connector that does otherwise -- LMCache's
    vLLM connector of vLLM 0.10 loads in ``start_load_kv`` and blocks in
    ``wait_for_save`` -- changes which requests pay for a transfer and when, so
    the same tier contents give different step times: a result depends on it.
    """

    async_load: bool = True
    """Loads overlap other requests' steps; the request waits in
    ``WAITING_FOR_REMOTE_KVS`` until its load lands. ``False``: the request is
    scheduled at once and the step it is in waits for the load before its
    forward pass (the load's transfer time adds to that step)."""
    blocking_store: bool = False
    """``False``: a step's stores start at the next step's start and overlap it.
    ``True``: the step waits at its end until its stores have landed (their
    transfer time adds to the step), and the blocks are ready at once."""
    store_outputs: bool = True
    """Store blocks of generated (decode-phase) tokens too; ``False``: only
    blocks wholly inside the prompt are stored."""


@attrs.frozen(slots=True)
class OffloadContext:
    """What the host knows when it builds a tier: block geometry and model shape."""

    gpu_block_size: int
    """Tokens per GPU block."""
    kv_bytes_per_token: int
    """KV bytes for one token across all layers (K and V) and all tensor-parallel
    ranks: what one token costs in the tier."""
    num_gpu_blocks: int
    enable_events: bool = True
    """Whether the manager records KV events for ``take_events`` (vLLM records them
    only when KV events are enabled; with no consumer they would pile up)."""

    @property
    def gpu_block_bytes(self) -> int:
        """Bytes of one GPU block of KV (all layers, K and V)."""
        return self.gpu_block_size * self.kv_bytes_per_token


@attrs.frozen(slots=True)
class PrepareStoreResult:
    """Slots to write for a store, and what was evicted to make room.

    ``block_hashes_to_store`` is the subset of the requested hashes that were not
    in the tier yet, in request order; ``slot_ids[i]`` is where the i-th of them
    goes. Both may be empty (everything was already stored), which is not a
    failure. ``evicted_block_hashes`` left the tier to make room, in eviction
    order.
    """

    block_hashes_to_store: tuple[BlockHash, ...]
    slot_ids: tuple[int, ...]
    evicted_block_hashes: tuple[BlockHash, ...]


class OffloadManager(Protocol):
    """Scheduler-side ledger of an offload tier: which blocks it holds, their states.

    Called directly by the connector on the scheduler's hot path, never through
    pluggy. Methods taking ``block_hashes`` accept any iterable; a batch names
    each hash at most once (chained hashes of one request are distinct).
    """

    @property
    def medium(self) -> str:
        """Where the tier lives (``"CPU"``); the ``medium`` of its KV events."""
        ...

    @property
    def block_size(self) -> int:
        """Tokens per offloaded block (GPU block size x block_size_factor)."""
        ...

    def lookup(self, block_hashes: Iterable[BlockHash]) -> int | None:
        """Length of the leading run of hashes that are stored and ready.

        Stops at the first hash that is absent or still being written. ``None``
        means "not known yet, ask again next step" (a remote tier may need a round
        trip); a local tier always answers.
        """
        ...

    def prepare_load(self, block_hashes: Iterable[BlockHash]) -> Sequence[int]:
        """Pin ready blocks for an in-flight load; return their slot ids, in order.

        Every hash must be stored and ready (a previous ``lookup`` said so).
        Pinned blocks are not evictable until ``complete_load``.
        """
        ...

    def touch(self, block_hashes: Iterable[BlockHash]) -> None:
        """Tell the eviction policy these blocks were used, the first most importantly.

        Separate from ``prepare_load`` so that a use served by the GPU prefix
        cache still counts. Unknown hashes are fine (an adaptive policy learns
        from hashes it evicted).
        """
        ...

    def prepare_store(self, block_hashes: Iterable[BlockHash]) -> PrepareStoreResult | None:
        """Reserve not-ready slots for the hashes not stored yet, evicting if needed.

        Eviction goes through the eviction policy, all at once, and never takes
        one of ``block_hashes`` (the batch's own blocks stay). Returns ``None``,
        with nothing changed, when not enough blocks can be evicted.
        """
        ...

    def complete_load(self, block_hashes: Iterable[BlockHash]) -> None:
        """A load finished: unpin the blocks (one pin each)."""
        ...

    def complete_store(self, block_hashes: Iterable[BlockHash], success: bool = True) -> None:
        """A store finished: its blocks become ready, or on failure are freed.

        Hashes that are not being written (already ready, or unknown) are ignored,
        so a store may be completed twice.
        """
        ...

    def take_events(self) -> Iterable[KVEvent]:
        """``BlockStored`` / ``BlockRemoved`` events since the last call, in order."""
        ...


class TransferHandler(Protocol):
    """Worker-side mover of block bytes between the device KV cache and the tier.

    Addressing. The device side is named by GPU block id. The tier side is named
    by *host block index*: an offloaded block in slot ``s`` with
    ``block_size_factor`` ``f`` occupies host block indices ``s*f .. s*f+f-1``,
    one per GPU block it covers, so every pair moves exactly one GPU block's
    bytes and a handler needs no notion of the factor (with ``f == 1`` the
    host block index is the slot id).

    A transfer is asynchronous: ``start_transfers`` returns at once, and the id
    it returned shows up in ``finished_transfers`` once the bytes have landed.
    A handler that needs the device tensors is given them by
    ``register_kv_caches`` before the first transfer.
    """

    def register_kv_caches(self, kv_caches: Sequence[Any]) -> None:
        """The device KV tensors the pairs index (dimension 0: GPU block id)."""
        ...

    def start_transfers(
        self, loads: Sequence[tuple[int, int]], stores: Sequence[tuple[int, int]]
    ) -> int:
        """Start copies; ``loads`` are (gpu block id, host block index) pairs to copy
        host -> device, ``stores`` the same pairs device -> host. Returns a transfer id."""
        ...

    def finished_transfers(self) -> Sequence[int]:
        """Ids of transfers that completed since the last call (each reported once)."""
        ...

    def wait(self, transfer_ids: Iterable[int]) -> None:
        """Block until these transfers have completed (a preemption barrier: the
        GPU blocks a store reads are about to be reused). They are still reported
        by the next ``finished_transfers``."""
        ...


class TransferPricing(Protocol):
    """A tier's own price of its transfers, in the sim's virtual time.

    A tier whose data path is not a plain copy over the preset's link (LMCache's:
    staging through pinned buffers in 256-token chunks, with per-call work)
    returns one from :meth:`kvframe.OffloadSpec.transfer_pricing`; the sim's
    transfer handler then times every transfer of the tier with it instead of
    the cost model's ``transfer_time``, and the tier view prices a load with it
    too. Called once per transfer (one request, one direction) on the worker's
    hot path: a plain method, never through pluggy.
    """

    def transfer_time(self, is_store: bool, num_gpu_blocks: int, num_bytes: int) -> float:
        """Seconds to move ``num_gpu_blocks`` GPU blocks (``num_bytes`` bytes) of one
        request in one call: device to tier if ``is_store``, else tier to device."""
        ...


class Tier(Protocol):
    """An offload tier as the engine runs it: a connector, its worker and a transfer handler.

    vLLM splits a KV connector in two: the scheduler half decides which blocks
    to load and store (``connector``, which the scheduler asks at admission,
    allocation and output), the worker half carries the decisions out around
    each forward pass (``worker``, which the executor runs), on a handler that
    moves or times the bytes (``handler``). The host's two tier builders return
    one each -- vLLM 0.19.1's ``OffloadingConnector`` and 0.33.0's job-numbered
    connector -- and :data:`NO_TIER` stands for a run without a tier, so the
    engine's loops ask the same questions in every run and never test for
    ``None``.

    The three parts are typed ``Any`` here because their classes live on floors
    above the contract (the core's ``SchedulerConnector``, the offload workers,
    the sim's transfer handler); the builders that make them know the types.
    The loops read only the members below the parts.
    """

    @property
    def connector(self) -> Any:
        """The scheduler-side connector (:class:`kvframe.core.connector.SchedulerConnector`);
        ``None`` without a tier."""
        ...

    @property
    def worker(self) -> Any:
        """The worker half the executor runs around every step; ``None`` without a tier."""
        ...

    @property
    def handler(self) -> Any:
        """The transfer handler whose clock times the transfers; ``None`` without a tier."""
        ...

    @property
    def moves_blocks(self) -> bool:
        """Whether there is a tier at all: a step that schedules nothing still runs its
        connector (vLLM's model runner does, without a forward pass)."""
        ...

    @property
    def busy(self) -> bool:
        """Transfers are planned or in flight on either half, or a finished request's
        stores are still due: the run is not over while this holds."""
        ...

    @property
    def has_deferred_stores(self) -> bool:
        """Stores wait for the next step's start to be submitted (vLLM 0.33.0 offers a
        finished request's last stores in a step that may schedule nothing): step
        again rather than wait for a transfer."""
        ...

    def next_completion(self) -> float:
        """When the earliest transfer in flight lands on the engine's clock (``inf``: none)."""
        ...

    def counters(self, hit_tokens: int, preempted_hit_tokens: int = 0) -> dict[str, int | float]:
        """The tier's counters for the run's summary (``offload_*``), given the prefix
        tokens the scheduler took from it at first admissions (``hit_tokens``) and at
        re-admissions of preempted requests (``preempted_hit_tokens``); empty without
        a tier."""
        ...


class NoTier:
    """The tier of a run without one: nothing moves, nothing is busy, nothing to count."""

    __slots__ = ()

    connector = None
    worker = None
    handler = None
    moves_blocks = False
    busy = False
    has_deferred_stores = False

    def next_completion(self) -> float:
        return math.inf

    def counters(self, hit_tokens: int, preempted_hit_tokens: int = 0) -> dict[str, int | float]:
        return {}


NO_TIER: Tier = NoTier()
"""The do-nothing :class:`Tier`: what the engine runs with when no tier is selected."""
