"""What the kvframe scheduler refuses inside vLLM 0.19.1 and 0.33.0, and the flag that fixes each.

Two kinds of refusal, because they fail differently:

* **engine-wide** (:func:`refuse_config`, :func:`refuse_kv_cache_layout`): a
  feature kvframe's scheduler does not model stops vLLM at start-up with
  :class:`UnsupportedByKvframe`, each item naming the vLLM flag that turns it
  off. :func:`refuse_config` needs only the ``VllmConfig``, so it runs as soon
  as vLLM has one (:mod:`kvframe_vllm.preflight`, before the engine core loads
  weights); the KV-cache layout is known only after vLLM profiled memory, so
  that check runs when vLLM builds the scheduler.
* **per request** (:func:`request_refusal`): a request asking for something the
  bridge cannot serve is *finished* with ``FINISHED_ERROR`` and the reason
  (:class:`RefusedRequests`), the way vLLM finishes a request whose KV load
  failed -- it never raises out of ``add_request``, where vLLM's engine core
  has no handler and would die of it.

This module imports vLLM; the bridge's other modules that do are
:mod:`kvframe_vllm.scheduler` and :mod:`kvframe_vllm.offload`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import attrs
import structlog

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.engine import EngineCoreOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

    from kvframe.contract.offload import ConnectorSemantics

__all__ = [
    "RefusedRequests",
    "UnsupportedByKvframe",
    "refuse_config",
    "refuse_connector_semantics",
    "refuse_kv_cache_layout",
    "request_refusal",
]

log = structlog.get_logger(__name__)

_USE_VLLM = "run it with vLLM's own scheduler (leave --scheduler-cls unset)"


class UnsupportedByKvframe(ValueError):
    """A vLLM feature the kvframe scheduler does not model was asked for."""


def _config_checks(vllm_config: VllmConfig) -> list[tuple[bool, str]]:
    """(refused?, what and the flag that fixes it), for everything the config shows."""
    # Imported here: both import vLLM, and the refusals are only checked inside vLLM.
    from kvframe_vllm import compat

    version_problem = compat.unsupported_version_message()
    return [
        (version_problem is not None, version_problem or ""),
        *_engine_feature_checks(vllm_config),
        *_connector_checks(vllm_config),
        *_scheduler_checks(vllm_config),
        *_model_checks(vllm_config),
    ]


def _engine_feature_checks(vllm_config: VllmConfig) -> list[tuple[bool, str]]:
    """Speculative decoding, LoRA and the parallelisms other than tensor and data."""
    parallel = vllm_config.parallel_config
    return [
        (
            vllm_config.speculative_config is not None,
            "speculative decoding (drop --speculative-config)",
        ),
        (vllm_config.lora_config is not None, "LoRA adapters (drop --enable-lora)"),
        (
            parallel.pipeline_parallel_size > 1,
            "pipeline parallelism (--pipeline-parallel-size 1)",
        ),
        (
            parallel.decode_context_parallel_size > 1,
            "decode context parallelism (--decode-context-parallel-size 1)",
        ),
        (
            parallel.prefill_context_parallel_size > 1,
            "prefill context parallelism (--prefill-context-parallel-size 1)",
        ),
    ]


def _connector_checks(vllm_config: VllmConfig) -> list[tuple[bool, str]]:
    """A KV connector other than the OffloadingConnector, and 0.33's async-connector rule."""
    from kvframe_vllm import compat, tier

    connector_problem = tier.refusal(vllm_config, compat.INTERFACE_033)
    return [
        (connector_problem is not None, connector_problem or ""),
        (
            connector_problem is None
            and compat.INTERFACE_033
            and vllm_config.kv_transfer_config is not None
            and bool(vllm_config.scheduler_config.async_scheduling)
            and not vllm_config.kv_transfer_config.is_kv_consumer,
            # kvframe's switch T22 defers block frees for every connector under async
            # scheduling; vLLM 0.33 only for a KV consumer (Scheduler.defer_block_free).
            "asynchronous scheduling with a KV connector that is not a KV consumer on "
            "vLLM 0.33 (kv_role 'kv_both' or 'kv_consumer', or --no-async-scheduling: "
            "vLLM 0.33 defers freeing blocks a step in flight may write only for a "
            "consumer, kvframe's core for every connector)",
        ),
    ]


def _scheduler_checks(vllm_config: VllmConfig) -> list[tuple[bool, str]]:
    """Scheduler and observability options kvframe's core does not model."""
    scheduler = vllm_config.scheduler_config
    return [
        (
            getattr(scheduler, "prefill_schedule_interval", 1) > 1,
            "prefill throttling (--prefill-schedule-interval 1)",
        ),
        (
            bool(getattr(scheduler, "long_prefill_token_threshold_adaptive", False)),
            "an adaptive long-prefill threshold (drop --long-prefill-token-threshold-adaptive)",
        ),
        (
            vllm_config.ec_transfer_config is not None,
            "encoder-cache connectors (drop --ec-transfer-config)",
        ),
        (
            bool(vllm_config.observability_config.kv_cache_metrics),
            "KV-cache residency metrics (drop --kv-cache-metrics)",
        ),
        (
            _returns_routed_experts(vllm_config),
            "returning routed experts (drop --enable-return-routed-experts)",
        ),
    ]


def _model_checks(vllm_config: VllmConfig) -> list[tuple[bool, str]]:
    """Model kinds served by vLLM's own scheduler only."""
    model = vllm_config.model_config
    return [
        (model is not None and model.is_encoder_decoder, f"encoder-decoder models ({_USE_VLLM})"),
        (model is not None and model.is_multimodal_model, f"multimodal models ({_USE_VLLM})"),
        (model is not None and model.runner_type == "pooling", f"pooling models ({_USE_VLLM})"),
    ]


def _returns_routed_experts(vllm_config: VllmConfig) -> bool:
    """Routed experts asked for: a model-config flag in 0.19.1, ``aux_output_config`` in 0.33."""
    aux = getattr(vllm_config, "aux_output_config", None)
    if aux is not None:
        return bool(aux.enable_return_routed_experts)
    model = vllm_config.model_config
    return model is not None and bool(getattr(model, "enable_return_routed_experts", False))


def refuse_config(vllm_config: VllmConfig) -> None:
    """Refuse every engine-wide feature the config shows that kvframe does not model.

    :raises UnsupportedByKvframe: naming each refused feature and its flag.
    """
    _raise_if([what for bad, what in _config_checks(vllm_config) if bad])


def refuse_kv_cache_layout(kv_cache_config: KVCacheConfig) -> None:
    """Refuse a KV cache that is not one full-attention group (known after profiling)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1 or type(groups[0].kv_cache_spec) is not FullAttentionSpec:
        _raise_if(
            [
                "KV-cache groups other than one full-attention group (sliding window, "
                f"hybrid or Mamba models; {_USE_VLLM})"
            ]
        )


def _raise_if(refused: list[str]) -> None:
    if refused:
        raise UnsupportedByKvframe(
            "--scheduler-cls kvframe_vllm.scheduler.KvframeScheduler does not model "
            + "; ".join(refused)
        )


_SEMANTICS_WORDS = {
    "async_load": ("asynchronous loads", "loads before the forward pass"),
    "blocking_store": ("stores that block the step", "stores deferred to the next step"),
    "store_outputs": ("decode-phase blocks stored", "prompt blocks only"),
}


def refuse_connector_semantics(tier: str, semantics: ConnectorSemantics, origin: str) -> None:
    """Refuse a kvframe tier plugin modelled on a connector other than vLLM's own.

    Inside vLLM a tier runs under vLLM 0.19.1's ``OffloadingConnector``, whose
    semantics are kvframe's default :class:`~kvframe.contract.offload.ConnectorSemantics`
    (asynchronous loads, stores deferred to the next step, decode blocks
    stored). A tier chosen for other semantics -- ``lmcache`` models LMCache's
    connector -- would silently be vLLM's connector there, and every number
    measured with it would describe the wrong system.

    :raises UnsupportedByKvframe: naming the tier, ``origin`` and each difference.
    """
    from kvframe.contract.offload import ConnectorSemantics

    native = ConnectorSemantics()
    differences = [
        f"{_SEMANTICS_WORDS[name][0 if getattr(semantics, name) else 1]} (vLLM's "
        f"OffloadingConnector: {_SEMANTICS_WORDS[name][0 if getattr(native, name) else 1]})"
        for name in _SEMANTICS_WORDS
        if getattr(semantics, name) != getattr(native, name)
    ]
    if differences:
        raise UnsupportedByKvframe(
            f"{origin}: tier plugin {tier!r} models a connector with "
            + "; ".join(differences)
            + ". Inside vLLM it would run as vLLM's own OffloadingConnector instead; "
            "use the connector it models (its own --kv-transfer-config), or a tier with "
            "vLLM's semantics"
        )


def request_refusal(request: Request) -> str | None:
    """Why the bridge cannot serve ``request`` (``None``: it can)."""
    params = request.sampling_params
    refused = []
    if request.use_structured_output:
        refused.append("structured output (response_format, guided decoding, a required tool)")
    if params is not None and params.min_tokens:
        refused.append("min_tokens")
    if params is not None and getattr(params, "repetition_detection", None) is not None:
        refused.append("repetition detection")
    if request.prompt_embeds is not None:
        refused.append("prompt embeddings")
    if request.mm_features:
        refused.append("multimodal inputs")
    if request.lora_request is not None:
        refused.append("a LoRA adapter")
    if request.pooling_params is not None:
        refused.append("pooling")
    if not refused:
        return None
    return (
        f"request {request.request_id!r} asks for {', '.join(refused)}, which the "
        "kvframe scheduler does not model"
    )


@attrs.define(slots=True)
class RefusedRequests:
    """Requests refused at ``add_request``, finished with an error at the next update.

    vLLM's engine core calls ``add_request`` with no handler around it and has no
    way to return an output from it; so a refused request is held here and
    finished in the next ``update_from_output`` with ``FINISHED_ERROR`` and its
    reason as ``stop_reason`` -- the output vLLM 0.19.1 gives a request whose
    KV load failed. ``has_pending`` makes the engine step once even when
    nothing else is queued (vLLM steps while ``has_finished_requests``).
    """

    _pending: dict[int, list[tuple[str, str]]] = attrs.field(factory=lambda: defaultdict(list))

    def refuse(self, request: Request, reason: str) -> None:
        log.warning("kvframe_vllm.request_refused", request_id=request.request_id, reason=reason)
        self._pending[request.client_index].append((request.request_id, reason))

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def request_ids(self) -> set[str]:
        return {rid for refused in self._pending.values() for rid, _ in refused}

    def take_outputs(self) -> dict[int, list[EngineCoreOutput]]:
        """The error outputs of every request refused since the last call, by client."""
        from vllm.v1.engine import EngineCoreOutput, FinishReason

        outputs: dict[int, list[EngineCoreOutput]] = {}
        for client, refused in self._pending.items():
            outputs[client] = [
                EngineCoreOutput(
                    request_id=rid,
                    new_token_ids=[],
                    finish_reason=FinishReason.ERROR,
                    stop_reason=reason,
                )
                for rid, reason in refused
            ]
        self._pending.clear()
        return outputs
