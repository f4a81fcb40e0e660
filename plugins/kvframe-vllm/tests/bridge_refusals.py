"""Run under the vLLM interpreter: what KvframeScheduler refuses, printed as JSON.

Used by ``test_scheduler_bridge.py``; each check builds a real VllmConfig the
way the differential harness's vLLM driver does, changes one thing, and
records the exception type and message (or ``null`` when nothing was raised).
"""

from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

# The harness (tools/differential) comes on PYTHONPATH: vllm_reference.run_script.


def build(**changes: Any) -> Any:
    after = changes.pop("after", None)
    import torch
    from kvframe_vllm.scheduler import KvframeScheduler
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm_driver import _model_dir

    scheduler_config = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=256,
        max_model_len=1024,
        is_encoder_decoder=False,
        async_scheduling=changes.pop("async_scheduling", False),
        policy=changes.pop("policy", "fcfs"),
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=ModelConfig(
            model=str(_model_dir()), max_model_len=1024, skip_tokenizer_init=True, dtype="float16"
        ),
        cache_config=CacheConfig(block_size=16),
        device_config=DeviceConfig(device="cpu"),
        additional_config=changes.pop("additional_config", {}),
        **changes,
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=64,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=1, dtype=torch.float32),
            )
        ],
    )
    if after is not None:
        after(vllm_config)  # what a flag vLLM cannot validate on this CPU box would set
    return KvframeScheduler(vllm_config, kv_cache_config, None, block_size=16)


def build_tier(**extra: Any) -> Any:
    """vLLM's CPU tier through KvframeOffloadingSpec, with ``extra`` in its extra config."""
    import kvframe_vllm
    import torch
    from kvframe_vllm.offload import KvframeOffloadingSpec
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        KVCacheTensor,
    )
    from vllm_driver import _model_dir

    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=1, dtype=torch.float32)
    vllm_config = VllmConfig(
        model_config=ModelConfig(
            model=str(_model_dir()), max_model_len=1024, skip_tokenizer_init=True, dtype="float16"
        ),
        cache_config=CacheConfig(block_size=16),
        device_config=DeviceConfig(device="cpu"),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={
                **kvframe_vllm.extra_config(cpu_bytes_to_use=spec.page_size_bytes * 32),
                **extra,
            },
        ),
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=64,
        kv_cache_tensors=[KVCacheTensor(size=spec.page_size_bytes * 64, shared_by=["layer"])],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    return KvframeOffloadingSpec(vllm_config, kv_cache_config)


def reset_with_tier(scheduler_cls: Any = None) -> dict[str, Any]:
    """``reset_prefix_cache(reset_connector=True)`` with vLLM's CPU tier: the bridge
    (or ``scheduler_cls``, vLLM's own) asks the connector's ``reset_cache``."""
    import torch
    from kvframe_vllm.scheduler import KvframeScheduler
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        KVTransferConfig,
        ModelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        KVCacheTensor,
    )
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm_driver import _model_dir

    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=1, dtype=torch.float32)
    vllm_config = VllmConfig(
        scheduler_config=SchedulerConfig(
            max_num_seqs=8,
            max_num_batched_tokens=256,
            max_model_len=1024,
            is_encoder_decoder=False,
            async_scheduling=False,
        ),
        model_config=ModelConfig(
            model=str(_model_dir()), max_model_len=1024, skip_tokenizer_init=True, dtype="float16"
        ),
        cache_config=CacheConfig(block_size=16),
        device_config=DeviceConfig(device="cpu"),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": spec.page_size_bytes * 32},
        ),
    )
    vllm_config.cache_config.num_gpu_blocks = 64
    kv_cache_config = KVCacheConfig(
        num_blocks=64,
        kv_cache_tensors=[KVCacheTensor(size=spec.page_size_bytes * 64, shared_by=["layer"])],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    scheduler = (scheduler_cls or KvframeScheduler)(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=16,
    )
    calls: list[str] = []
    reset_cache = scheduler.connector.reset_cache

    def counting() -> Any:
        calls.append("reset_cache")
        return reset_cache()

    scheduler.connector.reset_cache = counting
    return {"result": scheduler.reset_prefix_cache(reset_connector=True), "calls": calls}


def refused(scheduler: Any, req: Any) -> str | None:
    """Add ``req``; the reason it was finished with an error, or ``None`` if it was queued."""
    scheduler.add_request(req)
    outputs = scheduler.refused.take_outputs()
    if not outputs:
        return None
    (out,) = outputs[0]
    assert out.request_id == req.request_id and int(out.finish_reason) == 3  # ERROR
    return out.stop_reason


def setattr_on(path: str, value: Any) -> Any:
    def change(vllm_config: Any) -> None:
        owner, _, name = path.rpartition(".")
        obj = vllm_config
        for part in owner.split("."):
            obj = getattr(obj, part)
        object.__setattr__(obj, name, value)

    return change


def request(request_id: str, **params: Any) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    return Request(
        request_id=request_id,
        prompt_token_ids=list(range(10, 50)),
        sampling_params=SamplingParams(max_tokens=4, **params),
        pooling_params=None,
        arrival_time=0.0,
    )


def outcome(fn: Any) -> dict[str, str] | None:
    try:
        fn()
    except Exception as exc:  # the point is to report whatever was raised
        return {"type": type(exc).__name__, "message": str(exc)}
    return None


def main() -> None:
    import kvframe_vllm
    from vllm.config import KVEventsConfig, KVTransferConfig, LoRAConfig

    results = {
        "lora": outcome(lambda: build(lora_config=LoRAConfig())),
        "async": outcome(lambda: build(async_scheduling=True)),
        "typo": outcome(lambda: build(additional_config={"kvframe_scheduler": "fcsf"})),
        "bad_option": outcome(
            lambda: build(additional_config={"kvframe_scheduler": "continuum:ttl=sometimes"})
        ),
        "fine": outcome(lambda: build(additional_config={"kvframe_scheduler": "priority"})),
        "dcp": outcome(
            lambda: build(after=setattr_on("parallel_config.decode_context_parallel_size", 2))
        ),
        "pcp": outcome(
            lambda: build(after=setattr_on("parallel_config.prefill_context_parallel_size", 2))
        ),
        "kv_events": outcome(
            lambda: build(kv_events_config=KVEventsConfig(enable_kv_cache_events=True))
        ),
        "async_tier": outcome(
            lambda: build(
                async_scheduling=True,
                kv_transfer_config=KVTransferConfig(
                    kv_connector="OffloadingConnector",
                    kv_role="kv_both",
                    kv_connector_extra_config=kvframe_vllm.extra_config(cpu_bytes_to_use=1 << 20),
                ),
            )
        ),
    }
    from vllm.v1.core.sched.scheduler import Scheduler

    results["reset_tier"] = reset_with_tier()
    results["reset_tier_vllm"] = reset_with_tier(Scheduler)
    results["tier_lmcache"] = outcome(
        lambda: build_tier(kvframe_offload="kvframe_lmcache.spec:LMCacheOffloadSpec:capacity=1GiB")
    )
    results["tier_cpu"] = outcome(lambda: build_tier(kvframe_offload="cpu:capacity=1GiB"))
    results["tier_typo"] = outcome(lambda: build_tier(kvframe_evicton="arc"))
    results["tier_fine"] = outcome(lambda: build_tier(kvframe_eviction="arc"))
    results["policy_from_vllm"] = build(policy="priority").policy.name
    results["policy_explicit"] = build(
        policy="priority", additional_config={"kvframe_scheduler": "fcfs"}
    ).policy.name
    scheduler = build()
    results["min_tokens"] = refused(scheduler, request("a", min_tokens=2))
    results["unknown_xarg"] = refused(scheduler, request("b", extra_args={"kvframe_jobid": "j1"}))
    results["bad_last_turn"] = refused(
        scheduler, request("c", extra_args={"kvframe_last_turn": "maybe"})
    )
    results["agent_turn"] = outcome(
        lambda: scheduler.add_request(
            request(
                "d",
                extra_args={
                    "kvframe_job_id": 7,
                    "kvframe_turn": "2",
                    "kvframe_last_turn": "false",
                    "kvframe_tool": "search",
                },
            )
        )
    )
    turn = scheduler.core.requests.get("d")
    results["agent_fields"] = (
        None if turn is None else [turn.job_id, turn.turn, turn.is_last_turn, turn.tool_name]
    )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
