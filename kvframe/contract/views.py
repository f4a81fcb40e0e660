"""What a plugin is shown of the host: read-only views, passed to its methods.

A scheduling policy reads the scheduler through :class:`SchedulerContext`, the
offload tier through :class:`TierView` and the requests it retains through
:class:`Retention`; an eviction policy on the GPU tier sees blocks as
:class:`EvictableBlock`. They are protocols, so the host's own objects satisfy
them without a wrapper on the hot path; a plugin must treat them as read-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from kvframe.domain.costs import CostModel
    from kvframe.domain.queues import RequestQueue
    from kvframe.domain.request import Request

__all__ = ["EvictableBlock", "Retention", "SchedulerContext", "TierView"]


class Retention(Protocol):
    """A finished request whose KV blocks the core keeps on the policy's behalf."""

    @property
    def request(self) -> Request: ...

    @property
    def deadline(self) -> float:
        """Virtual time at which the core releases the blocks by itself."""
        ...


class TierView(Protocol):
    """A read-only view of the offload tier behind the scheduler's connector.

    What a scheduling policy may ask about the tier, so that it can price a
    decision by where a request's KV would come from -- e.g. "if I free these
    blocks now, what does getting them back cost?": loading the part the tier
    holds plus recomputing the rest, rather than recomputing everything.

    Nothing here changes the tier: no eviction-policy touch, no reuse-filter
    sighting, no pin. It answers with the tier manager's ``lookup`` behind the
    host's reuse filter, which for the bundled ``cpu`` tier is a pure query, so
    asking does not change which blocks the tier keeps (FCFS and priority
    never ask). The offload contract does not require a third-party manager's
    ``lookup`` to be pure -- a tier with a reuse filter built into its manager
    may count lookups as sightings -- and with such a tier the view's questions
    count too. The answers are the tier's state *now*; it may evict later.

    Called directly, never through pluggy; each call walks the request's block
    hashes once, so ask per decision, not per step.
    """

    @property
    def medium(self) -> str:
        """Where the tier lives (``"CPU"``)."""
        ...

    @property
    def block_size(self) -> int:
        """Tokens per offloaded block: the tier holds whole blocks of this size."""
        ...

    def num_cached_tokens(self, request: Request) -> int:
        """Leading tokens of ``request``'s context the tier holds, in whole offloaded blocks.

        Counts the blocks that are stored and ready, and the blocks of this
        request whose store the tier has accepted but not finished (they will
        be ready long before a follow-up turn could load them), in order from
        the first token, stopping at the first block the tier does not hold.
        Covers only full blocks whose hashes the request already has.
        """
        ...

    def load_time(self, num_tokens: int) -> float:
        """Seconds the connector estimates a load of ``num_tokens`` tokens takes.

        One batch from the tier into GPU memory on an idle link (the transfer
        model of the executor: latency plus bytes over bandwidth); 0 for 0.
        """
        ...


class SchedulerContext(Protocol):
    """The view of the scheduler a :class:`SchedulingPolicy` gets in ``attach``.

    Read the queues; do not mutate them. The only mutation offered is
    :meth:`release`, which gives retained blocks back to the prefix cache.
    """

    @property
    def now(self) -> float:
        """Virtual time of the current step."""
        ...

    @property
    def block_size(self) -> int: ...

    @property
    def cost_model(self) -> CostModel | None:
        """The executor's cost model when the engine has one (e.g. to price a
        re-prefill against keeping blocks), else ``None``."""
        ...

    @property
    def num_free_blocks(self) -> int:
        """Blocks that an allocation could take right now (free or evictable)."""
        ...

    def num_cached_tokens(self, request: Request) -> int:
        """Leading tokens of ``request`` the GPU prefix cache holds now, in whole blocks.

        What admitting it now would hit: the longest cached prefix of its
        block hashes, capped as the KV cache manager caps a hit (the last
        token is always computed). A query: no lookup is counted in the
        prefix-cache statistics and no eviction order changes. Costs one
        dict probe per hit block; 0 with prefix caching off.
        """
        ...

    @property
    def running(self) -> Sequence[Request]: ...

    @property
    def waiting(self) -> RequestQueue: ...

    @property
    def skipped_waiting(self) -> RequestQueue: ...

    @property
    def retained(self) -> Mapping[str, Retention]:
        """Retained finished requests by request id, oldest retention first."""
        ...

    @property
    def offload(self) -> TierView | None:
        """The offload tier behind the connector, read-only; ``None`` without a tier.

        Also ``None`` when the connector offers no view (a connector that is
        not kvframe's :class:`~kvframe.offload.slots.connector.OffloadingConnector`
        or one built without a load-time estimate). Policies should treat
        ``None`` as "every freed block must be recomputed".
        """
        ...

    def release(self, request_id: str) -> None:
        """Free a retained request's blocks now (they stay in the prefix cache)."""
        ...


@runtime_checkable
class EvictableBlock(Protocol):
    """What an eviction policy may look at on the blocks it is given.

    ``ref_cnt`` follows vLLM's offload convention: ``-1`` while being written,
    ``0`` idle (the only evictable state), ``> 0`` in use.
    """

    @property
    def ref_cnt(self) -> int: ...
