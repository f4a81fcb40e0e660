"""Prefix-cache blocks registered for tokens that a same-step preemption left uncomputed.

vLLM 0.19.1 registers a block in the prefix cache as soon as ``allocate_slots``
has given slots to the tokens that fill it, before the model has run. If the
same request is then preempted later in the *same* ``schedule()`` call (under
priority scheduling a running request already given its chunk can be the
victim of a more urgent one), its blocks are freed with those registrations
intact, though their K/V is never written. A later lookup of the same prefix
(the request itself, resumed) is served those blocks as hits and the model
attends to whatever the slots held: the generated tokens change. vLLM's open
PR #43569 ("Roll back eager prefix-cache registration on uncommitted free")
fixes this by dropping those registrations when such a request is freed.

kvframe makes vLLM's decisions by default, so the registration stays; this
module makes it visible and optionally applies the fix:

* :meth:`UncomputedBlocks.preempted_mid_step` is called (through
  ``KVCacheManager.preempted_mid_step``)
  when the scheduler preempts a request it had already scheduled this step. The request's cached
  blocks from ``num_computed_tokens // block_size`` on hold no K/V computed
  before this step (all prefix hits lie below it); with ``rollback`` their
  registrations are dropped (the upstream fix), otherwise they are remembered;
* :meth:`UncomputedBlocks.count_hits` counts the tokens of remembered blocks a
  request is given as prefix hits (``prefix_cache_uncomputed_hits`` in
  ``metrics.json``): a non-zero count says a result depends on this vLLM bug;
* a block registered again (re-allocated and filled, or loaded) is forgotten:
  its K/V is computed then.

The manager calls into this only when something is remembered (one branch on
the hot path otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvframe.log import get_logger

if TYPE_CHECKING:
    from kvframe.core.block_pool import KVCacheBlock

__all__ = ["UncomputedBlocks"]

log = get_logger(__name__)


class UncomputedBlocks:
    """The cached blocks whose K/V was never computed, and what was served from them."""

    __slots__ = ("blocks", "hit_tokens", "hit_tokens_by_request", "num_rolled_back", "rollback")

    def __init__(self, *, rollback: bool = False) -> None:
        self.rollback = rollback
        """Apply vLLM PR #43569: drop the registrations instead of remembering them."""
        self.blocks: set[int] = set()
        """Ids of cached blocks whose K/V was never written (``rollback`` off)."""
        self.hit_tokens = 0
        """Prefix-hit tokens served from those blocks."""
        self.hit_tokens_by_request: dict[str, int] = {}
        """The same, per request served them (only requests that were)."""
        self.num_rolled_back = 0
        """Registrations dropped by the rollback (``rollback`` on)."""

    def preempted_mid_step(
        self,
        request_id: str,
        cached_blocks: Sequence[KVCacheBlock],
        evict_blocks: Callable[[list[int]], None],
    ) -> None:
        """The request ``request_id``, scheduled this step, is preempted before its step
        ran; ``cached_blocks`` are its cached blocks past its computed tokens (the
        manager cuts them out before freeing them), ``evict_blocks`` drops their
        prefix-cache registrations (used with ``rollback``)."""
        uncomputed = [b.block_id for b in cached_blocks if b.block_hash is not None]
        if not uncomputed:
            return
        if self.rollback:
            evict_blocks(uncomputed)
            self.num_rolled_back += len(uncomputed)
        else:
            self.blocks.update(uncomputed)
        log.debug(
            "uncomputed_blocks_registered",
            request_id=request_id,
            block_ids=uncomputed,
            rolled_back=self.rollback,
        )

    def count_hits(self, request_id: str, hits: Sequence[KVCacheBlock], block_size: int) -> None:
        """``hits`` are given to request ``request_id`` as prefix-cache hits."""
        blocks = self.blocks
        tokens = block_size * sum(1 for b in hits if b.block_id in blocks)
        if tokens:
            self.hit_tokens += tokens
            by_request = self.hit_tokens_by_request
            by_request[request_id] = by_request.get(request_id, 0) + tokens

    def forget(self, registered: Sequence[KVCacheBlock]) -> None:
        """``registered`` are being cached for tokens that will be computed."""
        for block in registered:
            self.blocks.discard(block.block_id)
