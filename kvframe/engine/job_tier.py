"""An offload tier under the vLLM 0.33.0 target: 0.33.0's CPU tier, built from a config.

Under fidelity switch ``offload_jobs`` (the 0.33 target) the tier is vLLM
0.33.0's: :class:`~kvframe.offload.jobs.connector.JobOffloadingConnector` over
:class:`~kvframe.offload.jobs.manager.RequestScopedOffloadManager`, with
the eviction plugin's request-scoped form (``request_scoped_form``: the
bundled ``lru`` and ``arc`` have one) and the reuse filter *inside* the
manager, as 0.33.0's ``CPUOffloadingManager`` keeps it (``store_threshold``,
``max_tracker_size``), and :class:`~kvframe.offload.jobs.worker.JobOffloadWorker`
as its worker. vLLM 0.33.0 has only its CPU tier modelled here, so a tier
without a request-scoped model is refused with the reason, never run as
0.19.1's under a 0.33 label.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvframe.config import ConfigError

if TYPE_CHECKING:
    from kvframe.contract.offload import OffloadContext
    from kvframe.engine.config import EngineConfig
    from kvframe.host.registry import PluginRegistry, Resolved
    from kvframe.offload.jobs.connector import JobOffloadingConnector
    from kvframe.offload.jobs.worker import JobOffloadWorker

__all__ = ["build_job_tier"]


def build_job_tier(
    config: EngineConfig,
    registry: PluginRegistry,
    resolved: Resolved,
    spec: Any,
    context: OffloadContext,
    handler: Any,
) -> tuple[JobOffloadingConnector, JobOffloadWorker]:
    """The 0.33.0 connector and worker of tier ``resolved`` (its ``spec`` built).

    :raises ConfigError: for a tier, an eviction policy or a reuse filter with no
        vLLM 0.33.0 model, naming it.
    """
    from kvframe.offload.jobs.connector import JobOffloadingConnector
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager
    from kvframe.offload.jobs.worker import JobOffloadWorker

    where = f"vllm={config.vllm}"
    eviction = getattr(spec, "eviction", None)
    num_blocks_of = getattr(spec, "num_blocks", None)
    factor = getattr(spec, "block_size_factor", None)
    semantics_of = getattr(spec, "connector_semantics", None)
    semantics = semantics_of() if callable(semantics_of) else None
    if eviction is None or not callable(num_blocks_of) or not isinstance(factor, int):
        raise ConfigError(
            f"{where}: the offload tier {resolved.name!r} has no vLLM 0.33.0 model; "
            "kvframe models vLLM 0.33.0's CPU tier (--offload cpu:...)",
            hints=["run this tier with --vllm 0.19.1"],
        )
    if semantics is not None and (
        not semantics.async_load or semantics.blocking_store or not semantics.store_outputs
    ):
        raise ConfigError(
            f"{where}: the offload tier {resolved.name!r} asks for its own connector "
            "semantics, which vLLM 0.33.0's OffloadingConnector does not have",
            hints=["run this tier with --vllm 0.19.1"],
        )
    form = getattr(eviction.cls, "request_scoped_form", None)
    if form is None:
        raise ConfigError(
            f"{where}: the offload tier's eviction policy {eviction.name!r} has no vLLM "
            "0.33.0 (request-scoped) form; lru and arc have one",
            hints=["use --eviction lru or --eviction arc, or --vllm 0.19.1"],
        )
    num_blocks = int(num_blocks_of(context))
    if num_blocks < 1:
        raise ConfigError(
            f"offload tier {resolved.name!r}: its capacity holds no block of "
            f"{factor} GPU block(s) of {context.gpu_block_size} tokens"
        )
    try:
        policy = form(num_blocks, **dict(eviction.options))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: eviction policy {eviction.name!r}: {err}") from err
    store_threshold, max_tracker_size = _threshold(config, registry, where)
    manager = RequestScopedOffloadManager(
        policy, num_blocks, store_threshold=store_threshold, max_tracker_size=max_tracker_size
    )
    connector = JobOffloadingConnector(
        manager,
        gpu_block_size=config.block_size,
        block_size_factor=factor,
        enable_prefix_caching=config.enable_prefix_caching,
    )
    return connector, JobOffloadWorker(handler)


def _threshold(config: EngineConfig, registry: PluginRegistry, where: str) -> tuple[int, int]:
    """``(store_threshold, max_tracker_size)`` of the reuse filter, which 0.33.0 keeps
    inside its manager: the filter plugin's ``in_manager_form`` (the bundled
    ``threshold`` has one), as eviction plugins offer ``request_scoped_form``."""
    if config.reuse_filter is None:
        return 0, 64_000
    selected = registry.resolve("reuse_filter", config.reuse_filter)
    form = getattr(selected.cls, "in_manager_form", None)
    if form is None:
        raise ConfigError(
            f"{where}: reuse filter {selected.name!r} has no vLLM 0.33.0 form: 0.33.0's "
            "CPU tier counts store offers inside its manager (the threshold filter)",
            hints=["use --reuse-filter threshold:store_threshold=N, or --vllm 0.19.1"],
        )
    try:
        store_threshold, max_tracker_size = form(**dict(selected.options))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: reuse filter {selected.name!r}: {err}") from err
    return int(store_threshold), int(max_tracker_size)
