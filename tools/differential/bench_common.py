"""The decode-step benchmark, written once for both schedulers (stdlib only).

``benchmarks/scheduler_step.py`` runs it in-process on kvframe and, through
``vllm_step_bench.py``, in a vLLM-venv subprocess on vLLM's Scheduler. Both
sides build the same requests, prefill them untimed, then time only
``schedule()`` and ``update_from_output()`` of pure-decode steps; the
model-runner output each step needs is built outside the timed region, because
in an engine the worker builds it, not the scheduler.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable
from typing import Any

from workloads import SAMPLED_TOKEN_ID

BLOCK_SIZE = 16
PROMPT_LEN = 40
"""Two full blocks and a partial one: decode crosses a block boundary every 16 steps."""
WARMUP_STEPS = 8
MAX_MODEL_LEN = 4096
LARGE_POOL = 262_144
"""4M token slots: a pool far larger than the running set, to show step cost
does not grow with the number of free blocks."""


def small_pool(running: int, steps: int) -> int:
    """Just enough blocks (plus the null block and a little slack) for the run."""
    tokens = PROMPT_LEN + WARMUP_STEPS + steps + 2
    return running * -(-tokens // BLOCK_SIZE) + 1 + 8


def case_config(running: int, num_gpu_blocks: int) -> dict[str, Any]:
    """A workload-style config (``workloads.py`` schema) for one benchmark case."""
    return {
        "block_size": BLOCK_SIZE,
        "num_gpu_blocks": num_gpu_blocks,
        "max_num_batched_tokens": max(8192, running),
        "max_num_seqs": running,
        "max_model_len": MAX_MODEL_LEN,
        "long_prefill_token_threshold": 0,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "reserve_full_sequence": True,
        "policy": "fcfs",
    }


def case_requests(running: int, steps: int) -> list[dict[str, Any]]:
    """Distinct prompts (no prefix sharing) that outlive the timed steps."""
    rng = random.Random(f"scheduler-step:{running}")
    return [
        {
            "request_id": f"b{i:05d}",
            "prompt_token_ids": [rng.randint(10, 50_000) for _ in range(PROMPT_LEN)],
            "max_tokens": WARMUP_STEPS + steps + 64,
            "arrival_step": 0,
            "arrival_time": float(i),
            "priority": 0,
        }
        for i in range(running)
    ]


def time_decode_steps(
    scheduler: Any,
    steps: int,
    make_runner_output: Callable[[Any, dict[str, list[int]]], Any],
    progress: Callable[[str], tuple[int, int]],
) -> dict[str, float]:
    """Prefill untimed until every request decodes, then time ``steps`` steps.

    Time is the thread's CPU time, not wall time: the scheduler is
    single-threaded, and on a shared machine wall time mostly measures the
    neighbours. The timed steps are split into rounds of ``BLOCK_SIZE`` steps — each round
    holds exactly one step where every request fills a block and allocates the
    next — and the per-step mean of the *median* round is reported, so one
    descheduled round (the machine is shared) does not move the result.
    Raises if a timed step is not a pure decode of every running request (a
    preemption or a leftover prefill would make the number meaningless).
    """

    clock = time.thread_time  # CPU time: other processes on a shared box do not count

    def one_step() -> tuple[float, float, dict[str, int]]:
        t0 = clock()
        out = scheduler.schedule()
        t1 = clock()
        scheduled = dict(out.num_scheduled_tokens)
        sampled = {}
        for rid in scheduled:
            computed, total = progress(rid)
            if computed >= total:
                sampled[rid] = [SAMPLED_TOKEN_ID]
        runner_output = make_runner_output(out, sampled)
        t2 = clock()
        scheduler.update_from_output(out, runner_output)
        t3 = clock()
        return t1 - t0, t3 - t2, scheduled

    # Prefill, then a few decode steps, untimed.
    for _ in range(10_000):
        _, _, scheduled = one_step()
        if scheduled and all(n == 1 for n in scheduled.values()):
            break
    for _ in range(WARMUP_STEPS):
        one_step()
    num_running = len(scheduled)

    rounds: list[tuple[float, float]] = []
    gc.collect()
    gc.freeze()  # as vLLM's engine core does after start-up
    try:
        for _ in range(max(1, steps // BLOCK_SIZE)):
            sched_s = update_s = 0.0
            for _ in range(BLOCK_SIZE):
                s, u, scheduled = one_step()
                sched_s += s
                update_s += u
                if len(scheduled) != num_running or any(n != 1 for n in scheduled.values()):
                    raise RuntimeError("a timed step was not a pure decode of every request")
            rounds.append((sched_s / BLOCK_SIZE, update_s / BLOCK_SIZE))
    finally:
        gc.unfreeze()
    rounds.sort(key=sum)
    sched_mean, update_mean = rounds[len(rounds) // 2]
    return {
        "running": num_running,
        "schedule_us": sched_mean * 1e6,
        "update_us": update_mean * 1e6,
        "step_us": (sched_mean + update_mean) * 1e6,
        "best_step_us": sum(rounds[0]) * 1e6,
    }
