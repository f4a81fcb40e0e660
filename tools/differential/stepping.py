"""The stepping rule and the per-step record, shared verbatim by both drivers.

Both drivers feed a workload through their scheduler with this one loop, so a
difference between the two record streams can only come from the schedulers,
never from the harness. Standard library only (it runs under both virtualenvs).

The rule, at step ``k``:

1. add every request whose ``arrival_step == k``, in workload order;
2. ``schedule()``;
3. every scheduled request whose prompt is now fully computed
   (``num_computed_tokens >= num_tokens`` after scheduling, i.e. not a partial
   prefill chunk) samples exactly one token, :data:`SAMPLED_TOKEN_ID`;
4. ``update_from_output()``.

It stops when every request has arrived and finished, and raises
:class:`StepCapExceeded` past ``max_steps`` (a livelock is a finding, not a hang).

The record of a step (one JSON object per line in the output)::

    step        int
    scheduled   [[req_id, num_tokens], ...]  in num_scheduled_tokens order
    new         [req_id, ...]                scheduled_new_reqs, in order
    resumed     sorted req ids resumed from preemption this step
    preempted   sorted req ids preempted this step
    prefix_hits {req_id: num_cached_tokens}  for requests in ``new``
    free_blocks int                          free blocks right after schedule()
    finished    sorted req ids finished by this step's update
    blocks      {req_id: [block ids]}        only with ``record_blocks``: the new
                                             block ids of each scheduled request

``prefix_hits`` is per request rather than vLLM's prefix_cache_queries/hits
counters, which count a waiting request again every step it cannot be admitted.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from workloads import SAMPLED_TOKEN_ID, RequestSpec, Workload, load_workload

DEFAULT_MAX_STEPS = 200_000


class StepCapExceeded(RuntimeError):
    """The workload did not finish within the step cap."""


@dataclass(slots=True)
class StepView:
    """What a driver reads off one ``schedule()`` result, before the update."""

    scheduled: list[tuple[str, int]]
    new: list[str]
    resumed: list[str]
    preempted: list[str]
    prefix_hits: dict[str, int]
    free_blocks: int
    blocks: dict[str, list[int]] | None = None
    raw: Any = field(default=None, repr=False)
    """The scheduler's own output object, handed back to :meth:`update`."""


class SchedulerAdapter(Protocol):
    """The four things the loop needs from a scheduler under test."""

    def add_request(self, spec: RequestSpec) -> None: ...

    def schedule(self) -> StepView: ...

    def progress(self, req_id: str) -> tuple[int, int]:
        """``(num_computed_tokens, num_tokens)`` of a scheduled request, right now."""
        ...

    def update(self, view: StepView, sampled: dict[str, list[int]]) -> list[str]:
        """Apply the step's sampled tokens; return the ids that finished."""
        ...


def run(
    workload: Workload, adapter: SchedulerAdapter, max_steps: int = DEFAULT_MAX_STEPS
) -> Iterator[dict[str, Any]]:
    """Drive ``adapter`` through ``workload``, yielding one record per step."""
    by_step: dict[int, list[RequestSpec]] = {}
    for spec in workload["requests"]:
        by_step.setdefault(spec["arrival_step"], []).append(spec)
    total = len(workload["requests"])
    num_finished = 0
    step = 0
    while num_finished < total:
        if step >= max_steps:
            raise StepCapExceeded(
                f"{workload['name']}: {total - num_finished} requests unfinished "
                f"after {max_steps} steps"
            )
        for spec in by_step.pop(step, ()):
            adapter.add_request(spec)
        view = adapter.schedule()
        sampled: dict[str, list[int]] = {}
        for req_id, _ in view.scheduled:
            computed, num_tokens = adapter.progress(req_id)
            if computed >= num_tokens:
                sampled[req_id] = [SAMPLED_TOKEN_ID]
        finished = adapter.update(view, sampled)
        num_finished += len(finished)
        record: dict[str, Any] = {
            "step": step,
            "scheduled": [[rid, n] for rid, n in view.scheduled],
            "new": list(view.new),
            "resumed": sorted(view.resumed),
            "preempted": sorted(view.preempted),
            "prefix_hits": dict(view.prefix_hits),
            "free_blocks": view.free_blocks,
            "finished": sorted(finished),
        }
        if view.blocks is not None:
            record["blocks"] = view.blocks
        yield record
        step += 1


def write_records(
    workload: Workload,
    make_adapter: Callable[[], SchedulerAdapter],
    out_path: Path,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> bool:
    """Build the adapter, run, write JSONL; on a crash append ``{"error": ...}``.

    Returns False on a crash. Writing as we go keeps the steps before a crash,
    which is usually where the interesting difference is, and one failing
    workload does not stop the others.
    """
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("w") as fh:
        try:
            adapter = make_adapter()
            for record in run(workload, adapter, max_steps):
                fh.write(json.dumps(record, separators=(",", ":")) + "\n")
        except Exception as exc:  # reported in-band: the comparison shows it
            fh.write(
                json.dumps(
                    {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                )
                + "\n"
            )
            return False
    return True


def driver_main(
    argv: list[str] | None,
    driver: str,
    make_adapter: Callable[[dict[str, Any], bool], Any],
    description: str,
) -> int:
    """The command line both drivers share: workload files in, one records file each out.

    ``make_adapter(config, record_blocks)`` builds the scheduler adapter for one
    workload's config.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("workloads", nargs="+", type=Path)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--blocks", action="store_true", help="also record block ids")
    parser.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS)
    args = parser.parse_args(argv)
    ok = True
    for path in args.workloads:
        workload: Workload = load_workload(path)
        t0 = time.perf_counter()
        out = args.out_dir / f"{workload['name']}.jsonl"
        ok &= write_records(
            workload,
            lambda cfg=workload["config"]: make_adapter(cfg, args.blocks),
            out,
            args.max_steps,
        )
        print(f"{driver}: {workload['name']} -> {out} ({time.perf_counter() - t0:.1f}s)")
    return 0 if ok else 1
