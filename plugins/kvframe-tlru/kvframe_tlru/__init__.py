"""Tail-Optimized LRU (T-LRU): evict the tails of conversations a next turn can afford to
recompute, then least recently used.

Proposed for vLLM's prefix cache in vllm-project/vllm #37825 and merged into
SGLang's radix cache as sgl-project/sglang PR #34012 (T-LRU, NeurIPS 2025,
arXiv 2510.15152). SGLang's description: plain LRU keeps whole conversations
cached at the expense of every other conversation's tail latency, by up to 43%
on agentic traces. The rule, as SGLang PR #34012 states it:

* A conversation with history length ``L`` whose next prompt is expected to
  add ``Q_hat`` tokens (``next_prompt``) keeps its next prefill within a TTFT
  budget of ``xi`` tokens (``threshold``) as long as its first
  ``B = max(0, L + Q_hat - xi)`` tokens stay cached.
* Every block wholly past ``B`` is *TEL-safe*: evicting it cannot push the next
  turn's recompute over the budget. T-LRU evicts TEL-safe blocks first, least
  recently used first (phase 1), and only when none is left continues in plain
  LRU order (phase 2).

In kvframe a block is TEL-safe when its first token is at position ``>= B`` in
the request that released it last (its key is in the ``chain`` of
:meth:`kvframe.EvictionPolicy.on_release`, with ``L`` the request's
``num_tokens`` then). A later release of the same content (another request
reaching it) re-decides; a prefix hit takes the block out of the policy
(``on_hit``, i.e. ``remove``) and it is decided again when it comes back.
Preempted requests release their blocks too, and are treated like finished
ones (SGLang's radix cache does not tell them apart either).

Only the GPU prefix cache (``--gpu-eviction tlru``) calls ``on_release``; in an
offload tier nothing is ever TEL-safe and T-LRU orders exactly as ``lru``.
With ``threshold=0`` nothing is TEL-safe either (``B > L``): plain LRU.

Cost: ``evict`` walks the TEL-safe blocks (an index in the same order) and then
the LRU order, skipping the blocks it may not take; ``on_release`` is one dict
operation per block released.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence, Set

import kvframe
from kvframe import EvictableBlock

__all__ = ["TLRUPolicy"]


class TLRUPolicy(kvframe.EvictionPolicy):
    """Evict TEL-safe chain tails first, least recently used first; then LRU."""

    name = "tlru"
    description = "Tail-Optimized LRU: affordable conversation tails first, then LRU."

    def __init__(self, capacity: int, *, threshold: int = 256, next_prompt: int = 64) -> None:
        super().__init__(capacity)
        if threshold < 0 or next_prompt < 0:
            raise ValueError(
                f"tlru: threshold={threshold} and next_prompt={next_prompt} are token counts; "
                "neither may be negative"
            )
        self.threshold = threshold
        """``xi``: tokens the next turn's prefill may recompute within its TTFT budget."""
        self.next_prompt = next_prompt
        """``Q_hat``: tokens the next turn's prompt is expected to add."""
        self.blocks: OrderedDict[Hashable, EvictableBlock] = OrderedDict()
        """Front = least recently used: the phase-2 order."""
        self.safe: OrderedDict[Hashable, None] = OrderedDict()
        """The TEL-safe keys, a subsequence of :attr:`blocks` in the same order: phase 1."""

    def __len__(self) -> int:
        return len(self.blocks)

    def get(self, key: Hashable) -> EvictableBlock | None:
        return self.blocks.get(key)

    def insert(self, key: Hashable, block: EvictableBlock) -> None:
        self.blocks[key] = block

    def remove(self, key: Hashable) -> None:
        del self.blocks[key]
        self.safe.pop(key, None)

    def touch(self, keys: Iterable[Hashable]) -> None:
        # As vLLM's LRU: reversed, so the first key ends the most recent of them.
        blocks, safe = self.blocks, self.safe
        for key in reversed(list(keys)):
            if key in blocks:
                blocks.move_to_end(key)
                if key in safe:
                    safe.move_to_end(key)

    def on_release(self, chain: Sequence[tuple[Hashable, int]], num_tokens: int) -> None:
        keep = max(0, num_tokens + self.next_prompt - self.threshold)  # B
        blocks, safe = self.blocks, self.safe
        # The chain's keys were just inserted, tail first: the most recent blocks, in
        # reverse prefix order. Marking them in that order keeps `safe` in LRU order.
        for key, first_token in reversed(chain):
            if key not in blocks:
                continue
            if first_token >= keep:
                safe[key] = None
                safe.move_to_end(key)
            else:
                safe.pop(key, None)

    def evict(
        self, n: int, protected: Set[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        if n == 0:
            return []
        blocks = self.blocks
        victims: list[tuple[Hashable, EvictableBlock]] = []
        chosen: set[Hashable] = set()
        # Choose first, remove after: a refused eviction changes nothing.
        for key in self.safe:  # phase 1: TEL-safe tails, least recent first
            block = blocks[key]
            if block.ref_cnt == 0 and key not in protected:
                victims.append((key, block))
                chosen.add(key)
                if len(victims) == n:
                    break
        if len(victims) < n:
            for key, block in blocks.items():  # phase 2: least recently used
                if block.ref_cnt == 0 and key not in protected and key not in chosen:
                    victims.append((key, block))
                    if len(victims) == n:
                        break
            else:
                return None
        safe = self.safe
        for key, _ in victims:
            del blocks[key]
            safe.pop(key, None)
        return victims
