"""Validated engine settings: the scheduler's knobs, the cost-model preset, the plugins.

:class:`EngineConfig` is what :meth:`kvframe.engine.Engine.from_config` builds
an engine from. Every field has vLLM's meaning and default where vLLM has one.
The same settings come from three places, in increasing precedence: the
defaults here, the engine keys of ``kvframe.toml``, and command-line flags;
:meth:`EngineConfig.from_settings` takes the merged mapping and names the file
key or flag in every error.

Derived values (the GPU block count, ``max_model_len``) are resolved lazily from
the preset, so a config stays a plain description that prints and compares
well.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.config import ConfigError, PluginSpec, format_spec, parse_size, parse_spec
from kvframe.core.compiled import check_core, resolve_core
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.domain.costs import num_gpu_blocks_for
from kvframe.domain.fidelity import DEFAULT_VLLM, Fidelity, fidelity_for
from kvframe.executors.catalog import get_preset

if TYPE_CHECKING:
    from kvframe.config import UserConfig
    from kvframe.domain.kv_cache_spec import KVCacheConfig
    from kvframe.executors.presets import Preset
    from kvframe.models import ModelArchitecture

__all__ = ["DEFAULT_MAX_MODEL_LEN", "DEFAULT_PRESET", "ENGINE_KEYS", "EngineConfig"]

DEFAULT_PRESET = "llama3.1-8b-h100"
"""The cost model used when none is named: Llama-3.1-8B on one H100."""

DEFAULT_MAX_MODEL_LEN = 131072
"""The context length of the bundled presets' models (Llama 3.1's
``max_position_embeddings`` in its config.json), used when the config gives
none (a preset's model shape carries no context length)."""

PluginSelection = str | PluginSpec


def _positive_or_none(instance: Any, attribute: attrs.Attribute, value: int | None) -> None:
    if value is None:
        return
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _positive(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _non_negative(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attribute.name} must be an integer >= 0, got {value!r}")


def _is_bool(instance: Any, attribute: attrs.Attribute, value: bool) -> None:
    if type(value) is not bool:
        raise ValueError(f"{attribute.name} must be true or false, got {value!r}")


_OPTIONAL_SELECTIONS = frozenset({"gpu_eviction", "offload", "eviction", "reuse_filter", "router"})


def _selection(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None and attribute.name in _OPTIONAL_SELECTIONS:
        return
    if not isinstance(value, str | PluginSpec):
        raise ValueError(f"{attribute.name} must be a config string, got {value!r}")


def _tracers(value: Any) -> tuple[PluginSelection, ...]:
    if isinstance(value, str | PluginSpec):
        return (value,)
    return tuple(value)


def _spec_text(value: PluginSelection | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return format_spec(value)


@attrs.frozen(slots=True, kw_only=True, init=False)
class EngineConfig:
    """Everything an :class:`~kvframe.engine.Engine` is built from.

    The scheduling policy is ``scheduler``, as the ``--scheduler`` flag and the
    ``scheduler`` key of ``kvframe.toml`` name it; ``scheduling`` (the plugin
    kind's name) is accepted as an alias, as a keyword and as an attribute.

    GPU KV blocks: give ``num_gpu_blocks`` (counting vLLM's null block) *or*
    ``kv_memory`` (bytes for KV cache, divided by the preset model's KV bytes
    per block), not both; with neither, the preset's own KV budget is used
    (what vLLM would leave for KV on that hardware).

    ``max_model_len`` defaults to the bundled presets' model's context length
    (:data:`DEFAULT_MAX_MODEL_LEN`). Requests
    whose prompt does not fit it, or whose prompt + ``max_tokens`` could never
    fit the GPU pool even alone, are finished as ignored (see
    :meth:`kvframe.engine.Engine.run`).
    """

    preset: str = DEFAULT_PRESET
    """Cost-model preset name (``kvframe.executors.catalog.preset_names()``). With
    :attr:`model` it names the hardware (GPU, tensor parallelism); left at its
    default, the model's own preset is used."""
    model: str | None = attrs.field(default=None)
    """A model (``kvframe.models.model_names()``, e.g. ``gpt-oss-120b``) or the path of
    a Hugging Face ``config.json``: its shape, cost model and KV-cache groups
    (:mod:`kvframe.models`); ``None``: the preset's model."""
    scheduler: PluginSelection = attrs.field(default="fcfs", validator=_selection)
    """Scheduling policy config string (vLLM's default is FCFS); alias ``scheduling``."""
    gpu_eviction: PluginSelection | None = attrs.field(default=None, validator=_selection)
    """Eviction policy ordering the GPU prefix cache's free cached blocks; ``None``
    is vLLM's own LRU free queue."""
    tracers: tuple[PluginSelection, ...] = attrs.field(default=(), converter=_tracers)
    offload: PluginSelection | None = attrs.field(default=None, validator=_selection)
    """Offload tier config string (``cpu:capacity=8GiB,eviction=arc``); ``None``: no tier."""
    eviction: PluginSelection | None = attrs.field(default=None, validator=_selection)
    """The offload tier's eviction policy (``--eviction``): a shorthand for the
    tier's ``eviction`` option; it must agree with that option if both are given."""
    reuse_filter: PluginSelection | None = attrs.field(default=None, validator=_selection)
    """Reuse filter deciding what the tier stores (``threshold:store_threshold=2``)."""
    offload_bandwidth: float | None = attrs.field(default=None)
    """Device <-> host bytes per second for offload transfers; ``None``: the preset's
    ``transfer_bytes_per_s`` (a PCIe figure)."""
    block_size: int = attrs.field(default=16, validator=_positive)
    num_gpu_blocks: int | None = attrs.field(default=None, validator=_positive_or_none)
    kv_memory: int | None = attrs.field(default=None, validator=_positive_or_none)
    """Bytes of KV cache; converted to blocks with the preset's model shape."""
    max_num_batched_tokens: int = attrs.field(default=8192, validator=_positive)
    max_num_seqs: int = attrs.field(default=256, validator=_positive)
    max_model_len: int | None = attrs.field(default=None, validator=_positive_or_none)
    long_prefill_token_threshold: int = attrs.field(default=0, validator=_non_negative)
    enable_prefix_caching: bool = attrs.field(default=True, validator=_is_bool)
    enable_chunked_prefill: bool = attrs.field(default=True, validator=_is_bool)
    reserve_full_sequence: bool | None = attrs.field(
        default=None, validator=attrs.validators.optional(_is_bool)
    )
    """Admit a request only if its whole prompt fits the free blocks now (vLLM's
    ``scheduler_reserve_full_isl``); ``None`` keeps the core's default (on, as in
    vLLM 0.19)."""
    rollback_uncomputed_blocks: bool = attrs.field(default=False, validator=_is_bool)
    """Apply vLLM PR #43569: a request preempted in the step that scheduled it leaves
    no prefix-cache registration for tokens it never computed. Off: vLLM 0.19.1's
    behaviour (:mod:`kvframe.core.uncomputed`)."""
    seed: int = attrs.field(default=0, validator=attrs.validators.instance_of(int))
    """Seed of the chained block hash (vLLM's ``PYTHONHASHSEED`` role)."""
    cost_model: str | None = attrs.field(default=None)
    """A cost-model file (``kvframe calibrate`` writes one); replaces ``preset``'s."""
    executor: str = attrs.field(default="sim", validator=attrs.validators.instance_of(str))
    """``sim`` (cost model only) or ``torch[:preset=tiny,dtype=float32,...]`` (a real
    decoder on paged KV tensors; see :mod:`kvframe.executors.torch`)."""
    vllm: str = attrs.field(default=DEFAULT_VLLM, converter=lambda v: fidelity_for(v).vllm)
    """The vLLM release whose scheduling rules the core follows (``"0.19.1"``, the
    default, or ``"0.33"`` = ``"0.33.0"``): :mod:`kvframe.domain.fidelity`."""
    fidelity: Fidelity = attrs.field(
        init=False,
        repr=False,
        default=attrs.Factory(lambda self: fidelity_for(self.vllm), takes_self=True),
    )
    """The switches of :attr:`vllm`, resolved once here: the builders and the core
    read this object (:class:`~kvframe.domain.fidelity.Fidelity`), never the name."""
    async_scheduling: bool = attrs.field(default=False, validator=_is_bool)
    """vLLM's asynchronous scheduling (``--async-scheduling``; vLLM's own default in
    0.19.1 and 0.33.0): step N+1 is scheduled before step N's tokens come back, in
    the engine core's batch-queue order (:mod:`kvframe.engine.batch_queue`). Off
    by default here: kvframe's seeded figures are synchronous runs."""
    core: str = attrs.field(default="auto", validator=lambda _i, _a, v: check_core(v, "core"))
    """Which block pool runs: ``auto`` (the compiled core where it is built, else Python;
    the ``KVFRAME_CORE`` environment variable decides when set), ``python`` or
    ``compiled`` (:mod:`kvframe.core.compiled`). Same decisions either way."""
    replicas: int | None = attrs.field(default=None, validator=_positive_or_none)
    """A fleet of this many replicas of this engine behind :attr:`router`
    (``--replicas``; :mod:`kvframe.fleet`); ``None``: one engine, no router. The
    engine itself never reads it."""
    router: PluginSelection | None = attrs.field(default=None, validator=_selection)
    """The fleet's router (``--router``); required with ``replicas`` > 1."""
    kv_event_delay: float = attrs.field(default=0.0)
    """Seconds between a replica publishing a KV event and its router receiving it."""
    load_report_interval: float = attrs.field(default=0.0)
    """Seconds between a replica's load reports (0: after every step)."""
    disagg: str | None = attrs.field(default=None)
    """``"P:D"``: the fleet's first P replicas prefill and the next D decode, handing
    each request's KV over (``--disagg``; :mod:`kvframe.fleet.disagg`); the rest run
    aggregated. ``None``: every replica aggregated."""
    disagg_link: str = attrs.field(default="rdma")
    """The link KV moves over between replicas: ``rdma`` (400 Gb/s) or ``nvlink``
    (:data:`kvframe.fleet.transfer.LINKS`)."""
    disagg_bandwidth: float | None = attrs.field(default=None)
    """Bytes per second of each replica's link (``None``: the link's)."""
    disagg_latency: float | None = attrs.field(default=None)
    """Seconds from a transfer's last byte to its arrival (``None``: the link's)."""
    disagg_pipeline: bool = attrs.field(default=False, validator=_is_bool)
    """Per-layer pipelining: only the last layer's share of the KV moves after the prefill."""
    kv_load_failure_policy: str = attrs.field(default="fail")
    """What a decode replica does when a load fails (vLLM's ``kv_load_failure_policy``,
    default ``fail``): ``fail`` finishes the request with ``error``, ``recompute``
    computes from the first block the load could not fill."""
    step_by_step: bool = attrs.field(default=False, validator=_is_bool)
    """Run every step through the whole scheduler and executor, never a run of
    plain decode steps in one go (:mod:`kvframe.core.decode_run`). The results
    are the same; this is the reference the fast path is checked against, and
    several times slower."""

    def __init__(self, *, scheduling: PluginSelection | None = None, **fields: Any) -> None:
        """Take every field as a keyword; ``scheduling`` is ``scheduler``'s alias.

        :raises TypeError: for an unknown keyword, or both ``scheduler`` and ``scheduling``.
        """
        if scheduling is not None:
            if "scheduler" in fields:
                raise TypeError("give scheduler or its alias scheduling, not both")
            fields["scheduler"] = scheduling
        self.__attrs_init__(**fields)

    if TYPE_CHECKING:

        def __attrs_init__(self, **fields: Any) -> None:
            """The initialiser attrs writes for ``init=False``; declared for type checkers."""

    @property
    def scheduling(self) -> PluginSelection:
        """The scheduling policy: an alias of :attr:`scheduler`, the plugin kind's name."""
        return self.scheduler

    def __attrs_post_init__(self) -> None:
        if self.offload_bandwidth is not None and not self.offload_bandwidth > 0:
            raise ValueError(
                f"offload_bandwidth must be > 0 bytes per second, got {self.offload_bandwidth!r}"
            )
        if self.offload is None and (self.eviction is not None or self.reuse_filter is not None):
            raise ValueError(
                "eviction and reuse_filter configure an offload tier, but offload is not set"
            )
        if self.async_scheduling and self.executor.split(":", 1)[0].strip() != "sim":
            raise ValueError(
                f"async_scheduling runs with the sim executor only, not {self.executor!r}: "
                "a real model needs the token in flight, which only the worker has"
            )
        if self.core == "compiled":
            try:  # fail here, by name, not when the engine builds its block pool
                resolve_core(self.core)
            except RuntimeError as error:
                raise ValueError(f"core=compiled: {error}") from None
        if self.num_gpu_blocks is not None and self.kv_memory is not None:
            raise ValueError(
                "give num_gpu_blocks or kv_memory, not both "
                f"(got num_gpu_blocks={self.num_gpu_blocks}, kv_memory={self.kv_memory})"
            )
        get_preset(self.preset)  # raises ValueError naming the presets
        if self.model is not None:
            self._check_model()
        if self.cost_model is not None:
            self.preset_object  # noqa: B018 -- raises ValueError naming the file and field
        from kvframe.executors.torch.options import parse_executor

        parse_executor(self.executor)  # raises ValueError naming the bad option
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 2:
            raise ValueError(
                "num_gpu_blocks must be >= 2 (block 0 is the null block), "
                f"got {self.num_gpu_blocks}"
            )
        if self.kv_memory is not None and self.resolved_num_gpu_blocks() < 2:
            raise ValueError(
                f"kv_memory={self.kv_memory} bytes holds fewer than 2 blocks of "
                f"{self.block_size} tokens for {self.preset_object.shape.name}"
            )

    def _check_model(self) -> None:
        """Refuse a model this core cannot run yet, by name and reason.

        A model to which vLLM gives several KV-cache groups (sliding window, Mamba
        state) runs on the core's hybrid coordinator (:meth:`scheduler_config` hands it
        the groups); the core refuses what it does not model yet.
        """
        if self.cost_model is not None:
            raise ValueError(
                "give model or cost_model, not both (a cost-model file has its own model)"
            )
        self.model_architecture  # noqa: B018 -- raises ValueError naming the file and field
        # A hybrid model's groups run on the core's KV-cache groups; what they do not
        # model yet (groups of different block sizes, Mamba prefix caching) is refused
        # here, naming the groups, rather than when the scheduler is built.
        config = self.kv_cache_config()
        if config.is_hybrid:
            from kvframe.core.kv_cache_coordinator import check_kv_cache_config

            try:
                check_kv_cache_config(
                    config,
                    self.block_size,
                    self.enable_prefix_caching,
                    self.fidelity.groups_mamba_caching_needs_align,
                )
            except ValueError as err:
                kinds = ", ".join(
                    f"{type(g.spec).__name__} x{len(g.layer_names)}" for g in config.groups
                )
                raise ValueError(
                    f"model {self.model}: vLLM {self.vllm} manages its KV cache as "
                    f"{len(config.groups)} groups ({kinds}), which kvframe's core does not "
                    f"run yet: {err}"
                ) from None

    # -- derived values ----------------------------------------------------

    @property
    def model_architecture(self) -> ModelArchitecture:
        """:attr:`model`'s layers and parameters (the preset's Llama without one)."""
        from kvframe.models import load_model

        return load_model(self.model or "llama-3.1-8b")

    def kv_cache_config(self, *, kv_events: bool = False) -> KVCacheConfig:
        """The KV-cache groups and pool size vLLM :attr:`vllm` gives :attr:`model` with
        this config's KV memory and block size (``num_gpu_blocks`` overrides the count,
        as vLLM's ``num_gpu_blocks_override`` does). ``kv_events``: KV events are
        published (vLLM 0.19.1 then turns its hybrid manager off, switch M1)."""
        from kvframe.models import KVGroupOptions, kv_cache_config_for

        preset = self.preset_object
        options = KVGroupOptions(
            enable_prefix_caching=self.enable_prefix_caching,
            kv_events=kv_events,
            kv_connector=self.offload is not None,
            connector_supports_hma=True,  # kvframe's tier is vLLM's OffloadingConnector
            max_model_len=self.resolved_max_model_len(),
            num_gpu_blocks_override=self.num_gpu_blocks,
            tensor_parallel_size=preset.tensor_parallel_size,
        )
        memory = self.kv_memory if self.kv_memory is not None else preset.kv_memory_bytes
        return kv_cache_config_for(
            self.model_architecture, int(memory), self.block_size, self.fidelity, options
        )

    @property
    def preset_object(self) -> Preset:
        if self.model is not None:
            from kvframe.executors.model_presets import model_preset

            base = None if self.preset == DEFAULT_PRESET else get_preset(self.preset)
            return model_preset(self.model, base)
        if self.cost_model is not None:
            from kvframe.executors.cost_model_file import load_cost_model_file

            return load_cost_model_file(self.cost_model)
        return get_preset(self.preset)

    def resolved_num_gpu_blocks(self) -> int:
        """GPU KV blocks including the null block."""
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        if self.model is not None:
            return self.kv_cache_config().num_blocks
        preset = self.preset_object
        if self.kv_memory is not None:
            return num_gpu_blocks_for(self.kv_memory, self.block_size, preset.shape)
        return preset.num_gpu_blocks(self.block_size)

    def resolved_max_model_len(self) -> int:
        if self.max_model_len is not None:
            return self.max_model_len
        if self.model is not None:
            return self.model_architecture.max_position_embeddings or DEFAULT_MAX_MODEL_LEN
        return DEFAULT_MAX_MODEL_LEN

    def scheduler_config(self, *, enable_kv_cache_events: bool = False) -> SchedulerConfig:
        """The core's :class:`SchedulerConfig` for these settings.

        :raises ValueError: when the core rejects the combination (e.g. chunked
            prefill off with a token budget below ``max_model_len``).
        """
        optional: dict[str, Any] = {}
        if self.reserve_full_sequence is not None:
            optional["reserve_full_sequence"] = self.reserve_full_sequence
        num_gpu_blocks = self.resolved_num_gpu_blocks()
        if self.model is not None:
            groups = self.kv_cache_config(kv_events=enable_kv_cache_events)
            if groups.is_hybrid:  # several groups: the core's hybrid coordinator
                optional["kv_cache_config"] = groups
                num_gpu_blocks = groups.num_blocks
        return SchedulerConfig(
            **optional,
            block_size=self.block_size,
            num_gpu_blocks=num_gpu_blocks,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.resolved_max_model_len(),
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            enable_chunked_prefill=self.enable_chunked_prefill,
            enable_prefix_caching=self.enable_prefix_caching,
            rollback_uncomputed_blocks=self.rollback_uncomputed_blocks,
            hash_seed=self.seed,
            enable_kv_cache_events=enable_kv_cache_events,
            fidelity=self.fidelity,
            async_scheduling=self.async_scheduling,
            core=self.core,
            kv_load_failure_policy=self.kv_load_failure_policy,
        )

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings with the derived values filled in (for ``metrics.json``)."""
        return {
            "preset": self.preset if self.model is None else self.preset_object.name,
            "scheduling": _spec_text(self.scheduler),
            "gpu_eviction": _spec_text(self.gpu_eviction),
            "tracers": [_spec_text(t) for t in self.tracers],
            "offload": _spec_text(self.offload),
            "eviction": _spec_text(self.eviction),
            "reuse_filter": _spec_text(self.reuse_filter),
            "offload_bandwidth": self.offload_bandwidth,
            "block_size": self.block_size,
            "num_gpu_blocks": self.resolved_num_gpu_blocks(),
            "kv_memory": self.kv_memory,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "max_model_len": self.resolved_max_model_len(),
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "enable_prefix_caching": self.enable_prefix_caching,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "reserve_full_sequence": self.scheduler_config().reserve_full_sequence,
            "rollback_uncomputed_blocks": self.rollback_uncomputed_blocks,
            "seed": self.seed,
            "executor": self.executor,
            "cost_model": self.cost_model,
            "step_by_step": self.step_by_step,
            "vllm": self.vllm,
            "async_scheduling": self.async_scheduling,
            "core": self.core,
            **({"model": self.model} if self.model is not None else {}),
            **self.describe_fleet(),
        }

    @property
    def is_fleet(self) -> bool:
        """Whether this config describes a fleet (``replicas`` or ``router`` given)."""
        return self.replicas is not None or self.router is not None

    def describe_fleet(self) -> dict[str, Any]:
        """The fleet settings for ``metrics.json`` (empty for a single engine, whose
        ``metrics.json`` stays as it was)."""
        if not self.is_fleet:
            return {}
        return {
            "replicas": self.replicas,
            "router": _spec_text(self.router),
            "kv_event_delay": self.kv_event_delay,
            "load_report_interval": self.load_report_interval,
            **self._describe_disagg(),
        }

    def _describe_disagg(self) -> dict[str, Any]:
        """The ``disagg_*`` settings, only when ``disagg`` is set (an aggregated fleet's
        ``metrics.json`` stays as it was)."""
        if self.disagg is None:
            return {}
        return {
            "disagg": self.disagg,
            "disagg_link": self.disagg_link,
            "disagg_bandwidth": self.disagg_bandwidth,
            "disagg_latency": self.disagg_latency,
            "disagg_pipeline": self.disagg_pipeline,
            "kv_load_failure_policy": self.kv_load_failure_policy,
        }

    def fleet_problem(self) -> str | None:
        """Why the fleet settings do not make a run (``None``: they do)."""
        if self.router is not None and self.replicas is None:
            return "--router selects the router of a fleet, but --replicas N is not given"
        if self.replicas is not None and self.replicas > 1 and self.router is None:
            return (
                f"a fleet of {self.replicas} replicas needs a router (--router NAME, e.g. "
                "--router round-robin; `kvframe plugins` lists the installed ones)"
            )
        for name in ("kv_event_delay", "load_report_interval"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                return f"{name} must be a finite number of seconds >= 0, got {value!r}"
        if not self.is_fleet and (self.kv_event_delay or self.load_report_interval):
            return "--kv-event-delay and --load-report-interval are a fleet's (--replicas N)"
        return self._disagg_problem()

    def _disagg_problem(self) -> str | None:
        """Why the ``disagg_*`` settings do not make a disaggregated fleet (``None``: they do)."""
        if self.disagg is None:
            return None
        if self.replicas is None:
            return "--disagg P:D splits a fleet, but --replicas N is not given"
        from kvframe.domain.disagg import LINKS, DisaggLayout

        if self.disagg_link not in LINKS:
            return f"--disagg-link must be one of {sorted(LINKS)}, got {self.disagg_link!r}"
        for name in ("disagg_bandwidth", "disagg_latency"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                return f"{name} must be a finite number >= 0, got {value!r}"
        if self.disagg_bandwidth == 0:
            return "disagg_bandwidth must be > 0 bytes per second"
        try:
            DisaggLayout.parse(self.disagg, self.replicas)
        except ValueError as err:
            return str(err)
        return None

    # -- from kvframe.toml and flags ----------------------------------------

    @classmethod
    def from_selection(cls, selection: UserConfig) -> EngineConfig:
        """The engine a plugin selection and its engine settings describe.

        The one conversion every entry point uses -- ``kvframe run``, ``kvframe
        check``, a sweep cell and ``kvframe.toml`` -- so one selection gives one
        engine and one error everywhere. Checks what needs the whole selection
        (an eviction policy or a reuse filter without an offload tier), then
        :meth:`from_settings`; errors name the flag or the file's key.
        """
        if selection.offload is None and selection.eviction is not None:
            raise ConfigError(
                "the eviction policy selects how the offload tier evicts, "
                "but no offload tier is selected",
                text=selection.eviction.source,
                origin=selection.eviction.origin,
                hints=[
                    "for the order in which the GPU prefix cache evicts, use "
                    f"--gpu-eviction {selection.eviction.source or 'NAME'} "
                    "(or gpu_eviction in kvframe.toml)",
                    "to add a CPU tier: --offload cpu:capacity=8GiB",
                ],
            )
        if selection.offload is None and selection.reuse_filter is not None:
            raise ConfigError(
                "a reuse filter decides what an offload tier stores, "
                "but no offload tier is selected",
                text=selection.reuse_filter.source,
                origin=selection.reuse_filter.origin,
            )
        fields: dict[str, Any] = {
            "tracers": selection.tracer,
            "offload": selection.offload,
            "eviction": selection.eviction,
            "reuse_filter": selection.reuse_filter,
        }
        if selection.scheduling is not None:
            fields["scheduler"] = selection.scheduling
        if selection.routing is not None:
            fields["router"] = selection.routing
        gpu_eviction = selection.engine.get("gpu_eviction")
        if isinstance(gpu_eviction, str):
            # Parsed here so that its errors name the flag or the file's key.
            fields["gpu_eviction"] = parse_spec(
                gpu_eviction, "eviction", origin=selection.origins.get("gpu_eviction")
            )
        config = cls.from_settings(selection.engine, origins=selection.origins, **fields)
        problem = config.fleet_problem()
        if problem is not None:
            origin = selection.origins.get("replicas") or (
                selection.routing.origin if selection.routing is not None else None
            )
            if problem.startswith(("--disagg", "disagg")):
                origin = selection.origins.get("disagg") or origin
            raise ConfigError(problem, origin=origin)
        return config

    @classmethod
    def from_settings(
        cls,
        settings: Mapping[str, Any],
        *,
        origins: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> EngineConfig:
        """Build from engine settings as ``kvframe.toml`` and flags give them.

        :param settings: engine keys (:data:`ENGINE_KEYS`) to values; ``None``
            values mean "not given". Sizes may be strings (``kv_memory = "40GiB"``).
        :param origins: where each key came from (``--block-size``,
            ``kvframe.toml, key 'block_size'``), for messages.
        :param fields: fields set by the caller directly (the plugin selection),
            which settings of the same name do not override.
        :raises ConfigError: for an unknown key (with a suggestion), a value of
            the wrong type, or a combination the engine rejects, naming its origin.
        """
        origins = origins or {}
        values: dict[str, Any] = {}
        for key, value in settings.items():
            if value is None:
                continue
            where = origins.get(key, f"engine setting {key!r}")
            name = _ALIASES.get(key, key)
            converter = _CONVERTERS.get(name)
            if converter is None:
                close = difflib.get_close_matches(key, ENGINE_KEYS, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"unknown engine setting {key!r}{hint}",
                    origin=where,
                    hints=["engine settings: " + ", ".join(ENGINE_KEYS)],
                )
            try:
                values[name] = converter(value)
            except (TypeError, ValueError) as err:
                raise ConfigError(f"bad value for {name}: {err}", origin=where) from None
        values.update({k: v for k, v in fields.items() if v is not None})
        try:
            return cls(**values)
        except (TypeError, ValueError) as err:
            culprit = next((k for k in values if k in str(err)), None)
            origin = origins.get(culprit) if culprit else None
            raise ConfigError(str(err), origin=origin) from None


def _int(value: Any) -> int:
    if type(value) is bool:
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    digits = value.strip().replace("_", "") if isinstance(value, str) else ""
    if digits.isdigit() or (digits[:1] in ("+", "-") and digits[1:].isdigit()):
        return int(digits)  # a sign is read, so that "-3" gets the range check's message
    raise ValueError(f"expected an integer, got {value!r}")


def _size(value: Any) -> int:
    """Bytes: an integer, or a size string such as ``40GiB``."""
    if isinstance(value, str):
        size = parse_size(value)
        if size is None:
            raise ValueError(f"expected a size such as 40GiB or a number of bytes, got {value!r}")
        return size
    return _int(value)


def _bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "on", "false", "no", "off"):
        return value.lower() in ("true", "yes", "on")
    raise ValueError(f"expected true or false, got {value!r}")


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected seconds >= 0, got {value!r}")
    return seconds


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


_CONVERTERS: Mapping[str, Any] = {
    "preset": _str,
    "model": _str,
    "gpu_eviction": _str,
    "block_size": _int,
    "num_gpu_blocks": _int,
    "kv_memory": _size,
    "max_num_batched_tokens": _int,
    "max_num_seqs": _int,
    "max_model_len": _int,
    "long_prefill_token_threshold": _int,
    "enable_prefix_caching": _bool,
    "enable_chunked_prefill": _bool,
    "reserve_full_sequence": _bool,
    "rollback_uncomputed_blocks": _bool,
    "seed": _int,
    "offload_bandwidth": _size,
    "executor": _str,
    "cost_model": _str,
    "step_by_step": _bool,
    "vllm": lambda value: fidelity_for(_str(value)).vllm,
    "async_scheduling": _bool,
    "core": lambda value: check_core(_str(value)),
    "replicas": _int,
    "kv_event_delay": lambda value: _seconds(value),
    "load_report_interval": lambda value: _seconds(value),
    "disagg": _str,
    "disagg_link": _str,
    "disagg_bandwidth": _size,
    "disagg_latency": lambda value: _seconds(value),
    "disagg_pipeline": _bool,
    "kv_load_failure_policy": _str,
}

_ALIASES: Mapping[str, str] = {
    "prefix_caching": "enable_prefix_caching",
    "chunked_prefill": "enable_chunked_prefill",
    "gpu-eviction": "gpu_eviction",
    "offload-bandwidth": "offload_bandwidth",
    "cost-model": "cost_model",
    "step-by-step": "step_by_step",
    "async-scheduling": "async_scheduling",
    "kv-event-delay": "kv_event_delay",
    "load-report-interval": "load_report_interval",
    "disagg-link": "disagg_link",
    "disagg-bandwidth": "disagg_bandwidth",
    "disagg-latency": "disagg_latency",
    "disagg-pipeline": "disagg_pipeline",
    "kv-load-failure-policy": "kv_load_failure_policy",
}

ENGINE_KEYS: tuple[str, ...] = tuple(_CONVERTERS)
"""The engine settings ``kvframe.toml`` and the flags may set (plugin keys aside)."""
