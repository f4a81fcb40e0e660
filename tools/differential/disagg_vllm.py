"""vLLM's side of the disaggregation harness: its own ``Scheduler`` with the scripted connector.

Runs under a vLLM reference virtualenv only. The connector is loaded by vLLM's
``KVConnectorFactory`` from ``kv_connector_module_path="disagg_vllm"`` (this
module, on ``sys.path`` as the harness's folder), so the ``Scheduler`` builds
and calls it exactly as it builds ``NixlConnector``; its rules are
:class:`disagg_script.NixlRules`, shared with kvframe's side.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("PYTHONHASHSEED", "0")

import disagg_script
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)
from vllm.v1.request import RequestStatus

RULES: disagg_script.NixlRules | None = None
"""The rules of the connector vLLM builds next (set by :class:`VllmSide`)."""


class _Meta(KVConnectorMetadata):
    def __init__(self, loads: dict[str, list[int]]) -> None:
        self.loads = loads


class ScriptedNixlConnector(KVConnectorBase_V1):
    """``NixlConnector``'s scheduler half over :class:`disagg_script.NixlRules`."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        assert RULES is not None
        self.rules = RULES

    # Worker side: never called (no worker runs).
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise NotImplementedError

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kw: Any) -> None:
        raise NotImplementedError

    def wait_for_save(self) -> None:
        raise NotImplementedError

    # Scheduler side.
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Any:
        return self.rules.matched(
            request.kv_transfer_params, len(request.prompt_token_ids), num_computed_tokens
        )

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        unhashed = blocks.get_unhashed_block_ids() if num_external_tokens > 0 else []
        self.rules.after_alloc(
            request.request_id, request.kv_transfer_params, list(unhashed), num_external_tokens
        )

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        return _Meta(self.rules.take_meta())

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, Any]:
        delay = self.rules.finished(
            request.request_id,
            request.kv_transfer_params,
            request.status == RequestStatus.FINISHED_LENGTH_CAPPED,
            list(block_ids),
        )
        return delay, None


class _SortedSet(set):
    """A set that iterates sorted: the worker's report, in request-id order (as kvframe)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(sorted(set.__iter__(self)))


class VllmSide:
    """vLLM's ``Scheduler`` for one script, with the hooks the harness loop calls."""

    def __init__(self, script: dict[str, Any], vllm_version: str) -> None:
        global RULES
        import torch
        import vllm
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            KVTransferConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
            KVCacheTensor,
        )
        from vllm.v1.structured_output import StructuredOutputManager
        from vllm_driver import HASH_ALGO, _model_dir

        if not vllm.__version__.startswith(vllm_version):
            raise RuntimeError(
                f"wanted vLLM {vllm_version}, this interpreter has {vllm.__version__}"
            )
        self.v033 = not vllm.__version__.startswith("0.19")
        config = script["config"]
        block_size = config["block_size"]
        RULES = self.rules = disagg_script.NixlRules()
        kv_spec = FullAttentionSpec(
            block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
        )
        vllm_config = VllmConfig(
            scheduler_config=SchedulerConfig(
                max_num_seqs=config["max_num_seqs"],
                max_num_batched_tokens=config["max_num_batched_tokens"],
                max_model_len=config["max_model_len"],
                is_encoder_decoder=False,
                long_prefill_token_threshold=config["long_prefill_token_threshold"],
                enable_chunked_prefill=config["enable_chunked_prefill"],
                policy="fcfs",
                async_scheduling=bool(config.get("async_scheduling")),
            ),
            model_config=ModelConfig(
                model=str(_model_dir()),
                max_model_len=config["max_model_len"],
                skip_tokenizer_init=True,
                dtype="float16",
                seed=0,
            ),
            cache_config=CacheConfig(
                block_size=block_size,
                enable_prefix_caching=config["enable_prefix_caching"],
                prefix_caching_hash_algo=HASH_ALGO,
            ),
            device_config=DeviceConfig(device="cpu"),
            kv_transfer_config=KVTransferConfig(
                kv_connector="ScriptedNixlConnector",
                kv_connector_module_path="disagg_vllm",
                kv_role="kv_both",
                kv_load_failure_policy=script["failure_policy"],
            ),
        )
        size = kv_spec.page_size_bytes * config["num_gpu_blocks"]
        if self.v033:
            tensors = [
                KVCacheTensor(
                    size=size,
                    layers=["layer"],
                    layer_stride=size,
                    block_stride=kv_spec.page_size_bytes,
                )
            ]
        else:
            tensors = [KVCacheTensor(size=size, shared_by=["layer"])]
        kv_cache_config = KVCacheConfig(
            num_blocks=config["num_gpu_blocks"],
            kv_cache_tensors=tensors,
            kv_cache_groups=[KVCacheGroupSpec(["layer"], kv_spec)],
        )
        vllm_config.cache_config.num_gpu_blocks = config["num_gpu_blocks"]
        extra: dict[str, Any] = {"hash_block_size": block_size} if self.v033 else {}
        scheduler_class = Scheduler
        if config.get("async_scheduling"):
            from vllm.v1.core.sched.async_scheduler import AsyncScheduler

            scheduler_class = AsyncScheduler
        self.scheduler = scheduler_class(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=block_size,
            log_stats=False,
            **extra,
        )
        hash_fn = get_hash_fn_by_name(HASH_ALGO)
        init_none_hash(hash_fn)
        self._hasher = (
            get_request_block_hasher(block_size, hash_fn, 0)
            if self.v033
            else get_request_block_hasher(block_size, hash_fn)
        )

    def add(self, spec: dict[str, Any]) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = spec["params"]
        extra = {"kv_transfer_params": dict(params)} if params is not None else None
        request = Request(
            request_id=spec["request_id"],
            prompt_token_ids=list(spec["prompt_token_ids"]),
            sampling_params=SamplingParams(
                max_tokens=spec["max_tokens"], ignore_eos=True, extra_args=extra
            ),
            pooling_params=None,
            arrival_time=float(spec["arrival_step"]),
            block_hasher=self._hasher,
        )
        self.scheduler.add_request(request)

    def abort(self, request_id: str) -> None:
        self.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)

    def has_requests(self) -> bool:
        return bool(self.scheduler.has_requests())

    def schedule(self) -> tuple[Any, dict[str, int]]:
        out = self.scheduler.schedule()
        return out, dict(out.num_scheduled_tokens)

    def state(self) -> dict[str, Any]:
        """Live requests (status, computed tokens, block table), held finished ones, free blocks."""
        kv = self.scheduler.kv_cache_manager
        live = {}
        held = []
        for rid, r in sorted(self.scheduler.requests.items()):
            if r.is_finished():
                held.append(rid)
                continue
            live[rid] = [r.status.name, r.num_computed_tokens, list(kv.get_block_ids(rid)[0])]
        return {"live": live, "held": held, "free_blocks": kv.block_pool.get_num_free_blocks()}

    def progress(self, request_id: str) -> tuple[int, int]:
        r = self.scheduler.requests[request_id]
        return r.num_computed_tokens, r.num_tokens

    def update(
        self,
        out: Any,
        sampled: dict[str, list[int]],
        landed: tuple[list[str], list[str], list[int]],
    ) -> list[list[Any]]:
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        req_ids = list(out.num_scheduled_tokens)
        sending, recving, invalid = landed
        runner_output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=[list(sampled.get(rid, ())) for rid in req_ids],
            kv_connector_output=KVConnectorOutput(
                finished_sending=_SortedSet(sending) or None,
                finished_recving=_SortedSet(recving) or None,
                invalid_block_ids=set(invalid),
            ),
        )
        engine_outputs = self.scheduler.update_from_output(out, runner_output)
        outputs = [o for eco in engine_outputs.values() for o in eco.outputs]
        return sorted(
            [o.request_id, str(o.finish_reason).lower()]
            for o in outputs
            if o.finish_reason is not None
        )
