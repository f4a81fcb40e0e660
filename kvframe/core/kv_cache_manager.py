"""The KV cache manager: block tables, prefix-cache lookups and slot allocation.

One manager serves one KV cache group of full-attention layers (every layer
keeps the KV of every token), which is what decoder-only models without
sliding-window or state-space layers have. vLLM's hybrid allocator (several
groups, sliding windows, Mamba) is deliberately not modelled: for a single
full-attention group vLLM's coordinator and single-type manager reduce to
exactly the arithmetic below, and block counts agree with vLLM 0.19.1.

Per request the manager keeps the block table (``req_to_blocks``) and how many
of its leading blocks are already cached (``num_cached_block``). The block
table of a request covers ``cdiv(tokens that need a slot, block_size)`` blocks
and only ever grows until :meth:`free`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.core.block_pool import KVCacheBlock
from kvframe.core.compiled import make_block_pool
from kvframe.core.uncomputed import UncomputedBlocks

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy
    from kvframe.contract.records import KVEvent
    from kvframe.domain.request import Request

__all__ = ["KVCacheManager", "PrefixCacheStats"]


@attrs.define(slots=True)
class PrefixCacheStats:
    """Prefix-cache counters since the last :meth:`KVCacheManager.make_prefix_cache_stats`.

    As in vLLM, a lookup for a request that was preempted before (it is being
    resumed) is counted apart, under ``preempted_*``: its hits are mostly its
    own blocks coming back, which would flatter the hit rate.
    """

    requests: int = 0
    """Lookups for requests never preempted."""
    queries: int = 0
    """Tokens looked up for those requests (their ``num_tokens``)."""
    hits: int = 0
    """Tokens found in the prefix cache for those requests."""
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    reset: bool = False
    """Whether the prefix cache was reset in this interval."""

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += num_hits

    @property
    def hit_rate(self) -> float:
        """``hits / queries`` over never-preempted requests (0.0 when nothing was queried)."""
        return self.hits / self.queries if self.queries else 0.0


_ref_cnt = operator.attrgetter("ref_cnt")
_block_id = operator.attrgetter("block_id")


class KVCacheManager:
    """Allocates KV slots for requests on top of a :class:`BlockPool`.

    Args:
        num_gpu_blocks: blocks in the device cache (block 0 is the null block).
        block_size: tokens per block; requests must be hashed with the same
            size (:func:`kvframe.core.hashing.make_block_hasher`).
        max_model_len: no request ever gets slots beyond this many tokens.
        enable_caching: prefix caching on or off.
        enable_kv_cache_events: record KV events for :meth:`take_events`.
        eviction_policy: ``None`` for vLLM's LRU, or an
            :class:`~kvframe.contract.bases.EvictionPolicy` ordering the cached blocks
            (see :class:`~kvframe.core.block_pool.PolicyOrderedBlockPool`).
        use_eagle: an EAGLE-style drafter needs the hidden states of the last
            cached block, so a prefix hit gives up its last block (vLLM's
            ``use_eagle``).
        decode_lookahead: the lookahead slots the scheduler asks for with
            every running request's allocation (its ``num_lookahead_tokens``);
            :attr:`decode_limits` are computed for it.
        uncached_freed_first: the free-queue rule of vLLM 0.33 (see
            :class:`~kvframe.core.block_pool.BlockPool`).
        core: ``auto``, ``python`` or ``compiled``: which block pool
            (:mod:`kvframe.core.compiled`); :attr:`core` is the one used.

    Invariants (per request with an entry):

    * ``req_to_blocks[r]`` holds ``cdiv(slots allocated, block_size)`` blocks,
      each with one reference from this table;
    * the first ``num_cached_block[r]`` blocks are cached (have their
      request's hash) and the rest are not cached *by this request*;
    * a request absent from ``num_cached_block`` has never had a prefix hit,
      an external load or a cached block;
    * ``decode_limits[r]`` is at most the largest ``num_computed_tokens`` at
      which ``allocate_slots(r, 1, num_lookahead_tokens=decode_lookahead)``
      would change nothing and return ``[]``, and below ``max_model_len - 1``.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        eviction_policy: EvictionPolicy | None = None,
        *,
        use_eagle: bool = False,
        decode_lookahead: int = 0,
        uncached_freed_first: bool = False,
        rollback_uncomputed_blocks: bool = False,
        core: str = "auto",
    ) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.use_eagle = use_eagle
        built = make_block_pool(
            core,
            num_gpu_blocks,
            enable_caching=enable_caching,
            enable_kv_cache_events=enable_kv_cache_events,
            eviction_policy=eviction_policy,
            uncached_freed_first=uncached_freed_first,
        )
        self.block_pool = built.pool
        self.core = built.core
        """The core the block pool runs on: ``"python"`` or ``"compiled"``."""
        self.core_note = built.note
        """Why :attr:`core` is not the one asked for (a GPU eviction policy), or ``""``."""
        # The compiled pool frees a block table tail first without a reversed iterator.
        self._free_reversed = getattr(self.block_pool, "free_table_reversed", None)
        # Only a policy-ordered pool learns from lookups; the default skips the call.
        self._reports_lookups = enable_caching and eviction_policy is not None
        self._init_tables(decode_lookahead, rollback_uncomputed_blocks)
        if built.allocator is not None:
            self._use_compiled_paths(built.allocator)

    def _init_tables(self, decode_lookahead: int, rollback_uncomputed_blocks: bool) -> None:
        """The per-request tables and counters a new manager starts with."""
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_block: dict[str, int] = {}
        self.decode_lookahead = decode_lookahead
        self.decode_limits: dict[str, int] = {}
        """Per request with a block table: up to which ``num_computed_tokens`` a
        one-token decode needs neither a new block nor a block cached, so the
        scheduler may skip :meth:`allocate_slots` (it would return ``[]`` and
        change nothing). Why: decoding is most of a run's steps, and a decode
        crosses a block boundary once every ``block_size`` tokens; the other
        steps need only this one comparison. Kept by every successful
        allocation and by :meth:`cache_blocks`, dropped by :meth:`free`; a
        missing entry means "ask"."""
        self.prefix_cache_stats = PrefixCacheStats()
        self.uncomputed = UncomputedBlocks(rollback=rollback_uncomputed_blocks)
        """Blocks cached for tokens a same-step preemption left uncomputed (vLLM 0.19.1's
        eager registration), or their rollback (:mod:`kvframe.core.uncomputed`)."""
        self.one_token_path = True
        """Whether :meth:`allocate_slots` takes its short path for one token of a
        request with a block table (same decisions; tests switch it off to compare)."""

    def _use_compiled_paths(self, make_allocator: Callable[..., Any]) -> None:
        """The compiled core's allocation paths (one-token allocations end to end,
        caching and decode limits for every path); instance attributes shadow the
        Python methods, which stay the reference."""
        allocator = make_allocator(self, self.allocate_slots)
        self.allocate_slots = allocator.allocate_slots  # type: ignore[method-assign]
        self._cache_blocks = allocator.cache_blocks_of  # type: ignore[method-assign]
        self._set_decode_limit = allocator.set_decode_limit  # type: ignore[method-assign]

    # ----------------------------------------------------------------- state

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation could take now (free, including evictable cached ones)."""
        return self.block_pool.get_num_free_blocks()

    @property
    def num_cached_blocks(self) -> int:
        """Blocks findable by hash now (free or in use)."""
        return self.block_pool.num_cached_blocks

    @property
    def usage(self) -> float:
        """Fraction of usable blocks in use (0.0 .. 1.0)."""
        return self.block_pool.get_usage()

    def make_prefix_cache_stats(self) -> PrefixCacheStats:
        """Return the counters gathered since the last call and start new ones."""
        stats = self.prefix_cache_stats
        self.prefix_cache_stats = PrefixCacheStats()
        return stats

    def take_events(self) -> list[KVEvent]:
        """KV events since the last call (``[]`` unless events are enabled)."""
        return self.block_pool.take_events()

    def get_blocks(self, request_id: str) -> list[KVCacheBlock]:
        """The request's block table (empty if it has none). Do not mutate it."""
        return self.req_to_blocks.get(request_id) or []

    def get_block_ids(self, request_id: str) -> list[int]:
        # map at C speed: an admitted request's table can be a thousand blocks.
        return list(map(_block_id, self.req_to_blocks.get(request_id, ())))

    def get_num_common_prefix_blocks(self, request_id: str) -> int:
        """Leading blocks of ``request_id`` shared by every request holding blocks."""
        num_requests = len(self.req_to_blocks)
        count = 0
        for block in self.req_to_blocks.get(request_id, ()):
            if block.ref_cnt != num_requests:
                break
            count += 1
        return count

    # ---------------------------------------------------------------- lookup

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """The longest cached prefix of the request: its blocks and token count.

        Walks ``request.block_hashes`` and stops at the first miss (hashes
        chain, so nothing after a miss can hit). At most ``num_tokens - 1``
        tokens may hit, rounded down to whole blocks: the last prompt token
        must be computed to produce logits, so a fully cached prompt still
        recomputes its whole last block. Returns ``([], 0)`` without counting
        a lookup when caching is off or the request skips prefix-cache reads.
        """
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return [], 0
        num_tokens = request.num_tokens
        hit_blocks = self.block_pool.get_cached_prefix(
            request.block_hashes, (num_tokens - 1) // self.block_size
        )
        if self.use_eagle and hit_blocks:
            hit_blocks.pop()
        num_hit_tokens = len(hit_blocks) * self.block_size
        self.prefix_cache_stats.record(num_tokens, num_hit_tokens, request.num_preemptions > 0)
        return hit_blocks, num_hit_tokens

    # ------------------------------------------------------------ allocation

    def _can_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        reserved_blocks: int = 0,
    ) -> bool:
        """Whether an allocation of ``num_tokens`` slots finds enough free blocks.

        It consumes new blocks beyond what the table and the prefix hits
        cover, plus every hit block that is currently free: touching it takes
        it out of the free pool just like allocating a fresh block would.
        """
        num_free = self.block_pool.get_num_free_blocks() - reserved_blocks
        num_required = -(-num_tokens // self.block_size)
        num_table_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:
            # A request already admitted never gets new prefix hits.
            assert not new_computed_blocks
            return num_required - num_table_blocks <= num_free
        num_new = max(num_required - num_table_blocks - len(new_computed_blocks), 0)
        if not new_computed_blocks or num_new > num_free:
            # Decided without counting the free hits. The second case is how a
            # blocked head of the queue fails, looked at again every step.
            return num_new <= num_free
        # Free hit blocks, counted at C speed: a prefix hit can be hundreds of blocks.
        num_evictable = list(map(_ref_cnt, new_computed_blocks)).count(0)
        null_block = self.block_pool.null_block
        if num_evictable and null_block.ref_cnt == 0 and null_block in new_computed_blocks:
            num_evictable -= new_computed_blocks.count(null_block)  # never evictable
        return num_new + num_evictable <= num_free

    def can_fit_full_sequence(
        self,
        request: Request,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
        num_external_computed_tokens: int = 0,
        *,
        include_max_tokens: bool = False,
    ) -> bool:
        """Could the request's whole sequence get slots right now?

        An admission gate for chunked prefill, which otherwise only checks the
        first chunk. As in vLLM 0.19.1 the "whole sequence" is the request's
        current tokens (``num_tokens``, capped at ``max_model_len``); with
        ``include_max_tokens=True`` it is the prompt plus ``max_tokens`` (the
        most the request can ever hold), also capped.
        """
        if include_max_tokens:
            full_num_tokens = min(
                request.num_prompt_tokens + request.max_tokens, self.max_model_len
            )
        else:
            full_num_tokens = min(request.num_tokens, self.max_model_len)
        return self._can_allocate(request.request_id, full_num_tokens, new_computed_blocks)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
        num_lookahead_tokens: int = 0,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> list[KVCacheBlock] | None:
        """Give the request slots for ``num_new_tokens`` more tokens.

        Token layout of the request after this call::

            | computed | new computed | external computed | new | lookahead |
            |<- request.num_computed_tokens
                       |<- prefix hits (new_computed_blocks), already cached
                                      |<- supplied by a connector
                                                          |<- computed this step
                                                                |<- draft slots

        ``new`` may include unverified draft tokens. Everything from *new
        computed* on that has no block yet gets one.

        Phases:

        1. count the blocks needed: new blocks for the slots the table and
           the hits do not cover, plus hit blocks that are currently free
           (touching them removes them from the free pool);
        2. if fewer blocks are free, return ``None`` and change nothing;
        3. touch the hits and append them to the table, allocate blocks for
           the external tokens and the new ones, then cache every block that
           is now full, up to ``min(computed + new, request.num_tokens)``
           tokens -- draft tokens beyond ``num_tokens`` are never cached.
           With ``delay_cache_blocks`` (an asynchronous load will fill the
           external blocks later) nothing is cached now; call
           :meth:`cache_blocks` when the load completes.

        ``reserved_blocks`` free blocks are left out of phase 2's count: they
        belong to other requests' prefills in flight (vLLM 0.33.0 passes them
        for an asynchronous load, :mod:`kvframe.core.inflight`).

        Returns the newly allocated blocks for the new and lookahead tokens
        (not the hits, not the external-token blocks), possibly ``[]``, or
        ``None`` when there is not enough room.
        """
        # Over 60 lines, on purpose: this runs per request per step (the scheduler's
        # general path and every admission), and the one-token check below must
        # come before any call. Its phases already are methods (_can_allocate,
        # _new_table, _attach_prefix, _cache_blocks); what is left inline is the
        # slot arithmetic. benchmarks/whole_trace.py measures the whole path.
        if (
            num_new_tokens == 1
            and self.one_token_path
            and not new_computed_blocks
            and not num_new_computed_tokens
            and not num_external_computed_tokens
            and not delay_cache_blocks
        ):
            req_blocks = self.req_to_blocks.get(request.request_id)
            if req_blocks is not None:
                return self._allocate_one_token(request, req_blocks, num_lookahead_tokens)
        if num_new_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError("num_new_tokens must be positive when no tokens are loaded externally")
        request_id = request.request_id
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external_computed_tokens, self.max_model_len)
        num_tokens_need_slot = min(
            total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len
        )

        if num_local_computed + num_external_computed_tokens + num_new_tokens > self.max_model_len:
            self._refuse_past_model_len(
                request_id, num_new_tokens, num_local_computed + num_external_computed_tokens
            )
        if not self._can_allocate(
            request_id, num_tokens_need_slot, new_computed_blocks, reserved_blocks
        ):
            return None

        req_blocks = self.req_to_blocks.get(request_id)
        if req_blocks is None:
            req_blocks = self._new_table(request)

        if (new_computed_blocks or num_external_computed_tokens > 0) and (
            request_id not in self.num_cached_block
        ):
            self._attach_prefix(
                request_id,
                req_blocks,
                new_computed_blocks,
                num_local_computed + num_external_computed_tokens,
                num_external_computed_tokens,
            )

        num_new_blocks = -(-num_tokens_need_slot // self.block_size) - len(req_blocks)
        new_blocks = self.block_pool.get_new_blocks(num_new_blocks) if num_new_blocks > 0 else []
        req_blocks.extend(new_blocks)

        if self.enable_caching and not delay_cache_blocks:
            self._cache_blocks(
                request, req_blocks, min(total_computed + num_new_tokens, request.num_tokens)
            )
        self._set_decode_limit(request_id, len(req_blocks))
        return new_blocks

    def _new_table(self, request: Request) -> list[KVCacheBlock]:
        """An admission's empty block table; a policy-ordered pool is told the misses."""
        if self._reports_lookups and not request.skip_reading_prefix_cache:
            self.block_pool.record_lookup(request.block_hashes)
        table: list[KVCacheBlock] = []
        self.req_to_blocks[request.request_id] = table
        return table

    def _refuse_past_model_len(self, request_id: str, num_new: int, num_computed: int) -> None:
        """The slots would stop at max_model_len while the tokens to cache go on: fail
        here, by name, not later inside the caching."""
        raise ValueError(
            f"request {request_id!r}: {num_new} new tokens after {num_computed} computed "
            f"exceed max_model_len={self.max_model_len} (the scheduler never schedules past "
            "it; requests whose prompt is longer are ignored at arrival)"
        )

    def _attach_prefix(
        self,
        request_id: str,
        req_blocks: list[KVCacheBlock],
        new_computed_blocks: Sequence[KVCacheBlock],
        num_total_computed: int,
        num_external_computed_tokens: int,
    ) -> None:
        """First allocation of a request with prefix hits or external tokens: touch the
        hits into its table, then blocks for the tokens a connector supplies."""
        assert not req_blocks, "a request with blocks cannot get new prefix hits"
        pool = self.block_pool
        if self.enable_caching:
            pool.touch(new_computed_blocks)
            if self.uncomputed.blocks:
                self.uncomputed.count_hits(request_id, new_computed_blocks, self.block_size)
        else:
            assert not new_computed_blocks, "prefix hits while caching is disabled"
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)
        if num_external_computed_tokens > 0:
            num_external_blocks = -(-num_total_computed // self.block_size) - len(req_blocks)
            req_blocks.extend(pool.get_new_blocks(num_external_blocks))

    def _allocate_one_token(
        self, request: Request, req_blocks: list[KVCacheBlock], num_lookahead_tokens: int
    ) -> list[KVCacheBlock] | None:
        """:meth:`allocate_slots` for one new token of a request that has a block table.

        The call a decoding request makes when its next token crosses or fills
        a block: half a million times in a whole-trace replay. It is the
        general path with every term that is zero here left out (no hits, no
        external tokens, no admission, caching not delayed), so it decides and
        changes exactly the same; ``tests/core/test_one_token_allocation.py`` pins
        the two against each other.
        """
        max_model_len = self.max_model_len
        total_computed = request.num_computed_tokens
        if total_computed > max_model_len:
            total_computed = max_model_len
        num_tokens_need_slot = total_computed + 1 + num_lookahead_tokens
        if num_tokens_need_slot > max_model_len:
            num_tokens_need_slot = max_model_len
        block_size = self.block_size
        num_new_blocks = -(-num_tokens_need_slot // block_size) - len(req_blocks)
        if num_new_blocks > 0:
            pool = self.block_pool
            if num_new_blocks > pool.get_num_free_blocks():
                return None
            new_blocks = pool.get_new_blocks(num_new_blocks)
            req_blocks += new_blocks
        else:
            new_blocks = []
        if self.enable_caching:
            self._cache_blocks(request, req_blocks, min(total_computed + 1, request.num_tokens))
        self._set_decode_limit(request.request_id, len(req_blocks))
        return new_blocks

    def _set_decode_limit(self, request_id: str, num_table_blocks: int) -> None:
        """Recompute :attr:`decode_limits` for a request whose table or cached count moved.

        A one-token allocation at ``num_computed_tokens = c`` needs no new block
        while ``c + 1 + lookahead`` slots fit the table, and caches nothing while
        token ``c + 1`` fills no block beyond ``num_cached_block``. The
        ``max_model_len - 2`` cap keeps a request that has reached the model's
        length (scheduled fewer than one token) off the scheduler's fast path.
        """
        block_size = self.block_size
        limit = num_table_blocks * block_size - 1 - self.decode_lookahead
        if self.enable_caching:
            cached_limit = (self.num_cached_block.get(request_id, 0) + 1) * block_size - 2
            if cached_limit < limit:
                limit = cached_limit
        if limit > self.max_model_len - 2:
            limit = self.max_model_len - 2
        self.decode_limits[request_id] = limit

    def _cache_blocks(
        self, request: Request, req_blocks: list[KVCacheBlock], num_tokens: int
    ) -> None:
        request_id = request.request_id
        num_cached = self.num_cached_block.get(request_id, 0)
        num_full = num_tokens // self.block_size
        if num_cached >= num_full:
            return
        if self.uncomputed.blocks:
            self.uncomputed.forget(req_blocks[num_cached:num_full])
        self.block_pool.cache_full_blocks(
            request, req_blocks, num_cached, num_full, self.block_size
        )
        self.num_cached_block[request_id] = num_full

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Cache the request's blocks that are full within ``num_computed_tokens``.

        For delayed caching: after an asynchronous load filled the blocks
        allocated with ``delay_cache_blocks=True``. No-op without caching.
        """
        if self.enable_caching:
            request_id = request.request_id
            req_blocks = self.req_to_blocks.get(request_id, [])
            self._cache_blocks(request, req_blocks, num_computed_tokens)
            if request_id in self.decode_limits:
                self._set_decode_limit(request_id, len(req_blocks))

    def preempted_mid_step(self, request: Request) -> None:
        """``request``, scheduled this step, is preempted before its step ran: its
        cached blocks past its computed tokens hold no K/V (vLLM 0.19.1's eager
        registration; :mod:`kvframe.core.uncomputed`). Call before freeing them."""
        request_id = request.request_id
        first = request.num_computed_tokens // self.block_size
        end = self.num_cached_block.get(request_id, 0)
        self.uncomputed.preempted_mid_step(
            request_id, self.get_blocks(request_id)[first:end], self.evict_blocks
        )

    def free(self, request: Request) -> None:
        """Release the request's blocks (finished, aborted or preempted).

        Blocks are freed tail first, so the tail lands ahead of the head in
        the free queue and is evicted first: tail blocks are the least likely
        to be shared, because their hash depends on the whole prefix.
        Freeing a request that holds nothing is a no-op.
        """
        blocks = self.pop_blocks_for_free(request)
        if blocks:
            self.free_popped(blocks, request.num_tokens)

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        """Forget the request's blocks without freeing them; return them in allocation
        order (vLLM 0.33.0's ``pop_blocks_for_free``: the caller frees them later with
        :meth:`free_popped`, :mod:`kvframe.core.deferred_frees`)."""
        request_id = request.request_id
        blocks = self.req_to_blocks.pop(request_id, None)
        self.num_cached_block.pop(request_id, None)
        self.decode_limits.pop(request_id, None)
        return blocks if blocks else []

    def free_popped(self, blocks: list[KVCacheBlock], num_tokens: int) -> None:
        """Free blocks popped by :meth:`pop_blocks_for_free`, tail first, as :meth:`free`
        does (``num_tokens``: the request's tokens when they were popped)."""
        pool = self.block_pool
        if self._free_reversed is not None:
            self._free_reversed(blocks)
        else:
            pool.free_blocks(reversed(blocks))
        if pool.report_release is not None:  # a policy that ranks by chain position
            pool.report_release(blocks, num_tokens, self.block_size)

    def evict_blocks(self, block_ids: Sequence[int]) -> None:
        """Drop the given blocks from the prefix cache (e.g. a failed KV load)."""
        self.block_pool.evict_blocks(block_ids)

    def reset_prefix_cache(self) -> bool:
        """Forget all cached hashes; ``False`` (no change) while blocks are in use."""
        if not self.block_pool.reset_prefix_cache():
            return False
        self.prefix_cache_stats.reset = True
        return True
