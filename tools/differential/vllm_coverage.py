"""Which lines of vLLM's scheduling code the differential workloads execute.

Runs under the vLLM reference interpreter::

    .vllm-reference-venv/bin/python tools/differential/vllm_coverage.py [NAME ...]
        [--num-requests 240] [--seed 0]

and prints, for each vLLM function the harness is meant to pin down, the
executable lines no workload reached. A zero-difference comparison only
vouches for the rules the workloads exercise; this shows which those are. Lines
for features kvframe leaves out (encoder inputs, LoRA, KV connectors,
speculative decoding, async scheduling, Mamba) are expected in the list.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("PYTHONHASHSEED", "0")

import stepping
from vllm_driver import VllmAdapter
from workloads import DEFAULT_NUM_REQUESTS, POLICIES, WORKLOADS, all_workloads


def _targets() -> list[types.FunctionType]:
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler

    return [
        Scheduler.schedule,
        Scheduler._preempt_request,
        Scheduler.update_from_output,
        KVCacheManager.get_computed_blocks,
        KVCacheManager.can_fit_full_sequence,
        KVCacheManager.allocate_slots,
        BlockPool.get_new_blocks,
        BlockPool.cache_full_blocks,
        BlockPool.touch,
        BlockPool.free_blocks,
    ]


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _executable_lines(func: types.FunctionType) -> set[int]:
    lines = set()
    for code in _code_objects(func.__code__):
        lines.update(line for _, _, line in code.co_lines() if line is not None)
    lines.discard(func.__code__.co_firstlineno)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--num-requests", type=int, default=DEFAULT_NUM_REQUESTS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    targets = _targets()
    files = {inspect.getsourcefile(f) for f in targets}
    hit: dict[str, set[int]] = {f: set() for f in files if f}

    def local(frame: types.FrameType, event: str, arg: object) -> object:
        if event == "line":
            hit[frame.f_code.co_filename].add(frame.f_lineno)
        return local

    def tracer(frame: types.FrameType, event: str, arg: object) -> object:
        return local if frame.f_code.co_filename in hit else None

    for workload in all_workloads(args.names, POLICIES, args.num_requests, args.seed):
        adapter = VllmAdapter(workload["config"])
        sys.settrace(tracer)
        try:
            for _ in stepping.run(workload, adapter):
                pass
        finally:
            sys.settrace(None)

    for func in targets:
        path = inspect.getsourcefile(func) or ""
        source = Path(path).read_text().splitlines()
        missed = sorted(_executable_lines(func) - hit[path])
        total = len(_executable_lines(func))
        print(f"== {func.__qualname__} ({os.path.basename(path)}): {total - len(missed)}/{total}")
        for line in missed:
            print(f"  {line:5d}  {source[line - 1].rstrip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
