"""Assembling an engine: the plugins a config selects, the scheduler and the executor.

:func:`assemble` is what :meth:`Engine.from_config <kvframe.engine.Engine.from_config>`
runs; it is apart from the step loop so that each reads on its own. Every
problem found here is a :class:`~kvframe.config.ConfigError` naming what to fix
(an unknown plugin, options a plugin refuses, a tier whose blocks do not divide
into GPU blocks, a model that does not fit), raised before the run starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from kvframe.config import ConfigError
from kvframe.contract.bases import OffloadSpec
from kvframe.contract.offload import NO_TIER, OffloadContext
from kvframe.core.factory import make_scheduler
from kvframe.core.scheduler import Scheduler
from kvframe.engine.tier import OffloadTier
from kvframe.executors.sim import SimExecutor

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy
    from kvframe.contract.offload import ConnectorSemantics, Tier, TransferPricing
    from kvframe.domain.costs import CostModel
    from kvframe.engine.config import EngineConfig
    from kvframe.executors.base import Executor
    from kvframe.executors.presets import Preset
    from kvframe.executors.torch.build import ModelPlan
    from kvframe.executors.torch.executor import RealBytesTransferHandler
    from kvframe.executors.torch.options import TorchOptions
    from kvframe.host.registry import PluginRegistry
    from kvframe.host.tracing import Tracing
    from kvframe.offload.slots.connector import OffloadingConnector
    from kvframe.offload.slots.worker import SimTransferHandler

__all__ = ["EngineParts", "assemble", "build_offload"]


@attrs.frozen(slots=True)
class EngineParts:
    """What an :class:`~kvframe.engine.Engine` is made of."""

    config: EngineConfig
    scheduler: Scheduler
    executor: Executor
    tracing: Tracing | None
    preset: Preset
    tier: Tier
    """The offload tier (:data:`~kvframe.contract.offload.NO_TIER` without one)."""


def assemble(
    config: EngineConfig,
    registry: PluginRegistry | None = None,
    *,
    kv_events: bool = False,
    tier: Tier | None = None,
) -> EngineParts:
    """Build the plugins ``config`` selects, the scheduler and the executor.

    :param registry: where plugins are looked up (default: the installed ones).
    :param kv_events: the GPU pool records KV events without a tracer (a fleet's router).
    :param tier: a tier built by the caller instead of ``config.offload``'s (a
        disaggregated fleet's replica, :mod:`kvframe.fleet.pd_connector`); sim only.
    :raises ConfigError: for an unknown plugin or a bad option.
    """
    from kvframe.executors.torch.options import parse_executor
    from kvframe.host.registry import get_registry

    registry = registry if registry is not None else get_registry()
    torch_options = parse_executor(config.executor)[1]
    plan = None
    if torch_options is not None:
        # Validate the model (dtype, device, checkpoint) before anything else is built.
        plan, config = _plan_model(config, torch_options)
    preset = config.preset_object
    policy = registry.create("scheduling", config.scheduler)
    num_gpu_blocks = config.resolved_num_gpu_blocks()
    model = None
    if plan is not None:
        try:
            model = plan.build(num_gpu_blocks, config.block_size)
        except ValueError as err:
            raise ConfigError(str(err), origin="--executor") from None
    eviction = _gpu_eviction(config, registry, num_gpu_blocks)
    tracing = registry.create_tracing(config.tracers) if config.tracers else None
    events = tracing is not None and tracing.active
    try:
        tier = _tier(config, registry, events, plan, tier)
        scheduler = make_scheduler(
            config.scheduler_config(enable_kv_cache_events=events or kv_events),
            policy,
            eviction_policy=eviction,
            connector=tier.connector,
            cost_model=preset.cost_model,
        )
    except BaseException:
        if tracing is not None:
            tracing.close()
        raise
    executor: Executor
    if model is not None:
        assert plan is not None and torch_options is not None
        executor = _torch_executor(model, plan, torch_options, preset, tier)
    else:
        executor = SimExecutor(
            preset.cost_model, offload_worker=tier.worker, transfer_handler=tier.handler
        )
    return EngineParts(config, scheduler, executor, tracing, preset, tier)


def _tier(
    config: EngineConfig,
    registry: PluginRegistry,
    events: bool,
    plan: ModelPlan | None,
    given: Tier | None,
) -> Tier:
    """The run's tier: the caller's (a disaggregated fleet's replica), ``config.offload``'s,
    or none."""
    if given is not None:
        if config.offload is not None or plan is not None:
            raise ConfigError("a fleet's transfer tier runs with the sim executor and no --offload")
        return given
    if config.offload is None:
        return NO_TIER
    return build_offload(
        config,
        registry,
        events,
        kv_bytes_per_token=None if plan is None else plan.kv_bytes_per_token(),
        real_bytes=plan is not None,
    )


def _plan_model(config: EngineConfig, options: TorchOptions) -> tuple[ModelPlan, EngineConfig]:
    """The torch executor's model plan, and the config with its GPU block count."""
    from kvframe.executors.torch.build import plan_model

    try:
        plan = plan_model(options)
    except ValueError as err:
        raise ConfigError(str(err), origin="--executor") from None
    num_blocks = _torch_num_blocks(
        config, plan.kv_bytes_per_block(config.block_size), options.kv_memory
    )
    return plan, attrs.evolve(config, num_gpu_blocks=num_blocks, kv_memory=None)


def _gpu_eviction(
    config: EngineConfig, registry: PluginRegistry, num_gpu_blocks: int
) -> EvictionPolicy | None:
    """The GPU prefix cache's eviction policy, if one replaces vLLM's free queue."""
    if config.gpu_eviction is None:
        return None
    eviction: EvictionPolicy = registry.create("eviction", config.gpu_eviction, num_gpu_blocks)
    from kvframe.core.block_pool import gpu_eviction_problem

    problem = gpu_eviction_problem(eviction)
    if problem is not None:
        selected = config.gpu_eviction
        text = selected if isinstance(selected, str) else type(eviction).name
        raise ConfigError(f"--gpu-eviction {text}: {problem}")
    return eviction


def _torch_executor(
    model: Any,
    plan: ModelPlan,
    options: TorchOptions,
    preset: Preset,
    tier: Tier,
) -> Executor:
    from kvframe.executors.torch.executor import TorchExecutor

    if tier.moves_blocks:
        tier.handler.register_kv_caches(model.kv_caches)
    eos = options.eos if options.eos is not None else plan.config.eos_token_id
    return TorchExecutor(
        model,
        preset.cost_model,
        clock=options.clock,
        stop_token_ids=() if eos is None or eos < 0 else (eos,),
        offload_worker=tier.worker,
        transfer_handler=tier.handler,
        description=plan.describe(),
        tokenizer=plan.tokenizer,
    )


def build_offload(
    config: EngineConfig,
    registry: PluginRegistry,
    enable_events: bool,
    *,
    kv_bytes_per_token: int | None = None,
    real_bytes: bool = False,
) -> OffloadTier:
    """The tier's manager (wrapped in the reuse filter), its connector, worker and handler.

    The sim executor's worker runs a :class:`SimTransferHandler`. With
    ``real_bytes`` (the torch executor) the tier's own transfer handler moves
    the bytes and the sim handler keeps the time (see
    :class:`~kvframe.executors.torch.executor.RealBytesTransferHandler`);
    ``kv_bytes_per_token`` is then the torch model's, not the preset's.

    ``config.eviction`` sets the tier's ``eviction`` option; if the offload
    config string sets it too, they must name the same policy with the same options.
    """
    from kvframe.offload.slots.worker import OffloadWorker

    assert config.offload is not None
    resolved = registry.resolve("offload", config.offload)
    spec = _offload_spec(config, registry, resolved)
    preset = config.preset_object
    context = OffloadContext(
        gpu_block_size=config.block_size,
        kv_bytes_per_token=(
            preset.shape.kv_bytes_per_token if kv_bytes_per_token is None else kv_bytes_per_token
        ),
        num_gpu_blocks=config.resolved_num_gpu_blocks(),
        enable_events=enable_events,
    )
    cost_model = preset.cost_model
    pricing = spec.transfer_pricing(context)
    if config.offload_bandwidth is not None:
        if pricing is not None:
            raise ConfigError(
                f"--offload-bandwidth: the offload tier {resolved.name!r} prices its own "
                "transfers; set the rates with its own options instead",
                hints=[f"kvframe plugins offload {resolved.name}  # lists its options"],
            )
        cost_model = attrs.evolve(cost_model, transfer_bytes_per_s=float(config.offload_bandwidth))
    handler = _transfer_handler(cost_model, context, preset, spec if real_bytes else None, pricing)
    if config.fidelity.offload_jobs:
        # vLLM 0.33.0's tier: its job-numbered connector, ledger and worker.
        from kvframe.engine.job_tier import build_job_tier

        return build_job_tier(config, registry, resolved, spec, context, handler)
    manager, factor = _offload_manager(config, registry, resolved.name, spec, context)
    semantics = spec.connector_semantics()
    connector = _offload_connector(
        config, manager, factor, cost_model, context, preset, semantics, pricing
    )
    return OffloadTier(connector, OffloadWorker(handler, semantics), handler)


def _transfer_handler(
    cost_model: CostModel,
    context: OffloadContext,
    preset: Preset,
    real_bytes_spec: Any,
    pricing: TransferPricing | None = None,
) -> SimTransferHandler | RealBytesTransferHandler:
    """The sim's handler, which times the tier's transfers (at the tier's own
    ``pricing`` if it has one); given the tier's spec (``real_bytes_spec``, the
    torch executor), wrapped so that the spec's own handler moves the bytes
    while the sim's keeps the time."""
    from kvframe.offload.slots.worker import SimTransferHandler

    handler = SimTransferHandler(
        cost_model, context.gpu_block_bytes, preset.shape.num_layers, pricing
    )
    if real_bytes_spec is None:
        return handler
    from kvframe.executors.torch.executor import RealBytesTransferHandler

    return RealBytesTransferHandler(handler, real_bytes_spec.create_transfer_handler(context))


def _offload_spec(config: EngineConfig, registry: PluginRegistry, resolved: Any) -> OffloadSpec:
    """The tier's spec, built with the eviction policy selected on its own (``--eviction``),
    which must agree with one the offload config string names."""
    options = dict(resolved.options)
    if config.eviction is not None:
        wanted = registry.resolve("eviction", config.eviction)
        given = options.get("eviction")
        if given is not None:
            have = given if not isinstance(given, str) else registry.resolve("eviction", given)
            if (have.name, dict(have.options)) != (wanted.name, dict(wanted.options)):
                raise ConfigError(
                    f"the offload tier's eviction policy {have.name!r} disagrees with the "
                    f"eviction policy selected separately ({wanted.spec.source or wanted.name!r})",
                    hints=["name the tier's eviction policy once: --eviction or eviction=..."],
                )
        options["eviction"] = wanted.spec.source or wanted.name
    try:
        spec = resolved.cls(**options)
    except ValueError as err:
        raise ConfigError(f"offload tier {resolved.name!r} rejected its options: {err}") from err
    if not isinstance(spec, OffloadSpec):  # the registry admits only subclasses
        raise ConfigError(f"offload tier {resolved.name!r} is not a kvframe.OffloadSpec")
    return spec


def _offload_manager(
    config: EngineConfig,
    registry: PluginRegistry,
    name: str,
    spec: OffloadSpec,
    context: OffloadContext,
) -> tuple[Any, int]:
    """The tier's manager behind the reuse filter, and how many GPU blocks a tier block spans."""
    from kvframe.offload.slots.manager import FilteredOffloadManager

    try:
        manager = spec.create_manager(context)
    except ValueError as err:
        raise ConfigError(f"offload tier {name!r}: {err}") from err
    if config.reuse_filter is not None:
        reuse_filter = registry.create("reuse_filter", config.reuse_filter)
        manager = FilteredOffloadManager(manager, reuse_filter)
    factor, rest = divmod(manager.block_size, config.block_size)
    if rest or factor < 1:
        raise ConfigError(
            f"offload tier {name!r}: its block of {manager.block_size} tokens is not "
            f"a whole number of {config.block_size}-token GPU blocks"
        )
    return manager, factor


def _offload_connector(
    config: EngineConfig,
    manager: Any,
    factor: int,
    cost_model: CostModel,
    context: OffloadContext,
    preset: Preset,
    semantics: ConnectorSemantics | None,
    pricing: TransferPricing | None = None,
) -> OffloadingConnector:
    """The scheduler-side connector, with the tier's connector semantics (``None``:
    vLLM's native connector); its tier view prices a load as the sim's handler
    does (what a load costs here): at the tier's own ``pricing`` if it has one,
    else on the cost model's link, copies counted by the preset's block layout."""
    from kvframe.domain.transfers import num_chunks
    from kvframe.offload.slots.connector import OffloadingConnector

    kv_bytes = context.kv_bytes_per_token
    layers = preset.shape.num_layers
    block_size = config.block_size

    def load_time(num_tokens: int) -> float:
        blocks = -(-num_tokens // block_size)
        if pricing is not None:
            return pricing.transfer_time(False, blocks, num_tokens * kv_bytes) if blocks else 0.0
        return cost_model.transfer_time(
            num_tokens * kv_bytes, num_chunks(cost_model.transfer_layout, blocks, layers)
        )

    return OffloadingConnector(
        manager,
        gpu_block_size=config.block_size,
        block_size_factor=factor,
        enable_prefix_caching=config.enable_prefix_caching,
        load_time=load_time,
        semantics=semantics,
    )


def _torch_num_blocks(config: EngineConfig, block_bytes: int, default_kv_memory: int) -> int:
    """GPU blocks for the torch executor: as given, or its KV memory over the *model's*
    block bytes (the preset's model shape only drives the sim's clock)."""
    if config.num_gpu_blocks is not None:
        return config.num_gpu_blocks
    memory = config.kv_memory if config.kv_memory is not None else default_kv_memory
    blocks = int(memory // block_bytes)
    if blocks < 2:
        raise ConfigError(
            f"kv_memory={memory} bytes holds fewer than 2 blocks of {block_bytes} bytes "
            "for the torch executor's model"
        )
    return blocks
