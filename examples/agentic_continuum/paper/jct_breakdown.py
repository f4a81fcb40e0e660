"""Where a job's time goes: per-job JCT split into phases, per scheduler.

Runs one cell of the paper sweep (a workload file, a load, a tier) under each
given scheduler and splits every job's completion time into the phases its
turns went through, averaged per job:

``queue``
    a turn's arrival to its admission (the step in which the scheduler reserved
    its blocks: the prefix-cache event of its first admission);
``tier load``
    admission to first scheduled tokens, for a turn the tier supplied tokens to:
    the asynchronous load (the turn waits in ``WAITING_FOR_REMOTE_KVS`` while
    other requests run), the step at whose end the load is seen to have landed,
    and any wait for budget after that;
``prefill``
    first scheduled tokens to first token (the prompt's chunks, GPU and tier
    hits excluded);
``decode``
    first token to finish (output tokens, and any preemption's recompute);
``tool``
    a turn's finish to the next turn's arrival (the closed loop's tool call).

The phases add up to the JCT exactly. The admission time comes from a tracer
(the engine's public trace hooks); everything else from the run's per-request
rows. Also printed per job: tokens prefilled, tokens loaded from the tier,
turns that loaded, the part of ``queue`` spent by first turns (a new job
waiting to start); and the run's makespan and the jobs left out (a job with a
turn the engine never ran, e.g. a context too long for the pool, has no JCT).

    .venv/bin/python examples/agentic_continuum/paper/jct_breakdown.py \
        runs/agentic-paper/bfcl-s0.jsonl --rate-scale 4 --kv-memory 16GiB \
        --offload cpu:capacity=64GiB

(the contended ``bfcl`` cell at 16 jobs/s; docs/continuum.md, "Where the time
goes"). Virtual time: the figures do not depend on the machine.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Sequence
from typing import Any, ClassVar

import kvframe
from kvframe.contract.records import PrefixCacheEvent, StepDecision

PHASES = ("queue", "tier load", "prefill", "decode", "tool")
"""The phases of a job's time, in the order a turn goes through them."""
COUNTS = ("queue of first turns", "tokens prefilled", "tokens from tier", "turns that loaded")
"""Per-job figures printed with the phases (the first is part of ``queue``)."""


class PhaseTracer(kvframe.Tracer):
    """Records each request's admission (and whether the tier fed it) and first scheduled step.

    The engine builds its tracers itself, so the instances are collected on
    the class for the script to read after the run.
    """

    name = "jct-breakdown"
    instances: ClassVar[list[PhaseTracer]] = []

    def __init__(self) -> None:
        self.admitted: dict[str, float] = {}
        self.tier_tokens: dict[str, int] = {}
        self.first_scheduled: dict[str, float] = {}
        PhaseTracer.instances.append(self)

    def on_prefix_cache(self, event: PrefixCacheEvent) -> None:
        self.admitted.setdefault(event.request_id, event.now)
        self.tier_tokens.setdefault(event.request_id, event.external_hit_tokens)

    def on_step_decision(self, decision: StepDecision) -> None:
        first = self.first_scheduled
        for request_id in decision.num_scheduled_tokens:
            if request_id not in first:
                first[request_id] = decision.now


def breakdown(settings: dict[str, Any]) -> dict[str, float]:
    """Run one cell with :class:`PhaseTracer` and average the phases per job."""
    from kvframe.engine import Engine
    from kvframe.sweep.cell import build_engine_config, load_cell_workload

    PhaseTracer.instances.clear()
    config = build_engine_config({**settings, "tracer": [f"{__name__}:PhaseTracer"]})
    result = Engine.from_config(config).run(load_cell_workload(settings))
    (tracer,) = PhaseTracer.instances
    jobs: dict[str, list[Any]] = collections.defaultdict(list)
    for row in result.summary.requests:
        jobs[row.job_id].append(row)
    # Every phase and count is present in the result, 0 when nothing took it.
    total: collections.Counter[str] = collections.Counter(
        dict.fromkeys(("jct", *PHASES, *COUNTS), 0.0)
    )
    skipped = 0
    for rows in jobs.values():
        if any(row.first_token_time is None for row in rows):
            # A turn the engine never ran (finished as ignored: its context
            # cannot fit the pool, or aborted): the job has no JCT to split.
            skipped += 1
            continue
        rows.sort(key=lambda r: r.turn)
        total["jct"] += rows[-1].finish_time - rows[0].arrival_time
        for index, row in enumerate(rows):
            request_id = row.request_id
            admitted = tracer.admitted.get(request_id, row.first_scheduled_time)
            scheduled = tracer.first_scheduled.get(request_id, row.first_scheduled_time)
            loaded = tracer.tier_tokens.get(request_id, 0) > 0
            total["queue"] += admitted - row.arrival_time
            if index == 0:
                total["queue of first turns"] += admitted - row.arrival_time
            # Without a load a turn is scheduled in the step that admits it.
            total["tier load" if loaded else "queue"] += scheduled - admitted
            total["prefill"] += row.first_token_time - scheduled
            total["decode"] += row.finish_time - row.first_token_time
            if index + 1 < len(rows):
                total["tool"] += rows[index + 1].arrival_time - row.finish_time
            total["turns that loaded"] += loaded
            total["tokens from tier"] += row.num_external_cached_tokens or 0
            total["tokens prefilled"] += (
                row.num_prompt_tokens
                - (row.num_cached_tokens or 0)
                - (row.num_external_cached_tokens or 0)
                + (row.num_recomputed_tokens or 0)
            )
    num_jobs = len(jobs) - skipped
    out = {key: value / num_jobs for key, value in total.items()} if num_jobs else {}
    out["jobs left out"] = skipped
    out["makespan"] = max(r.finish_time for r in result.summary.requests)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--offload", default=None, help="e.g. cpu:capacity=64GiB")
    parser.add_argument("--kv-memory", default=None, help="e.g. 16GiB")
    parser.add_argument("--scheduler", action="append", help="repeatable; default fcfs, continuum")
    args = parser.parse_args(argv)
    settings: dict[str, Any] = {"workload": args.workload, "rate_scale": args.rate_scale}
    if args.offload:
        settings["offload"] = args.offload
    if args.kv_memory:
        settings["kv_memory"] = args.kv_memory
    schedulers = args.scheduler or ["fcfs", "continuum"]
    results = {s: breakdown({**settings, "scheduler": s}) for s in schedulers}
    keys = ["jct", *PHASES, *COUNTS, "makespan", "jobs left out"]
    print(f"{'per job':<20}" + "".join(f"{s:>14}" for s in schedulers))
    for key in keys:
        print(f"{key:<20}" + "".join(f"{results[s].get(key, 0.0):>14.2f}" for s in schedulers))


if __name__ == "__main__":
    main()
