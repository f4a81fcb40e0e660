"""Run workloads through kvframe's Scheduler and write per-step records.

The kvframe twin of ``vllm_driver.py``, run under kvframe's own virtualenv::

    .venv/bin/python tools/differential/kvframe_driver.py \
        WORKLOAD.json [WORKLOAD.json ...] --out-dir DIR [--blocks]

writes ``DIR/<workload name>.jsonl`` with exactly the schema and stepping
rule of the vLLM driver (both come from ``stepping.py``).

With a tier (``config["tier"]``) the scheduler gets kvframe's own
``OffloadingConnector`` over a ``SlotOffloadManager`` whose eviction policy is
the bundled ``lru`` / ``arc`` plugin class, wrapped in the ``threshold`` reuse
filter when ``store_threshold >= 2`` -- the pieces ``--offload cpu:...`` builds,
assembled directly so that the comparison does not depend on CLI option names.
Under the 0.33.0 target (fidelity switch ``offload_jobs``) it gets vLLM
0.33.0's connector instead: ``JobOffloadingConnector`` over a
``RequestScopedOffloadManager`` with ``RankLRUPolicy`` / ``RequestARCPolicy``
and the reuse filter inside the manager, its worker ``stepping.JobWorker``.
"""

from __future__ import annotations

from typing import Any

import stepping
from workloads import RequestSpec


def _policy(name: str) -> Any:
    """The scheduling policy object for ``name`` (the bundled plugin classes)."""
    if name == "fcfs":
        from kvframe_fcfs import FCFSPolicy

        return FCFSPolicy()
    if name == "priority":
        from kvframe_priority import PriorityPolicy

        return PriorityPolicy()
    if name == "continuum":
        from kvframe_continuum import ContinuumPolicy

        return ContinuumPolicy()
    raise ValueError(f"unknown policy {name!r}")


def _scheduler_config(config: dict[str, Any], fidelity: Any) -> Any:
    """kvframe's SchedulerConfig from the workload config, refusing silent drops.

    The workload config names a few settings that kvframe may not model under
    the same name (``reserve_full_sequence`` is vLLM's
    ``scheduler_reserve_full_isl``); if kvframe lacks one, the run is refused
    rather than compared against a vLLM that used it. ``fidelity`` is the
    workload's ``vllm`` target, resolved once by the caller.
    """
    import attrs

    try:
        from kvframe.core.scheduler import SchedulerConfig
    except ImportError:  # the config class may live only in its own module
        from kvframe.core.scheduler_config import SchedulerConfig

    fields = attrs.fields_dict(SchedulerConfig)
    kwargs: dict[str, Any] = {"hash_seed": 0} if "hash_seed" in fields else {}
    for key, value in config.items():
        if key == "policy":
            continue
        if key == "kv_cache_groups":  # a hybrid model's groups (hybrid_workloads.py)
            kwargs["kv_cache_config"] = kv_cache_config(value, config)
            continue
        if key == "vllm":
            # The vLLM release the workload is compared against: kvframe's fidelity target.
            if "fidelity" not in fields:
                raise RuntimeError(f"this kvframe has no fidelity targets (wanted vLLM {value})")
            kwargs["fidelity"] = fidelity
            continue
        if key in fields:
            kwargs[key] = value
        else:
            raise RuntimeError(f"kvframe's SchedulerConfig has no {key!r} (wanted {value!r})")
    return SchedulerConfig(**kwargs)


def _connector(tier: dict[str, Any], block_size: int, enable_prefix_caching: bool) -> Any:
    """kvframe's scheduler-side CPU tier, as ``--offload cpu:...`` would build it."""
    from kvframe.offload.slots.connector import OffloadingConnector
    from kvframe.offload.slots.manager import FilteredOffloadManager, SlotOffloadManager

    num_slots = tier["num_cpu_blocks"]
    if tier["eviction"] == "lru":
        from kvframe_lru import LRUPolicy

        policy: Any = LRUPolicy(num_slots)
    elif tier["eviction"] == "arc":
        from kvframe_arc import ARCPolicy

        policy = ARCPolicy(num_slots)
    else:
        raise ValueError(f"unknown tier eviction policy {tier['eviction']!r}")
    factor = tier["block_size_factor"]
    manager: Any = SlotOffloadManager(
        policy, num_slots, block_size=block_size * factor, enable_events=False
    )
    if tier["store_threshold"] >= 2:
        from kvframe_cpu_offload.reuse import ThresholdReuseFilter

        manager = FilteredOffloadManager(
            manager, ThresholdReuseFilter(store_threshold=tier["store_threshold"])
        )
    return OffloadingConnector(
        manager,
        gpu_block_size=block_size,
        block_size_factor=factor,
        enable_prefix_caching=enable_prefix_caching,
    )


def _job_connector(tier: dict[str, Any], block_size: int, enable_prefix_caching: bool) -> Any:
    """kvframe's model of vLLM 0.33.0's tier: the job-numbered connector over the
    request-scoped ledger, with the bundled 0.33 forms of ``lru`` / ``arc`` and the
    reuse filter inside the manager (``store_threshold``)."""
    from kvframe.offload.jobs.connector import JobOffloadingConnector
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager

    num_slots = tier["num_cpu_blocks"]
    if tier["eviction"] == "lru":
        from kvframe_lru.rank import RankLRUPolicy

        policy: Any = RankLRUPolicy(num_slots)
    elif tier["eviction"] == "arc":
        from kvframe_arc.request_arc import RequestARCPolicy

        policy = RequestARCPolicy(num_slots)
    else:
        raise ValueError(f"unknown tier eviction policy {tier['eviction']!r}")
    manager = RequestScopedOffloadManager(
        policy, num_slots, store_threshold=tier["store_threshold"]
    )
    return JobOffloadingConnector(
        manager,
        gpu_block_size=block_size,
        block_size_factor=tier["block_size_factor"],
        enable_prefix_caching=enable_prefix_caching,
        offload_prompt_only=bool(tier.get("offload_prompt_only", True)),
    )


def _slots(host_block_ids: list[int], factor: int) -> list[int]:
    """Tier slots of a transfer's host block indices (``slot * factor + j``), in order."""
    slots: list[int] = []
    for host in host_block_ids:
        slot = host // factor
        if not slots or slots[-1] != slot:
            slots.append(slot)
    return slots


def kv_cache_config(groups: list[dict[str, Any]], config: dict[str, Any]) -> Any:
    """kvframe's ``KVCacheConfig`` from a workload's ``kv_cache_groups`` (one layer per
    group; page sizes do not matter to the scheduler)."""
    from kvframe.domain import kv_cache_spec as specs

    block_size = config["block_size"]
    built = []
    for i, group in enumerate(groups):
        kind = group["kind"]
        heads = {"block_size": block_size, "num_kv_heads": 1, "head_size": 1}
        if kind == "full_attention":
            spec = specs.FullAttentionSpec(**heads)
        elif kind == "sliding_window":
            spec = specs.SlidingWindowSpec(**heads, sliding_window=group["sliding_window"])
        elif kind == "chunked_local_attention":
            spec = specs.ChunkedLocalAttentionSpec(
                **heads, attention_chunk_size=group["attention_chunk_size"]
            )
        elif kind == "mamba":
            spec = specs.MambaSpec(block_size=config["max_model_len"], state_bytes=1)
        else:
            raise ValueError(f"kv_cache_groups[{i}]: unknown kind {kind!r}")
        built.append(specs.KVCacheGroupSpec(layer_names=(f"layer.{i}",), spec=spec))
    return specs.KVCacheConfig(num_blocks=config["num_gpu_blocks"], groups=built)


def _group_ids(ids: Any) -> list[Any]:
    """A hybrid model's block ids: one list per group (``[]`` for none)."""
    return [] if ids is None else [list(g) for g in ids]


def _first_group(ids: Any) -> list[int]:
    """Block ids as a flat list whether kvframe reports one group or a tuple of them."""
    if ids is None:
        return []
    ids = list(ids)
    if ids and isinstance(ids[0], (list, tuple)):
        return list(ids[0])
    return ids


class KvframeAdapter:
    """:class:`stepping.SchedulerAdapter` over kvframe's scheduler (``Scheduler``, or
    ``AsyncScheduler`` under asynchronous scheduling)."""

    def __init__(self, config: dict[str, Any], *, record_blocks: bool = False) -> None:
        try:
            from kvframe.core.factory import make_scheduler
        except ImportError:  # a kvframe before the factory: one class for both modes
            from kvframe.core.scheduler import Scheduler as make_scheduler
        from kvframe.core.scheduler_output import ModelRunnerOutput
        from kvframe.domain.request import Request

        self._Request = Request
        self._ModelRunnerOutput = ModelRunnerOutput
        self.record_blocks = record_blocks
        self._hybrid = "kv_cache_groups" in config
        tier = config.get("tier")
        connector = None
        self._namer: stepping.BlockNamer | None = None
        self._evicted: list[Any] = []
        from kvframe.domain.fidelity import DEFAULT_VLLM, fidelity_for

        fidelity = fidelity_for(config.get("vllm", DEFAULT_VLLM))
        self._jobs = fidelity.offload_jobs
        """vLLM 0.33.0's connector (fidelity switch ``offload_jobs``): numbered jobs."""
        self._block_size = config["block_size"]
        self._loaded_tokens: dict[str, int] = {}
        if tier:
            build = _job_connector if self._jobs else _connector
            connector = build(tier, config["block_size"], config["enable_prefix_caching"])
            self._factor = tier["block_size_factor"]
            self._namer = stepping.BlockNamer(config["block_size"])
            prepare_store = connector.manager.prepare_store

            if self._jobs:

                def recording_prepare_store(keys: Any, access: Any) -> Any:
                    result = prepare_store(keys, access)
                    if result is not None:
                        self._evicted.extend(result.evicted_keys)
                    return result

            else:

                def recording_prepare_store(block_hashes: Any) -> Any:  # type: ignore[misc]
                    result = prepare_store(block_hashes)
                    if result is not None:
                        self._evicted.extend(result.evicted_block_hashes)
                    return result

            connector.manager.prepare_store = recording_prepare_store
        config = {k: v for k, v in config.items() if k != "tier"}
        self._step = 0
        self.scheduler = make_scheduler(
            _scheduler_config(config, fidelity), _policy(config["policy"]), connector=connector
        )

    def _tier_view(self, out: Any, new: list[str]) -> stepping.TierView:
        from kvframe.domain.request import RequestStatus

        requests = self.scheduler.requests
        namer = self._namer
        assert namer is not None
        for rid, request in requests.items():
            namer.observe(rid, request.block_hashes)
        meta = out.kv_connector_metadata
        factor = self._factor

        def transfer(spec: Any) -> stepping.Transfer:
            return {"gpu": list(spec.gpu_block_ids), "cpu": _slots(spec.host_block_ids, factor)}

        jobs: stepping.TierJobs | None = None
        if self._jobs:
            # vLLM 0.33.0's connector: one job per transfer, read as vllm_driver reads it.
            loads = {j.request_id: transfer(j) for j in meta.load_jobs.values()}
            stores = {j.request_id: transfer(j) for j in meta.store_jobs.values()}
            jobs = stepping.TierJobs(
                loads={job: j.request_id for job, j in meta.load_jobs.items()},
                stores={job: j.request_id for job, j in meta.store_jobs.items()},
                flush=sorted(meta.jobs_to_flush),
            )
            flush: list[str] = []
            for rid, load in loads.items():
                self._loaded_tokens[rid] = len(load["gpu"]) * self._block_size
            external_hits = {rid: self._loaded_tokens.get(rid, 0) for rid in [*new, *loads]}
        else:
            loads = {rid: transfer(spec) for rid, spec in meta.reqs_to_load.items()}
            stores = {rid: transfer(spec) for rid, spec in meta.reqs_to_store.items()}
            flush = sorted(meta.reqs_to_flush)
            external_hits = {
                rid: requests[rid].num_external_computed_tokens for rid in [*new, *loads]
            }
        evicted = [namer.name(h) for h in self._evicted]
        self._evicted.clear()
        waiting = RequestStatus.WAITING_FOR_REMOTE_KVS
        return stepping.TierView(
            loads=loads,
            stores=stores,
            flush=flush,
            finished_req_ids=sorted(out.finished_req_ids),
            external_hits=external_hits,
            waiting_remote=sorted(rid for rid, r in requests.items() if r.status == waiting),
            evicted=evicted,
            jobs=jobs,
        )

    def _free_blocks(self) -> int:
        free = self.scheduler.kv_cache_manager.num_free_blocks
        return int(free() if callable(free) else free)

    # -- SchedulerAdapter ---------------------------------------------------

    def add_request(self, spec: RequestSpec) -> None:
        request = self._Request(
            spec["request_id"],
            list(spec["prompt_token_ids"]),
            spec["max_tokens"],
            arrival_time=spec["arrival_time"],
            priority=spec["priority"],
            block_hasher=self.scheduler.block_hasher,
            job_id=spec.get("job_id"),
            turn=spec.get("turn"),
            is_last_turn=spec.get("last_turn", True),
            tool_name=spec.get("tool"),
        )
        self.scheduler.add_request(request)
        if self._namer is not None:
            self._namer.add_request(spec)

    def schedule(self) -> stepping.StepView:
        # The step clock: one second per step (the kvframe-vllm bridge's test
        # clock is the same), so time-based policies see the same times.
        out = self.scheduler.schedule(float(self._step))
        self._step += 1
        requests = self.scheduler.requests
        new = [d.req_id for d in out.scheduled_new_reqs]
        cached = out.scheduled_cached_reqs
        blocks: dict[str, list[int]] | None = None
        if self.record_blocks:
            read = _group_ids if self._hybrid else _first_group
            blocks = {d.req_id: read(d.block_ids) for d in out.scheduled_new_reqs}
            for rid, ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
                blocks[rid] = read(ids)
        return stepping.StepView(
            scheduled=list(out.num_scheduled_tokens.items()),
            new=new,
            resumed=sorted(cached.resumed_req_ids),
            preempted=sorted(out.preempted_req_ids),
            prefix_hits={rid: requests[rid].num_cached_tokens for rid in new},
            free_blocks=self._free_blocks(),
            blocks=blocks,
            raw=out,
            tier=self._tier_view(out, new) if self._namer is not None else None,
        )

    def progress(self, req_id: str) -> tuple[int, int]:
        request = self.scheduler.requests[req_id]
        return request.num_computed_tokens, request.num_tokens

    def has_requests(self) -> bool:
        return self.scheduler.has_requests()

    def update(
        self,
        view: stepping.StepView,
        sampled: dict[str, list[int]],
        transfers: tuple[set[str], set[str]] | None = None,
    ) -> list[str]:
        output = self._ModelRunnerOutput(sampled_token_ids=sampled)
        if transfers is not None:
            from kvframe.core.scheduler_output import KVConnectorOutput

            jobs = view.tier.jobs if view.tier is not None else None
            output.kv_connector_output = KVConnectorOutput(
                finished_sending=set(transfers[0]),
                finished_recving=set(transfers[1]),
                completed_jobs=list(jobs.completed) if jobs is not None else [],
            )
        finished = self.scheduler.update_from_output(view.raw, output)
        return [r.request_id for r in finished or ()]


def main(argv: list[str] | None = None) -> int:
    return stepping.driver_main(
        argv,
        "kvframe_driver",
        lambda config, record_blocks: KvframeAdapter(config, record_blocks=record_blocks),
        __doc__.split("\n\n")[0],
    )


if __name__ == "__main__":
    raise SystemExit(main())
