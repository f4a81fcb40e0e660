"""KV-cache groups: the coordinator over per-group managers, and the manager a hybrid
model's scheduler uses.

A model whose layers are all full attention has one KV-cache group; kvframe's
:class:`~kvframe.core.kv_cache_manager.KVCacheManager` serves it on its own fast
path (vLLM's ``UnitaryKVCacheCoordinator`` reduces to that arithmetic). A hybrid
model -- gpt-oss (sliding window 128 + full), Gemma 3 (five sliding-window
layers per full one), Llama 4 (chunked local + full), Mamba hybrids -- has
several groups drawing from one block pool, each with its own block table per
request. vLLM serves them through its ``HybridKVCacheCoordinator`` and one
``SingleTypeKVCacheManager`` per group; this module follows vLLM 0.19.1's
``kv_cache_coordinator.py`` and ``kv_cache_manager.py`` for that case:

* :class:`KVCacheCoordinator` asks every group's manager
  (:mod:`kvframe.core.single_type_managers`) in turn: blocks to allocate (summed
  over groups against the one free queue), prefix hits, new blocks, caching,
  freeing and :meth:`~KVCacheCoordinator.remove_skipped_blocks`;
* :meth:`KVCacheCoordinator.find_longest_cache_hit` is the fixed-point search:
  groups with equal specs are looked up together, full attention first (its
  left-to-right scan bounds the others), and every group either accepts the
  candidate length or lowers it until none does. Without prefix caching it finds
  nothing (vLLM's ``KVCacheCoordinatorNoPrefixCache``);
* :class:`HybridKVCacheManager` is the scheduler's side, with the same methods as
  the single-group manager. Block ids come per group: :meth:`~HybridKVCacheManager.get_block_ids`
  is one list per group, and :meth:`~HybridKVCacheManager.allocate_slots` returns
  ``[]`` when no group got a block, else one :class:`GroupNewBlocks` per group whose
  ``block_id`` is that group's new ids -- so the scheduler's one expression
  ``list(map(attrgetter("block_id"), new_blocks)) or None`` gives vLLM's
  ``get_block_ids(allow_none=True)`` without a branch in the scheduler.

An eviction policy under several groups (``--gpu-eviction``; the pool is
:class:`~kvframe.core.block_pool.PolicyOrderedBlockPool`) sees the blocks of
every group in one set of candidates: a key is a group's cache key
(:func:`~kvframe.core.hashing.block_hash_with_group_id`), so the same tokens are
one key per group. Blocks a sliding window (or chunk) leaves behind become idle
while their request runs and are inserted then; the blocks still inside a window
are in use and never the policy's, and a victim it was not given is refused by
the pool. ``touch(missed)`` at admission names every group's missed keys; a
policy that overrides ``on_release`` is refused (its chain positions are not
defined across groups yet).

What the hybrid path does not do yet, and refuses by name: a connector (offload
tier, P/D), the rollback of uncomputed blocks, ``on_release`` for a policy. It
always runs on the Python block pool (a note says so where the compiled core
was selected).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvframe.contract.records import BlockRemoved
from kvframe.core.block_pool import BlockPool
from kvframe.core.compiled import resolve_core
from kvframe.core.hashing import block_hash_with_group_id, group_id_of, plain_block_hash
from kvframe.core.kv_cache_manager import PrefixCacheStats
from kvframe.core.single_type_managers import SingleTypeManager, manager_for
from kvframe.core.uncomputed import UncomputedBlocks
from kvframe.domain.kv_cache_spec import FullAttentionSpec, KVCacheConfig, MambaSpec

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy
    from kvframe.contract.records import KVEvent
    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.domain.request import Request
    from kvframe.domain.tokens import BlockHash

__all__ = [
    "CountedInflightTokens",
    "GroupNewBlocks",
    "HybridKVCacheManager",
    "InflightTokens",
    "KVCacheCoordinator",
    "check_kv_cache_config",
]

GroupBlocks = tuple[Sequence["KVCacheBlock"], ...]
"""One sequence of blocks per KV-cache group (vLLM's ``KVCacheBlocks.blocks``)."""


class KVCacheCoordinator:
    """The groups' managers over one block pool (vLLM's ``HybridKVCacheCoordinator``).

    ``spec_groups`` batches groups with equal specs (looked up together), full
    attention first; ``lcm_block_size`` is the unit every hit length is a
    multiple of.
    """

    def __init__(
        self, config: KVCacheConfig, pool: BlockPool, enable_caching: bool, use_eagle: bool
    ) -> None:
        self.config = config
        self.pool = pool
        self.enable_caching = enable_caching
        self.use_eagle = use_eagle
        self.managers: tuple[SingleTypeManager, ...] = tuple(
            manager_for(group.spec, pool, enable_caching, i)
            for i, group in enumerate(config.groups)
        )
        batches: list[tuple[object, list[int], type[SingleTypeManager]]] = []
        for i, group in enumerate(config.groups):
            for spec, ids, _cls in batches:
                if spec == group.spec:
                    ids.append(i)
                    break
            else:
                batches.append((group.spec, [i], type(self.managers[i])))
        self.spec_groups = sorted(
            batches, key=lambda batch: not isinstance(batch[0], FullAttentionSpec)
        )
        self.lcm_block_size = math.lcm(*(spec.block_size for spec, _, _ in batches))  # type: ignore[attr-defined]
        first = self.spec_groups[0][0]
        self.simple_hybrid = len(self.spec_groups) == 2 and isinstance(first, FullAttentionSpec)
        """One full-attention batch and one other: a single pass of the search (vLLM)."""

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: GroupBlocks,
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks the allocation takes from the shared free queue, summed over groups."""
        return sum(
            manager.get_num_blocks_to_allocate(
                request_id,
                num_tokens,
                new_computed_blocks[i],
                total_computed_tokens,
                apply_admission_cap,
            )
            for i, manager in enumerate(self.managers)
        )

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        """Free, in every group, the blocks attention no longer reads."""
        for manager in self.managers:
            manager.remove_skipped_blocks(request_id, total_computed_tokens)

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[list[list[KVCacheBlock]], int]:
        """The longest prefix every group can serve: per-group blocks and its length.

        Each spec batch accepts the candidate length or lowers it; any lowering
        restarts the pass (lengths only fall, so it ends). Full attention's blocks
        are found once and then only truncated (a shorter prefix of a hit is a hit).
        """
        hit_length = max_cache_hit_length
        by_group: list[list[KVCacheBlock] | None] = [None] * len(self.managers)
        while True:
            current = hit_length
            for spec, group_ids, manager_cls in self.spec_groups:
                cached = by_group[group_ids[0]]
                if isinstance(spec, FullAttentionSpec) and cached is not None:
                    current = current // spec.block_size * spec.block_size  # type: ignore[attr-defined]
                    continue
                hits = manager_cls.find_longest_cache_hit(
                    block_hashes,
                    current,
                    group_ids,
                    self.pool,
                    spec,  # type: ignore[arg-type]
                    self.use_eagle,
                    self.lcm_block_size,
                )
                current = len(hits[0]) * spec.block_size  # type: ignore[attr-defined]
                for group_id, blocks in zip(group_ids, hits, strict=True):
                    by_group[group_id] = blocks
            if current >= hit_length:
                break
            hit_length = current
            if self.simple_hybrid:
                break
        spec, group_ids, _cls = self.spec_groups[0]
        if isinstance(spec, FullAttentionSpec):
            keep = hit_length // spec.block_size
            for group_id in group_ids:
                found = by_group[group_id]
                if found is not None:
                    del found[keep:]
        return [blocks if blocks is not None else [] for blocks in by_group], hit_length


class InflightTokens:
    """Tokens of each request in a step not applied yet (vLLM 0.33.0's
    ``Request.num_in_flight_tokens``), for switch G2: a sliding window moves on
    only over applied tokens. This default, for 0.19.1 and synchronous runs,
    counts none and is told nothing worth keeping."""

    __slots__ = ()

    def after_schedule(self, num_scheduled_tokens: dict[str, int]) -> None:
        """A step was scheduled (its tokens are now in flight)."""

    def after_output(self, num_scheduled_tokens: dict[str, int]) -> None:
        """The output of a step with these tokens was applied."""

    def of(self, request_id: str) -> int:
        """The request's tokens in flight."""
        return 0


class CountedInflightTokens(InflightTokens):
    """Switch G2 under asynchronous scheduling: in-flight tokens per request."""

    __slots__ = ("_tokens",)

    def __init__(self) -> None:
        self._tokens: dict[str, int] = {}

    def after_schedule(self, num_scheduled_tokens: dict[str, int]) -> None:
        tokens = self._tokens
        for request_id, n in num_scheduled_tokens.items():
            tokens[request_id] = tokens.get(request_id, 0) + n

    def after_output(self, num_scheduled_tokens: dict[str, int]) -> None:
        tokens = self._tokens
        for request_id, n in num_scheduled_tokens.items():
            left = tokens.get(request_id, 0) - n
            if left > 0:
                tokens[request_id] = left
            else:
                tokens.pop(request_id, None)

    def of(self, request_id: str) -> int:
        return self._tokens.get(request_id, 0)


class GroupNewBlocks:
    """One group's new blocks of an allocation; ``block_id`` is their ids (see the
    module docstring: the scheduler reads it as it reads a block's id)."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.blocks = blocks

    @property
    def block_id(self) -> list[int]:
        return [block.block_id for block in self.blocks]


def check_kv_cache_config(
    config: KVCacheConfig, block_size: int, enable_caching: bool, mamba_needs_align: bool
) -> None:
    """Refuse, by name, group shapes the hybrid core does not follow vLLM on (and, under
    switch G3, Mamba caching in mode "none", which vLLM 0.33.0 refuses)."""
    for i, group in enumerate(config.groups):
        spec = group.spec
        if isinstance(spec, MambaSpec):
            if spec.block_size % block_size:
                raise ValueError(
                    f"KV-cache group {i}: a Mamba group's block_size ({spec.block_size}) must "
                    f"be a multiple of the scheduler's ({block_size})"
                )
            if enable_caching and mamba_needs_align and spec.mamba_cache_mode != "align":
                raise ValueError(
                    f"KV-cache group {i}: Mamba prefix caching requires "
                    "mamba_cache_mode='align' (vLLM 0.33.0 refuses "
                    f"{spec.mamba_cache_mode!r}); turn prefix caching off"
                )
            if enable_caching and spec.mamba_cache_mode != "none":
                raise ValueError(
                    f"KV-cache group {i}: Mamba prefix caching (mamba_cache_mode "
                    f"{spec.mamba_cache_mode!r}) is not modelled yet; kvframe follows 'none'"
                )
            continue
        if spec.block_size != block_size:
            raise ValueError(
                f"KV-cache group {i} has block_size {spec.block_size}, the scheduler's is "
                f"{block_size}: groups with different block sizes are not modelled yet"
            )


class HybridKVCacheManager:
    """The scheduler's KV cache for several KV-cache groups (vLLM's ``KVCacheManager``
    over a ``HybridKVCacheCoordinator``), with the single-group manager's methods.

    Args:
        kv_cache_config: the groups and the pool's size (``num_blocks`` counts the
            null block).
        block_size: the scheduler's block size, the one request hashes use.
        max_model_len: no request gets slots beyond it.
        enable_caching: prefix caching on or off.
        enable_kv_cache_events: record KV events, each naming its group.
        use_eagle: a hit gives up its last block (vLLM's ``use_eagle``).
        uncached_freed_first: switch D (:class:`~kvframe.core.block_pool.BlockPool`).
        admission_cap_in_flight: switch G1: ``None`` (0.19.1) asks the whole sequence
            of every group at admission; else the most tokens in flight (the step
            budget times the steps in flight), which caps the windowed groups.
        inflight_tokens: switch G2 (:class:`InflightTokens`; the default counts none).
        mamba_caching_needs_align: switch G3 (refuse Mamba caching in mode "none").
        core: the core setting; the hybrid path runs on the Python pool.
    """

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        block_size: int,
        max_model_len: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        *,
        use_eagle: bool = False,
        uncached_freed_first: bool = False,
        admission_cap_in_flight: int | None = None,
        inflight_tokens: InflightTokens | None = None,
        mamba_caching_needs_align: bool = False,
        eviction_policy: EvictionPolicy | None = None,
        core: str = "auto",
    ) -> None:
        check_kv_cache_config(
            kv_cache_config, block_size, enable_caching, mamba_caching_needs_align
        )
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(
            kv_cache_config.num_blocks,
            enable_caching,
            enable_kv_cache_events,
            eviction_policy,
            uncached_freed_first=uncached_freed_first,
        )
        if self.block_pool.report_release is not None:
            raise ValueError(
                f"eviction policy {type(eviction_policy).__name__} overrides on_release, whose "
                "chain positions are not defined across KV-cache groups yet; use a policy "
                "without it for a hybrid model"
            )
        self._reports_lookups = enable_caching and eviction_policy is not None
        self._looked_up: set[str] = set()
        """Requests whose admission the policy was told of (``record_lookup``), until freed."""
        self.core = "python"
        self.core_note = (
            "KV-cache groups run on the Python block pool (the compiled core covers one group)"
            if resolve_core(core) == "compiled"
            else ""
        )
        self.coordinator = KVCacheCoordinator(
            kv_cache_config, self.block_pool, enable_caching, use_eagle
        )
        self.managers = self.coordinator.managers
        self._size_groups(admission_cap_in_flight)
        self.inflight_tokens = inflight_tokens if inflight_tokens is not None else InflightTokens()
        """Switch G2's count of tokens in flight (the async scheduler tells it)."""
        self.num_groups = len(self.managers)
        self.decode_limits: dict[str, int] = {}
        """Always empty: every allocation asks (the one-group fast path is not taken)."""
        self.prefix_cache_stats = PrefixCacheStats()
        self.uncomputed = UncomputedBlocks(rollback=False)
        """Never fed: uncomputed blocks are counted on the one-group path only (a run's
        counters read it)."""
        self._empty: GroupBlocks = tuple(() for _ in self.managers)

    def _size_groups(self, admission_cap_in_flight: int | None) -> None:
        """Each group's hash blocks per block, and its admission cap under switch G1
        (``None``: 0.19.1, no cap)."""
        for manager in self.managers:
            manager.hash_stride = manager.block_size // self.block_size
            if admission_cap_in_flight is not None:
                manager.admission_cap = manager.max_admission_blocks(
                    admission_cap_in_flight, self.max_model_len
                )

    # ----------------------------------------------------------------- state

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.get_num_free_blocks()

    @property
    def num_cached_blocks(self) -> int:
        return self.block_pool.num_cached_blocks

    @property
    def usage(self) -> float:
        return self.block_pool.get_usage()

    @property
    def req_to_blocks(self) -> dict[str, list[KVCacheBlock]]:
        """Every group's blocks of each request, group after group (counting only)."""
        return {rid: self.get_blocks(rid) for rid in self.managers[0].req_to_blocks}

    def make_prefix_cache_stats(self) -> PrefixCacheStats:
        stats = self.prefix_cache_stats
        self.prefix_cache_stats = PrefixCacheStats()
        return stats

    def take_events(self) -> list[KVEvent]:
        """KV events since the last call, each with its group (vLLM 0.33.0's fields);
        a removal names the plain block hash, not the group's cache key."""
        events = self.block_pool.take_events()
        return [
            BlockRemoved(
                block_hashes=tuple(plain_block_hash(key) for key in e.block_hashes),
                medium=e.medium,
                group_idx=group_id_of(e.block_hashes[0]),
            )
            if isinstance(e, BlockRemoved) and e.group_idx is None
            else e
            for e in events
        ]

    def get_blocks(self, request_id: str) -> list[KVCacheBlock]:
        """All the request's blocks, group after group, null blocks included."""
        return [b for m in self.managers for b in m.req_to_blocks.get(request_id, ())]

    def get_block_ids(self, request_id: str) -> list[list[int]]:
        """The request's block ids, one list per group (vLLM's tuple of lists)."""
        return [
            [block.block_id for block in m.req_to_blocks.get(request_id, ())] for m in self.managers
        ]

    def get_num_common_prefix_blocks(self, request_id: str) -> int:
        return 0  # cascade attention is not modelled for groups

    # ---------------------------------------------------------------- lookup

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        """The longest prefix cached in every group: per-group blocks, token count.

        ``((), 0)`` -- nothing found -- when caching is off or the request skips
        prefix-cache reads; at most ``num_tokens - 1`` tokens hit.
        """
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return (), 0
        blocks, num_hit = self.coordinator.find_longest_cache_hit(
            request.block_hashes, request.num_tokens - 1
        )
        self.prefix_cache_stats.record(request.num_tokens, num_hit, request.num_preemptions > 0)
        return (tuple(blocks) if any(blocks) else ()), num_hit

    # ------------------------------------------------------------ allocation

    def can_fit_full_sequence(
        self,
        request: Request,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks = (),
        num_external_computed_tokens: int = 0,
        *,
        include_max_tokens: bool = False,
    ) -> bool:
        """Could the request's whole current sequence get slots now (vLLM's admission
        gate, sliding windows and hits counted)?"""
        if include_max_tokens:
            raise ValueError("include_max_tokens is not modelled for KV-cache groups")
        local = request.num_computed_tokens + num_new_computed_tokens
        total = min(local + num_external_computed_tokens, self.max_model_len)
        full = min(request.num_tokens, self.max_model_len)
        needed = self.coordinator.get_num_blocks_to_allocate(
            request.request_id, full, new_computed_blocks or self._empty, total, True
        )
        return needed <= self.block_pool.get_num_free_blocks()

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks = (),
        num_lookahead_tokens: int = 0,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> list[GroupNewBlocks] | None:
        """Slots for ``num_new_tokens`` more tokens in every group (vLLM 0.19.1's order:
        skipped blocks freed first, then the count, hits, new blocks, caching).

        Returns ``None`` when the free blocks do not suffice (nothing changed but
        the skipped blocks freed), ``[]`` when no group got a block, else one
        :class:`GroupNewBlocks` per group.
        """
        if num_new_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError("num_new_tokens must be positive when no tokens are loaded externally")
        request_id = request.request_id
        hits = new_computed_blocks or self._empty
        local = request.num_computed_tokens + num_new_computed_tokens
        total = min(local + num_external_computed_tokens, self.max_model_len)
        need_slot = min(total + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        coordinator = self.coordinator
        # Switch G2: only applied tokens move a window on (0 in flight for 0.19.1).
        coordinator.remove_skipped_blocks(
            request_id, max(0, total - self.inflight_tokens.of(request_id))
        )
        needed = coordinator.get_num_blocks_to_allocate(
            request_id, need_slot, hits, local + num_external_computed_tokens
        )
        if needed > self.block_pool.get_num_free_blocks() - reserved_blocks:
            return None
        if self._reports_lookups and request_id not in self._looked_up:
            self._record_lookup(request)
        if new_computed_blocks or num_external_computed_tokens > 0:
            for i, manager in enumerate(self.managers):
                manager.allocate_new_computed_blocks(
                    request_id, hits[i], local, num_external_computed_tokens
                )
        new = [manager.allocate_new_blocks(request_id, need_slot) for manager in self.managers]
        if self.enable_caching and not delay_cache_blocks:
            num_to_cache = min(total + num_new_tokens, request.num_tokens)
            for manager in self.managers:
                manager.cache_blocks(request, num_to_cache)
        return [GroupNewBlocks(blocks) for blocks in new] if any(new) else []

    def _record_lookup(self, request: Request) -> None:
        """An admission: a policy-ordered pool is told the keys it missed, every group's
        (as the one-group manager tells it the hashes)."""
        self._looked_up.add(request.request_id)
        if request.skip_reading_prefix_cache:
            return
        hashes = request.block_hashes
        keys = [
            block_hash_with_group_id(h, m.group_id)
            for m in self.managers
            for h in hashes[m.hash_stride - 1 :: m.hash_stride]
        ]
        self.block_pool.record_lookup(keys)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Cache the blocks full within ``num_computed_tokens`` in every group."""
        if self.enable_caching:
            for manager in self.managers:
                manager.cache_blocks(request, num_computed_tokens)

    def new_step_starts(self) -> None:
        """A step begins (Mamba's blocks cached in the last step become usable)."""
        for manager in self.managers:
            manager.new_step_starts()

    # ------------------------------------------------------------------ free

    def preempted_mid_step(self, request: Request) -> None:
        """vLLM 0.19.1 keeps the blocks cached for tokens a same-step preemption left
        uncomputed; kvframe counts them only on the one-group path."""

    def free(self, request: Request) -> None:
        """Release the request's blocks in every group, each group tail first."""
        self._looked_up.discard(request.request_id)
        for manager in self.managers:
            manager.free(request.request_id)

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        raise ValueError("deferred frees (a connector) are not modelled for KV-cache groups")

    def free_popped(self, blocks: list[KVCacheBlock], num_tokens: int) -> None:
        raise ValueError("deferred frees (a connector) are not modelled for KV-cache groups")

    def evict_blocks(self, block_ids: Sequence[int]) -> None:
        self.block_pool.evict_blocks(block_ids)

    def reset_prefix_cache(self) -> bool:
        if not self.block_pool.reset_prefix_cache():
            return False
        self.prefix_cache_stats.reset = True
        return True
