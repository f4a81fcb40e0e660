"""Replay a block trace through an eviction policy plugin at one cache size.

The policy is the installed plugin itself, built by the plugin registry from
its config string and called through the :class:`kvframe.EvictionPolicy`
contract, exactly as the engine's tiers call it: no private copy of any
policy lives here.

Protocol per request (the "cache only" view: served at arrival, one at a
time), mirroring the GPU prefix cache (``PolicyOrderedBlockPool``):

1. **Lookup.** The hit is the leading run of the request's eligible blocks
   that the cache holds; it stops at the first missing block, as
   ``get_computed_blocks`` does. A policy may evict a block in the middle of
   a chain (ARC can): the blocks after it stay cached but cannot hit until
   the missing block returns -- the prefix-chain semantics, counted rather
   than enforced.
2. ``touch(missed)``: the request's blocks the cache does not hold, in prefix
   order (the tier's touch-before-lookup; a ghost key tells an adaptive
   policy it evicted too early).
3. **Store.** The request's first ``capacity`` blocks are cached: if the new
   ones do not fit, ``evict(n, protected=the request's blocks)`` frees room;
   new blocks are inserted tail first, then the ones already held are
   touched in prefix order (a second use: ARC promotes them), so block 0
   ends up the most important (vLLM's free order).
   A policy that declares ``may_refuse`` (vLLM's ARC) may answer ``None``:
   the store is then skipped, as an offload tier skips it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from kvframe.analyze.trace import BlockTrace

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy
    from kvframe.host.registry import PluginRegistry

__all__ = ["PolicyContractError", "replay_policy"]


class PolicyContractError(RuntimeError):
    """A policy's ``evict`` answered something the contract forbids."""


class _IdleBlock:
    """The block every key maps to: always idle (``ref_cnt == 0``), as a cached,
    unreferenced block is between requests."""

    __slots__ = ()
    ref_cnt = 0


_BLOCK = _IdleBlock()


def build_policy(registry: PluginRegistry, spec: str, capacity: int) -> EvictionPolicy:
    """The eviction plugin ``spec`` selects, for a cache of ``capacity`` blocks."""
    return registry.create("eviction", spec, capacity)


def replay_policy(
    trace: BlockTrace, policy: EvictionPolicy, capacity: int, *, spec: str = "policy"
) -> tuple[int, int]:
    """Replay ``trace`` through ``policy`` holding at most ``capacity`` blocks.

    Returns ``(hit_tokens, refused_stores)``. Raises
    :class:`PolicyContractError` naming the policy, the request and the call
    if ``evict`` returns the wrong number of victims, a key it does not hold
    or a protected key.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1 block, got {capacity}")
    held: set[Hashable] = set()
    insert = policy.insert
    touch = policy.touch
    evict = policy.evict
    block = _BLOCK
    hit_blocks = 0
    refused = 0
    eligible = trace.eligible
    for r, chain in enumerate(trace.blocks):
        cap = eligible[r]
        h = 0
        while h < cap and chain[h] in held:
            h += 1
        hit_blocks += h
        stored = chain[:capacity] if len(chain) > capacity else chain
        new = [key for key in stored if key not in held]
        missed = new if stored is chain else [key for key in chain if key not in held]
        if missed:
            touch(missed)
        kept = [key for key in stored if key in held] if new else stored
        if not new:
            touch(kept)
            continue
        need = len(held) + len(new) - capacity
        if need > 0:
            protected = set(stored)
            victims = evict(need, protected)
            if victims is None:
                if not getattr(policy, "may_refuse", False):
                    raise PolicyContractError(
                        f"eviction policy {spec!r}: evict({need}, ...) returned None at request "
                        f"{r} although it holds {len(held) - (len(stored) - len(new))} idle "
                        "unprotected blocks and does not declare may_refuse"
                    )
                refused += 1
                if kept:
                    touch(kept)
                continue
            _check_victims(victims, need, held, protected, spec, r)
            for key, _ in victims:
                held.discard(key)
        for key in reversed(new):
            insert(key, block)
        held.update(new)
        if kept:
            touch(kept)
    return hit_blocks * trace.block_size, refused


def _check_victims(
    victims: list[tuple[Any, Any]],
    need: int,
    held: set[Hashable],
    protected: set[Hashable],
    spec: str,
    request: int,
) -> None:
    where = f"eviction policy {spec!r}: evict({need}, ...) at request {request}"
    if len(victims) != need:
        raise PolicyContractError(f"{where} returned {len(victims)} victims, not {need}")
    keys = [key for key, _ in victims]
    if len(set(keys)) != need:
        raise PolicyContractError(f"{where} returned the same key twice")
    for key in keys:
        if key not in held:
            raise PolicyContractError(f"{where} returned {key!r}, a key it does not hold")
        if key in protected:
            raise PolicyContractError(f"{where} returned {key!r}, a protected key")
