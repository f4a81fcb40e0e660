"""Run workloads through kvframe's Scheduler and write per-step records.

The kvframe twin of ``vllm_driver.py``, run under kvframe's own virtualenv::

    .venv/bin/python tools/differential/kvframe_driver.py \
        WORKLOAD.json [WORKLOAD.json ...] --out-dir DIR [--blocks]

writes ``DIR/<workload name>.jsonl`` with exactly the schema and stepping
rule of the vLLM driver (both come from ``stepping.py``).
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
    raise ValueError(f"unknown policy {name!r}")


def _scheduler_config(config: dict[str, Any]) -> Any:
    """kvframe's SchedulerConfig from the workload config, refusing silent drops.

    The workload config names a few settings that kvframe may not model under
    the same name (``reserve_full_sequence`` is vLLM's
    ``scheduler_reserve_full_isl``); if kvframe lacks one, the run is refused
    rather than compared against a vLLM that used it.
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
        if key in fields:
            kwargs[key] = value
        else:
            raise RuntimeError(f"kvframe's SchedulerConfig has no {key!r} (wanted {value!r})")
    return SchedulerConfig(**kwargs)


def _first_group(ids: Any) -> list[int]:
    """Block ids as a flat list whether kvframe reports one group or a tuple of them."""
    if ids is None:
        return []
    ids = list(ids)
    if ids and isinstance(ids[0], (list, tuple)):
        return list(ids[0])
    return ids


class KvframeAdapter:
    """:class:`stepping.SchedulerAdapter` over ``kvframe.core.scheduler.Scheduler``."""

    def __init__(self, config: dict[str, Any], *, record_blocks: bool = False) -> None:
        from kvframe.core.scheduler import Scheduler
        from kvframe.core.scheduler_output import ModelRunnerOutput
        from kvframe.request import Request

        self._Request = Request
        self._ModelRunnerOutput = ModelRunnerOutput
        self.record_blocks = record_blocks
        self.scheduler = Scheduler(_scheduler_config(config), _policy(config["policy"]))

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
        )
        self.scheduler.add_request(request)

    def schedule(self) -> stepping.StepView:
        out = self.scheduler.schedule()
        requests = self.scheduler.requests
        new = [d.req_id for d in out.scheduled_new_reqs]
        cached = out.scheduled_cached_reqs
        blocks: dict[str, list[int]] | None = None
        if self.record_blocks:
            blocks = {d.req_id: _first_group(d.block_ids) for d in out.scheduled_new_reqs}
            for rid, ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
                blocks[rid] = _first_group(ids)
        return stepping.StepView(
            scheduled=list(out.num_scheduled_tokens.items()),
            new=new,
            resumed=sorted(cached.resumed_req_ids),
            preempted=sorted(out.preempted_req_ids),
            prefix_hits={rid: requests[rid].num_cached_tokens for rid in new},
            free_blocks=self._free_blocks(),
            blocks=blocks,
            raw=out,
        )

    def progress(self, req_id: str) -> tuple[int, int]:
        request = self.scheduler.requests[req_id]
        return request.num_computed_tokens, request.num_tokens

    def update(self, view: stepping.StepView, sampled: dict[str, list[int]]) -> list[str]:
        finished = self.scheduler.update_from_output(
            view.raw, self._ModelRunnerOutput(sampled_token_ids=sampled)
        )
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
