"""Prefill/decode disaggregation: kvframe's scheduler against vLLM's, step for step.

Each seed makes a script (:func:`disagg_script.make_script`) for a prefill
instance (``producer``: ``do_remote_decode`` requests that finish after one
token and hold their blocks until the send lands) and one for a decode
instance (``consumer``: ``do_remote_prefill`` requests that wait in
``WAITING_FOR_REMOTE_KVS`` while the blocks their own prefix cache missed
load), with seeded transfer delays, aborts (in flight included), decode-side
prefix hits and failed loads (``invalid_block_ids``, under
``kv_load_failure_policy`` ``recompute`` for even seeds and ``fail`` for odd).
The same script drives vLLM's own ``Scheduler`` (under its reference
interpreter, the connector built by vLLM's factory) and kvframe's; the step
records must be identical::

    python tools/differential/disagg.py --seeds 20 --vllm-version 0.19.1
    python tools/differential/disagg.py --seeds 20 --vllm-version 0.33.0
    python tools/differential/disagg.py --side kvframe --seed 3 --role consumer  # one side

A step's record: the tokens scheduled, the loads started (request: GPU blocks),
the sends started, each live request's status, computed tokens and block
table, the finished requests whose blocks are still held, the free blocks, and
the requests that finished with their reason. ``--async`` runs vLLM's
``AsyncScheduler`` and kvframe's in the engine's batch-queue order::

    python tools/differential/disagg.py --seeds 20 --vllm-version 0.33.0 --async
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import disagg_script

HERE = Path(__file__).resolve().parent
MAX_STEPS = 400
SAMPLED_TOKEN_ID = 7


def full_script(seed: int, role: str, async_scheduling: bool = False) -> dict[str, Any]:
    """The script of ``seed`` and ``role`` with its load-failure policy."""
    script = disagg_script.make_script(seed, role)
    script["failure_policy"] = "recompute" if seed % 2 == 0 else "fail"
    script["config"]["async_scheduling"] = async_scheduling
    return script


def run(script: dict[str, Any], side: Any) -> list[dict[str, Any]]:
    """Drive ``side`` (:class:`KvframeSide` or ``disagg_vllm.VllmSide``) through ``script``."""
    worker = disagg_script.ScriptedWorker(script)
    arrivals = sorted(script["requests"], key=lambda s: s["arrival_step"])
    aborts: dict[int, list[str]] = {}
    records = []
    for step in range(MAX_STEPS):
        _arrive(side, arrivals, aborts, step)
        state = side.state()
        if not arrivals and not aborts and not state["live"] and not worker.busy():
            # The end state too (an abort at the top of this step is in it).
            return [*records, {"step": step, "end": True, **state}]
        out, scheduled = side.schedule()
        loads = side.rules.take_started()
        worker.started(step, loads, [])
        sampled = {}
        for request_id in scheduled:
            computed, num_tokens = side.progress(request_id)
            if computed >= num_tokens:
                sampled[request_id] = [SAMPLED_TOKEN_ID]
        landed = worker.landed(step)
        finished = side.update(out, sampled, landed)
        sends = side.rules.sends_started
        worker.started(step, {}, sends)
        records.append(
            {
                "step": step,
                "scheduled": sorted(scheduled.items()),
                "loads": loads,
                "sends": list(sends),
                "landed": landed,
                "finished": finished,
                **side.state(),
            }
        )
        sends.clear()
    raise RuntimeError(f"seed {script['seed']} {script['role']}: no end after {MAX_STEPS} steps")


BATCH_QUEUE_SIZE = 2
"""vLLM's ``max_concurrent_batches`` with async scheduling and one engine."""


def run_async(script: dict[str, Any], side: Any, version: str) -> list[dict[str, Any]]:
    """:func:`run` in vLLM's batch-queue order (``stepping.run_async``'s rule): a step's
    output, and the worker's transfer report that travels with it, is applied one
    engine iteration late; the transfer clock counts scheduled steps."""
    worker = disagg_script.ScriptedWorker(script)
    arrivals = sorted(script["requests"], key=lambda s: s["arrival_step"])
    aborts: dict[int, list[str]] = {}
    empty_waits = not version.startswith("0.19")  # switch empty_step_keeps_queue
    queue: list[tuple[Any, dict[str, list[int]], Any]] = []
    records: list[dict[str, Any]] = []
    clock = 0
    for iteration in range(MAX_STEPS):
        _arrive(side, arrivals, aborts, iteration)
        state = side.state()
        if not (arrivals or aborts or state["live"] or worker.busy() or queue):
            return [*records, {"step": iteration, "end": True, **state}]
        record: dict[str, Any] = {"step": iteration, "scheduled": [], "loads": {}}
        early = False
        if side.has_requests() or worker.busy():
            out, scheduled = side.schedule()
            record["loads"] = loads = side.rules.take_started()
            worker.started(clock, loads, [])
            sampled = {}
            for request_id in scheduled:
                computed, num_tokens = side.progress(request_id)
                if computed >= num_tokens:
                    sampled[request_id] = [SAMPLED_TOKEN_ID]
            queue.append((out, sampled, worker.landed(clock)))
            clock += 1
            record["scheduled"] = sorted(scheduled.items())
            early = len(queue) < BATCH_QUEUE_SIZE and (
                bool(scheduled) or (empty_waits and side.has_requests())
            )
        record.update(sends=[], landed=None, finished=[])
        if not early and queue:
            out, sampled, landed = queue.pop(0)
            record["finished"] = side.update(out, sampled, landed)
            record["landed"] = landed
            record["sends"] = sends = list(side.rules.sends_started)
            side.rules.sends_started.clear()
            worker.started(clock, {}, sends)
        records.append({**record, **side.state()})
    raise RuntimeError(f"seed {script['seed']} {script['role']}: no end after {MAX_STEPS} steps")


def _arrive(
    side: Any, arrivals: list[dict[str, Any]], aborts: dict[int, list[str]], step: int
) -> None:
    """Add the requests arriving at ``step``, then abort the ones due."""
    while arrivals and arrivals[0]["arrival_step"] == step:
        spec = arrivals.pop(0)
        side.add(spec)
        if spec["abort_after"] is not None:
            aborts.setdefault(step + spec["abort_after"], []).append(spec["request_id"])
    for request_id in aborts.pop(step, []):
        side.abort(request_id)


class KvframeSide:
    """kvframe's scheduler for one script, with the scripted connector."""

    def __init__(self, script: dict[str, Any], vllm_version: str) -> None:
        from kvframe_driver import _policy

        from kvframe.core.factory import make_scheduler
        from kvframe.core.scheduler_config import SchedulerConfig
        from kvframe.domain.request import Request, RequestStatus

        self._Request = Request
        self._status = RequestStatus
        config = SchedulerConfig(
            **script["config"],
            fidelity=vllm_version,
            kv_load_failure_policy=script["failure_policy"],
        )
        self.rules = disagg_script.NixlRules()
        self.scheduler = make_scheduler(
            config, _policy("fcfs"), connector=_KvframeConnector(self.rules, RequestStatus)
        )

    def add(self, spec: dict[str, Any]) -> None:
        request = self._Request(
            spec["request_id"],
            list(spec["prompt_token_ids"]),
            spec["max_tokens"],
            arrival_time=float(spec["arrival_step"]),
            block_hasher=self.scheduler.block_hasher,
        )
        params = spec["params"]
        request.kv_transfer_params = dict(params) if params is not None else None
        self.scheduler.add_request(request)

    def abort(self, request_id: str) -> None:
        self.scheduler.finish_requests(request_id, self._status.FINISHED_ABORTED)

    def has_requests(self) -> bool:
        return self.scheduler.has_requests()

    def schedule(self) -> tuple[Any, dict[str, int]]:
        out = self.scheduler.schedule()
        return out, dict(out.num_scheduled_tokens)

    def state(self) -> dict[str, Any]:
        s = self.scheduler
        kv = s.kv_cache_manager
        live = {
            rid: [r.status.name, r.num_computed_tokens, list(kv.get_block_ids(rid))]
            for rid, r in sorted(s.requests.items())
        }
        held = sorted({*s._awaiting_store, *s._awaiting_load})
        return {"live": live, "held": held, "free_blocks": kv.num_free_blocks}

    def progress(self, request_id: str) -> tuple[int, int]:
        r = self.scheduler.requests[request_id]
        return r.num_computed_tokens, r.num_tokens

    def update(
        self,
        out: Any,
        sampled: dict[str, list[int]],
        landed: tuple[list[str], list[str], list[int]],
    ) -> list[list[Any]]:
        from kvframe.core.scheduler_output import KVConnectorOutput, ModelRunnerOutput

        sending, recving, invalid = landed
        finished = self.scheduler.update_from_output(
            out,
            ModelRunnerOutput(
                sampled_token_ids=sampled,
                kv_connector_output=KVConnectorOutput(
                    finished_sending=set(sending),
                    finished_recving=set(recving),
                    invalid_block_ids=set(invalid),
                ),
            ),
        )
        return sorted([r.request_id, r.get_finished_reason()] for r in finished)


class _KvframeConnector:
    """kvframe's ``SchedulerConnector`` over the shared NIXL rules."""

    def __init__(self, rules: disagg_script.NixlRules, status: Any) -> None:
        self.rules = rules
        self._length_capped = status.FINISHED_LENGTH_CAPPED

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Any:
        return self.rules.matched(
            request.kv_transfer_params, request.num_prompt_tokens, num_computed_tokens
        )

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        unhashed = [b.block_id for b in blocks if b.block_hash is None]
        self.rules.after_alloc(
            request.request_id, request.kv_transfer_params, unhashed, num_external_tokens
        )

    def build_connector_meta(self, scheduler_output: Any) -> object:
        return self.rules.take_meta()

    def update_connector_output(self, output: Any) -> None:
        pass

    def request_finished(self, request: Any, block_ids: Any) -> bool:
        return self.rules.finished(
            request.request_id,
            request.kv_transfer_params,
            request.status == self._length_capped,
            list(block_ids),
        )

    def take_events(self) -> list[Any]:
        return []


def run_side(
    side_name: str, seed: int, role: str, vllm_version: str, async_scheduling: bool = False
) -> list[dict[str, Any]]:
    """The records of one side for one script (in this interpreter)."""
    script = full_script(seed, role, async_scheduling)
    if side_name == "vllm":
        import disagg_vllm

        side: Any = disagg_vllm.VllmSide(script, vllm_version)
    else:
        side = KvframeSide(script, vllm_version)
    if async_scheduling:
        return run_async(script, side, vllm_version)
    return run(script, side)


def _side_in(
    python: str | Path, side: str, seeds: int, version: str, async_scheduling: bool = False
) -> dict[str, Any]:
    """Every script's records of ``side``, run by ``python`` in one process (JSON
    round trip on both sides, so tuples and lists compare alike)."""
    import compare as harness

    path = [*harness.tree_paths(), str(HERE), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), VLLM_LOGGING_LEVEL="ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{side}.json"
        cmd = [str(python), str(HERE / "disagg.py"), "--side", side, "--seeds", str(seeds)]
        cmd += ["--vllm-version", version, "--out", str(out)]
        cmd += ["--async"] if async_scheduling else []
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{side} side failed:\n{done.stderr[-4000:]}")
        return json.loads(out.read_text())


def run_both(
    seeds: int,
    version: str,
    vllm_python: str | Path | None = None,
    *,
    async_scheduling: bool = False,
) -> dict[str, tuple[list[Any], list[Any]]]:
    """Every script's ``(vLLM records, kvframe records)`` for ``seeds`` seeds, both roles."""
    import compare as harness

    python = vllm_python or harness.find_vllm_python(version=version)
    if python is None:
        raise RuntimeError(f"no vLLM {version} reference interpreter (see compare.py --help)")
    theirs = _side_in(python, "vllm", seeds, version, async_scheduling)
    ours = _side_in(sys.executable, "kvframe", seeds, version, async_scheduling)
    return {key: (theirs[key], ours[key]) for key in sorted(theirs)}


def compare(seeds: int, version: str, async_scheduling: bool = False) -> int:
    """Run both sides over ``seeds`` seeds and both roles; print the first difference."""
    runs = run_both(seeds, version, async_scheduling=async_scheduling)
    bad = 0
    for key, (a, b) in runs.items():
        same = a == b
        print(f"{key:16} {'identical' if same else 'DIFFERENT':10} {len(a):3} steps  {summary(a)}")
        if not same:
            bad += 1
            step = next(
                (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)),
            )
            print("  vLLM   :", json.dumps(a[step] if step < len(a) else None))
            print("  kvframe:", json.dumps(b[step] if step < len(b) else None))
    totals: dict[str, int] = {}
    for a, _ in runs.values():
        for field in summary(a).split():
            name, value = field.split("=")
            totals[name] = totals.get(name, 0) + int(value)
    print("totals:", " ".join(f"{k}={v}" for k, v in totals.items()))
    print(f"{len(runs) - bad} identical, {bad} different (vLLM {version})")
    return 1 if bad else 0


def summary(records: list[dict[str, Any]]) -> str:
    """What a script exercised: loads (with a decode-side prefix hit: fewer blocks
    loaded than the request holds), sends, failed loads, requests failed by them,
    and finished requests whose blocks a transfer in flight held (aborts in flight
    on the decode side, sends on the prefill side)."""
    records = [r for r in records if "end" not in r]
    loads = sum(len(r["loads"]) for r in records)
    hits = sum(
        1
        for r in records
        for rid, blocks in r["loads"].items()
        if rid in r["live"] and len(blocks) < len(r["live"][rid][2])
    )
    sends = sum(len(r["sends"]) for r in records)
    invalid = sum(1 for r in records if r["landed"] and r["landed"][2])
    errors = sum(1 for r in records for f in r["finished"] if f[1] == "error")
    held = len({rid for r in records for rid in r["held"]})
    return (
        f"loads={loads} prefix-hit-loads={hits} sends={sends} failed-loads={invalid} "
        f"errors={errors} held-after-finish={held}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("vllm", "kvframe"))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--role", choices=disagg_script.ROLES)
    parser.add_argument("--vllm-version", default="0.19.1", choices=("0.19.1", "0.33.0"))
    parser.add_argument("--out", type=Path, help="with --side: write the records here")
    parser.add_argument("--async", dest="async_scheduling", action="store_true")
    args = parser.parse_args(argv)
    if args.side is None:
        return compare(args.seeds, args.vllm_version, args.async_scheduling)
    seeds = [args.seed] if args.seed is not None else range(args.seeds)
    roles = [args.role] if args.role else disagg_script.ROLES
    result = {
        f"{role}-seed{seed}": run_side(
            args.side, seed, role, args.vllm_version, args.async_scheduling
        )
        for seed in seeds
        for role in roles
    }
    text = json.dumps(result)
    if args.out is not None:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
