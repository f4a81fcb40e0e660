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
    outputs     [[req_id, new token ids, finish reason, stop reason,
                  num_cached_tokens], ...]   vLLM-typed drivers only: the
                                             EngineCoreOutputs of the update

With an offload tier (a workload whose config has a ``tier``), the connector's
worker side is played by :class:`ScriptedWorker`, the same code in both
drivers, between ``schedule()`` and ``update_from_output()``; its report goes
into the update as the connector output. (A connector that numbers its
transfers as jobs -- vLLM 0.33.0's, and kvframe's under the 0.33.0 target --
gets :class:`JobWorker`, 0.33's job-numbered worker, instead; its records add
``load_jobs``, ``store_jobs``, ``jobs_to_flush`` and ``completed_jobs``.) The
record then also holds::

    external_hits  {req_id: tokens}  num_external_computed_tokens of each request
                                     admitted (``new``) or given a load this step
    waiting_remote sorted req ids waiting for remote KV after schedule()
    loads          {req_id: {"gpu": [...], "cpu": [...]}}  loads the connector
                                     metadata asked for (GPU block ids, tier slots)
    stores         {req_id: {"gpu": [...], "cpu": [...]}}  stores it asked for
    tier_evicted   [block names]     blocks the tier evicted this step, in order
    finished_sending / finished_recving  sorted ids the worker reported

A tier block is named by content, not by either project's hash (SHA-256 vs
BLAKE2b): :func:`block_names` chains a SHA-1 over the request's token blocks,
so both drivers name the same content the same way.

``prefix_hits`` is per request rather than vLLM's prefix_cache_queries/hits
counters, which count a waiting request again every step it cannot be admitted.

Asynchronous scheduling (``config["async_scheduling"]``): :func:`run_async`
drives the scheduler in the order of vLLM's ``EngineCore.step_with_batch_queue``
with a batch queue of two and a worker that is never done before the engine
blocks on it, so step N+1 is scheduled before step N's sampled tokens are
applied. One record per engine iteration ``i``: arrivals with ``arrival_step ==
i`` are added first; the schedule fields are those of the step scheduled in the
iteration (empty when none was), plus::

    scheduled_step  int or null   index of the step scheduled (schedule() calls)
    applied_step    int or null   index of the step whose output was applied
    finished        sorted req ids finished by that update

With a tier (:class:`ScriptedWorker` for vLLM 0.19.1, :class:`JobWorker` for
0.33.0, whose records add the job fields), the worker plays each scheduled step -- empty
ones too, as vLLM's model runner runs the connector without a forward pass --
when it is queued (``execute_model``), in schedule order, its steps counted in
``schedule()`` calls; its report rides with the step and goes into that step's
update, one iteration or more later. The tier fields above are those of the
step scheduled in the iteration (``finished_sending`` / ``finished_recving``:
what the worker reported for it, applied later).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
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
    tier: TierView | None = None
    """Only with an offload tier: what the connector decided this step."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Driver-specific record fields an adapter may fill in ``update`` (compared
    only when both sides recorded them, like ``blocks``)."""


Transfer = dict[str, list[int]]
"""``{"gpu": [GPU block ids], "cpu": [tier slot ids]}`` of one request's copy."""


@dataclass(slots=True)
class TierView:
    """The connector's side of one step, in names both projects share."""

    loads: dict[str, Transfer]
    stores: dict[str, Transfer]
    flush: list[str]
    """Requests preempted this step: their stores must land first."""
    finished_req_ids: list[str]
    """What the scheduler tells the worker finished since the previous step."""
    external_hits: dict[str, int]
    waiting_remote: list[str]
    evicted: list[str]
    jobs: TierJobs | None = None
    """vLLM 0.33's connector only: its transfers as jobs (see :class:`JobWorker`)."""


@dataclass(slots=True)
class TierJobs:
    """vLLM 0.33.0's connector metadata: transfers as numbered jobs.

    0.33's ``OffloadingConnectorScheduler`` numbers every load and store job
    from one counter, flushes jobs (not requests), and learns of a finished
    job from the worker's ``OffloadingWorkerMetadata.completed_jobs``; no
    request is ever reported in ``finished_sending``.
    """

    loads: dict[int, str]
    """job id -> request id, this step's load jobs."""
    stores: dict[int, str]
    """job id -> request id, this step's store jobs."""
    flush: list[int]
    """``jobs_to_flush``: store jobs the worker must finish before the forward pass."""
    completed: list[int] = field(default_factory=list)
    """Filled by :class:`JobWorker`: the job ids that landed this step, for the update."""


# --------------------------------------------------------------------------
# The worker side of an offload tier, played identically for both schedulers
# --------------------------------------------------------------------------


class ScriptedWorker:
    """vLLM 0.19's ``OffloadingConnectorWorker`` bookkeeping with scripted transfer times.

    The order of one step is the worker's: submit the stores deferred from the
    previous step, wait for the stores of requests preempted now (the flush
    barrier), start this step's loads, defer this step's stores to the next
    step, then report finished transfers. A finished request is reported in
    ``finished_sending`` once it had stores and none is pending; a load in
    ``finished_recving`` when it lands.

    A transfer submitted at step ``s`` lands at the end of step ``s + d``:

    * rule ``next-step``: ``d = 1`` for every transfer;
    * rule ``seeded``: ``d`` drawn from ``0 .. max_delay`` by a generator seeded
      with ``(seed, request id, load|store, n)`` for the request's ``n``-th
      transfer of that kind, so both drivers draw the same delays for the
      same transfers, whatever order they issue them in.

    A flushed store lands at once (the worker blocks on it).
    """

    def __init__(self, rule: dict[str, Any]) -> None:
        kind = rule.get("kind", "next-step")
        if kind not in ("next-step", "seeded"):
            raise ValueError(f"unknown completion rule {kind!r}")
        self.kind = kind
        self.max_delay = int(rule.get("max_delay", 0))
        self.seed = rule.get("seed", 0)
        self._next_job = 0
        self._due: dict[int, int] = {}
        """Submitted job -> the step at whose end it lands."""
        self._jobs: dict[int, tuple[str, bool]] = {}
        self._counts: dict[tuple[str, bool], int] = {}
        self._store_jobs: dict[str, set[int]] = {}
        self._unsubmitted: list[int] = []
        self._finished_waiting: set[str] = set()

    def _delay(self, request_id: str, is_store: bool) -> int:
        key = (request_id, is_store)
        n = self._counts.get(key, 0)
        self._counts[key] = n + 1
        if self.kind == "next-step":
            return 1
        kind = "store" if is_store else "load"
        return random.Random(f"{self.seed}:{request_id}:{kind}:{n}").randint(0, self.max_delay)

    def _new_job(self, request_id: str, is_store: bool) -> int:
        job = self._next_job
        self._next_job += 1
        self._jobs[job] = (request_id, is_store)
        return job

    def _submit(self, job: int, step: int) -> None:
        request_id, is_store = self._jobs[job]
        self._due[job] = step + self._delay(request_id, is_store)

    def step(self, step: int, view: TierView) -> tuple[set[str], set[str]]:
        """Play the worker for one step; return ``(finished_sending, finished_recving)``."""
        for job in self._unsubmitted:
            self._submit(job, step)
        self._unsubmitted.clear()
        for request_id in view.flush:
            for job in self._store_jobs.get(request_id, ()):
                self._due[job] = min(self._due[job], step)
        for request_id in view.loads:
            self._submit(self._new_job(request_id, False), step)
        for request_id in view.stores:
            job = self._new_job(request_id, True)
            self._store_jobs.setdefault(request_id, set()).add(job)
            self._unsubmitted.append(job)
        sending: set[str] = set()
        recving: set[str] = set()
        for job in sorted(j for j, due in self._due.items() if due <= step):
            del self._due[job]
            request_id, is_store = self._jobs.pop(job)
            if not is_store:
                recving.add(request_id)
                continue
            jobs = self._store_jobs[request_id]
            jobs.discard(job)
            if not jobs and request_id in self._finished_waiting:
                self._finished_waiting.discard(request_id)
                sending.add(request_id)
                del self._store_jobs[request_id]
        for request_id in view.finished_req_ids:
            jobs = self._store_jobs.get(request_id)
            if jobs:
                self._finished_waiting.add(request_id)
            elif jobs is not None:
                sending.add(request_id)
                del self._store_jobs[request_id]
        return sending, recving


class JobWorker:
    """vLLM 0.33.0's ``OffloadingConnectorWorker`` bookkeeping with scripted transfer times.

    The order of one step is 0.33's worker's: ``handle_preemptions`` (this
    step's flushed store jobs are taken out of the step's stores; every store
    job deferred so far is submitted; the flushed jobs are waited for, i.e.
    land now), ``start_kv_transfers`` (this step's loads are submitted),
    ``prepare_store_kv`` (the other store jobs are deferred to the next step),
    then ``get_finished``: every job that landed is reported by id (the
    scheduler's ``completed_jobs``), and a landed load's request in
    ``finished_recving``. Stores never put a request in ``finished_sending``.

    Landing times follow :class:`ScriptedWorker`'s rules, drawn per (request,
    load or store, n-th transfer of that kind), so the same transfers land at
    the same steps whatever the job numbers.
    """

    def __init__(self, rule: dict[str, Any]) -> None:
        self._delays = ScriptedWorker(rule)
        self._due: dict[int, int] = {}
        self._kind: dict[int, tuple[str, bool]] = {}
        self._unsubmitted: list[int] = []
        self.completed: list[int] = []
        """The job ids that landed in the last step, in id order."""

    def _submit(self, job: int, step: int) -> None:
        request_id, is_store = self._kind[job]
        self._due[job] = step + self._delays._delay(request_id, is_store)

    def step(self, step: int, view: TierView) -> tuple[set[str], set[str]]:
        """Play the worker for one step; return ``(finished_sending, finished_recving)``."""
        jobs = view.jobs
        if jobs is None:
            raise RuntimeError("the 0.33 worker needs the connector's jobs (TierView.jobs)")
        flush = set(jobs.flush)
        for job, request_id in jobs.stores.items():
            self._kind[job] = (request_id, True)
        for job in sorted(flush & jobs.stores.keys()):
            self._unsubmitted.append(job)
        for job in self._unsubmitted:
            self._submit(job, step)
        self._unsubmitted.clear()
        for job in flush:
            if job in self._due:
                self._due[job] = min(self._due[job], step)
        for job, request_id in jobs.loads.items():
            self._kind[job] = (request_id, False)
            self._submit(job, step)
        self._unsubmitted.extend(j for j in jobs.stores if j not in flush)
        recving: set[str] = set()
        self.completed = sorted(j for j, due in self._due.items() if due <= step)
        jobs.completed = list(self.completed)
        for job in self.completed:
            del self._due[job]
            request_id, is_store = self._kind.pop(job)
            if not is_store:
                recving.add(request_id)
        return set(), recving


def block_names(spec: RequestSpec, block_size: int) -> list[str]:
    """Content names of every full block the request can ever have.

    Every sampled token is :data:`SAMPLED_TOKEN_ID`, so a request's blocks are
    fixed by its prompt; the name of block ``i`` chains a SHA-1 over blocks
    ``0 .. i`` (the same content gets the same name in any request).
    """
    tokens = list(spec["prompt_token_ids"]) + [SAMPLED_TOKEN_ID] * spec["max_tokens"]
    names: list[str] = []
    parent = b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        digest = hashlib.sha1(parent + repr(tokens[start : start + block_size]).encode())
        parent = digest.digest()
        names.append(digest.hexdigest()[:12])
    return names


class BlockNamer:
    """Maps a project's block hashes to :func:`block_names`, as requests reveal them."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._names: dict[str, list[str]] = {}
        self._seen: dict[str, int] = {}
        self.by_hash: dict[Any, str] = {}

    def add_request(self, spec: RequestSpec) -> None:
        self._names[spec["request_id"]] = block_names(spec, self.block_size)

    def observe(self, request_id: str, block_hashes: Iterable[Any]) -> None:
        """Learn the hashes a live request has computed since it was last observed."""
        hashes = list(block_hashes)
        seen = self._seen.get(request_id, 0)
        names = self._names[request_id]
        for i in range(seen, min(len(hashes), len(names))):
            self.by_hash.setdefault(hashes[i], names[i])
        self._seen[request_id] = len(hashes)

    def name(self, block_hash: Any) -> str:
        return self.by_hash.get(block_hash, "?")


class SchedulerAdapter(Protocol):
    """The four things the loop needs from a scheduler under test."""

    def add_request(self, spec: RequestSpec) -> None: ...

    def schedule(self) -> StepView: ...

    def progress(self, req_id: str) -> tuple[int, int]:
        """``(num_computed_tokens, num_tokens)`` of a scheduled request, right now."""
        ...

    def has_requests(self) -> bool:
        """The scheduler's ``has_requests()`` (asynchronous scheduling only)."""
        ...

    def update(
        self,
        view: StepView,
        sampled: dict[str, list[int]],
        transfers: tuple[set[str], set[str]] | None = None,
    ) -> list[str]:
        """Apply the step's sampled tokens (and the worker's report); return finished ids."""
        ...


def run(
    workload: Workload, adapter: SchedulerAdapter, max_steps: int = DEFAULT_MAX_STEPS
) -> Iterator[dict[str, Any]]:
    """Drive ``adapter`` through ``workload``, yielding one record per step."""
    by_step: dict[int, list[RequestSpec]] = {}
    for spec in workload["requests"]:
        by_step.setdefault(spec["arrival_step"], []).append(spec)
    total = len(workload["requests"])
    tier = workload["config"].get("tier")
    worker: ScriptedWorker | JobWorker | None = None
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
        transfers = None
        if tier:
            if view.tier is None:
                raise RuntimeError("the workload has a tier but the adapter reported none")
            if worker is None:
                # The connector decides the worker: 0.33.0's numbers its transfers
                # as jobs (its tier view carries them), 0.19.1's does not.
                jobs = view.tier.jobs is not None
                worker = (JobWorker if jobs else ScriptedWorker)(tier.get("completion", {}))
            transfers = worker.step(step, view.tier)
        finished = adapter.update(view, sampled, transfers)
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
        record.update(view.extra)
        if view.tier is not None and transfers is not None:
            record.update(_tier_fields(view.tier, transfers))
            if view.tier.jobs is not None:
                record.update(_job_fields(view.tier.jobs))
        yield record
        step += 1


Transfers = tuple[set[str], set[str]]
"""The worker's report of one step: ``(finished_sending, finished_recving)``."""


def _tier_fields(tier: TierView, transfers: Transfers) -> dict[str, Any]:
    """The record fields of a step's connector decisions and the worker's report."""
    return {
        "external_hits": tier.external_hits,
        "waiting_remote": tier.waiting_remote,
        "loads": tier.loads,
        "stores": tier.stores,
        "tier_evicted": tier.evicted,
        "finished_sending": sorted(transfers[0]),
        "finished_recving": sorted(transfers[1]),
    }


def _job_fields(jobs: TierJobs) -> dict[str, Any]:
    """The record fields of a step's jobs (vLLM 0.33.0's connector): the jobs the
    connector numbered and the ones the worker reported landed in that step."""
    return {
        "load_jobs": {str(j): r for j, r in jobs.loads.items()},
        "store_jobs": {str(j): r for j, r in jobs.stores.items()},
        "jobs_to_flush": sorted(jobs.flush),
        "completed_jobs": list(jobs.completed),
    }


def _empty_waits(config: dict[str, Any]) -> bool:
    """Whether the batch queue schedules again after an empty step while requests
    remain (vLLM 0.33.0's ``model_executed or has_requests()``; 0.19.1 applies the
    output in flight first). kvframe's switch ``empty_step_keeps_queue``."""
    return not str(config.get("vllm", "0.19.1")).startswith("0.19")


BATCH_QUEUE_SIZE = 2
"""vLLM's ``max_concurrent_batches`` with async scheduling and one engine."""


def run_async(
    workload: Workload, adapter: SchedulerAdapter, max_steps: int = DEFAULT_MAX_STEPS
) -> Iterator[dict[str, Any]]:
    """Drive ``adapter`` in vLLM's batch-queue order, one record per engine iteration.

    One iteration is ``step_with_batch_queue`` with a worker that never finishes
    before it is waited for: if the scheduler has requests, schedule a step (the
    requests that sample are fixed now) and queue it; return early if the queue
    has room and the step ran tokens (0.33.0: or requests remain); otherwise
    apply the oldest queued step's output. The adapter must have been built with
    asynchronous scheduling (``has_requests`` is the scheduler's own).
    """
    tier = workload["config"].get("tier")
    worker: ScriptedWorker | JobWorker | None = None
    by_step: dict[int, list[RequestSpec]] = {}
    for spec in workload["requests"]:
        by_step.setdefault(spec["arrival_step"], []).append(spec)
    total = len(workload["requests"])
    empty_waits = _empty_waits(workload["config"])
    # oldest first: (step, its view, its sampled tokens, the worker's report)
    queue: list[tuple[int, StepView, dict[str, list[int]], Transfers | None]] = []
    num_finished = 0
    num_scheduled = 0
    iteration = 0
    while num_finished < total:
        if iteration >= max_steps:
            raise StepCapExceeded(
                f"{workload['name']}: {total - num_finished} requests unfinished "
                f"after {max_steps} engine iterations"
            )
        for spec in by_step.pop(iteration, ()):
            adapter.add_request(spec)
        view: StepView | None = None
        scheduled_step: int | None = None
        transfers: Transfers | None = None
        early = False
        if adapter.has_requests():
            view = adapter.schedule()
            scheduled_step = num_scheduled
            num_scheduled += 1
            sampled: dict[str, list[int]] = {}
            for req_id, _ in view.scheduled:
                computed, num_tokens = adapter.progress(req_id)
                if computed >= num_tokens:
                    sampled[req_id] = [SAMPLED_TOKEN_ID]
            if tier:
                # The worker runs the step's connector metadata when the step is
                # handed to it (execute_model), in the order steps are queued; its
                # report travels with the step's output and is applied with it.
                if view.tier is None:
                    raise RuntimeError("the workload has a tier but the adapter reported none")
                if worker is None:
                    jobs = view.tier.jobs is not None
                    worker = (JobWorker if jobs else ScriptedWorker)(tier.get("completion", {}))
                transfers = worker.step(scheduled_step, view.tier)
            queue.append((scheduled_step, view, sampled, transfers))
            executed = bool(view.scheduled)
            early = len(queue) < BATCH_QUEUE_SIZE and (
                executed or (empty_waits and adapter.has_requests())
            )
        elif not queue:
            iteration += 1  # idle: nothing to schedule, nothing in flight
            continue
        applied_step: int | None = None
        finished: list[str] = []
        extra: dict[str, Any] = {}
        if not early:
            applied_step, done, done_sampled, done_transfers = queue.pop(0)
            finished = adapter.update(done, done_sampled, done_transfers)
            num_finished += len(finished)
            extra = done.extra
        record: dict[str, Any] = {
            "step": iteration,
            "scheduled_step": scheduled_step,
            "applied_step": applied_step,
            "scheduled": [[rid, n] for rid, n in view.scheduled] if view else [],
            "new": list(view.new) if view else [],
            "resumed": sorted(view.resumed) if view else [],
            "preempted": sorted(view.preempted) if view else [],
            "prefix_hits": dict(view.prefix_hits) if view else {},
            "free_blocks": view.free_blocks if view else None,
            "finished": sorted(finished),
        }
        if view is not None and view.blocks is not None:
            record["blocks"] = view.blocks
        if view is not None and view.tier is not None and transfers is not None:
            record.update(_tier_fields(view.tier, transfers))
            if view.tier.jobs is not None:
                record.update(_job_fields(view.tier.jobs))
        record.update(extra)
        yield record
        iteration += 1


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
            loop = run_async if workload["config"].get("async_scheduling") else run
            for record in loop(workload, adapter, max_steps):
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
