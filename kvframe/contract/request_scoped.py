"""What a plugin offers to run in vLLM 0.33.0's CPU tier (``--vllm 0.33`` with ``--offload``).

vLLM 0.33.0 rewrote its CPU tier's manager around *requests* (PR #51787, since
0.31): every call carries the request's context, the cache policy hears of a
request's accesses as they happen and commits them once, when the request
finishes, and the reuse filter lives inside the manager, counting store
*offers*. A plugin written for vLLM 0.19.1's five-operation tier
(:class:`~kvframe.contract.bases.EvictionPolicy`,
:class:`~kvframe.contract.bases.ReuseFilter`) cannot be driven that way, so
under the 0.33 target the host asks each for its vLLM 0.33.0 *form*, through
two seams on the base classes:

* ``EvictionPolicy.request_scoped_form`` returns a :class:`RequestScopedPolicy`
  (vLLM 0.33.0's ``CachePolicy``);
* ``ReuseFilter.in_manager_form`` returns an :class:`InManagerReuseFilter` (the
  manager's ``store_threshold`` and ``max_tracker_size``);

and an offload spec says what vLLM 0.33.0's model of it is built from
(``OffloadSpec.request_scoped_slots``, a :class:`RequestScopedSlots`). The host's manager is
:class:`kvframe.offload.jobs.manager.RequestScopedOffloadManager`;
``docs/plugin-authors.md`` ("vLLM 0.33: the request-scoped seams") has a whole example.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import attrs

if TYPE_CHECKING:
    from kvframe.contract.views import EvictableBlock

__all__ = [
    "InManagerReuseFilter",
    "RequestAccess",
    "RequestScopedPolicy",
    "RequestScopedSlots",
]


@attrs.define(slots=True, eq=False)
class RequestAccess:
    """One request's context for the tier (vLLM 0.33.0's ``ReqContext``).

    ``positions`` maps each key the connector named to the token position that
    ends its chunk; the policy reads it to order a request's keys head to tail.
    ``manager_state`` and ``policy_state`` are scratch slots the manager and
    the policy own (vLLM keeps both in the context's per-type state): a policy
    keeps what it knows of the request in ``policy_state`` and never touches
    ``manager_state``.
    """

    request_id: str
    positions: dict[Hashable, int] = attrs.field(factory=dict)
    manager_state: Any = None
    policy_state: Any = None

    def position(self, key: Hashable) -> int | None:
        """The token position that ends ``key``'s chunk in this request, if known."""
        return self.positions.get(key)


class RequestScopedPolicy(Protocol):
    """vLLM 0.33.0's ``CachePolicy``: organisation and eviction order of a tier's chunks.

    The manager is the policy's only user and owns the blocks; the policy
    orders them. A block's ``ref_cnt`` is ``-1`` while it is being written,
    ``0`` when idle, ``> 0`` while loads read it; the manager changes it in
    place and reports every change to and from ``0`` (:meth:`mark_evictable`,
    :meth:`mark_non_evictable`).

    Contract (checked by the conformance suite, ``pytest --kvframe-plugin
    eviction:NAME``, through the host's manager):

    * ``get`` answers exactly the block inserted under a key and not removed,
      evicted or cleared since;
    * ``evict(n, protected)`` returns exactly ``n`` distinct ``(key, block)``
      pairs it held, each marked evictable (``ref_cnt == 0``) and none
      protected, and stops holding them -- or ``None``, only when it holds
      fewer than ``n`` such chunks; ``evict(0, ...)`` returns ``[]``;
    * deterministic: the same calls give the same victims;
    * ``clear`` forgets every chunk (vLLM's ``reset_cache``).
    """

    def get(self, key: Hashable) -> EvictableBlock | None:
        """The block held under ``key``, or ``None``. Changes no order."""
        ...

    def insert(self, key: Hashable, block: EvictableBlock, access: RequestAccess) -> None:
        """Hold a new chunk (``key`` not held), stored by the request of ``access``."""
        ...

    def remove(self, key: Hashable) -> None:
        """Stop holding ``key`` (held): its store failed."""
        ...

    def evict(
        self, n: int, protected: Collection[Hashable]
    ) -> list[tuple[Hashable, EvictableBlock]] | None:
        """Remove and return exactly ``n`` evictable, unprotected chunks, or ``None``."""
        ...

    def on_store_miss(self, keys: Sequence[Hashable], access: RequestAccess) -> None:
        """The request offered these keys, not held, for storing (once per request and key)."""
        ...

    def on_request_access(self, keys: Sequence[Hashable], access: RequestAccess) -> None:
        """The request accessed these keys (loaded, stored or found ready), first time each."""
        ...

    def on_request_finished(
        self,
        keys: Sequence[Hashable],
        insertion_only: Collection[Hashable],
        reused: Collection[Hashable],
        access: RequestAccess,
    ) -> None:
        """The request finished: commit its accesses (``keys`` head to tail, once).

        ``insertion_only``: keys it stored and never reused; ``reused``: keys it
        loaded or found ready. Keys may have been evicted since.
        """
        ...

    def mark_evictable(self, key: Hashable) -> None:
        """``key``'s block has just become idle (``ref_cnt`` set to ``0``)."""
        ...

    def mark_non_evictable(self, key: Hashable) -> None:
        """``key``'s block was idle and a load has just pinned it."""
        ...

    def clear(self) -> None:
        """Forget every chunk (the tier was reset)."""
        ...


class InManagerReuseFilter(NamedTuple):
    """The reuse filter vLLM 0.33.0's CPU manager keeps inside itself.

    A chunk new to the tier is stored only once it has been *offered* for
    storing ``store_threshold`` times (0 or 1: every offer); the manager
    remembers the offers of ``max_tracker_size`` keys, least recently offered
    forgotten first.
    """

    store_threshold: int
    max_tracker_size: int


@attrs.frozen
class RequestScopedSlots:
    """What vLLM 0.33.0's model of a slot tier is built from, as its offload spec has it.

    The host builds the tier's policy with the eviction plugin's
    :attr:`~kvframe.contract.bases.EvictionPolicy.request_scoped_form`
    (``eviction.request_scoped_form(num_blocks, **eviction_options)``).
    """

    eviction: type[Any]
    """The eviction policy plugin (an ``EvictionPolicy`` subclass) the tier orders its
    chunks by. (Typed loosely only because the bases module imports this one.)"""
    eviction_name: str
    """How the user selected it (error messages name it)."""
    eviction_options: Mapping[str, Any]
    """Its options, as its constructor would take them."""
    num_blocks: int
    """Chunks the tier holds."""
    block_size_factor: int
    """GPU blocks per chunk."""
