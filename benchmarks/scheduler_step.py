"""Scheduler step time: kvframe vs vLLM V1, decode steps, small and large KV pools.

    .venv/bin/python benchmarks/scheduler_step.py [--work 81920] [--vllm-python PATH] [--no-vllm]

Times ``schedule()`` + ``update_from_output()`` with 16 / 256 / 1024 running
requests that have finished their prefill and each decode one token per step
(prefix caching on, so every 16th step each request fills and hashes a block).
Each size runs with a pool that just fits and with a 262,144-block pool: a step
must cost the same in both (no scan over free blocks), and grow linearly with
the running requests. When the vLLM reference interpreter exists (found as in
``tools/differential/compare.py``), vLLM 0.19.1's Scheduler is timed in a
subprocess in the same run, one side after the other so they never share the
two cores, and the table shows vLLM/kvframe. Takes about a minute.
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

HARNESS = Path(__file__).resolve().parents[1] / "tools" / "differential"
sys.path.insert(0, str(HARNESS))

import bench_common  # noqa: E402  (stdlib-only harness modules, shared with the vLLM side)
from compare import find_vllm_python  # noqa: E402

RUNNING = (16, 256, 1024)


def steps_for(running: int, work: int) -> int:
    """Timed steps for a case: about ``work`` request-steps, 9 to 64 rounds of 16.

    Small batches get more rounds so that their median is as stable as the
    large ones' on a shared machine, at about the same cost per case.
    """
    return 16 * max(9, min(64, work // (16 * running)))


def cases(work: int) -> list[dict[str, Any]]:
    out = []
    for n in RUNNING:
        steps = steps_for(n, work)
        for pool, blocks in (
            ("small", bench_common.small_pool(n, steps)),
            ("large", bench_common.LARGE_POOL),
        ):
            out.append({"running": n, "pool": pool, "num_gpu_blocks": blocks, "steps": steps})
    return out


def run_kvframe_case(case: dict[str, Any]) -> dict[str, float]:
    from kvframe_fcfs import FCFSPolicy

    from kvframe.core.scheduler import Scheduler
    from kvframe.core.scheduler_config import SchedulerConfig
    from kvframe.core.scheduler_output import ModelRunnerOutput
    from kvframe.domain.request import Request

    cfg = bench_common.case_config(case["running"], case["num_gpu_blocks"])
    config = SchedulerConfig(
        **{k: v for k, v in cfg.items() if k != "policy"},
        hash_seed=0,
    )
    scheduler = Scheduler(config, FCFSPolicy())
    for spec in bench_common.case_requests(case["running"], case["steps"]):
        scheduler.add_request(
            Request(
                spec["request_id"],
                spec["prompt_token_ids"],
                spec["max_tokens"],
                arrival_time=spec["arrival_time"],
                priority=spec["priority"],
                block_hasher=scheduler.block_hasher,
            )
        )

    def progress(rid: str) -> tuple[int, int]:
        req = scheduler.requests[rid]
        return req.num_computed_tokens, req.num_tokens

    return bench_common.time_decode_steps(
        scheduler,
        case["steps"],
        lambda out, sampled: ModelRunnerOutput(sampled_token_ids=sampled),
        progress,
    )


def run_vllm_cases(python: Path, todo: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "vllm.json"
        proc = subprocess.run(
            [str(python), str(HARNESS / "vllm_step_bench.py"), str(result_path)],
            input=json.dumps(todo),
            capture_output=True,
            text=True,
            cwd=HARNESS,
            env=dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", PYTHONHASHSEED="0"),
        )
        if proc.returncode != 0:
            raise RuntimeError(f"vLLM benchmark failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
        return json.loads(result_path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work",
        type=int,
        default=81_920,
        help="request-steps timed per case (split into rounds of 16 steps)",
    )
    parser.add_argument("--vllm-python", help="vLLM reference interpreter")
    parser.add_argument("--no-vllm", action="store_true", help="time kvframe only")
    args = parser.parse_args(argv)

    todo = cases(args.work)
    kv = [{**case, **run_kvframe_case(case)} for case in todo]
    vllm_python = None if args.no_vllm else find_vllm_python(args.vllm_python)
    vl = run_vllm_cases(vllm_python, todo) if vllm_python else None

    print(
        "scheduler step = schedule() + update_from_output() thread CPU time, pure decode, "
        "prefix caching on, median round of 16 steps"
    )
    header = (
        f"{'running':>7}  {'pool':>5}  {'blocks':>7}  {'rounds':>6}"
        f"  {'kvframe us/step':>15}  {'us/req':>6}"
    )
    if vl:
        header += f"  {'vLLM us/step':>12}  {'us/req':>6}  {'vLLM/kvframe':>12}"
    print(header)
    print("-" * len(header))
    for i, k in enumerate(kv):
        line = (
            f"{k['running']:>7}  {k['pool']:>5}  {k['num_gpu_blocks']:>7}  "
            f"{k['steps'] // 16:>6}  {k['step_us']:>15.1f}  {k['step_us'] / k['running']:>6.2f}"
        )
        if vl:
            v = vl[i]
            line += (
                f"  {v['step_us']:>12.1f}  {v['step_us'] / v['running']:>6.2f}"
                f"  {v['step_us'] / k['step_us']:>12.2f}"
            )
        print(line)

    print()
    sides = [("kvframe", kv)] + ([("vLLM", vl)] if vl else [])
    for name, rows in sides:
        by = {(r["running"], r["pool"]): r["step_us"] for r in rows}
        pool_ratios = ", ".join(f"{n}: {by[n, 'large'] / by[n, 'small']:.2f}" for n in RUNNING)
        per_req = [by[n, "small"] / n for n in RUNNING]
        print(
            f"{name}: large/small pool step-time ratio (1.0 = no growth with pool size): "
            f"{pool_ratios}"
        )
        print(
            f"{name}: us per running request at {'/'.join(map(str, RUNNING))}: "
            + " / ".join(f"{x:.2f}" for x in per_req)
            + f"  (1024 vs 16 per-request ratio {per_req[-1] / per_req[0]:.2f}; 1.0 = linear)"
        )
    if not vl:
        print("vLLM: not timed (no reference interpreter; see docs/fidelity.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
