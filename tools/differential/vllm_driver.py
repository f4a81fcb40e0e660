"""Run workloads through vLLM V1's real Scheduler and write per-step records.

Runs under the vLLM reference virtualenv only (``install.sh`` in
``shared/tools/vllm-reference``); kvframe never imports this file or vLLM::

    .vllm-reference-venv/bin/python tools/differential/vllm_driver.py \
        WORKLOAD.json [WORKLOAD.json ...] --out-dir DIR [--blocks]

writes ``DIR/<workload name>.jsonl`` (schema in ``stepping.py``). Several
workloads go through one process because importing vLLM and resolving its first
ModelConfig costs ~15 s on this machine; each workload gets a fresh Scheduler.

The Scheduler is built the way vLLM's own unit tests build one
(``tests/v1/core/utils.py``: ``create_scheduler``): a VllmConfig with
SchedulerConfig / ModelConfig (a folder holding only ``config.json``) /
CacheConfig / ``DeviceConfig("cpu")``, and a KVCacheConfig with a single
FullAttentionSpec group of ``num_gpu_blocks`` blocks. No model, no worker.

Request equivalence with kvframe: ``priority`` and ``arrival_time`` are passed
straight through. In vLLM 0.19.1 they matter only under the priority policy:
the waiting heap orders by ``Request.__lt__`` = (priority, arrival_time,
request_id) and the preemption victim is ``max(running, key=(priority,
arrival_time))``; under fcfs the waiting queue is a deque in insertion order.
Sampling: ``ignore_eos=True``, no stop tokens, so a request stops only at
max_tokens or max_model_len (``check_stop``).

With a tier (``config["tier"]``) the VllmConfig carries a ``kv_transfer_config``
for vLLM's own ``OffloadingConnector`` (``kv_role="kv_both"``;
``cpu_bytes_to_use``, ``eviction_policy``, ``block_size`` and
``store_threshold`` in its extra config), which the Scheduler builds in its
scheduler role. The KVCacheConfig then holds one KV tensor so that the CPU
spec's bytes-per-block is the FullAttentionSpec's page size; the tier gets
exactly ``num_cpu_blocks`` slots. The worker side is ``stepping.ScriptedWorker``.

Both reference releases run here: vLLM 0.19.1 and 0.33.0 (``install.sh`` and
``tools/vllm-reference/install-0.33.sh``). The workload's ``config["vllm"]``
names the release it is meant for, and the driver refuses another one. What
0.33.0 changed in the interface, not in the decisions, is read back to
0.19.1's record schema here: the Scheduler takes ``hash_block_size`` and the
block hasher a lookahead argument (both given, 0 lookahead); a request's
prefix hit is its ``prefill_stats.num_cached_tokens`` (``num_cached_tokens``
left the Request, PR #48860); and with Model Runner V2, vLLM's default since
0.33 (PRs #44443, #53183), a resumed request is sent in
``scheduled_new_reqs`` with its whole token list and whole block table, so a
new request there that has been preempted before is recorded as resumed (its
whole table, as 0.19.1's resumed requests are recorded).

With a tier under 0.33.0, the connector is 0.33's job-numbered one: the tier
view carries the step's load and store jobs and ``jobs_to_flush``, the
worker (``stepping.JobWorker``) reports landed jobs in
``OffloadingWorkerMetadata.completed_jobs``, the tier is sized with each
chunk padded to a page (as 0.33.0's ``CPUOffloadingSpec`` pads it), a
request's external hit is read off its load job, and the scheduler's
``finished_req_ids`` is handed to the connector as a set that iterates in
sorted order (the connector numbers finished requests' last store jobs in
that order; kvframe walks them sorted). The bridge (``bridge=True``)
runs the same connector and tier there (vLLM's ``CPUOffloadingSpec`` with the
workload's policy); an eviction named ``kvframe:<spec>`` is a kvframe plugin
loaded by vLLM 0.33's ``CachePolicyFactory`` on both sides.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Quiet vLLM's import-time INFO/WARNING chatter (no Triton / no CUDA on this box).
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# Deterministic root hash for the chained block hash (init_none_hash reads it).
os.environ.setdefault("PYTHONHASHSEED", "0")

import stepping
from workloads import RequestSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL_DIR = REPO_ROOT.parent / "shared" / "tools" / "vllm-reference" / "model"
HASH_ALGO = "sha256"


def _model_dir() -> Path:
    env = os.environ.get("KVFRAME_VLLM_MODEL_DIR")
    return Path(env) if env else DEFAULT_MODEL_DIR


class _SortedSet(set):
    """A set that iterates in sorted order: the worker's report, in request-id order.

    vLLM's scheduler walks ``finished_sending`` / ``finished_recving`` in set
    order, which for strings depends on ``PYTHONHASHSEED``; the order decides
    which freed blocks go to the free queue first. kvframe walks them sorted
    (so that runs do not depend on the hash seed); the harness hands vLLM sets
    that iterate the same way, so the rule compared is the same.
    """

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(sorted(set.__iter__(self)))


class VllmAdapter:
    """:class:`stepping.SchedulerAdapter` over ``vllm.v1.core.sched.scheduler.Scheduler``."""

    def __init__(
        self, config: dict[str, Any], *, record_blocks: bool = False, bridge: bool = False
    ) -> None:
        """``bridge``: build the kvframe-vllm ``KvframeScheduler`` (kvframe's core behind
        vLLM's scheduler interface, the workload's policy as a kvframe plugin) in
        place of vLLM's ``Scheduler``; everything else -- config, requests, runner
        output, this adapter's reading of the ``SchedulerOutput`` -- is unchanged."""
        import torch
        import vllm
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager

        self.version = vllm.__version__
        self.v033 = _at_least(self.version, (0, 33))
        wanted_version = config.get("vllm", "0.19.1")
        if not self.version.startswith(wanted_version):
            raise RuntimeError(
                f"the workload is for vLLM {wanted_version}, this interpreter has vLLM "
                f"{self.version} (compare.py --vllm-version picks the interpreter)"
            )
        self._Request = Request
        self._SamplingParams = SamplingParams
        self._ModelRunnerOutput = ModelRunnerOutput
        self.record_blocks = record_blocks

        block_size = config["block_size"]
        max_model_len = config["max_model_len"]
        tier = config.get("tier")
        kv_spec = FullAttentionSpec(
            block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
        )
        scheduler_config = SchedulerConfig(
            max_num_seqs=config["max_num_seqs"],
            max_num_batched_tokens=config["max_num_batched_tokens"],
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            long_prefill_token_threshold=config["long_prefill_token_threshold"],
            enable_chunked_prefill=config["enable_chunked_prefill"],
            # vLLM validates its own policy name; the bridge takes the kvframe one.
            policy=config["policy"] if config["policy"] in ("fcfs", "priority") else "fcfs",
            scheduler_reserve_full_isl=config.get("reserve_full_sequence", True),
            async_scheduling=bool(config.get("async_scheduling", False)),
        )
        model_config = ModelConfig(
            model=str(_model_dir()),
            max_model_len=max_model_len,
            skip_tokenizer_init=True,
            dtype="float16",
            seed=0,
        )
        cache_config = CacheConfig(
            block_size=block_size,
            enable_prefix_caching=config["enable_prefix_caching"],
            prefix_caching_hash_algo=HASH_ALGO,
        )
        kv_transfer_config = None
        kv_cache_tensors = []
        if tier:
            from vllm.config import KVTransferConfig
            from vllm.v1.kv_cache_interface import KVCacheTensor

            factor = tier["block_size_factor"]
            cpu_bytes = tier["num_cpu_blocks"] * _cpu_bytes_per_chunk(
                factor * kv_spec.page_size_bytes, self.v033
            )
            if (tier.get("bridge") or bridge) and not self.v033:
                # The same tier with kvframe's plugins in it (plugins/kvframe-vllm);
                # the bridge scheduler always runs it so on 0.19.1 (--bridge --tier).
                # On 0.33.0 the bridge runs vLLM's own CPU tier, as vLLM's scheduler
                # does (a kvframe plugin enters it as eviction "kvframe:<spec>").
                import kvframe_vllm

                threshold = tier["store_threshold"]
                extra = kvframe_vllm.extra_config(
                    cpu_bytes_to_use=cpu_bytes,
                    eviction=tier["eviction"],
                    reuse_filter=f"threshold:store_threshold={threshold}"
                    if threshold >= 2
                    else None,
                    block_size=block_size * factor,
                )
            else:
                extra = {
                    "cpu_bytes_to_use": cpu_bytes,
                    "eviction_policy": tier["eviction"],
                    "block_size": block_size * factor,
                    "store_threshold": tier["store_threshold"],
                }
                if str(tier["eviction"]).startswith("kvframe:"):
                    # vLLM 0.33's CachePolicyFactory loads the kvframe plugin.
                    extra["cache_policy_module_path"] = "kvframe_vllm.cache_policy"
                if "offload_prompt_only" in tier:
                    # 0.33.0's default is True (PR #43797); a workload may set it
                    # to see what the change alone does (0.19.1 has no such key).
                    extra["offload_prompt_only"] = bool(tier["offload_prompt_only"])
            kv_transfer_config = KVTransferConfig(
                kv_connector="OffloadingConnector",
                kv_role="kv_both",
                kv_connector_extra_config=extra,
            )
            size = kv_spec.page_size_bytes * config["num_gpu_blocks"]
            if self.v033:
                # 0.33.0 places layers explicitly: one layer, block-contiguous pages.
                page = kv_spec.page_size_bytes
                kv_cache_tensors = [
                    KVCacheTensor(size=size, layers=["layer"], layer_stride=size, block_stride=page)
                ]
            else:
                kv_cache_tensors = [KVCacheTensor(size=size, shared_by=["layer"])]
        kv_events_config = None
        if tier:
            # With a tier the records carry what vLLM's clients read of it:
            # SchedulerStats' connector fields and every KV event (GPU and tier).
            from vllm.config import KVEventsConfig

            kv_events_config = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
        vllm_config = VllmConfig(
            scheduler_config=scheduler_config,
            model_config=model_config,
            cache_config=cache_config,
            device_config=DeviceConfig(device="cpu"),
            kv_transfer_config=kv_transfer_config,
            kv_events_config=kv_events_config,
            additional_config={"kvframe_scheduler": config["policy"]} if bridge else {},
        )
        self._hybrid = "kv_cache_groups" in config
        kv_cache_config = KVCacheConfig(
            num_blocks=config["num_gpu_blocks"],
            kv_cache_tensors=kv_cache_tensors,
            kv_cache_groups=_kv_cache_groups(config, KVCacheGroupSpec)
            if self._hybrid
            else [KVCacheGroupSpec(["layer"], kv_spec)],
        )
        cache_config.num_gpu_blocks = config["num_gpu_blocks"]
        self.bridge = bridge
        self.async_scheduling = bool(config.get("async_scheduling", False))
        if self.async_scheduling and not bridge:
            # What vLLM's EngineCore builds when async scheduling is on (both releases).
            Scheduler = AsyncScheduler
        if bridge:
            from kvframe_vllm.scheduler import KvframeScheduler

            Scheduler = KvframeScheduler
        extra_args: dict[str, Any] = {"hash_block_size": block_size} if self.v033 else {}
        scheduler_block_size = block_size
        if self.v033 and self._hybrid:
            # 0.33.0's engine core schedules in the groups' LCM block and hashes in
            # the block its resolver picks (a Mamba group's max_model_len block makes
            # both that length unless its cache mode is "align").
            from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

            scheduler_block_size, hash_block = resolve_kv_cache_block_sizes(
                kv_cache_config, vllm_config
            )
            extra_args["hash_block_size"] = hash_block
        self._hash_block_size = extra_args.get("hash_block_size", block_size)
        self.scheduler = Scheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=scheduler_block_size,
            log_stats=bool(tier),
            **extra_args,
        )
        self._published: list[Any] | None = None
        if tier:
            self._published = []
            self.scheduler.kv_event_publisher = _Recorder(self._published)
        if bridge:
            self._step = 0
            self.scheduler.clock = lambda: float(self._step)  # one second per step
            bridged_tier = getattr(self.scheduler, "tier", None)
            if self.v033 and bridged_tier is not None:
                # As for vLLM's own scheduler (schedule() below): 0.33.0's connector
                # numbers the last stores of finished requests in the order it walks
                # finished_req_ids; hand it a set that iterates sorted.
                build_meta = bridged_tier.build_vllm_meta

                def sorted_build_meta(scheduler_output: Any) -> Any:
                    scheduler_output.finished_req_ids = _SortedSet(
                        scheduler_output.finished_req_ids
                    )
                    return build_meta(scheduler_output)

                bridged_tier.build_vllm_meta = sorted_build_meta
        else:
            self._check_effective_config(config)
        self._tier_factor = 1
        self._block_size = block_size
        self._loaded_tokens: dict[str, int] = {}
        self._namer: stepping.BlockNamer | None = None
        self._evicted: list = []
        if tier:
            self._attach_tier(tier, block_size)

        hash_fn = get_hash_fn_by_name(HASH_ALGO)
        init_none_hash(hash_fn)
        self._block_hasher = (
            get_request_block_hasher(self._hash_block_size, hash_fn, 0)
            if self.v033
            else get_request_block_hasher(block_size, hash_fn)
        )

    def _check_effective_config(self, config: dict[str, Any]) -> None:
        """VllmConfig post-init may silently rewrite settings; refuse if it did."""
        s = self.scheduler
        effective = {
            "policy": s.policy.value,
            "max_num_seqs": s.max_num_running_reqs,
            "max_num_batched_tokens": s.max_num_scheduled_tokens,
            "max_model_len": s.max_model_len,
            "long_prefill_token_threshold": s.scheduler_config.long_prefill_token_threshold,
            "enable_chunked_prefill": s.scheduler_config.enable_chunked_prefill,
            "enable_prefix_caching": s.kv_cache_manager.enable_caching,
            "reserve_full_sequence": s.scheduler_reserve_full_isl,
            "num_gpu_blocks": s.kv_cache_manager.block_pool.num_gpu_blocks,
            "async_scheduling": bool(s.scheduler_config.async_scheduling),
            "num_lookahead_tokens": s.num_lookahead_tokens,
        }
        wanted = {
            **{k: config.get(k, True) for k in effective},
            "async_scheduling": bool(config.get("async_scheduling", False)),
        }
        wanted["num_lookahead_tokens"] = 0
        bad = {k: (wanted[k], v) for k, v in effective.items() if wanted[k] != v}
        if bad:
            raise RuntimeError(f"vLLM rewrote the config (wanted, got): {bad}")

    def _attach_tier(self, tier: dict[str, Any], block_size: int) -> None:
        """Check the connector vLLM built and record the tier's evictions as they happen."""
        from vllm.v1.request import RequestStatus

        self._waiting_for_remote = RequestStatus.WAITING_FOR_REMOTE_KVS
        connector = self.scheduler.connector
        side = getattr(connector, "connector_scheduler", None)
        if side is None:
            raise RuntimeError(f"vLLM built no offloading connector: {connector!r}")
        manager = side.manager
        if self.v033:
            # 0.33.0: chunks, the reuse filter inside CPUOffloadingManager.
            self._tier_factor = side.config.blocks_per_chunk
            effective = {
                "block_size_factor": side.config.blocks_per_chunk,
                "num_cpu_blocks": manager._num_chunks,
                "filtered": manager.counts is not None,
                "kvframe_policy": type(manager._policy).__module__.startswith("kvframe"),
            }
        else:
            self._tier_factor = side.block_size_factor
            backing = getattr(manager, "_backing", manager)
            effective = {
                "block_size_factor": side.block_size_factor,
                "num_cpu_blocks": backing._num_blocks,
                "filtered": backing is not manager,
                "kvframe_policy": type(backing._policy).__module__.startswith("kvframe"),
            }
        wanted = {
            "block_size_factor": tier["block_size_factor"],
            "num_cpu_blocks": tier["num_cpu_blocks"],
            "filtered": tier["store_threshold"] >= 2,
            "kvframe_policy": str(tier["eviction"]).startswith("kvframe:")
            if self.v033
            else bool(tier.get("bridge")) or self.bridge,
        }
        if effective != wanted:
            raise RuntimeError(f"vLLM built another tier (wanted, got): {wanted} {effective}")
        self._namer = stepping.BlockNamer(block_size)
        prepare_store = manager.prepare_store

        if self.v033:
            from vllm.v1.kv_offload.base import get_offload_block_hash

            def recording_prepare_store(keys: Any, req_context: Any) -> Any:
                out = prepare_store(keys, req_context)
                if out is not None:
                    self._evicted.extend(get_offload_block_hash(k) for k in out.evicted_keys)
                return out

            manager.prepare_store = recording_prepare_store
            return

        def recording_prepare_store(block_hashes: Any) -> Any:
            out = prepare_store(block_hashes)
            if out is not None:
                self._evicted.extend(out.block_hashes_evicted)
            return out

        manager.prepare_store = recording_prepare_store

    def _tier_view(self, out: Any, new: list[str]) -> stepping.TierView:
        requests = self.scheduler.requests
        namer = self._namer
        assert namer is not None
        for rid, request in requests.items():
            namer.observe(rid, request.block_hashes)
        meta = out.kv_connector_metadata

        def transfer(gpu: Any, cpu: Any) -> stepping.Transfer:
            return {"gpu": [int(b) for b in gpu.block_ids], "cpu": [int(b) for b in cpu.block_ids]}

        jobs: stepping.TierJobs | None = None
        if self.v033:
            # 0.33.0: one job per transfer (one load or one store per request a step).
            loads = {j.req_id: transfer(j.dst_spec, j.src_spec) for j in meta.load_jobs.values()}
            stores = {j.req_id: transfer(j.src_spec, j.dst_spec) for j in meta.store_jobs.values()}
            jobs = stepping.TierJobs(
                loads={job: j.req_id for job, j in meta.load_jobs.items()},
                stores={job: j.req_id for job, j in meta.store_jobs.items()},
                flush=sorted(meta.jobs_to_flush or ()),
            )
            flush: list[str] = []
        else:
            loads = {rid: transfer(dst, src) for rid, (src, dst) in meta.reqs_to_load.items()}
            stores = {rid: transfer(src, dst) for rid, (src, dst) in meta.reqs_to_store.items()}
            flush = sorted(meta.reqs_to_flush or ())
        evicted = [namer.name(h) for h in self._evicted]
        self._evicted.clear()
        return stepping.TierView(
            loads=loads,
            stores=stores,
            flush=flush,
            finished_req_ids=sorted(out.finished_req_ids),
            external_hits=self._external_hits(requests, new, loads),
            waiting_remote=sorted(
                rid for rid, r in requests.items() if r.status == self._waiting_for_remote
            ),
            evicted=evicted,
            jobs=jobs,
        )

    def _external_hits(
        self, requests: dict[str, Any], new: list[str], loads: dict[str, stepping.Transfer]
    ) -> dict[str, int]:
        """``num_external_computed_tokens`` of the requests admitted or given a load.

        0.33.0 dropped the Request field (the first admission's value is in
        ``prefill_stats``); a load's tokens are its GPU blocks' (whole chunks), and
        a request admitted after its load landed keeps the load's count, as the
        0.19.1 field does.
        """
        if not self.v033:
            return {rid: requests[rid].num_external_computed_tokens for rid in [*new, *loads]}
        for rid, load in loads.items():
            self._loaded_tokens[rid] = len(load["gpu"]) * self._block_size
        return {rid: self._loaded_tokens.get(rid, 0) for rid in [*new, *loads]}

    # -- SchedulerAdapter ---------------------------------------------------

    def add_request(self, spec: RequestSpec) -> None:
        # An agent turn's job and turn, as a client sends them (vllm_xargs).
        agentic = {
            f"kvframe_{k}": spec[k] for k in ("job_id", "turn", "last_turn", "tool") if k in spec
        }
        params = self._SamplingParams(
            max_tokens=spec["max_tokens"], ignore_eos=True, extra_args=agentic or None
        )
        request = self._Request(
            request_id=spec["request_id"],
            prompt_token_ids=list(spec["prompt_token_ids"]),
            sampling_params=params,
            pooling_params=None,
            arrival_time=spec["arrival_time"],
            priority=spec["priority"],
            block_hasher=self._block_hasher,
        )
        self.scheduler.add_request(request)
        if self._namer is not None:
            self._namer.add_request(spec)

    def _num_free_blocks(self) -> int:
        if self.bridge:
            return self.scheduler.core.kv_cache_manager.num_free_blocks
        return self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()

    def schedule(self) -> stepping.StepView:
        if self._namer is not None and self.v033 and not self.bridge:
            # 0.33.0's connector walks finished_req_ids (a set, in hash-seed order)
            # to offer their last stores, numbering jobs in that order; kvframe
            # walks them sorted, so hand vLLM a set that iterates sorted. (The
            # bridge has no finished_req_ids of its own: it hands kvframe's.)
            self.scheduler.finished_req_ids = _SortedSet(self.scheduler.finished_req_ids)
        out = self.scheduler.schedule()
        if self.bridge:
            self._step += 1
        requests = self.scheduler.requests
        cached = out.scheduled_cached_reqs
        resumed = set(cached.resumed_req_ids)
        if self.v033:
            # Model Runner V2 sends resumed requests as new ones (see the docstring).
            resumed.update(
                d.req_id for d in out.scheduled_new_reqs if requests[d.req_id].num_preemptions
            )
        new = [d.req_id for d in out.scheduled_new_reqs if d.req_id not in resumed]
        blocks: dict[str, list[int]] | None = None
        if self.record_blocks and self._hybrid:  # every group's ids
            blocks = {d.req_id: [list(g) for g in d.block_ids] for d in out.scheduled_new_reqs}
            for rid, ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
                blocks[rid] = [list(g) for g in ids] if ids is not None else []
        elif self.record_blocks:
            blocks = {d.req_id: list(d.block_ids[0]) for d in out.scheduled_new_reqs}
            for rid, ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
                blocks[rid] = list(ids[0]) if ids is not None else []
        return stepping.StepView(
            scheduled=list(out.num_scheduled_tokens.items()),
            new=new,
            resumed=sorted(resumed),
            preempted=sorted(out.preempted_req_ids),
            prefix_hits={rid: self._prefix_hit(requests[rid]) for rid in new},
            free_blocks=self._num_free_blocks(),
            blocks=blocks,
            raw=out,
            tier=self._tier_view(out, new) if self._namer is not None else None,
        )

    def _prefix_hit(self, request: Any) -> int:
        """Tokens of a newly admitted request found cached (GPU and tier together)."""
        if self.v033:
            return request.prefill_stats.num_cached_tokens
        return request.num_cached_tokens

    def progress(self, req_id: str) -> tuple[int, int]:
        request = self.scheduler.requests[req_id]
        computed, num_tokens = request.num_computed_tokens, request.num_tokens
        if self.async_scheduling and (computed >= num_tokens) == request.is_prefill_chunk:
            # The harness's sampling rule must be the model runner's: a step samples
            # unless it is a partial prefill chunk (placeholders included).
            raise RuntimeError(
                f"{req_id}: computed {computed} / {num_tokens} tokens but "
                f"is_prefill_chunk={request.is_prefill_chunk}"
            )
        return computed, num_tokens

    def has_requests(self) -> bool:
        return bool(self.scheduler.has_requests())

    def update(
        self,
        view: stepping.StepView,
        sampled: dict[str, list[int]],
        transfers: tuple[set[str], set[str]] | None = None,
    ) -> list[str]:
        req_ids = [rid for rid, _ in view.scheduled]
        kv_connector_output = None
        if transfers is not None:
            from vllm.v1.outputs import KVConnectorOutput

            worker_meta = None
            jobs = view.tier.jobs if view.tier is not None else None
            if jobs is not None and jobs.completed:
                from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
                    OffloadingWorkerMetadata,
                )

                worker_meta = OffloadingWorkerMetadata(
                    completed_jobs={job: 1 for job in jobs.completed}
                )
            kv_connector_output = KVConnectorOutput(
                finished_sending=_SortedSet(transfers[0]) or None,
                finished_recving=_SortedSet(transfers[1]) or None,
                **({"kv_connector_worker_meta": worker_meta} if self.v033 else {}),
            )
        runner_output = self._ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            # vLLM's model runner returns [] for a partial prefill chunk.
            sampled_token_ids=[list(sampled.get(rid, ())) for rid in req_ids],
            kv_connector_output=kv_connector_output,
        )
        engine_outputs = self.scheduler.update_from_output(view.raw, runner_output)
        if self._published is not None:
            view.extra["connector"] = self._connector_record(engine_outputs)
        outputs = [o for eco in engine_outputs.values() for o in eco.outputs]
        view.extra["outputs"] = sorted(
            [
                o.request_id,
                list(o.new_token_ids),
                None if o.finish_reason is None else str(o.finish_reason),
                o.stop_reason,
                _output_cached_tokens(o),
            ]
            for o in outputs
        )
        return [o.request_id for o in outputs if o.finish_reason is not None]

    def _connector_record(self, engine_outputs: dict[int, Any]) -> list[Any]:
        """What vLLM's clients read of the tier this step: the connector's prefix-cache
        counters and stats payload from ``SchedulerStats``, and every KV event
        published (all fields, GPU and tier alike)."""
        assert self._published is not None
        stats = next(
            (e.scheduler_stats for e in engine_outputs.values() if e.scheduler_stats), None
        )
        events = [_event(e) for batch in self._published for e in batch.events]
        self._published.clear()
        if stats is None:
            return [None, None, events]
        p = stats.connector_prefix_cache_stats
        prefix = (
            None
            if p is None
            else [
                p.reset,
                p.requests,
                p.queries,
                p.hits,
                p.preempted_requests,
                p.preempted_queries,
                p.preempted_hits,
                {str(k): v for k, v in getattr(p, "hits_by_source", {}).items()},
            ]
        )
        return [prefix, _untimed(_plain(stats.kv_connector_stats)), events]


class _Recorder:
    """A KV-event publisher keeping every batch (vLLM's publisher interface)."""

    def __init__(self, into: list[Any]) -> None:
        self.into = into

    def publish(self, batch: Any) -> None:
        self.into.append(batch)

    def shutdown(self) -> None:
        return None


def _kv_cache_groups(config: dict[str, Any], group_spec: Any) -> list[Any]:
    """vLLM's KV-cache groups from a workload's ``kv_cache_groups`` (hybrid_workloads.py):
    one layer per group, the workload's block size (a Mamba group's: max_model_len)."""
    import torch
    from vllm.v1 import kv_cache_interface as kvi

    block_size = config["block_size"]
    heads = {"block_size": block_size, "num_kv_heads": 1, "head_size": 1, "dtype": torch.float32}
    groups = []
    for i, group in enumerate(config["kv_cache_groups"]):
        kind = group["kind"]
        if kind == "full_attention":
            spec = kvi.FullAttentionSpec(**heads)
        elif kind == "sliding_window":
            spec = kvi.SlidingWindowSpec(**heads, sliding_window=group["sliding_window"])
        elif kind == "chunked_local_attention":
            spec = kvi.ChunkedLocalAttentionSpec(
                **heads, attention_chunk_size=group["attention_chunk_size"]
            )
        elif kind == "mamba":
            spec = kvi.MambaSpec(
                block_size=config["max_model_len"], shapes=((1,),), dtypes=(torch.float32,)
            )
        else:
            raise ValueError(f"kv_cache_groups[{i}]: unknown kind {kind!r}")
        groups.append(group_spec([f"layer.{i}"], spec))
    return groups


def _plain(value: Any) -> Any:
    """A value as JSON: bytes as hex, tuples as lists, dicts with string keys."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return value


def _untimed(value: Any, name: str = "") -> Any:
    """A stats payload less its timings: a metric named in seconds (0.33's
    ``kv_offload_lookup_sync_delay_seconds``) keeps only how many samples it has."""
    if isinstance(value, dict):
        return {k: _untimed(v, k if k.startswith("vllm:") else name) for k, v in value.items()}
    if name.endswith("_seconds") and isinstance(value, list):
        return len(value)
    return value


def _event(event: Any) -> list[Any]:
    """A KV event with every field its release declares, in declaration order."""
    fields = type(event).__struct_fields__
    return [type(event).__name__, *(_plain(getattr(event, name)) for name in fields)]


def _at_least(version: str, wanted: tuple[int, int]) -> bool:
    """``version`` (``"0.33.0"``, ``"0.19.1+cpu"``) is ``wanted`` (major, minor) or later."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= wanted


def _cpu_bytes_per_chunk(kv_bytes_per_chunk: int, v033: bool) -> int:
    """The tier bytes one offloaded chunk takes: 0.33.0 pads each chunk to a page.

    vLLM 0.33.0's ``CPUOffloadingSpec`` divides ``cpu_bytes_to_use`` by the
    chunk size rounded up to ``BLOCK_SIZE_ALIGNMENT`` (the OS page size), so
    the harness asks for that many bytes per slot to get exactly
    ``num_cpu_blocks`` slots, as 0.19.1 gets from the unpadded size.
    """
    if not v033:
        return kv_bytes_per_chunk
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    align = CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT
    return -(-kv_bytes_per_chunk // align) * align


def _output_cached_tokens(output: Any) -> int:
    """An output's cached prompt tokens: a field in 0.19.1, in ``prefill_stats`` in 0.33."""
    if hasattr(output, "num_cached_tokens"):
        return output.num_cached_tokens
    stats = output.prefill_stats
    return stats.num_cached_tokens if stats is not None else 0


def main(argv: list[str] | None = None) -> int:
    return stepping.driver_main(
        argv,
        "vllm_driver",
        lambda config, record_blocks: VllmAdapter(config, record_blocks=record_blocks),
        __doc__.split("\n\n")[0],
    )


if __name__ == "__main__":
    raise SystemExit(main())
