"""One manager per KV-cache group: how each kind of layer holds its blocks.

vLLM V1 serves a hybrid model (several KV-cache groups, e.g. gpt-oss's sliding
window and full attention layers) with one ``SingleTypeKVCacheManager`` per
group over one shared block pool; its ``HybridKVCacheCoordinator``
(:mod:`kvframe.core.kv_cache_coordinator`) asks them in turn. The classes here
follow vLLM 0.19.1's ``single_type_kv_cache_manager.py`` method for method, so a
reader of either finds the other's names:

* :class:`FullAttentionManager` keeps every block of a request;
* :class:`SlidingWindowManager` frees the blocks wholly before the window while
  the request runs (:meth:`SingleTypeManager.remove_skipped_blocks`), putting the
  *null block* in their place so that block positions keep their meaning, and
  a prefix hit needs only the window's last blocks (found right to left);
* :class:`ChunkedLocalAttentionManager` does the same per attention chunk;
* :class:`MambaManager` keeps one block of state per request (vLLM's
  ``mamba_cache_mode="none"``: the group's block size is ``max_model_len``).

A block of a group is cached under :func:`~kvframe.core.hashing.block_hash_with_group_id`
(the request's hash and the group id), so the same tokens have a findable block
in each group. The single-group core (:class:`~kvframe.core.kv_cache_manager.KVCacheManager`)
keeps its own faster path and never builds these.

Invariants (per manager, per request with an entry): ``req_to_blocks[r]`` holds
``cdiv(slots allocated, block_size)`` entries, each a block with one reference
from this table or the null block; the first ``num_cached_block[r]`` entries
are cached or null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from kvframe.contract.records import BlockStored
from kvframe.core.hashing import block_hash_with_group_id
from kvframe.domain.kv_cache_spec import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
)

if TYPE_CHECKING:
    from kvframe.core.block_pool import BlockPool, KVCacheBlock
    from kvframe.domain.request import Request
    from kvframe.domain.tokens import BlockHash

__all__ = [
    "ChunkedLocalAttentionManager",
    "FullAttentionManager",
    "MambaManager",
    "SingleTypeManager",
    "SlidingWindowManager",
    "cached_blocks_of",
    "manager_for",
]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


NO_CAP = 1 << 62
"""The admission cap of a group that keeps every block (full attention, Mamba)."""


def cached_blocks_of(
    pool: BlockPool, block_hash: BlockHash, group_ids: Sequence[int]
) -> list[KVCacheBlock] | None:
    """One cached block per group of ``group_ids`` for ``block_hash``, or ``None`` when
    any of them misses (vLLM's ``BlockPool.get_cached_block`` with group ids)."""
    found = []
    get = pool.cached_block_hash_to_block.get_one_block
    for group_id in group_ids:
        block = get(block_hash_with_group_id(block_hash, group_id))
        if block is None:
            return None
        found.append(block)
    return found


class SingleTypeManager:
    """The block tables of one KV-cache group (vLLM's ``SingleTypeKVCacheManager``).

    Args:
        spec: the group's KV-cache spec.
        pool: the block pool every group shares.
        enable_caching: prefix caching on or off.
        group_id: the group's index in the KV-cache config (part of its cache key).
    """

    kind: ClassVar[str] = "abstract"

    def __init__(
        self, spec: KVCacheSpec, pool: BlockPool, enable_caching: bool, group_id: int
    ) -> None:
        self.spec = spec
        self.block_size = spec.block_size
        self.pool = pool
        self.enable_caching = enable_caching
        self.group_id = group_id
        self.null_block = pool.null_block
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_block: dict[str, int] = {}
        self.admission_cap = NO_CAP
        """The most blocks the group holds at once for one request, which vLLM 0.33.0's
        admission check counts at most (switch G1; set by the coordinator)."""
        self.hash_stride = 1
        """Request hash blocks per block of this group (the coordinator sets it for a
        group with larger blocks: a Mamba group's block is ``max_model_len``). Such a
        block is keyed by the hash of its last hash block, which chains its whole
        prefix (vLLM joins the hashes instead; no lookup can tell them apart)."""

    # ------------------------------------------------------------ allocation

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks an allocation to ``num_tokens`` slots takes from the free queue:
        new blocks beyond the table, the hits and the skipped prefix, plus hit
        blocks now free (touching them takes them out of the queue).
        ``apply_admission_cap``: the full-sequence admission check of vLLM 0.33.0
        (switch G1) counts at most :attr:`admission_cap` blocks."""
        num_required = _cdiv(num_tokens, self.block_size)
        if apply_admission_cap:
            num_required = min(num_required, self.admission_cap)
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:
            assert not new_computed_blocks, "a running request gets no new prefix hits"
            return max(num_required - num_req_blocks, 0)
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_local_computed = len(new_computed_blocks) + num_req_blocks
        num_new = max(num_required - max(num_skipped_blocks, num_local_computed), 0)
        skip_hits = max(0, num_skipped_blocks - num_req_blocks)
        num_evictable = sum(
            1 for b in new_computed_blocks[skip_hits:] if b.ref_cnt == 0 and not b.is_null
        )
        return num_new + num_evictable

    def allocate_new_computed_blocks(
        self,
        request_id: str,
        new_computed_blocks: Sequence[KVCacheBlock],
        num_local_computed_tokens: int,
        num_external_computed_tokens: int,
    ) -> None:
        """A new request's prefix hits into its table: the skipped ones as null blocks,
        the others touched; then blocks for the tokens a connector supplies."""
        if request_id in self.num_cached_block:
            assert not new_computed_blocks, "a running request gets no new prefix hits"
            return
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        assert not req_blocks, "a request with blocks cannot get new prefix hits"
        num_total = num_local_computed_tokens + num_external_computed_tokens
        num_skipped_tokens = self.get_num_skipped_tokens(num_total)
        num_skipped_blocks = num_skipped_tokens // self.block_size
        if num_skipped_blocks > 0:
            new_computed_blocks = new_computed_blocks[num_skipped_blocks:]
            num_external_computed_tokens = min(
                num_total - num_skipped_tokens, num_external_computed_tokens
            )
        if self.enable_caching:
            self.pool.touch(new_computed_blocks)
        else:
            assert not new_computed_blocks, "prefix hits while caching is disabled"
        req_blocks.extend([self.null_block] * num_skipped_blocks)
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)
        if num_external_computed_tokens > 0:
            num_more = _cdiv(num_total, self.block_size) - len(req_blocks)
            req_blocks.extend(self.pool.get_new_blocks(num_more))

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Blocks so that the table covers ``num_tokens`` slots; the new ones."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = _cdiv(num_tokens, self.block_size) - len(req_blocks)
        if num_new <= 0:
            return []
        new_blocks = self.pool.get_new_blocks(num_new)
        req_blocks.extend(new_blocks)
        return new_blocks

    # --------------------------------------------------------------- caching

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Make the request's blocks full within ``num_tokens`` findable (null blocks
        skipped), under this group's keys; one ``BlockStored`` with the group."""
        request_id = request.request_id
        num_cached = self.num_cached_block.get(request_id, 0)
        num_full = num_tokens // self.block_size
        if num_cached >= num_full:
            return
        hashes = request.block_hashes
        if self.hash_stride != 1:  # a block of several hash blocks (a Mamba group)
            hashes = hashes[self.hash_stride - 1 :: self.hash_stride]
        if len(hashes) < num_full:
            raise ValueError(
                f"request {request_id!r} has {len(hashes)} block hashes, {num_full} needed "
                f"(group {self.group_id}): was it built with a block hasher?"
            )
        blocks = self.req_to_blocks[request_id]
        pool = self.pool
        insert = pool.cached_block_hash_to_block.insert
        stored = []
        for i in range(num_cached, num_full):
            block = blocks[i]
            if block.is_null:
                continue
            if block.block_hash is not None:
                raise AssertionError(f"block {block.block_id} is already cached")
            key = block_hash_with_group_id(hashes[i], self.group_id)
            block.block_hash = key
            insert(key, block)
            pool.num_cached_blocks += 1
            stored.append(hashes[i])
        if pool.enable_kv_cache_events:
            pool.kv_event_queue.append(
                BlockStored(
                    block_hashes=tuple(stored),
                    parent_block_hash=hashes[num_cached - 1] if num_cached > 0 else None,
                    block_size=self.block_size,
                    group_idx=self.group_id,
                    kv_cache_spec_kind=self.spec.kind,
                )
            )
        self.num_cached_block[request_id] = num_full

    # ------------------------------------------------------------------ free

    def pop(self, request_id: str) -> list[KVCacheBlock]:
        """Forget the request's table; its blocks, for the caller to free."""
        self.num_cached_block.pop(request_id, None)
        return self.req_to_blocks.pop(request_id, None) or []

    def free(self, request_id: str) -> None:
        """Free the request's blocks tail first (the tail is evicted first)."""
        self.pool.free_blocks(reversed(self.pop(request_id)))

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens no future token attends to (none for full attention)."""
        return 0

    def max_admission_blocks(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """The most blocks one request holds at once in this group (vLLM 0.33.0's
        ``max_admission_blocks_per_request``): no cap unless blocks are recycled."""
        return NO_CAP

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        """Free the blocks wholly before what attention still reads, null blocks in
        their place; walks back from the last skipped block to the first null."""
        num_skipped_tokens = self.get_num_skipped_tokens(total_computed_tokens)
        if num_skipped_tokens <= 0:
            return
        blocks = self.req_to_blocks.setdefault(request_id, [])
        num_skipped_blocks = min(num_skipped_tokens // self.block_size, len(blocks))
        removed = []
        null = self.null_block
        for i in range(num_skipped_blocks - 1, -1, -1):
            if blocks[i] is null:
                break
            removed.append(blocks[i])
            blocks[i] = null
        if removed:
            self.pool.free_blocks(removed)

    def new_step_starts(self) -> None:
        """A new step begins (Mamba forgets the blocks cached in the last one)."""

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        group_ids: Sequence[int],
        pool: BlockPool,
        spec: KVCacheSpec,
        use_eagle: bool,
        alignment_tokens: int,
    ) -> tuple[list[KVCacheBlock], ...]:
        """The longest hit of at most ``max_length`` tokens, a multiple of
        ``alignment_tokens``, common to every group of ``group_ids``: one list of
        blocks (null blocks where nothing is needed) per group."""
        raise NotImplementedError


def _trim_to_alignment(
    computed: tuple[list[KVCacheBlock], ...], block_size: int, alignment_tokens: int
) -> None:
    while block_size != alignment_tokens and len(computed[0]) * block_size % alignment_tokens:
        for blocks in computed:
            blocks.pop()


class FullAttentionManager(SingleTypeManager):
    """Full attention: every block kept; the hit is the cached prefix, left to right."""

    kind = FullAttentionSpec.kind

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        group_ids: Sequence[int],
        pool: BlockPool,
        spec: KVCacheSpec,
        use_eagle: bool,
        alignment_tokens: int,
    ) -> tuple[list[KVCacheBlock], ...]:
        computed: tuple[list[KVCacheBlock], ...] = tuple([] for _ in group_ids)
        block_size = spec.block_size
        for block_hash in block_hashes[: max_length // block_size]:
            cached = cached_blocks_of(pool, block_hash, group_ids)
            if cached is None:
                break
            for blocks, block in zip(computed, cached, strict=True):
                blocks.append(block)
        if use_eagle and computed[0]:
            for blocks in computed:
                blocks.pop()
        _trim_to_alignment(computed, block_size, alignment_tokens)
        return computed


class SlidingWindowManager(SingleTypeManager):
    """Sliding-window attention: a hit needs the window's last blocks only."""

    kind = SlidingWindowSpec.kind

    def __init__(
        self, spec: KVCacheSpec, pool: BlockPool, enable_caching: bool, group_id: int
    ) -> None:
        super().__init__(spec, pool, enable_caching, group_id)
        assert isinstance(spec, SlidingWindowSpec)
        self.sliding_window = spec.sliding_window

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        group_ids: Sequence[int],
        pool: BlockPool,
        spec: KVCacheSpec,
        use_eagle: bool,
        alignment_tokens: int,
    ) -> tuple[list[KVCacheBlock], ...]:
        """Right to left: the first run of ``cdiv(window - 1, block_size)`` cached
        blocks ends the hit; before it, null blocks (vLLM's search, same order)."""
        assert isinstance(spec, SlidingWindowSpec)
        block_size = spec.block_size
        needed = _cdiv(spec.sliding_window - 1, block_size) + (1 if use_eagle else 0)
        max_num_blocks = max_length // block_size
        null = pool.null_block
        computed = tuple([null] * max_num_blocks for _ in group_ids)
        num_contiguous = 0
        match_found = False
        for i in range(max_num_blocks - 1, -1, -1):
            cached = cached_blocks_of(pool, block_hashes[i], group_ids)
            if cached is None:
                num_contiguous = 0
                continue
            if (
                num_contiguous == 0
                and block_size != alignment_tokens
                and (i + 1) * block_size % alignment_tokens != 0
            ):
                continue
            for blocks, block in zip(computed, cached, strict=True):
                blocks[i] = block
            num_contiguous += 1
            if num_contiguous >= needed:
                for blocks in computed:
                    del blocks[i + num_contiguous :]
                match_found = True
                break
        if not match_found:
            for blocks in computed:
                del blocks[num_contiguous:]
            _trim_to_alignment(computed, block_size, alignment_tokens)
        if use_eagle and computed[0]:
            for blocks in computed:
                blocks.pop()
            _trim_to_alignment(computed, block_size, alignment_tokens)
        return computed

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens before the next token's window: ``computed - window + 1``."""
        return max(0, num_computed_tokens - self.sliding_window + 1)

    def max_admission_blocks(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """The window's last ``window - 1`` tokens plus those in flight, one block more
        for a window that does not start at a block boundary."""
        tokens = min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len)
        return _cdiv(tokens, self.block_size) + 1


class ChunkedLocalAttentionManager(SingleTypeManager):
    """Chunked local attention (Llama 4): a token reads its own chunk only."""

    kind = ChunkedLocalAttentionSpec.kind

    def __init__(
        self, spec: KVCacheSpec, pool: BlockPool, enable_caching: bool, group_id: int
    ) -> None:
        super().__init__(spec, pool, enable_caching, group_id)
        assert isinstance(spec, ChunkedLocalAttentionSpec)
        self.attention_chunk_size = spec.attention_chunk_size

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        group_ids: Sequence[int],
        pool: BlockPool,
        spec: KVCacheSpec,
        use_eagle: bool,
        alignment_tokens: int,
    ) -> tuple[list[KVCacheBlock], ...]:
        """Null blocks up to the last token's chunk, then the chunk's cached prefix."""
        assert isinstance(spec, ChunkedLocalAttentionSpec)
        if use_eagle:
            raise ValueError("chunked local attention with an EAGLE drafter is not supported")
        block_size = spec.block_size
        if block_size != alignment_tokens:
            raise ValueError(
                "KV-cache groups with different block sizes are not compatible with "
                "chunked local attention (as in vLLM)"
            )
        max_num_blocks = max_length // block_size
        chunk = spec.attention_chunk_size
        start = max_length // chunk * chunk if max_length > 0 else 0
        start_block = start // block_size
        computed = tuple([pool.null_block] * start_block for _ in group_ids)
        for i in range(start_block, max_num_blocks):
            cached = cached_blocks_of(pool, block_hashes[i], group_ids)
            if cached is None:
                break
            for blocks, block in zip(computed, cached, strict=True):
                blocks.append(block)
        return computed

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens of the chunks before the next token's chunk."""
        return num_computed_tokens // self.attention_chunk_size * self.attention_chunk_size

    def max_admission_blocks(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """A chunk plus the tokens in flight."""
        tokens = min(self.attention_chunk_size + max_in_flight_tokens, max_model_len)
        return _cdiv(tokens, self.block_size)


class MambaManager(SingleTypeManager):
    """Mamba / linear-attention state: only the last computed token's state is kept.

    With vLLM's ``mamba_cache_mode="none"`` the group's block size is the model's
    length, so a request holds one block and nothing is ever skipped or cached.
    A hit is the last cached block found right to left (modes that cache state).
    """

    kind = MambaSpec.kind

    def __init__(
        self, spec: KVCacheSpec, pool: BlockPool, enable_caching: bool, group_id: int
    ) -> None:
        super().__init__(spec, pool, enable_caching, group_id)
        assert isinstance(spec, MambaSpec)
        if spec.mamba_cache_mode not in ("none", "all"):
            raise ValueError(
                f"mamba_cache_mode {spec.mamba_cache_mode!r} is not modelled (kvframe follows "
                "vLLM's 'none' and 'all'; 'align' is not done yet)"
            )
        self.cached_blocks_this_step: set[BlockHash] = set()
        self.caches_state = spec.mamba_cache_mode != "none"
        """Whether hits on Mamba state can happen (never under ``"none"``: its block is
        the model's length)."""

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        group_ids: Sequence[int],
        pool: BlockPool,
        spec: KVCacheSpec,
        use_eagle: bool,
        alignment_tokens: int,
    ) -> tuple[list[KVCacheBlock], ...]:
        computed: tuple[list[KVCacheBlock], ...] = tuple([] for _ in group_ids)
        block_size = spec.block_size
        for i in range(max_length // block_size - 1, -1, -1):
            cached = cached_blocks_of(pool, block_hashes[i], group_ids)
            if cached is None:
                continue
            if block_size != alignment_tokens and (i + 1) * block_size % alignment_tokens:
                continue
            for blocks, block in zip(computed, cached, strict=True):
                blocks.extend([pool.null_block] * i)
                blocks.append(block)
            break
        return computed

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """As the base rule, except that a hit on a block another request cached this
        step cannot be used yet: more blocks than the pool has (wait a step)."""
        if new_computed_blocks and new_computed_blocks[-1].block_hash in (
            self.cached_blocks_this_step
        ):
            return self.pool.num_gpu_blocks + 1
        return super().get_num_blocks_to_allocate(
            request_id, num_tokens, new_computed_blocks, total_computed_tokens, apply_admission_cap
        )

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Every token but the last computed one: its state is all that is needed."""
        return num_computed_tokens - 1

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        before = self.num_cached_block.get(request.request_id, 0)
        super().cache_blocks(request, num_tokens)
        if not self.caches_state:
            return
        after = self.num_cached_block.get(request.request_id, 0)
        for block in self.req_to_blocks[request.request_id][before:after]:
            if not block.is_null:
                self.cached_blocks_this_step.add(block.block_hash)  # type: ignore[arg-type]

    def new_step_starts(self) -> None:
        self.cached_blocks_this_step.clear()


_MANAGERS: dict[str, type[SingleTypeManager]] = {
    FullAttentionSpec.kind: FullAttentionManager,
    SlidingWindowSpec.kind: SlidingWindowManager,
    ChunkedLocalAttentionSpec.kind: ChunkedLocalAttentionManager,
    MambaSpec.kind: MambaManager,
}


def manager_for(
    spec: KVCacheSpec, pool: BlockPool, enable_caching: bool, group_id: int
) -> SingleTypeManager:
    """The manager of one group's spec (MLA is full attention: the same manager)."""
    try:
        cls = _MANAGERS[spec.kind]
    except KeyError:
        raise ValueError(
            f"KV-cache group {group_id}: no manager for spec {type(spec).__name__} "
            f"(kind {spec.kind!r}); kvframe has {sorted(_MANAGERS)}"
        ) from None
    return cls(spec, pool, enable_caching, group_id)
