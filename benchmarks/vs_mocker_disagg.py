"""A disaggregated P:D fleet in kvframe beside Dynamo's mocker disaggregated replay.

    # benchmark-only: the mocker lives in its own venv, never in kvframe's
    export KVFRAME_MOCKER_PYTHON=/work/mocker-venv/bin/python
    .venv/bin/python benchmarks/vs_mocker_disagg.py --prefill 2 --decode 6 --limit 1500

The first ``--limit`` requests of the Mooncake conversation trace, replayed by
Dynamo's mocker (``run_mocker_trace_replay`` with ``num_prefill_workers=P``,
``num_decode_workers=D``, ``router_mode="round_robin"``, the vLLM backend with
the engine settings of ``vs_mocker.py`` on every worker) and by a kvframe fleet
(``kvframe run --replicas P+D --disagg P:D --router round-robin``, 400 Gb/s
RDMA). Printed side by side: TTFT, TPOT and end-to-end latency (mean, p50,
p90), the prompt tokens the decode side found in its own prefix cache, and the
time from the prefill's end to the decode admission. The two sides have
different step-time models (the mocker's vLLM performance model, kvframe's
preset cost model), so their absolute times differ as in ``vs_mocker.py``; what
compares is the shape (which part dominates, how the decode side reuses).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from vs_mocker import (
    INSTALL_HINT,
    MAX_MODEL_LEN,
    MOCKER_PYTHON_ENV,
    TRACE_CHUNK_TOKENS,
    _plain_trace,
)

BLOCKS = 27_770  # the default preset's usable pool (kvframe adds the null block)
BATCHED, SEQS = 8192, 256

_MOCKER = """
import json, sys
from dynamo._core import run_mocker_trace_replay
trace, p, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
engine, chunk = json.loads(sys.argv[4]), int(sys.argv[5])
result = run_mocker_trace_replay(
    [trace], prefill_engine_args={"engine": {**engine, "worker_type": "prefill"}},
    decode_engine_args={"engine": {**engine, "worker_type": "decode"}},
    num_prefill_workers=p, num_decode_workers=d, replay_mode="offline",
    router_mode="round_robin", trace_block_size=chunk, capture_per_request=True)
rows = [[r["ttft_ms"] / 1e3, r["e2e_latency_ms"] / 1e3,
         (r["e2e_latency_ms"] - r["ttft_ms"]) / 1e3 / max(1, r["output_length"] - 1),
         r["decode_reused_input_tokens"], (r["decode_admit_ms"] - r["source_held_ms"]) / 1e3,
         r["output_length"]] for r in result.per_request]
print("ROWS " + json.dumps(rows))
"""
ENGINE = {
    "backend": "vllm",
    "block_size": 16,
    "num_gpu_blocks": BLOCKS,
    "max_num_batched_tokens": BATCHED,
    "max_num_seqs": SEQS,
    "max_model_len": MAX_MODEL_LEN,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "preemption_mode": "lifo",
}


def mocker_rows(python: str, trace: Path, p: int, d: int) -> list[list[float]]:
    """Per request: TTFT, e2e, TPOT, decode-side reused tokens, handoff seconds."""
    done = subprocess.run(
        [python, "-c", _MOCKER, str(trace), str(p), str(d), json.dumps(ENGINE),
         str(TRACE_CHUNK_TOKENS)],
        capture_output=True, text=True, check=True, timeout=3600,
    )  # fmt: skip
    line = next(x for x in done.stdout.splitlines() if x.startswith("ROWS "))
    return json.loads(line[5:])


def kvframe_rows(trace: str, limit: int, p: int, d: int) -> list[list[float]]:
    """The same figures from a kvframe disaggregated fleet."""
    from kvframe.engine import EngineConfig
    from kvframe.fleet import Fleet
    from kvframe.workloads import load_workload

    config = EngineConfig(
        num_gpu_blocks=BLOCKS + 1, max_num_batched_tokens=BATCHED, max_num_seqs=SEQS,
        replicas=p + d, disagg=f"{p}:{d}",
    )  # fmt: skip
    summary = (
        Fleet.from_config(config, "round-robin").run(load_workload(trace, limit=limit)).summary
    )
    rows = []
    for r in summary.requests:
        if r.time_to_first_token_seconds is None or r.e2e_request_latency_seconds is None:
            continue
        rows.append(
            [
                r.time_to_first_token_seconds,
                r.e2e_request_latency_seconds,
                r.time_per_output_token_seconds or 0.0,
                r.num_cached_tokens,
                None,
                r.num_output_tokens,
            ]
        )
    wait = summary.distributions["disagg_ttft_decode_wait_seconds"]
    move = summary.distributions["disagg_ttft_transfer_seconds"]
    rows.append(["handoff", (wait.mean if wait else 0.0) + (move.mean if move else 0.0)])
    return rows


def _stats(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[int(0.9 * (len(values) - 1))]
    return f"{statistics.fmean(values):9.4f} {statistics.median(values):9.4f} {p90:9.4f}"


def report(name: str, rows: list[list[Any]]) -> None:
    handoff = None
    if rows and rows[-1][0] == "handoff":
        handoff = rows.pop()[1]
    print(f"{name}: {len(rows)} requests")
    print(f"  {'':28}{'mean':>9} {'p50':>9} {'p90':>9}")
    print(f"  {'TTFT (s)':28}{_stats([r[0] for r in rows])}")
    print(f"  {'TPOT (s, >1 token)':28}{_stats([r[2] for r in rows if r[5] > 1])}")
    print(f"  {'e2e (s)':28}{_stats([r[1] for r in rows])}")
    print(f"  {'decode-side cached tokens':28}{statistics.fmean(r[3] for r in rows):9.1f}")
    if handoff is None:
        handoff = statistics.fmean(r[4] for r in rows)
    print(f"  {'prefill end -> decode (s)':28}{handoff:9.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefill", type=int, default=2)
    parser.add_argument("--decode", type=int, default=6)
    parser.add_argument("--limit", type=int, default=1500)
    parser.add_argument("--trace", default="mooncake:conversation")
    args = parser.parse_args()
    python = os.environ.get(MOCKER_PYTHON_ENV)
    if not python:
        raise SystemExit(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="vs-mocker-disagg-") as folder:
        trace, _ = _plain_trace(args.trace, args.limit, Path(folder))
        mocker = mocker_rows(python, trace, args.prefill, args.decode)
    ours = kvframe_rows(args.trace, args.limit, args.prefill, args.decode)
    print(f"{args.prefill}P:{args.decode}D, first {args.limit} requests of {args.trace}")
    report("Dynamo mocker 1.6.1", mocker)
    report("kvframe --disagg", ours)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
