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
:class:`~kvframe.bases.EvictionPolicy` instead builds a
:class:`PolicyOrderedBlockPool`, where the policy orders the cached blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kvframe.events import AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, KVEvent

if TYPE_CHECKING:
    from kvframe.bases import EvictionPolicy
    from kvframe.request import Request

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

    __slots__ = ("_index", "_num_shared")

    _PROBE = 64
    """Hashes looked up per C-level batch in :meth:`get_prefix`."""

    def __init__(self) -> None:
        self._index: dict[BlockHash, KVCacheBlock | dict[int, KVCacheBlock]] = {}
        # Entries in dict form (a hash cached in several blocks).
        self._num_shared = 0

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
        miss wastes at most one batch of lookups.
        """
        end = min(max_num_blocks, len(block_hashes))
        index_get = self._index.get
        found: list[KVCacheBlock | dict[int, KVCacheBlock] | None] = []
        for start in range(0, end, self._PROBE):
            batch = list(map(index_get, block_hashes[start : min(start + self._PROBE, end)]))
            if None in batch:
                found += batch[: batch.index(None)]
                break
            found += batch
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
        enable_kv_cache_events: record :class:`~kvframe.events.BlockStored` /
            :class:`~kvframe.events.BlockRemoved` /
            :class:`~kvframe.events.AllBlocksCleared` for :meth:`take_events`.
        eviction_policy: ``None`` for vLLM's LRU (the free queue's order).
            Otherwise an :class:`~kvframe.bases.EvictionPolicy` built with
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

    def __new__(
        cls,
        num_gpu_blocks: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        eviction_policy: EvictionPolicy | None = None,
    ) -> BlockPool:
        if cls is BlockPool and eviction_policy is not None:
            cls = PolicyOrderedBlockPool
        return super().__new__(cls)

    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        eviction_policy: EvictionPolicy | None = None,
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
        index = index_map._index
        for i in range(num_cached_blocks, num_full_blocks):
            block = blocks[i]
            assert block.block_hash is None, f"block {block.block_id} is already cached"
            block_hash = block_hashes[i]
            block.block_hash = block_hash
            if block_hash in index:
                index_map.insert(block_hash, block)  # a duplicate: rare
            else:
                index[block_hash] = block
        self.num_cached_blocks += num_full_blocks - num_cached_blocks
        if self.enable_kv_cache_events:
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
            events = self.kv_event_queue if self.enable_kv_cache_events else None
            num_dropped = 0
            for _ in range(num_blocks):
                assert block is not None
                following = block.next_free_block
                block.prev_free_block = block.next_free_block = None
                block_hash = block.block_hash
                if block_hash is not None:  # evict: its KV is about to be overwritten
                    if index.get(block_hash) is block:
                        del index[block_hash]
                    else:
                        self.cached_block_hash_to_block.pop(block_hash, block.block_id)
                    block.block_hash = None
                    num_dropped += 1
                    if events is not None:
                        events.append(BlockRemoved(block_hashes=(block_hash,)))
                block.ref_cnt = 1
                append(block)
                block = following
            self.num_cached_blocks -= num_dropped
        else:
            for _ in range(num_blocks):
                assert block is not None
                following = block.next_free_block
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

    The refusal rule (:attr:`kvframe.bases.EvictionPolicy.may_refuse`): the GPU
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


class PolicyOrderedBlockPool(BlockPool):
    """A block pool whose cached blocks are evicted in an eviction policy's order.

    Built by ``BlockPool(..., eviction_policy=policy)``. The free blocks are
    split in two:

    * free blocks *without* a hash stay in the free queue (FIFO, as above);
    * free blocks *with* a hash are the policy's eviction candidates.

    Allocation takes uncached free blocks first and asks
    ``policy.evict(n, protected)`` only for the rest, so a cached block is
    never evicted while an uncached block is free. (vLLM's LRU can evict a
    cached block at the head of its queue while an uncached one waits behind
    it; with a policy that does not happen.)

    What the policy sees. Keys are ``(block_hash, block_id)``: several blocks
    with equal content are distinct entries, and ``key[0]`` still tells the
    policy which content it is. Every time a request *releases* a cached
    block (its table is freed, whether or not others still share the block),
    that counts as one use:

    * the block's first release ``insert``\\ s it;
    * each later release ``touch``\\ es it (batched; among the blocks one call
      releases, the head block is the most important, the tail the least);
    * ``remove`` when its hash is dropped other than by ``evict``
      (:meth:`evict_blocks`, :meth:`reset_prefix_cache`);
    * ``evict`` when allocation needs cached blocks; tracked blocks may be in
      use again (a later prefix hit), and the policy must skip those
      (``ref_cnt != 0``), as its contract says.

    Why at release, not at caching or at a hit: vLLM orders eviction by
    release time (tail block first), so an LRU policy fed this way evicts
    exactly like the default pool; and a block used by one request only is
    inserted once and never touched, so a frequency-aware policy (ARC, LFU)
    sees ``1 + touches`` = the number of requests that used the block.
    Prefix hits themselves are not reported: the hitting request's release is.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        eviction_policy: EvictionPolicy | None = None,
    ) -> None:
        if eviction_policy is None:
            raise ValueError("PolicyOrderedBlockPool needs an eviction_policy")
        problem = gpu_eviction_problem(eviction_policy)
        if problem is not None:
            raise ValueError(problem)
        super().__init__(num_gpu_blocks, enable_caching, enable_kv_cache_events)
        self.eviction_policy = eviction_policy
        # Ids of the cached blocks the policy tracks (released at least once).
        self.tracked_block_ids: set[int] = set()
        # Free blocks that carry a hash: held by the policy, not the queue.
        self.num_evictable_cached_blocks = 0

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Uncached free blocks first, then blocks the policy evicts."""
        if num_blocks > self.get_num_free_blocks():
            raise ValueError(
                f"cannot get {num_blocks} free blocks, only {self.get_num_free_blocks()} free"
            )
        queue = self.free_block_queue
        from_queue = min(num_blocks, queue.num_free_blocks)
        blocks = queue.popleft_n(from_queue)
        num_to_evict = num_blocks - from_queue
        if num_to_evict > 0:
            victims = self.eviction_policy.evict(num_to_evict, _NOTHING_PROTECTED)
            if victims is None or len(victims) != num_to_evict:
                raise RuntimeError(
                    f"eviction policy could not evict {num_to_evict} blocks although "
                    f"{self.num_evictable_cached_blocks} cached blocks are free"
                )
            self.num_evictable_cached_blocks -= num_to_evict
            tracked = self.tracked_block_ids
            for _, victim in victims:
                assert isinstance(victim, KVCacheBlock) and victim.ref_cnt == 0, victim
                tracked.discard(victim.block_id)
                self._drop_hash(victim)
                blocks.append(victim)
        for block in blocks:
            block.ref_cnt = 1
        return blocks

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        remove = self.free_block_queue.remove
        for block in blocks:
            if block.ref_cnt == 0 and not block.is_null:
                if block.block_hash is not None:
                    self.num_evictable_cached_blocks -= 1  # leaves the policy's candidates
                else:
                    remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        policy = self.eviction_policy
        tracked = self.tracked_block_ids
        uncached: list[KVCacheBlock] = []
        touch_run: list[tuple[BlockHash, int]] = []
        for block in ordered_blocks:
            block.ref_cnt -= 1
            if block.is_null:
                continue
            block_hash = block.block_hash
            if block_hash is None:
                if block.ref_cnt == 0:
                    uncached.append(block)
                continue
            if block.ref_cnt == 0:
                self.num_evictable_cached_blocks += 1
            key = (block_hash, block.block_id)
            if block.block_id in tracked:
                touch_run.append(key)
            else:
                # Keep the policy's view in release order: earlier touches first.
                if touch_run:
                    touch_run.reverse()  # the block to evict first goes last
                    policy.touch(touch_run)
                    touch_run = []
                policy.insert(key, block)
                tracked.add(block.block_id)
        if touch_run:
            touch_run.reverse()
            policy.touch(touch_run)
        self.free_block_queue.append_n(uncached)

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.block_hash is None:
                continue
            if block_id in self.tracked_block_ids:
                self.tracked_block_ids.discard(block_id)
                self.eviction_policy.remove((block.block_hash, block_id))
            self._drop_hash(block)
            if block.ref_cnt == 0:
                self.num_evictable_cached_blocks -= 1
                self.free_block_queue.append(block)

    def reset_prefix_cache(self) -> bool:
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:
            return False
        # Every cached block is free, hence tracked: hand them back to the
        # queue in the policy's eviction order, then forget all hashes.
        policy = self.eviction_policy
        num_cached = self.num_evictable_cached_blocks
        victims = policy.evict(num_cached, _NOTHING_PROTECTED) if num_cached else []
        if victims is None or len(victims) != num_cached:
            raise RuntimeError(f"eviction policy could not evict all {num_cached} free blocks")
        freed: list[KVCacheBlock] = []
        for _, victim in victims:
            assert isinstance(victim, KVCacheBlock)
            freed.append(victim)
        self.free_block_queue.append_n(freed)
        self.tracked_block_ids.clear()
        self.num_evictable_cached_blocks = 0
        return super().reset_prefix_cache()

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks + self.num_evictable_cached_blocks
