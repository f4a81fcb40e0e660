"""Asynchronous KV loads that fail: recompute from the first bad block, or fail the request.

A connector's worker reports the GPU blocks a load could not fill
(``KVConnectorOutput.invalid_block_ids``): a prefill instance that went away in
a disaggregated deployment, a remote store that lost a chunk. vLLM's scheduler
(``Scheduler._handle_invalid_blocks`` and ``_update_requests_with_invalid_blocks``,
0.19.1 and 0.33.0 alike) walks the requests waiting for their load
(``WAITING_FOR_REMOTE_KVS``), truncates each one's computed tokens at its first
invalid block, and then by ``kv_load_failure_policy``:

* ``"recompute"``: remembers the request; when its load is reported done
  (``finished_recving``) the valid prefix is cached, or, with none, the blocks
  are freed (a local prefix hit may serve the retry), and the request is
  admitted as any other, computing what the load did not bring
  (``_update_waiting_for_remote_kv``);
* ``"fail"`` (vLLM's default): the request finishes with ``FINISHED_ERROR``;
  its blocks are freed once the load is reported done, as an abort's are.

Either way nothing is lost: every block goes back to the pool, and
:class:`~kvframe.core.scheduler_stats.SchedulerStats` counts the failed loads and
their tokens. vLLM also handles invalid blocks of *synchronous* loads (a running
request's blocks); kvframe's connectors load asynchronously only, so a report
naming a running request's computed block is refused with an error rather than
guessed at.

One release difference, switch ``failed_load_keeps_external_count``: 0.19.1
lowered the request's ``num_external_computed_tokens`` by the tokens lost;
0.33.0 no longer does (accounting only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kvframe.domain.request import RequestStatus

if TYPE_CHECKING:
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.core.scheduler_config import SchedulerConfig
    from kvframe.core.scheduler_stats import SchedulerStats
    from kvframe.domain.request import Request

__all__ = ["LoadFailures"]

_WAITING_FOR_REMOTE_KVS = RequestStatus.WAITING_FOR_REMOTE_KVS


class LoadFailures:
    """The failed loads of one scheduler: which requests recompute once their load lands."""

    __slots__ = ("_block_size", "_keep_external", "_kv", "_recompute", "_stats", "failed")

    def __init__(
        self, kv_cache_manager: KVCacheManager, config: SchedulerConfig, stats: SchedulerStats
    ) -> None:
        self._kv = kv_cache_manager
        self._block_size = config.block_size
        self._recompute = config.kv_load_failure_policy == "recompute"
        self._keep_external = config.fidelity.failed_load_keeps_external_count
        self._stats = stats
        self.failed: set[str] = set()
        """Requests whose load failed and that recompute once it is reported done
        (vLLM's ``failed_recving_kv_req_ids``)."""

    def handle(
        self, invalid_block_ids: set[int], holders: Iterable[Request], running: Sequence[Request]
    ) -> list[str]:
        """Truncate the loads that hit ``invalid_block_ids``; the requests to fail now.

        ``holders`` are the waiting requests that may hold a load (vLLM walks its
        skipped-waiting / KV-holding queue in order). Returns, sorted, the ids of
        the requests to finish with ``FINISHED_ERROR`` (none under ``"recompute"``).
        """
        self._refuse_sync_failures(invalid_block_ids, running)
        affected: list[str] = []
        for request in holders:
            if request.status == _WAITING_FOR_REMOTE_KVS and self._truncate(
                request, invalid_block_ids
            ):
                affected.append(request.request_id)
        if not affected:
            return []
        self._stats.num_failed_kv_loads += len(affected)
        if not self._recompute:
            return sorted(affected)
        self.failed.update(affected)
        return []

    def _truncate(self, request: Request, invalid_block_ids: set[int]) -> bool:
        """Cut ``request``'s computed tokens at its first invalid block; whether it had one.

        Async loads share no block (their blocks are cached only once loaded), so
        vLLM's bookkeeping of blocks shared between requests never applies here.
        """
        block_size = self._block_size
        computed = request.num_computed_tokens
        num_blocks = -(-computed // block_size)
        block_ids = self._kv.get_block_ids(request.request_id)
        for index, block_id in enumerate(block_ids[:num_blocks]):
            if block_id in invalid_block_ids:
                request.num_computed_tokens = index * block_size
                lost = computed - request.num_computed_tokens
                self._stats.num_failed_kv_load_tokens += lost
                if not self._keep_external:
                    request.num_external_computed_tokens -= lost
                return True
        return False

    def _refuse_sync_failures(
        self, invalid_block_ids: set[int], running: Sequence[Request]
    ) -> None:
        """A running request's computed block reported invalid: a synchronous load failed,
        which no kvframe connector does; say so rather than decide unlike vLLM."""
        block_size = self._block_size
        for request in running:
            num_blocks = -(-request.num_computed_tokens // block_size)
            bad = invalid_block_ids.intersection(
                self._kv.get_block_ids(request.request_id)[:num_blocks]
            )
            if bad:
                raise ValueError(
                    f"KVConnectorOutput.invalid_block_ids: blocks {sorted(bad)} belong to "
                    f"running request {request.request_id!r}; only asynchronous loads "
                    "(requests in WAITING_FOR_REMOTE_KVS) may fail in kvframe"
                )

    def forget(self, request_id: str) -> None:
        """``request_id`` finished or was freed before its failed load was reported done:
        nothing is left to recompute (vLLM drops it from ``failed_recving_kv_req_ids``)."""
        self.failed.discard(request_id)

    def landed(self, request: Request) -> bool:
        """``request``'s load was reported done: if it had failed, keep its valid prefix
        (cached) or free its blocks, and return True; False for a load that succeeded."""
        request_id = request.request_id
        if request_id not in self.failed:
            return False
        self.failed.discard(request_id)
        if request.num_computed_tokens:
            self._kv.cache_blocks(request, request.num_computed_tokens)
        else:
            self._kv.free(request)
        return True
