"""The connector seam on vLLM 0.33.0: what its scheduler tells the OffloadingConnector.

vLLM 0.33.0 rewrote the ``OffloadingConnector`` around transfer *jobs*
(``docs/fidelity.md``, "The tier under vLLM 0.33.0"). The jobs, the fence of a
finished request's last stores, the flush when a fenced source block is
allocated again, the pending lookup answer (``None``: ask again next step) and
the request-scoped tier all live in the connector's scheduler half, which the
bridge runs unchanged; what the *scheduler* must do is make the calls vLLM
0.33.0's ``Scheduler`` makes, with what it passes. kvframe's core already asks
its connector at vLLM's points (lookup, after allocation -- at every
admission, external tokens or not --, metadata, worker report, finish) and
frees a finished request's blocks at once when the connector says so (0.33's
``request_finished`` always does); T16 (``reserve_for_inflight_prefills``) is
the core's. :class:`VllmConnector033` adds what 0.33's scheduler does beyond
0.19.1's:

* ``on_new_request`` when a request is added (the connector opens the
  request's context in the tier);
* ``request_finished_all_groups`` (the connector supports the hybrid
  allocator), with the request's finished status already on vLLM's request:
  the connector's next metadata reads it (a finished request's last stores
  reach ``max(num_prompt_tokens, num_tokens - 1)``, an aborted one's its
  computed tokens), and a landed job un-fences its source blocks only for a
  finished request;
* a ``KVConnectorBlockState`` on the ``SchedulerOutput`` while the metadata is
  built (the step's request ids and their block tables), removed before the
  output goes to the worker, as vLLM does;
* the allocated blocks' ``is_null`` (the connector skips the null block when
  it collects the step's allocated block ids, which decide the flushes).

What the bridge does not model is refused when the scheduler is built
(:func:`refusal_033`), each naming the setting that turns it off.

This module imports vLLM; nothing else in kvframe does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, SupportsHMA
from vllm.v1.core.sched.output import KVConnectorBlockState
from vllm.v1.request import RequestStatus as VllmStatus

from kvframe_vllm.tier import VllmConnector

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

    from kvframe.domain.request import Request as KvRequest

__all__ = ["CPU_SPECS", "VllmConnector033", "refusal_033"]

CPU_SPECS = ("CPUOffloadingSpec",)
"""The offloading specs the bridge runs on vLLM 0.33 (vLLM's own CPU tier)."""

_CONNECTOR_HOOKS = ("has_pending_block_frees", "register_finished_partial_tail")
"""Connector methods vLLM 0.33's scheduler consults that kvframe's core does not ask;
a connector answering them other than vLLM's base class does is refused."""


def refusal_033(vllm_config: VllmConfig) -> str | None:
    """Why the OffloadingConnector configured here cannot run with the bridge on 0.33."""
    transfer = vllm_config.kv_transfer_config
    assert transfer is not None
    extra = transfer.kv_connector_extra_config or {}
    spec = extra.get("spec_name", CPU_SPECS[0])
    if spec not in CPU_SPECS:
        return (
            f"the offloading spec {spec!r} on vLLM 0.33 (the bridge runs vLLM 0.33's own "
            "CPUOffloadingSpec; a kvframe eviction plugin enters it through vLLM's cache-"
            "policy factory: drop spec_name/spec_module_path and set eviction_policy "
            "'kvframe:<config string>' with cache_policy_module_path "
            "'kvframe_vllm.cache_policy', i.e. kvframe_vllm.cache_policy_config(...))"
        )
    if int(extra.get("sync_load_budget_bytes", 0) or 0) > 0:
        return (
            "synchronous tier loads (kv_connector_extra_config sync_load_budget_bytes; "
            "drop it or set 0: the bridge loads asynchronously, as vLLM's default)"
        )
    return None


def overridden_hooks(connector: Any) -> list[str]:
    """The 0.33 scheduler hooks ``connector`` answers itself (see ``_CONNECTOR_HOOKS``)."""
    return [
        name
        for name in _CONNECTOR_HOOKS
        if getattr(type(connector), name, None) is not getattr(KVConnectorBase_V1, name, None)
    ]


class VllmConnector033(VllmConnector):
    """:class:`~kvframe_vllm.tier.VllmConnector` with vLLM 0.33.0's scheduler calls."""

    def __init__(
        self,
        connector: Any,
        requests: dict[str, Request],
        block_ids: Callable[[str], list[int]],
    ) -> None:
        """``block_ids(request_id)``: the request's GPU block table in kvframe's core."""
        hooks = overridden_hooks(connector)
        if hooks:
            raise ValueError(
                f"{type(connector).__name__} answers {', '.join(hooks)}, which vLLM 0.33's "
                "scheduler consults and kvframe's does not"
            )
        super().__init__(connector, requests)
        self._block_ids = block_ids
        self._hma = isinstance(connector, SupportsHMA)

    def on_new_request(self, request: Request) -> None:
        self.connector.on_new_request(request)

    def _record_lookup(self, request: Request, queries: int, hits: int, *, preempted: bool) -> None:
        """0.33 splits a first admission's hit by the tier it came from."""
        assert self.prefix_stats is not None
        self.prefix_stats.record(
            num_tokens=queries,
            num_hits=hits,
            preempted=preempted,
            hits_by_source=(
                self.connector.get_external_cache_hit_sources(request, hits)
                if hits and not preempted
                else None
            ),
        )

    def step_stats(self, worker: Any) -> Any:
        """0.33 takes the connector's own stats whenever it has some."""
        own = self.connector.get_kv_connector_stats()
        if own is not None and not own.is_empty():
            return worker.aggregate(own) if worker is not None else own
        return worker

    @staticmethod
    def stats_payload(stats: Any) -> Any:
        return stats.to_dict() if stats else None

    def request_finished(self, request: KvRequest, block_ids: Any) -> bool:
        # vLLM sets the finished status before it tells the connector.
        self._requests[request.request_id].status = VllmStatus[request.status.name]
        return super().request_finished(request, block_ids)

    def _finished(self, request: Request, block_ids: list[int]) -> tuple[bool, Any]:
        if self._hma:
            return self.connector.request_finished_all_groups(request, (block_ids,))
        return self.connector.request_finished(request, block_ids)

    def build_vllm_meta(self, scheduler_output: SchedulerOutput) -> Any:
        scheduler_output.kv_connector_block_state = KVConnectorBlockState(
            req_ids=set(scheduler_output.num_scheduled_tokens),
            resolve_block_ids=lambda rid: (list(self._block_ids(rid)),),
            boundary_state_offloads={},
        )
        try:
            return self.connector.build_connector_meta(scheduler_output)
        finally:
            # Connector-only block state is not sent to the workers.
            scheduler_output.kv_connector_block_state = None
