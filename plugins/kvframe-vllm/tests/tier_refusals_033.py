"""Run under the vLLM 0.33 interpreter: which tiers KvframeScheduler takes on 0.33, as JSON.

Used by ``test_scheduler_tier_033.py``. Each check builds a real VllmConfig with
``kv_transfer_config`` = vLLM's OffloadingConnector the way the differential
harness's vLLM driver does, changes one thing, and records the exception type
and message (``null`` when the scheduler was built), plus what was built.
"""

from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

# The harness (tools/differential) comes on PYTHONPATH: vllm_reference.run_script.

BLOCK = 16


def build(
    extra: dict[str, Any],
    connector: str = "OffloadingConnector",
    scheduler_cls: Any = None,
    **changes: Any,
) -> Any:
    """The bridge (or ``scheduler_cls``, vLLM's own) with a CPU tier of 32 chunks and
    ``extra`` in the connector's extra config."""
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
    from vllm_driver import _cpu_bytes_per_chunk, _model_dir

    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
    page = spec.page_size_bytes
    vllm_config = VllmConfig(
        scheduler_config=SchedulerConfig(
            max_num_seqs=8,
            max_num_batched_tokens=256,
            max_model_len=1024,
            is_encoder_decoder=False,
            async_scheduling=changes.pop("async_scheduling", False),
        ),
        model_config=ModelConfig(
            model=str(_model_dir()), max_model_len=1024, skip_tokenizer_init=True, dtype="float16"
        ),
        cache_config=CacheConfig(block_size=BLOCK),
        device_config=DeviceConfig(device="cpu"),
        kv_transfer_config=KVTransferConfig(
            kv_connector=connector,
            kv_role=changes.pop("kv_role", "kv_both"),
            kv_connector_extra_config={
                "cpu_bytes_to_use": 32 * _cpu_bytes_per_chunk(page, True),
                **extra,
            },
        ),
    )
    size = page * 64
    kv_cache_config = KVCacheConfig(
        num_blocks=64,
        kv_cache_tensors=[
            KVCacheTensor(size=size, layers=["layer"], layer_stride=size, block_stride=page)
        ],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    if scheduler_cls is not None:
        from vllm.v1.structured_output import StructuredOutputManager

        vllm_config.cache_config.num_gpu_blocks = 64  # what the engine sets after profiling
        return scheduler_cls(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=BLOCK,
            hash_block_size=BLOCK,
        )
    return KvframeScheduler(
        vllm_config, kv_cache_config, None, block_size=BLOCK, hash_block_size=BLOCK
    )


def outcome(fn: Any) -> dict[str, Any] | None:
    try:
        fn()
    except Exception as exc:  # the point is to report whatever was raised
        return {"type": type(exc).__name__, "message": str(exc)}
    return None


def built(extra: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """What the bridge built: its connector view, and the tier's cache policy."""
    scheduler = build(extra, **changes)
    manager = scheduler.connector.connector_scheduler.manager
    return {
        "view": type(scheduler.tier).__name__,
        "policy": type(manager._policy).__name__,
        "policy_module": type(manager._policy).__module__,
    }


def reset_with_tier(scheduler_cls: Any = None) -> dict[str, Any]:
    """``reset_prefix_cache(reset_connector=True)`` with the tier: vLLM resets the
    connector's cache (``reset_cache``) and reports the two results together."""
    scheduler = build({"eviction_policy": "lru"}, scheduler_cls=scheduler_cls)
    calls: list[str] = []
    reset_cache = scheduler.connector.reset_cache

    def counting() -> Any:
        calls.append("reset_cache")
        return reset_cache()

    scheduler.connector.reset_cache = counting
    return {
        "result": scheduler.reset_prefix_cache(reset_connector=True),
        "calls": calls,
        "without": scheduler.reset_prefix_cache(),
    }


def main() -> None:
    import kvframe_vllm
    from vllm.v1.core.sched.scheduler import Scheduler

    kvframe_spec = kvframe_vllm.extra_config(cpu_bytes_to_use=1 << 20)
    kvframe_spec.pop("cpu_bytes_to_use")
    policy = kvframe_vllm.cache_policy_config(cpu_bytes_to_use=0, eviction="arc:variant=paper")
    policy.pop("cpu_bytes_to_use")
    results = {
        "vllm_lru": built({"eviction_policy": "lru"}),
        "vllm_arc": built({"eviction_policy": "arc", "store_threshold": 2}),
        "kvframe_policy": built(policy),
        "kvframe_spec": outcome(lambda: build(kvframe_spec)),
        "sync_loads": outcome(lambda: build({"sync_load_budget_bytes": 1 << 20})),
        "other_connector": outcome(lambda: build({}, connector="ExampleConnector")),
        "async": built({}, async_scheduling=True),
        "async_producer": outcome(lambda: build({}, async_scheduling=True, kv_role="kv_producer")),
        "reset": reset_with_tier(),
        "reset_vllm": reset_with_tier(Scheduler),
    }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
