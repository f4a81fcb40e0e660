"""vLLM's side of ``benchmarks/scheduler_step.py`` (runs under the vLLM venv).

Reads a JSON list of cases ``[{"running": N, "num_gpu_blocks": B, "steps": S}, ...]``
on stdin, writes a JSON list of timings (``bench_common.time_decode_steps``)
to the file named by its one argument (vLLM logs to stdout). The Scheduler is
built exactly as the differential driver builds it.
"""

from __future__ import annotations

import json
import sys

import bench_common
from vllm_driver import VllmAdapter


def run_case(case: dict[str, int]) -> dict[str, float]:
    adapter = VllmAdapter(bench_common.case_config(case["running"], case["num_gpu_blocks"]))
    for spec in bench_common.case_requests(case["running"], case["steps"]):
        adapter.add_request(spec)
    ModelRunnerOutput = adapter._ModelRunnerOutput

    def runner_output(out: object, sampled: dict[str, list[int]]) -> object:
        req_ids = list(out.num_scheduled_tokens)  # type: ignore[attr-defined]
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=[sampled.get(rid, []) for rid in req_ids],
        )

    return bench_common.time_decode_steps(
        adapter.scheduler, case["steps"], runner_output, adapter.progress
    )


def main() -> int:
    cases = json.load(sys.stdin)
    results = [{**case, **run_case(case)} for case in cases]
    with open(sys.argv[1], "w") as fh:
        json.dump(results, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
