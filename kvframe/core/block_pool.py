"""The GPU block pool: block metadata, the free queue and the prefix-cache index.

Every KV block of the device cache has one :class:`KVCacheBlock` object,
created once when the pool is built and never freed: allocation hands out
existing objects, so the steady state allocates no Python objects per block.

A block is in exactly one of these states (the pool's central invariant):

* **the null block** -- block 0, a placeholder id that is never allocated,
  never cached and never in the free queue;
* **in use** -- ``ref_cnt > 0``: it appears in ``ref_cnt`` request block
  tables (a prefix-cache hit makes several requests share one block);
* **free** -- ``ref_cnt == 0``: it is in the free queue. A free block may
  still carry a ``block_hash`` and be findable in the hash index: it is then
  an *eviction candidate* that a later prefix hit can revive for free. (With
  an eviction policy, free cached blocks are the policy's instead.)

``block.block_hash is not None`` exactly when the block is in the hash index
under that hash. The index maps a hash to one block, or to a small dict of
blocks when several blocks hold the same content (the pool never de-duplicates:
a block that becomes full keeps its id even if an identical block exists, so
block tables stay append-only).

Eviction. By default the free queue *is* the eviction order, exactly as in
vLLM V1: least recently freed first, and within one request's blocks the tail
first (the manager frees a request's blocks in reverse). Allocation pops from
the head and drops the popped block's hash. Passing an
:class:`~kvframe.contract.bases.EvictionPolicy` instead builds a
:class:`PolicyOrderedBlockPool`, where the policy orders the cached blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

from kvframe.contract.records import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from kvframe.domain.tokens import BlockHash

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy
    from kvframe.domain.request import Request

__all__ = [
    "BlockHashToBlockMap",
    "BlockPool",
    "FreeKVCacheBlockQueue",
    "KVCacheBlock",
    "PolicyOrderedBlockPool",
]


class KVCacheBlock:
    """Metadata of one KV block.

    ``prev_free_block`` / ``next_free_block`` are the free queue's links; only
    :class:`FreeKVCacheBlockQueue` and the pool's allocation paths touch them,
    and both are ``None`` exactly when the block is not in the queue.
    ``block_hash`` is set while the block is findable by hash (see the module
    docstring).
    """

    __slots__ = (
        "block_hash",
        "block_id",
        "is_null",
        "next_free_block",
        "prev_free_block",
        "ref_cnt",
    )

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None
        self.is_null = False

    def __repr__(self) -> str:
        # Print neighbour ids, not neighbours: printing the links would recurse.
        prev_id = self.prev_free_block.block_id if self.prev_free_block is not None else None
        next_id = self.next_free_block.block_id if self.next_free_block is not None else None
        return (
            f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, "
            f"block_hash={self.block_hash!r}, prev={prev_id}, next={next_id})"
        )


class FreeKVCacheBlockQueue:
    """The free blocks as a doubly-linked list threaded through the blocks.

    Why not ``collections.deque``: a prefix-cache hit must pull a free block
    out of the *middle* of the queue (it is no longer an eviction candidate),
    which is O(n) on a deque. Linking the blocks themselves makes popleft,
    append and remove O(1), and since the links are slots on objects that
    already exist, no operation allocates anything.

    Two sentinel blocks (id ``-1``) bracket the list, so every real block
    always has a real ``prev`` and ``next``: no operation branches on "is this
    the first / last block". The sentinels are never handed out.

    Order: the queue starts in block-id order; freed blocks are appended, so
    the head is the least recently freed block -- the next to be reused and,
    if it is cached, the next to lose its hash.
    """

    __slots__ = ("head", "num_free_blocks", "tail")

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.head = KVCacheBlock(-1)
        self.tail = KVCacheBlock(-1)
        self.head.next_free_block = self.tail
        self.tail.prev_free_block = self.head
        self.num_free_blocks = 0
        self.append_n(blocks)

    def popleft(self) -> KVCacheBlock:
        """Remove and return the head block. Raises ``ValueError`` when empty."""
        block = self.head.next_free_block
        assert block is not None
        if block is self.tail:
            raise ValueError("no free blocks available")
        successor = block.next_free_block
        assert successor is not None
        self.head.next_free_block = successor
        successor.prev_free_block = self.head
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1
        return block

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Remove and return the first ``n`` blocks in queue order.

        Walks the ``n`` blocks once, clearing their links, and splices the
        head sentinel to the block after them. Raises ``ValueError`` if fewer
        than ``n`` blocks are free (and then changes nothing).
        """
        if n <= 0:
            return []
        if n > self.num_free_blocks:
            raise ValueError(f"cannot pop {n} blocks, only {self.num_free_blocks} free")
        popped: list[KVCacheBlock] = []
        append = popped.append
        block = self.head.next_free_block
        for _ in range(n):
            assert block is not None
            append(block)
            following = block.next_free_block
            block.prev_free_block = block.next_free_block = None
            block = following
        assert block is not None
        self.head.next_free_block = block
        block.prev_free_block = self.head
        self.num_free_blocks -= n
        return popped

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` from anywhere in the queue in O(1).

        Raises ``RuntimeError`` if the block is not in the queue.
        """
        prev_block = block.prev_free_block
        next_block = block.next_free_block
        if prev_block is None or next_block is None:
            raise RuntimeError(f"remove() of a block that is not free: {block!r}")
        prev_block.next_free_block = next_block
        next_block.prev_free_block = prev_block
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Add ``block`` at the tail (it will be reused last)."""
        last = self.tail.prev_free_block
        assert last is not None
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = self.tail
        self.tail.prev_free_block = block
        self.num_free_blocks += 1

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Add ``blocks`` at the head, in order (``blocks[0]`` becomes the head)."""
        if not blocks:
            return
        first = self.head.next_free_block
        assert first is not None
        prev = self.head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Add ``blocks`` at the tail, in order (``blocks[0]`` is reused first)."""
        if not blocks:
            return
        last = self.tail.prev_free_block
        assert last is not None
        for block in blocks:
            last.next_free_block = block
            block.prev_free_block = last
            last = block
        last.next_free_block = self.tail
        self.tail.prev_free_block = last
        self.num_free_blocks += len(blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """All free blocks, head first. O(n); for tests and debugging."""
        blocks: list[KVCacheBlock] = []
        block = self.head.next_free_block
        while block is not None and block is not self.tail:
            blocks.append(block)
            block = block.next_free_block
        return blocks

    def __len__(self) -> int:
        return self.num_free_blocks


class BlockHashToBlockMap:
    """Hash -> cached block(s).

    Almost every hash maps to a single block, stored directly; only when a
    second block with the same hash is cached does the entry become a
    ``{block_id: block}`` dict (insertion-ordered, so "the first block" is the
    one cached first). Keeping the common case dict-free saves one dict per
    cached block (memory and garbage-collector work). The pool's hot paths
    read ``_index`` directly for the single-block case.
    """

    __slots__ = ("_index", "_last_hashes", "_last_hits", "_num_shared")

    _PROBE = 64
    """Hashes looked up per C-level batch in :meth:`get_prefix`."""

    def __init__(self) -> None:
        self._index: dict[BlockHash, KVCacheBlock | dict[int, KVCacheBlock]] = {}
        # Entries in dict form (a hash cached in several blocks).
        self._num_shared = 0
        # The hash list of the last get_prefix and how many of it hit: a hint
        # for the first batch when the same list is looked up again.
        self._last_hashes: Sequence[BlockHash] | None = None
        self._last_hits = 0

    def get_one_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        """The first block cached under ``block_hash``, or ``None``."""
        entry = self._index.get(block_hash)
        if isinstance(entry, dict):
            return next(iter(entry.values()))
        return entry

    def get_prefix(
        self, block_hashes: Sequence[BlockHash], max_num_blocks: int
    ) -> list[KVCacheBlock]:
        """One block per hash for the leading hashes found, up to the first miss.

        Looks hashes up in batches of ``_PROBE`` with ``map`` (C speed), so a
        long hit costs little more than the dict lookups themselves, and a
        miss wastes at most one batch of lookups. The blocked head of the
        waiting queue is looked up again every step with the same hash list:
        its first batch is then one more than its last hit count, so a repeat
        that hits as before does one wasted lookup, not up to 63. The batch
        sizes change only the work, never the result.
        """
        end = min(max_num_blocks, len(block_hashes))
        index_get = self._index.get
        found: list[KVCacheBlock | dict[int, KVCacheBlock] | None] = []
        size = self._last_hits + 1 if block_hashes is self._last_hashes else self._PROBE
        start = 0
        while start < end:
            stop = min(start + size, end)
            batch = list(map(index_get, block_hashes[start:stop]))
            if None in batch:
                found += batch[: batch.index(None)]
                break
            found += batch
            start = stop
            size = self._PROBE
        self._last_hashes = block_hashes
        self._last_hits = len(found)
        if self._num_shared:  # rare: some hashes are cached in several blocks
            return [next(iter(e.values())) if isinstance(e, dict) else e for e in found]  # type: ignore[misc]
        return found  # type: ignore[return-value]

    def insert(self, block_hash: BlockHash, block: KVCacheBlock) -> None:
        entry = self._index.get(block_hash)
        if entry is None:
            self._index[block_hash] = block
        elif isinstance(entry, dict):
            entry[block.block_id] = block
        else:
            self._index[block_hash] = {entry.block_id: entry, block.block_id: block}
            self._num_shared += 1

    def pop(self, block_hash: BlockHash, block_id: int) -> KVCacheBlock | None:
        """Remove block ``block_id`` from ``block_hash``'s entry; ``None`` if absent."""
        entry = self._index.get(block_hash)
        if entry is None:
            return None
        if not isinstance(entry, dict):
            if entry.block_id != block_id:
                return None
            del self._index[block_hash]
            return entry
        block = entry.pop(block_id, None)
        if len(entry) == 1:
            # Back to the common single-block form.
            (self._index[block_hash],) = entry.values()
            self._num_shared -= 1
        return block

    def get_all_blocks(self, block_hash: BlockHash) -> list[KVCacheBlock]:
        """Every block cached under ``block_hash``, first cached first."""
        entry = self._index.get(block_hash)
        if entry is None:
            return []
        if isinstance(entry, dict):
            return list(entry.values())
        return [entry]

    def hashes(self) -> list[BlockHash]:
        return list(self._index)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._index

    def __len__(self) -> int:
        """Number of distinct hashes (not blocks)."""
        return len(self._index)


class BlockPool:
    """Allocates, frees and caches the blocks of one device KV cache.

    Args:
        num_gpu_blocks: blocks in the cache, including the null block.
        enable_caching: keep full blocks findable by hash after they are freed.
        enable_kv_cache_events: record :class:`~kvframe.contract.records.BlockStored` /
            :class:`~kvframe.contract.records.BlockRemoved` /
            :class:`~kvframe.contract.records.AllBlocksCleared` for :meth:`take_events`.
        uncached_freed_first: vLLM 0.33's rule for freed blocks (the
            :class:`~kvframe.domain.fidelity.Fidelity` switch D): a block without
            a hash -- every block when caching is off -- goes to the front of
            the free queue, so it is reused before any cached block is evicted.
            Chosen here, once: ``BlockPool(...)`` then returns an
            :class:`UncachedFirstBlockPool`, whose :meth:`free_blocks` is that
            rule (the compiled core has the same pair of classes).
        eviction_policy: ``None`` for vLLM's LRU (the free queue's order).
            Otherwise an :class:`~kvframe.contract.bases.EvictionPolicy` built with
            ``capacity=num_gpu_blocks``; ``BlockPool(...)`` then returns a
            :class:`PolicyOrderedBlockPool`. The choice is made here, once, so
            the default path carries no per-call branch for it.

    Why a null block: block tables are lists of block ids with no hole
    marker, so a placeholder id that never holds real KV (block 0) is
    reserved up front. It is taken out of the free queue at construction,
    never cached, and its ``ref_cnt`` is not maintained.

    ``num_cached_blocks`` counts the blocks findable by hash right now (free
    or in use).
    """

    report_release: Callable[[Sequence[KVCacheBlock], int, int], None] | None = None
    """Called by :meth:`KVCacheManager.free` after a request's blocks are freed, with
    them in prefix order, the request's length and the block size; only a policy
    that overrides ``on_release`` sets it (:class:`PolicyOrderedBlockPool`)."""

    def __new__(
        cls,
        num_gpu_blocks: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        eviction_policy: EvictionPolicy | None = None,
        *,
        uncached_freed_first: bool = False,
    ) -> BlockPool:
        if cls is BlockPool:
            if eviction_policy is not None:
                cls = PolicyOrderedBlockPool
            elif uncached_freed_first:
                cls = UncachedFirstBlockPool
        return super().__new__(cls)

    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        eviction_policy: EvictionPolicy | None = None,
        *,
        uncached_freed_first: bool = False,
    ) -> None:
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be at least 1, got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        self.blocks: list[KVCacheBlock] = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.num_cached_blocks = 0
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.kv_event_queue: list[KVEvent] = []
        self.uncached_freed_first = uncached_freed_first

    # ---------------------------------------------------------------- lookup

    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        """A block cached under ``block_hash`` (free or in use), or ``None``."""
        return self.cached_block_hash_to_block.get_one_block(block_hash)

    def get_cached_prefix(
        self, block_hashes: Sequence[BlockHash], max_num_blocks: int
    ) -> list[KVCacheBlock]:
        """Blocks of the longest cached prefix of ``block_hashes[:max_num_blocks]``.

        Stops at the first miss: hashes chain, so nothing after a miss can
        be cached under the same prefix.
        """
        return self.cached_block_hash_to_block.get_prefix(block_hashes, max_num_blocks)

    def record_lookup(self, block_hashes: Sequence[BlockHash]) -> None:
        """A request is being admitted with these block hashes.

        The default pool learns nothing from lookups (vLLM's LRU is ordered
        by release alone); :class:`PolicyOrderedBlockPool` reports the misses
        to its policy.
        """

    # --------------------------------------------------------------- caching

    def cache_full_blocks(
        self,
        request: Request,
        blocks: Sequence[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
    ) -> None:
        """Make ``blocks[num_cached_blocks:num_full_blocks]`` findable by hash.

        ``blocks`` is the request's whole block table; the blocks in the range
        have just become full and must not be cached yet. Their hashes are
        the request's ``block_hashes`` at the same positions (computed when
        the tokens were appended). Emits one ``BlockStored`` for the range.
        """
        if num_cached_blocks >= num_full_blocks:
            return
        block_hashes = request.block_hashes
        if len(block_hashes) < num_full_blocks:
            raise ValueError(
                f"request {request.request_id!r} has {len(block_hashes)} block hashes, "
                f"{num_full_blocks} needed: was it built with a block hasher?"
            )
        index_map = self.cached_block_hash_to_block
        if num_full_blocks - num_cached_blocks == 1:
            # One block (a decode step filled it; half of all calls): no slices, no maps.
            block = blocks[num_cached_blocks]
            block_hash = block_hashes[num_cached_blocks]
            if block.block_hash is not None:
                raise AssertionError(f"block {block.block_id} is already cached")
            block.block_hash = block_hash
            if index_map._index.setdefault(block_hash, block) is not block:
                index_map.insert(block_hash, block)  # a duplicate: rare
            self.num_cached_blocks += 1
            if self.enable_kv_cache_events:
                self._record_stored(block_hashes, num_cached_blocks, num_full_blocks, block_size)
            return
        new_blocks = blocks[num_cached_blocks:num_full_blocks]
        new_hashes = block_hashes[num_cached_blocks:num_full_blocks]
        for block, block_hash in zip(new_blocks, new_hashes, strict=True):
            if block.block_hash is not None:
                raise AssertionError(f"block {block.block_id} is already cached")
            block.block_hash = block_hash
        # The common case at C speed, one dict probe per block: setdefault
        # indexes every hash not cached yet and returns, for a hash already
        # cached (or repeated within the range), the block that holds it.
        held = list(map(index_map._index.setdefault, new_hashes, new_blocks))
        if held != new_blocks:  # compares identities first: equal unless a hash was cached
            for block, block_hash, holder in zip(new_blocks, new_hashes, held, strict=True):
                if holder is not block:
                    index_map.insert(block_hash, block)  # a duplicate: rare
        self.num_cached_blocks += num_full_blocks - num_cached_blocks
        if self.enable_kv_cache_events:
            self._record_stored(block_hashes, num_cached_blocks, num_full_blocks, block_size)

    def _record_stored(
        self,
        block_hashes: Sequence[BlockHash],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
    ) -> None:
        """One ``BlockStored`` event for the blocks just cached."""
        self.kv_event_queue.append(
            BlockStored(
                block_hashes=tuple(block_hashes[num_cached_blocks:num_full_blocks]),
                parent_block_hash=block_hashes[num_cached_blocks - 1]
                if num_cached_blocks > 0
                else None,
                block_size=block_size,
            )
        )

    def _drop_hash(self, block: KVCacheBlock) -> None:
        """Make a cached block unfindable (its KV is about to be overwritten)."""
        block_hash = block.block_hash
        assert block_hash is not None
        self.cached_block_hash_to_block.pop(block_hash, block.block_id)
        block.block_hash = None
        self.num_cached_blocks -= 1
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(BlockRemoved(block_hashes=(block_hash,)))

    # ------------------------------------------------------------ allocation
    #
    # get_new_blocks, touch and free_blocks splice the free queue's links
    # inline instead of calling its methods once per block: a Python method
    # call costs as much as the splice itself, and these three run for every
    # block of every request. They keep the queue's invariants exactly (the
    # state-machine test walks the links both ways after every step).

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take ``num_blocks`` free blocks, each with ``ref_cnt == 1``.

        Blocks come from the head of the free queue; one that is still cached
        loses its hash (a ``BlockRemoved`` event), because its KV will be
        overwritten. The prefix cache is *not* consulted: hits are found by
        the manager beforehand. Raises ``ValueError`` if not enough blocks are
        free.
        """
        queue = self.free_block_queue
        if num_blocks > queue.num_free_blocks:
            raise ValueError(
                f"cannot get {num_blocks} free blocks, only {queue.num_free_blocks} free"
            )
        if num_blocks <= 0:
            return []
        blocks: list[KVCacheBlock] = []
        append = blocks.append
        block = queue.head.next_free_block
        if self.enable_caching:
            index = self.cached_block_hash_to_block._index
            index_pop = index.pop
            events = self.kv_event_queue if self.enable_kv_cache_events else None
            num_dropped = 0
            for _ in range(num_blocks):
                # (A None block would fail on its first attribute: the count
                # was checked against num_free_blocks above.)
                following = block.next_free_block  # type: ignore[union-attr]
                block.prev_free_block = block.next_free_block = None  # type: ignore[union-attr]
                block_hash = block.block_hash  # type: ignore[union-attr]
                if block_hash is not None:  # evict: its KV is about to be overwritten
                    entry = index_pop(block_hash)
                    if entry is not block:
                        # Several blocks share the hash: put the entry back and
                        # take out only this block (rare).
                        index[block_hash] = entry
                        shared_pop = self.cached_block_hash_to_block.pop
                        shared_pop(block_hash, block.block_id)  # type: ignore[union-attr]
                    block.block_hash = None  # type: ignore[union-attr]
                    num_dropped += 1
                    if events is not None:
                        events.append(BlockRemoved(block_hashes=(block_hash,)))
                block.ref_cnt = 1
                append(block)
                block = following
            self.num_cached_blocks -= num_dropped
        else:
            for _ in range(num_blocks):
                following = block.next_free_block  # type: ignore[union-attr]
                block.prev_free_block = block.next_free_block = None
                block.ref_cnt = 1
                append(block)
                block = following
        assert block is not None
        queue.head.next_free_block = block
        block.prev_free_block = queue.head
        queue.num_free_blocks -= num_blocks
        return blocks

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take one more reference on each block (a prefix-cache hit).

        A block at ``ref_cnt == 0`` is an eviction candidate sitting in the
        free queue; it leaves the queue so it cannot be evicted while in use.
        """
        num_removed = 0
        for block in blocks:
            if block.ref_cnt == 0 and not block.is_null:
                prev_block = block.prev_free_block
                next_block = block.next_free_block
                if prev_block is None or next_block is None:
                    self.free_block_queue.num_free_blocks -= num_removed
                    raise RuntimeError(f"touch() of a free block not in the free queue: {block!r}")
                prev_block.next_free_block = next_block
                next_block.prev_free_block = prev_block
                block.prev_free_block = block.next_free_block = None
                num_removed += 1
            block.ref_cnt += 1
        self.free_block_queue.num_free_blocks -= num_removed

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference on each block; blocks reaching zero become free.

        ``ordered_blocks`` is in eviction order: the first block to reach zero
        is appended first and so is reused (evicted) first. The manager passes
        a request's blocks tail first, because a tail block is the least
        likely to be shared: its hash chains through every block before it.
        """
        queue = self.free_block_queue
        tail = queue.tail
        last = tail.prev_free_block
        assert last is not None
        num_freed = 0
        for block in ordered_blocks:
            ref_cnt = block.ref_cnt - 1
            block.ref_cnt = ref_cnt
            if ref_cnt == 0 and not block.is_null:
                last.next_free_block = block
                block.prev_free_block = last
                last = block
                num_freed += 1
        last.next_free_block = tail
        tail.prev_free_block = last
        queue.num_free_blocks += num_freed

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        """Drop the hashes of the given blocks (e.g. their KV failed to load).

        Blocks stay where they are (in use or free); only their prefix-cache
        entries go. Blocks without a hash are ignored.
        """
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.block_hash is not None:
                self._drop_hash(block)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash, if no block is in use.

        Returns ``False`` (and changes nothing) while any request holds
        blocks; the caller decides whether to report that.
        """
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:  # the null block
            return False
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        for block in self.blocks:
            block.block_hash = None
        self.num_cached_blocks = 0
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True

    # ----------------------------------------------------------------- state

    def get_num_free_blocks(self) -> int:
        """Blocks an allocation could take now: free ones, cached or not."""
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """Fraction of the usable blocks (null block excluded) in use."""
        usable = self.num_gpu_blocks - 1
        if usable == 0:
            return 0.0
        return 1.0 - self.get_num_free_blocks() / usable

    def take_events(self) -> list[KVEvent]:
        """Return and clear the recorded KV events (always ``[]`` when disabled)."""
        if not self.enable_kv_cache_events:
            return []
        events = self.kv_event_queue
        self.kv_event_queue = []
        return events


_NOTHING_PROTECTED: frozenset[object] = frozenset()


def gpu_eviction_problem(policy: object) -> str | None:
    """Why ``policy`` cannot order the GPU prefix cache, or ``None`` if it can.

    The refusal rule (:attr:`kvframe.contract.bases.EvictionPolicy.may_refuse`): the GPU
    tier asks ``evict(n, set())`` only when ``n`` blocks it gave the policy are
    idle, and cannot go on if the answer is ``None``; a policy that declares it
    may refuse anyway is turned away here, when it is selected, rather than
    failing an allocation in the middle of a run.
    """
    if not getattr(policy, "may_refuse", False):
        return None
    name = getattr(type(policy), "name", "") or type(policy).__qualname__
    return (
        f"eviction policy {name!r} declares may_refuse = True (its evict may return None "
        "although enough idle blocks exist), which only an offload tier can accept: the GPU "
        "prefix cache (--gpu-eviction) cannot go on without the blocks it asked for. Use it "
        "for an offload tier (--eviction / cpu:eviction=...), or pick a policy that never "
        "refuses (e.g. lru, arc:variant=paper)"
    )


def _overrides_on_release(policy: EvictionPolicy) -> bool:
    """Whether ``policy`` (or the policy a wrapper passes calls to) overrides
    :meth:`~kvframe.contract.bases.EvictionPolicy.on_release`."""
    from kvframe.contract.bases import EvictionPolicy

    on_release = getattr(policy, "on_release", None)
    return on_release is not None and (
        getattr(on_release, "__func__", None) is not EvictionPolicy.on_release
    )


def _hit_notifier(policy: EvictionPolicy) -> Callable[[Hashable], None]:
    """``policy.on_hit``, or ``policy.remove`` when ``on_hit`` is the base class's default.

    The default ``on_hit`` only calls ``remove``: calling ``remove`` directly
    gives the same calls (vLLM's order with ``lru``) one Python call cheaper.
    A wrapper that is not an :class:`~kvframe.contract.bases.EvictionPolicy`
    (the conformance suite's recorder) is taken at its word.
    """
    from kvframe.contract.bases import EvictionPolicy

    on_hit = getattr(policy, "on_hit", None)
    if on_hit is None or getattr(on_hit, "__func__", None) is EvictionPolicy.on_hit:
        return policy.remove
    return on_hit  # type: ignore[no-any-return]



class UncachedFirstBlockPool(BlockPool):
    """The default pool under vLLM 0.33's free-queue rule (switch D of
    :class:`~kvframe.domain.fidelity.Fidelity`, ``uncached_freed_first``).

    Why a subclass: the rule is a difference between vLLM releases in the
    per-block free loop, and a class chosen once when the pool is built keeps
    that loop free of a per-call test in both cores (the compiled core's
    ``CompiledUncachedFirstBlockPool`` mirrors it). ``BlockPool(...,
    uncached_freed_first=True)`` returns one.
    """

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """:meth:`BlockPool.free_blocks` under vLLM 0.33's rule (vLLM PRs #42656, #51482).

        Blocks reaching zero that carry no hash (or every one, with caching
        off) are put at the *front* of the queue in the order given, so they
        are reused first and the cached blocks behind them survive longer;
        cached blocks are appended as before.
        """
        caching = self.enable_caching
        first: list[KVCacheBlock] = []
        last: list[KVCacheBlock] = []
        for block in ordered_blocks:
            ref_cnt = block.ref_cnt - 1
            block.ref_cnt = ref_cnt
            if ref_cnt == 0 and not block.is_null:
                if block.block_hash is None or not caching:
                    first.append(block)
                else:
                    last.append(block)
        queue = self.free_block_queue
        queue.prepend_n(first)
        queue.append_n(last)


class PolicyOrderedBlockPool(BlockPool):
    """A block pool whose cached blocks are evicted in an eviction policy's order.

    Built by ``BlockPool(..., eviction_policy=policy)``. The free blocks are
    split in two:

    * free blocks *without* a hash stay in the free queue (FIFO, as above);
    * free blocks *with* a hash are the policy's eviction candidates.

    Allocation takes uncached free blocks first and asks
    ``policy.evict(n, frozenset())`` only for the rest, so a cached block is
    never evicted while an uncached block is free. (vLLM's LRU can evict a
    cached block at the head of its queue while an uncached one waits behind
    it; compare a policy with ``--gpu-eviction lru``, which has the same
    structure, to isolate the policy's effect.)

    The GPU-tier contract -- what the policy sees:

    * **Keys are content.** A key is a block hash. The policy holds exactly
      the content that is cached, idle and evictable now -- what vLLM's free
      queue holds, minus the uncached blocks -- so every block it is given has
      ``ref_cnt == 0`` and ``evict`` never has to skip anything: in-use blocks
      cost it nothing. Content that comes back after an eviction comes back
      under the same key (whatever block id holds it now), so ghost entries
      (ARC's B1/B2, S3-FIFO's ghost queue) recognise it.
    * ``insert(hash, block)`` when a cached block's last reference is
      dropped (release order: a request's tail block first, as vLLM frees),
      immediately followed by ``touch([hash])`` if a prefix hit took the block
      since it was last idle: the content was used by more than one request.
    * ``on_hit(hash)`` when a prefix hit takes an idle cached block (it is in
      use now, not evictable, but its content stays cached and comes back
      with ``insert`` when idle). The base class's default is ``remove``, so a
      policy that does not override it sees exactly the calls it saw before
      :meth:`~kvframe.contract.bases.EvictionPolicy.on_hit` existed; one that
      does keeps its per-key history across the hit (a use count: without it
      a frequency policy orders as LRU does on this tier).
    * ``remove(hash)`` when a hash is dropped other than by ``evict``
      (:meth:`evict_blocks`, :meth:`reset_prefix_cache`). A removal is not an
      eviction: policies leave no ghost for it.
    * ``touch(missed)`` once per admission (:meth:`record_lookup`): the
      request's block hashes that are not cached on the GPU -- the misses,
      in prefix order. This is the offload connector's touch-before-lookup:
      unknown keys are ignored, and a ghost key tells an adaptive policy it
      evicted something too early (vLLM's ARC moves its target there).
    * ``evict(n, frozenset())`` when allocation needs ``n`` cached blocks. It
      must succeed: every held block is idle and nothing is protected.
    * ``on_release(chain, num_tokens)`` after a request's blocks are freed
      (:attr:`report_release`, called by ``KVCacheManager.free``), only if the
      policy overrides it: the keys that release just inserted, in the
      request's prefix order, each with its first token's position.

    Duplicates. Two blocks can hold the same content: a request whose whole
    prompt is cached still recomputes its last block (the hit is capped at
    ``num_tokens - 1``), so that block is cached a second time. When a block
    becomes idle while another idle block already holds its hash, its key is
    ``(block_hash, block_id)`` instead: each idle block stays one entry, so
    an LRU keeps vLLM's order exactly, while the content's main entry keeps
    its history. :attr:`evictable` maps every key to its block.

    Why this reproduces vLLM with ``lru``: the default pool's eviction order
    is release order, and an LRU policy fed inserts in release order evicts
    in release order; a touch right after an insert moves nothing, touches of
    missed keys find nothing, and a prefix hit takes a block out of both
    (``lru`` keeps the default ``on_hit``, a ``remove``).
    Tested on block-aligned workloads, where every freed block is full:
    identical block ids and events.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        eviction_policy: EvictionPolicy | None = None,
        *,
        uncached_freed_first: bool = False,
    ) -> None:
        if eviction_policy is None:
            raise ValueError("PolicyOrderedBlockPool needs an eviction_policy")
        problem = gpu_eviction_problem(eviction_policy)
        if problem is not None:
            raise ValueError(problem)
        super().__init__(
            num_gpu_blocks,
            enable_caching,
            enable_kv_cache_events,
            uncached_freed_first=uncached_freed_first,
        )
        # Uncached freed blocks: reused most recently freed first under vLLM 0.33's rule.
        queue = self.free_block_queue
        self._queue_uncached = queue.prepend_n if uncached_freed_first else queue.append_n
        self.eviction_policy = eviction_policy
        self.evictable: dict[Hashable, KVCacheBlock] = {}
        """Idle cached blocks by policy key, in release order: exactly the policy's keys."""
        # Ids of cached blocks a prefix hit took since they were last idle.
        self._hit_block_ids: set[int] = set()
        self._on_hit = _hit_notifier(eviction_policy)
        self.report_release = (
            self._report_release if _overrides_on_release(eviction_policy) else None
        )
        """What :meth:`KVCacheManager.free` calls after freeing a request's blocks:
        ``None`` unless the policy overrides ``on_release`` (chosen once here, so a
        policy that does not pays one branch per request freed, nothing per block)."""
        """What a prefix hit on an idle cached block calls: the policy's ``on_hit``, or its
        ``remove`` directly when ``on_hit`` is the base's default (which calls ``remove``),
        chosen once here so that a hit costs no branch and no extra call."""

    @property
    def num_evictable_cached_blocks(self) -> int:
        """Idle cached blocks (held by the policy)."""
        return len(self.evictable)

    def record_lookup(self, block_hashes: Sequence[BlockHash]) -> None:
        """A request is admitted: tell the policy which of its blocks missed.

        Called once per admission, before the hits are taken, with the
        request's block hashes. The hashes cached on the GPU (hits, and the
        rare cached block after a miss) are left out: touching an idle cached
        block would reorder it although nobody used it.
        """
        index = self.cached_block_hash_to_block
        missed = [block_hash for block_hash in block_hashes if block_hash not in index]
        if missed:
            self.eviction_policy.touch(missed)

    def _key_of(self, block: KVCacheBlock, block_hash: BlockHash) -> Hashable:
        """The policy key of an idle cached block."""
        return (
            block_hash if self.evictable.get(block_hash) is block else (block_hash, block.block_id)
        )

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Uncached free blocks first, then blocks the policy evicts."""
        if num_blocks > self.get_num_free_blocks():
            raise ValueError(
                f"cannot get {num_blocks} free blocks, only {self.get_num_free_blocks()} free"
            )
        queue = self.free_block_queue
        from_queue = min(num_blocks, queue.num_free_blocks)
        num_to_evict = num_blocks - from_queue
        victims: list[KVCacheBlock] = []
        if num_to_evict > 0:
            victims = self._evict(num_to_evict)
        blocks = queue.popleft_n(from_queue)
        for victim in victims:
            self._drop_hash(victim)
            self._hit_block_ids.discard(victim.block_id)
        blocks += victims
        for block in blocks:
            block.ref_cnt = 1
        return blocks

    def _evict(self, n: int) -> list[KVCacheBlock]:
        """Ask the policy for ``n`` victims and check them before anything changes."""
        policy = self.eviction_policy
        victims = policy.evict(n, _NOTHING_PROTECTED)
        where = f"{type(policy).__name__}.evict({n}, frozenset()) on the GPU prefix cache"
        if victims is None or len(victims) != n:
            got = "None" if victims is None else f"{len(victims)} victims"
            raise RuntimeError(
                f"{where} returned {got} although it holds {len(self.evictable)} idle "
                "blocks and nothing is protected: it must return exactly n victims"
            )
        evictable = self.evictable
        blocks: list[KVCacheBlock] = []
        for key, victim in victims:
            block = evictable.get(key)  # type: ignore[arg-type]
            if block is None or block is not victim:
                raise RuntimeError(
                    f"{where} returned ({key!r}, {victim!r}), which is not a key it holds "
                    "with its block"
                )
            blocks.append(block)
        if len(set(map(id, blocks))) != n:
            raise RuntimeError(f"{where} returned the same key twice")
        for key, _ in victims:
            del evictable[key]
        return blocks

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        evictable = self.evictable
        on_hit = self._on_hit
        hit = self._hit_block_ids
        for block in blocks:
            if not block.is_null:
                block_hash = block.block_hash
                if block.ref_cnt == 0:
                    if block_hash is not None:
                        # In use from now on: no longer an eviction candidate,
                        # but still cached (not a removal).
                        key = self._key_of(block, block_hash)
                        del evictable[key]
                        on_hit(key)
                    else:
                        self.free_block_queue.remove(block)
                if block_hash is not None:
                    hit.add(block.block_id)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        policy = self.eviction_policy
        evictable = self.evictable
        hit = self._hit_block_ids
        uncached: list[KVCacheBlock] = []
        for block in ordered_blocks:
            ref_cnt = block.ref_cnt - 1
            block.ref_cnt = ref_cnt
            if ref_cnt != 0 or block.is_null:
                continue
            block_hash = block.block_hash
            if block_hash is None:
                uncached.append(block)
            else:
                # Keyed by content; by (content, id) if another idle block has it.
                key = (block_hash, block.block_id) if block_hash in evictable else block_hash
                evictable[key] = block
                policy.insert(key, block)
                if block.block_id in hit:
                    hit.discard(block.block_id)
                    policy.touch((key,))
        self._queue_uncached(uncached)

    def _report_release(
        self, blocks: Sequence[KVCacheBlock], num_tokens: int, block_size: int
    ) -> None:
        """Tell the policy which of a request's blocks (``blocks``, in prefix order) the
        release just made idle, with their first tokens' positions."""
        chain = [
            (self._key_of(block, block.block_hash), index * block_size)
            for index, block in enumerate(blocks)
            if block.ref_cnt == 0 and block.block_hash is not None and not block.is_null
        ]
        if chain:
            self.eviction_policy.on_release(chain, num_tokens)

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        for block_id in block_ids:
            block = self.blocks[block_id]
            block_hash = block.block_hash
            if block_hash is None:
                continue
            self._hit_block_ids.discard(block_id)
            if block.ref_cnt == 0:
                key = self._key_of(block, block_hash)
                del self.evictable[key]
                self.eviction_policy.remove(key)
                self._drop_hash(block)
                self.free_block_queue.append(block)
            else:
                self._drop_hash(block)

    def reset_prefix_cache(self) -> bool:
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:
            return False
        # Every cached block is idle, hence held by the policy: take them back
        # (a reset is not an eviction, so no ghosts) and hand them to the
        # queue in release order, then forget all hashes.
        remove = self.eviction_policy.remove
        for key in self.evictable:
            remove(key)
        self.free_block_queue.append_n(list(self.evictable.values()))
        self.evictable.clear()
        self._hit_block_ids.clear()
        return super().reset_prefix_cache()

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks + len(self.evictable)
