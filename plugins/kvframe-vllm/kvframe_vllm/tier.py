"""A kvframe scheduling policy and vLLM's CPU tier in one vLLM: the connector seam.

With ``--kv-transfer-config`` naming vLLM's ``OffloadingConnector`` (its own
``CPUOffloadingSpec`` or, on vLLM 0.19.1,
:class:`~kvframe_vllm.offload.KvframeOffloadingSpec`, i.e. a kvframe eviction
plugin in the tier), :class:`~kvframe_vllm.scheduler.KvframeScheduler`
builds the connector's scheduler half exactly as vLLM's ``Scheduler`` does
(``KVConnectorFactory.create_connector`` in the scheduler role) and hands it to
kvframe's core through :class:`VllmConnector`.

Why vLLM's connector rather than kvframe's model of it (``kvframe.offload``):
the worker half of the connector, in vLLM's model runner, reads the metadata the
scheduler half builds -- ``OffloadingConnectorMetadata`` with vLLM's load/store
specs -- so the scheduler half must be vLLM's own for the transfers to happen.
kvframe's core already asks its connector the five questions vLLM's scheduler
asks (``kvframe.core.connector.SchedulerConnector``), at the same points of a
step, so :class:`VllmConnector` only translates arguments:

* a kvframe request -> the vLLM ``Request`` of the same id (the bridge keeps
  those in step: tokens, block hashes from vLLM's own hasher, and -- when the
  connector builds its metadata -- the computed-token counts vLLM's scheduler
  has at that moment, before the step's tokens are added);
* kvframe's blocks -> a ``KVCacheBlocks``-shaped view (block ids, and which
  blocks are cached, i.e. have a hash: what the connector reads);
* the worker's ``KVConnectorOutput`` is passed through unchanged.

What vLLM's scheduler reports of its connector, the bridge reports the same
way: the connector's prefix-cache counters (``SchedulerStats.
connector_prefix_cache_stats``: per admission that asked the connector, the
tokens past the local hit and the connector's hit, preempted ones apart; the
``reset`` flag after a connector reset), the step's ``kv_connector_stats`` (the
worker's, aggregated with the connector's own) and the connector's KV events
(the tier's ``BlockStored`` / ``BlockRemoved``, after the GPU's in the step's
batch). vLLM 0.33's differences -- hits split by tier, the connector's own
stats taken even without the worker's, ``to_dict`` payloads -- are
:class:`kvframe_vllm.tier033.VllmConnector033`'s.

The connector's metadata is built by the bridge in vLLM's types (the connector
reads vLLM's ``SchedulerOutput``), so the core's ``build_connector_meta`` call
returns nothing. On vLLM 0.33.0 the connector's scheduler half is 0.33's own
job-numbered one (its ``CPUOffloadingSpec``; a kvframe eviction plugin enters
through vLLM's cache-policy factory, :mod:`kvframe_vllm.cache_policy`), and
:mod:`kvframe_vllm.tier033` adds the calls 0.33's scheduler makes beyond
0.19.1's (``kvframe_vllm.compat.tier_connector`` picks the view).

This module imports vLLM; nothing else in kvframe does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.metrics.stats import PrefixCacheStats

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

    from kvframe.core.block_pool import KVCacheBlock
    from kvframe.core.scheduler_output import KVConnectorOutput as KvConnectorOutput
    from kvframe.domain.request import Request as KvRequest

__all__ = ["SUPPORTED_CONNECTORS", "VllmConnector", "build_connector", "refusal"]

SUPPORTED_CONNECTORS = ("OffloadingConnector",)
"""The KV connectors whose scheduler half the bridge is checked with."""


def refusal(vllm_config: VllmConfig, interface_033: bool) -> str | None:
    """Why this ``kv_transfer_config`` cannot run with the bridge, or None."""
    transfer = vllm_config.kv_transfer_config
    if transfer is None:
        return None
    if transfer.kv_connector not in SUPPORTED_CONNECTORS:
        return (
            f"the KV connector {transfer.kv_connector!r} (--kv-transfer-config; the bridge "
            f"runs {', '.join(SUPPORTED_CONNECTORS)})"
        )
    if interface_033:
        from kvframe_vllm.tier033 import refusal_033

        return refusal_033(vllm_config)
    return None


def build_connector(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> Any:
    """vLLM's connector, scheduler role, built as vLLM's ``Scheduler`` builds it.

    vLLM 0.33's scheduler then binds its ``KVCacheManager`` to the connector
    (``bind_kv_cache_manager``); kvframe has none to bind. The OffloadingConnector
    reads it only for hybrid models' bounding groups (refused: one KV-cache
    group), so the bind is skipped; a connector that overrides the bind to
    track vLLM's GPU blocks is refused.
    """
    connector = KVConnectorFactory.create_connector(
        config=vllm_config, role=KVConnectorRole.SCHEDULER, kv_cache_config=kv_cache_config
    )
    if _binds_gpu_blocks(connector):
        raise ValueError(
            f"{type(connector).__name__} wants vLLM's GPU block pool, which the kvframe "
            "scheduler replaces with its own"
        )
    return connector


def _binds_gpu_blocks(connector: Any) -> bool:
    """Whether ``connector`` overrides vLLM's block-pool binding (0.19.1: has one at all)."""
    if not hasattr(connector, "bind_gpu_block_pool"):
        return False
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

    base = getattr(KVConnectorBase_V1, "bind_gpu_block_pool", None)
    return base is None or type(connector).bind_gpu_block_pool is not base


class _Block:
    """What vLLM's connector reads of a GPU block: its id, whether it is cached, and
    (0.33) whether it is the null block."""

    __slots__ = ("block_hash", "block_id", "is_null")

    def __init__(self, block: KVCacheBlock) -> None:
        self.block_id = block.block_id
        self.block_hash = block.block_hash
        self.is_null = block.is_null


class _Blocks:
    """A one-group ``KVCacheBlocks`` over kvframe's blocks (``blocks``, ``get_block_ids``)."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.blocks = ([_Block(b) for b in blocks],)

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...]:
        return ([b.block_id for b in self.blocks[0]],)


class VllmConnector:
    """kvframe's ``SchedulerConnector`` answered by vLLM's own connector (scheduler half)."""

    def __init__(self, connector: Any, requests: dict[str, Request]) -> None:
        """``requests``: the bridge's vLLM requests by id (live: read at each call)."""
        self.connector = connector
        self._requests = requests
        self._output: KVConnectorOutput | None = None
        self.kv_transfer_params: dict[str, dict[str, Any]] = {}
        """Finished request id -> the parameters the connector returned for its output."""
        self.prefix_stats: PrefixCacheStats | None = None
        """The connector's prefix-cache counters since the last ``make_stats`` (the
        bridge sets it when stats are on, as vLLM's scheduler does)."""
        self._lookups: dict[str, tuple[int, int]] = {}
        """Request id -> (tokens asked of the connector, its hit), until admitted."""

    def get_num_new_matched_tokens(
        self, request: KvRequest, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        found = self.connector.get_num_new_matched_tokens(
            self._requests[request.request_id], num_computed_tokens
        )
        if found[0] is not None:
            # vLLM counts the lookup once the request is admitted (below).
            self._lookups[request.request_id] = (
                request.num_tokens - num_computed_tokens,
                found[0],
            )
        return found

    def update_state_after_alloc(
        self, request: KvRequest, blocks: Sequence[KVCacheBlock], num_external_tokens: int
    ) -> None:
        vllm_request = self._requests[request.request_id]
        self.connector.update_state_after_alloc(vllm_request, _Blocks(blocks), num_external_tokens)
        lookup = self._lookups.pop(request.request_id, None)
        if lookup is not None and lookup[0] and self.prefix_stats is not None:
            self._record_lookup(vllm_request, *lookup, preempted=request.num_preemptions > 0)

    def _record_lookup(self, request: Request, queries: int, hits: int, *, preempted: bool) -> None:
        """vLLM 0.19.1's record of an admission's connector lookup."""
        assert self.prefix_stats is not None
        self.prefix_stats.record(num_tokens=queries, num_hits=hits, preempted=preempted)

    def take_prefix_stats(self) -> PrefixCacheStats | None:
        """The connector's prefix-cache counters since the last call (``make_stats``)."""
        stats = self.prefix_stats
        if stats is not None:
            self.prefix_stats = PrefixCacheStats()
        return stats

    def cache_reset(self) -> None:
        """The connector's cache was reset: the next counters say so."""
        if self.prefix_stats is not None:
            self.prefix_stats.reset = True

    def step_stats(self, worker: Any) -> Any:
        """The step's ``KVConnectorStats``: vLLM 0.19.1 aggregates the connector's own
        with the worker's, and only when the worker reported some."""
        if worker:
            own = self.connector.get_kv_connector_stats()
            if own:
                return worker.aggregate(own)
        return worker

    @staticmethod
    def stats_payload(stats: Any) -> Any:
        """What ``SchedulerStats.kv_connector_stats`` carries (0.19.1: ``data``)."""
        return stats.data if stats else None

    def build_connector_meta(self, scheduler_output: object) -> None:
        return None  # built in vLLM's types: see build_vllm_meta

    def build_vllm_meta(self, scheduler_output: SchedulerOutput) -> Any:
        """The connector's metadata for the worker, from the step in vLLM's types."""
        return self.connector.build_connector_meta(scheduler_output)

    def set_worker_output(self, output: KVConnectorOutput | None) -> None:
        """The worker's report of this step, handed on when the core asks."""
        self._output = output

    def update_connector_output(self, output: KvConnectorOutput) -> None:
        assert self._output is not None, "update_connector_output without a worker report"
        self.connector.update_connector_output(self._output)
        self._output = None

    def request_finished(self, request: KvRequest, block_ids: Sequence[int]) -> bool:
        self._lookups.pop(request.request_id, None)
        delay, params = self._finished(self._requests[request.request_id], list(block_ids))
        if params is not None:
            self.kv_transfer_params[request.request_id] = params
        return bool(delay)

    def _finished(self, request: Request, block_ids: list[int]) -> tuple[bool, Any]:
        """vLLM 0.19.1's call: ``request_finished(request, block_ids)``."""
        return self.connector.request_finished(request, block_ids)

    def on_new_request(self, request: Request) -> None:
        """A request reached the scheduler (vLLM 0.33 tells its connector; 0.19.1 does not)."""

    def take_events(self) -> Iterable[Any]:
        """The connector's KV events since the last call (vLLM's types, as they are)."""
        return self.connector.take_events()
