"""An offload tier under the vLLM 0.33.0 target: 0.33.0's CPU tier, built from a config.

Under fidelity switch ``offload_jobs`` (the 0.33 target) the tier is vLLM
0.33.0's: :class:`~kvframe.offload.jobs.connector.JobOffloadingConnector` over
:class:`~kvframe.offload.jobs.manager.RequestScopedOffloadManager`, with the
eviction plugin's request-scoped form (the contract's seam
:attr:`kvframe.EvictionPolicy.request_scoped_form`: the bundled ``lru`` and
``arc`` have one) and the reuse filter *inside* the manager, as 0.33.0's
``CPUOffloadingManager`` keeps it (``store_threshold``, ``max_tracker_size``:
:attr:`kvframe.ReuseFilter.in_manager_form`), and
:class:`~kvframe.offload.jobs.worker.JobOffloadWorker` as its worker. The
offload spec says what the tier is built from
(:meth:`kvframe.OffloadSpec.request_scoped_slots`). vLLM 0.33.0 has only its
CPU tier modelled here, so a tier, a policy or a filter without a request-scoped
model is refused with the reason and the seam it lacks, never run as 0.19.1's
under a 0.33 label.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvframe.config import ConfigError
from kvframe.contract.bases import EvictionPolicy, ReuseFilter
from kvframe.engine.tier import OffloadTier

if TYPE_CHECKING:
    from kvframe.contract.bases import OffloadSpec
    from kvframe.contract.offload import OffloadContext
    from kvframe.contract.request_scoped import (
        InManagerReuseFilter,
        RequestScopedPolicy,
        RequestScopedSlots,
    )
    from kvframe.engine.config import EngineConfig
    from kvframe.host.registry import PluginRegistry, Resolved

__all__ = ["build_job_tier"]

SEAMS_DOC = 'docs/plugin-authors.md, section "vLLM 0.33: the request-scoped seams"'
"""Where an author reads how to offer the 0.33 seams (named in the refusals)."""


def build_job_tier(
    config: EngineConfig,
    registry: PluginRegistry,
    resolved: Resolved,
    spec: OffloadSpec,
    context: OffloadContext,
    handler: Any,
) -> OffloadTier:
    """The 0.33.0 connector and worker of tier ``resolved`` (its ``spec`` built), on ``handler``.

    :raises ConfigError: for a tier, an eviction policy or a reuse filter with no
        vLLM 0.33.0 model, naming it and the seam it lacks.
    """
    from kvframe.offload.jobs.connector import JobOffloadingConnector
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager
    from kvframe.offload.jobs.worker import JobOffloadWorker

    where = f"vllm={config.vllm}"
    slots = _slots(spec, context, resolved.name, where)
    policy = _policy(slots, context, resolved.name, where)
    reuse = _in_manager_filter(config, registry, where)
    manager: Any = RequestScopedOffloadManager(
        policy,
        slots.num_blocks,
        store_threshold=reuse.store_threshold,
        max_tracker_size=reuse.max_tracker_size,
    )
    if config.offload_tiers:
        # Tiers below DRAM: vLLM 0.33.0's tiering manager takes the ledger's place.
        from kvframe.engine.tier_chain import build_chain

        manager = build_chain(
            config.offload_tiers,
            manager,
            registry=registry,
            context=context,
            chunk_bytes=context.gpu_block_bytes * slots.block_size_factor,
            clock=lambda: handler.now,
        )
    connector = JobOffloadingConnector(
        manager,
        gpu_block_size=config.block_size,
        block_size_factor=slots.block_size_factor,
        enable_prefix_caching=config.enable_prefix_caching,
    )
    return OffloadTier(connector, JobOffloadWorker(handler), handler)


def _slots(spec: OffloadSpec, context: OffloadContext, name: str, where: str) -> RequestScopedSlots:
    """What the tier's spec builds vLLM 0.33.0's model from, and its connector semantics
    checked to be vLLM's (0.33.0's ``OffloadingConnector`` has no other)."""
    slots = spec.request_scoped_slots(context)
    if slots is None:
        raise ConfigError(
            f"{where}: the offload tier {name!r} has no vLLM 0.33.0 model (its spec's "
            "request_scoped_slots is None); kvframe models vLLM 0.33.0's CPU tier "
            "(--offload cpu:...)",
            hints=["run this tier with --vllm 0.19.1"],
        )
    semantics = spec.connector_semantics()
    if not semantics.async_load or semantics.blocking_store or not semantics.store_outputs:
        raise ConfigError(
            f"{where}: the offload tier {name!r} asks for its own connector "
            "semantics, which vLLM 0.33.0's OffloadingConnector does not have",
            hints=["run this tier with --vllm 0.19.1"],
        )
    return slots


def _policy(
    slots: RequestScopedSlots, context: OffloadContext, name: str, where: str
) -> RequestScopedPolicy:
    """The eviction plugin's request-scoped form, built for the tier's chunks."""
    eviction = slots.eviction
    form = eviction.request_scoped_form if issubclass(eviction, EvictionPolicy) else None
    if form is None:
        raise ConfigError(
            f"{where}: the offload tier's eviction policy {slots.eviction_name!r} has no "
            "vLLM 0.33.0 (request-scoped) form; lru and arc have one. vLLM 0.33.0's CPU "
            "tier drives its policy per request, through the plugin's "
            f"request_scoped_form, which {eviction.__module__}.{eviction.__qualname__} "
            "leaves None",
            hints=[
                f"give the class a request_scoped_form ({SEAMS_DOC})",
                "or use --eviction lru or --eviction arc, or --vllm 0.19.1",
            ],
        )
    if slots.num_blocks < 1:
        raise ConfigError(
            f"offload tier {name!r}: its capacity holds no block of "
            f"{slots.block_size_factor} GPU block(s) of {context.gpu_block_size} tokens"
        )
    try:
        return form(slots.num_blocks, **dict(slots.eviction_options))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: eviction policy {slots.eviction_name!r}: {err}") from err


def _in_manager_filter(
    config: EngineConfig, registry: PluginRegistry, where: str
) -> InManagerReuseFilter:
    """The reuse filter, which 0.33.0 keeps inside its manager: the filter plugin's
    ``in_manager_form`` (the bundled ``threshold`` has one); none selected, a
    manager that stores every offer."""
    from kvframe.contract.request_scoped import InManagerReuseFilter

    if config.reuse_filter is None:
        return InManagerReuseFilter(0, 64_000)
    selected = registry.resolve("reuse_filter", config.reuse_filter)
    cls = selected.cls
    form = cls.in_manager_form if issubclass(cls, ReuseFilter) else None
    if form is None:
        raise ConfigError(
            f"{where}: reuse filter {selected.name!r} has no vLLM 0.33.0 form: 0.33.0's "
            "CPU tier counts store offers inside its manager (the threshold filter), "
            f"through the plugin's in_manager_form, which {cls.__module__}.{cls.__qualname__} "
            "leaves None",
            hints=[
                f"give the class an in_manager_form ({SEAMS_DOC})",
                "or use --reuse-filter threshold:store_threshold=N, or --vllm 0.19.1",
            ],
        )
    try:
        store_threshold, max_tracker_size = form(**dict(selected.options))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: reuse filter {selected.name!r}: {err}") from err
    return InManagerReuseFilter(int(store_threshold), int(max_tracker_size))
