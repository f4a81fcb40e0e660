"""Throughput of the offload tier's ledger (the ``cpu`` spec's manager) in batches of 32.

    .venv/bin/python benchmarks/offload_manager.py [--quick] [--no-vllm]

A batch is 32 offloaded-block hashes (one request's worth of new blocks). For
tiers of 10k and 1M slots, with ``lru`` and ``arc``:

* ``store (free)``: ``prepare_store`` + ``complete_store`` of 32 new hashes
  while the tier still has free slots (filling it from empty);
* ``store (evict 32)``: the same on a full tier, so each batch evicts 32;
* ``lookup (32 hits)``: ``lookup`` of 32 ready hashes;
* ``load``: ``prepare_load`` + ``complete_load`` of 32 ready hashes.

Baselines, in the same process and interleaved: ``store`` is an ``OrderedDict``
LRU doing the minimum a store must (32 ``popitem`` when full, 32 inserts, 32
status writes); ``lookup``/``load`` loop over the 32 hashes with ``dict.get``
and a status check (and a ref-count increment and decrement). ``ratio`` is
manager / baseline. When the vLLM reference venv exists, vLLM 0.19.1's
``CPUOffloadingManager`` (its files loaded in-process, see
``eviction_policies.load_vllm``) runs the same batches: ``vs vLLM`` = kvframe
/ vLLM. Each operation runs in chunks with the implementations alternating
chunk by chunk; figures are microseconds per batch and blocks per second of
the best chunk over all repeats.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BATCH = 32
SIZES = (10_000, 1_000_000)
CHUNKS = 10
OPS = ("store (free)", "store (evict 32)", "lookup (32 hits)", "load")


def _load_sibling(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def key(i: int) -> bytes:
    return i.to_bytes(8, "big")


def kvframe_manager(policy: str, num_blocks: int) -> Any:
    from kvframe_cpu_offload import CPUOffloadSpec

    from kvframe.contract.offload import OffloadContext

    context = OffloadContext(gpu_block_size=16, kv_bytes_per_token=1, num_gpu_blocks=1)
    return CPUOffloadSpec(capacity=num_blocks * 16, eviction=policy).create_manager(context)


def vllm_manager_factory() -> Callable[[str, int], Any] | None:
    policies = _load_sibling("eviction_policies")
    loaded = policies.load_vllm(
        "abstract",
        "mediums",
        "cpu.policies.abstract",
        "cpu.policies.lru",
        "cpu.policies.arc",
        "cpu.manager",
    )
    if not loaded:
        return None
    cls = loaded["cpu.manager"].CPUOffloadingManager

    def build(policy: str, num_blocks: int) -> Any:
        return cls(block_size=16, num_blocks=num_blocks, cache_policy=policy, enable_events=True)

    return build


class Baseline:
    """The least work each operation needs, on plain containers."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks: OrderedDict[bytes, list[int]] = OrderedDict()  # hash -> [ref_cnt]

    def store(self, hashes: list[bytes]) -> None:
        blocks = self.blocks
        for _ in range(len(blocks) + len(hashes) - self.num_blocks):
            blocks.popitem(last=False)
        for h in hashes:
            blocks[h] = [-1]
        for h in hashes:
            blocks[h][0] = 0

    def lookup(self, hashes: list[bytes]) -> int:
        get = self.blocks.get
        n = 0
        for h in hashes:
            b = get(h)
            if b is None or b[0] < 0:
                break
            n += 1
        return n

    def load(self, hashes: list[bytes]) -> None:
        get = self.blocks.get
        for h in hashes:
            get(h)[0] += 1  # type: ignore[index]
        for h in hashes:
            get(h)[0] -= 1  # type: ignore[index]


def batches(start: int, count: int) -> list[list[bytes]]:
    return [[key(start + b * BATCH + i) for i in range(BATCH)] for b in range(count)]


def run(subject: Any, op: str, work: list[list[bytes]], baseline: bool) -> float:
    """Seconds for ``work`` (a list of batches) through one operation."""
    t0 = time.perf_counter()
    if op.startswith("store"):
        if baseline:
            for hashes in work:
                subject.store(hashes)
        else:
            prepare, complete = subject.prepare_store, subject.complete_store
            for hashes in work:
                result = prepare(hashes)
                complete(result.block_hashes_to_store)
            subject.take_events()
    elif op.startswith("lookup"):
        lookup = subject.lookup
        for hashes in work:
            lookup(hashes)
    elif baseline:
        for hashes in work:
            subject.load(hashes)
    else:
        prepare, complete = subject.prepare_load, subject.complete_load
        for hashes in work:
            prepare(hashes)
            complete(hashes)
    return time.perf_counter() - t0


def measure(
    factories: dict[str, Callable[[str, int], Any]], repeats: int, quick: bool
) -> dict[tuple[str, str, int, str], float]:
    """Best seconds per batch for (implementation, policy, size, op)."""
    best: dict[tuple[str, str, int, str], float] = {}
    for size in SIZES:
        fill = size // BATCH
        hot_count = min(fill, 200 if quick else 2000)
        for policy in ("lru", "arc"):
            for _ in range(repeats):
                subjects = [("baseline", Baseline(size))]
                subjects += [(name, build(policy, size)) for name, build in factories.items()]
                fill_work = batches(0, fill)
                evict_work = batches(size * 2, hot_count)
                plan = [
                    ("store (free)", fill_work),
                    ("store (evict 32)", evict_work),
                    ("lookup (32 hits)", evict_work),
                    ("load", evict_work),
                ]
                for op, work in plan:
                    # Chunks, implementations alternating: a burst of load from
                    # elsewhere spoils a chunk of each, not a whole run of one.
                    step = max(1, len(work) // CHUNKS)
                    for start in range(0, len(work), step):
                        chunk = work[start : start + step]
                        for name, subject in subjects:
                            per_batch = run(subject, op, chunk, name == "baseline") / len(chunk)
                            k = (name, policy, size, op)
                            best[k] = min(best.get(k, per_batch), per_batch)
                del subjects
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k-slot tier only, fewer batches")
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    global SIZES
    if args.quick:
        SIZES = (10_000,)
    factories: dict[str, Callable[[str, int], Any]] = {"kvframe": kvframe_manager}
    vllm = None if args.no_vllm else vllm_manager_factory()
    if vllm is not None:
        factories["vllm"] = vllm
    best = measure(factories, args.repeats, args.quick)
    print(f"## offload manager, batches of {BATCH} (best of {args.repeats})\n")
    head = "| policy | slots | operation | us/batch | blocks/s | baseline us | ratio |"
    print(head + (" vs vLLM |" if vllm else ""))
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |" + (" ---: |" if vllm else ""))
    for size in SIZES:
        for policy in ("lru", "arc"):
            for op in OPS:
                ours = best["kvframe", policy, size, op]
                base = best["baseline", policy, size, op]
                line = (
                    f"| {policy} | {size:,} | {op} | {ours * 1e6:.1f} | {BATCH / ours:,.0f} | "
                    f"{base * 1e6:.1f} | {ours / base:.2f} |"
                )
                if vllm:
                    line += f" {ours / best['vllm', policy, size, op]:.2f} |"
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
