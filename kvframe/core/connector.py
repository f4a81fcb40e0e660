"""The scheduler side of the connector seam to offload tiers.

The scheduler never talks to a tier. It asks a connector, at five points of a
step, the questions vLLM V1's ``KVConnectorBase_V1`` scheduler half answers:

1. admission — how many more prefix tokens the tier holds beyond the local hit,
   and whether loading them is asynchronous (``None``: ask again next step);
2. after allocation — which GPU blocks were reserved for those tokens;
3. output — per-step metadata for the worker (loads and stores to perform);
4. update — the worker's report of finished transfers;
5. finish — whether a finished request's blocks must stay until a store lands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvframe.contract.records import KVEvent
    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.scheduler_output import KVConnectorOutput, SchedulerOutput
    from kvframe.domain.request import Request


class SchedulerConnector(Protocol):
    """Scheduler-side connector: called directly by the scheduler, never via pluggy."""

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Tokens beyond ``num_computed_tokens`` the tier can supply, and whether async.

        Return ``(None, False)`` when the answer is not known yet; the request
        then waits in skipped-waiting and is asked again next step.
        """
        ...

    def update_state_after_alloc(
        self, request: Request, blocks: Sequence[KVCacheBlock], num_external_tokens: int
    ) -> None:
        """GPU blocks were reserved for ``request``; the last ``num_external_tokens``
        worth of its computed prefix must be loaded into them."""
        ...

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> object:
        """Metadata for the worker side: transfers to start this step."""
        ...

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        """The worker finished these transfers."""
        ...

    def request_finished(self, request: Request, block_ids: Sequence[int]) -> bool:
        """``request`` finished. Return True to keep its blocks until its store lands
        (the worker reports it in ``finished_sending``)."""
        ...

    def take_events(self) -> Iterable[KVEvent]:
        """KV events of the tier since the last call."""
        ...
