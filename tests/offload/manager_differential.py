"""Drive kvframe's ``cpu`` tier and vLLM 0.19's ``CPUOffloadingManager`` through the same calls.

A seeded generator plays a connector: requests over a few shared-prefix
families touch their blocks, look them up, load the hits, store new blocks,
and complete loads and stores (some stores fail) in a random interleaving.
Every call and its result is logged in a neutral form (hashes as ints, slot
ids as lists, events as tuples); two implementations agree if their logs are
equal. The generator only ever reacts to what the manager answered, so equal
logs mean the same decisions call for call.

It imports neither side at module level, so the same file runs in kvframe's
venv (``kvframe``) and in the vLLM reference venv (``vllm``)::

    .venv/bin/python tests/offload/manager_differential.py compare
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(
    os.environ.get("KVFRAME_VLLM_PYTHON", REPO / ".vllm-reference-venv" / "bin" / "python")
)
BLOCK_SIZE = 16  # tokens per offloaded block, reported in events
BLOCK_BYTES = 4096  # bytes per offloaded block in the kvframe spec's context

SCENARIOS = [
    {"policy": policy, "num_blocks": num_blocks, "store_threshold": threshold, "seed": seed}
    for policy in ("lru", "arc")
    for num_blocks in (8, 48)
    for threshold in (0, 2)
    for seed in (0, 1)
]


def key(i: int) -> bytes:
    return i.to_bytes(4, "big")


def unkey(h: bytes) -> int:
    return int.from_bytes(h, "big")


def build_vllm(scenario: dict[str, Any]) -> Any:
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.reuse_manager import FilterReusedOffloadingManager

    manager: Any = CPUOffloadingManager(
        block_size=BLOCK_SIZE,
        num_blocks=scenario["num_blocks"],
        cache_policy=scenario["policy"],
        enable_events=True,
    )
    if scenario["store_threshold"] >= 2:
        manager = FilterReusedOffloadingManager(
            manager, store_threshold=scenario["store_threshold"], max_tracker_size=40
        )
    return manager


def build_kvframe(scenario: dict[str, Any]) -> Any:
    from kvframe_cpu_offload import CPUOffloadSpec

    from kvframe.contract.offload import OffloadContext

    spec = CPUOffloadSpec(
        capacity=scenario["num_blocks"] * BLOCK_BYTES + BLOCK_BYTES - 1,
        eviction=scenario["policy"],
        block_size_factor=4,
    )
    # 4 tokens x 256 bytes per GPU block; block_size_factor 4: 16 tokens, 4096 bytes.
    context = OffloadContext(gpu_block_size=4, kv_bytes_per_token=256, num_gpu_blocks=64)
    manager = spec.create_manager(context)
    if scenario["store_threshold"] >= 2:
        # What --reuse-filter threshold:store_threshold=N,max_tracker_size=40 builds.
        from kvframe_cpu_offload import ThresholdReuseFilter

        from kvframe.offload.slots.manager import FilteredOffloadManager

        manager = FilteredOffloadManager(
            manager,
            ThresholdReuseFilter(store_threshold=scenario["store_threshold"], max_tracker_size=40),
        )
    return manager


def slots_of(spec_or_slots: Any) -> list[int]:
    """vLLM returns a ``CPULoadStoreSpec`` (numpy ``block_ids``); kvframe a tuple."""
    ids = getattr(spec_or_slots, "block_ids", spec_or_slots)
    return [int(i) for i in ids]


def events_of(manager: Any) -> list[list[Any]]:
    out = []
    for event in manager.take_events():
        if hasattr(event, "removed"):  # vLLM's OffloadingEvent
            kind = "removed" if event.removed else "stored"
            size = None if event.removed else event.block_size
        else:
            kind = "removed" if type(event).__name__ == "BlockRemoved" else "stored"
            size = getattr(event, "block_size", None)
        out.append([kind, [unkey(h) for h in event.block_hashes], size, event.medium])
    return out


def store_result(result: Any) -> Any:
    if result is None:
        return None
    evicted = getattr(result, "block_hashes_evicted", None)
    if evicted is None:
        evicted = result.evicted_block_hashes
    slots = result.store_spec if hasattr(result, "store_spec") else result.slot_ids
    return [
        [unkey(h) for h in result.block_hashes_to_store],
        slots_of(slots),
        [unkey(h) for h in evicted],
    ]


def drive(manager: Any, seed: int, steps: int = 1500) -> list[Any]:
    """Play ``steps`` connector steps against ``manager``; return the call log."""
    rng = random.Random(seed)
    log: list[Any] = []
    loads: list[list[bytes]] = []  # in flight
    stores: list[list[bytes]] = []
    families = [[key(f * 1000 + j) for j in range(40)] for f in range(12)]
    weights = [1 / (f + 1) for f in range(12)]  # a few hot prefixes, a long tail
    for _ in range(steps):
        family = rng.choices(families, weights)[0]
        length = rng.randint(1, 40)
        blocks = family[:length]
        manager.touch(blocks)
        start = rng.randint(0, length - 1) if rng.random() < 0.3 else 0
        hits = manager.lookup(blocks[start:])
        log.append(["lookup", start, length, hits])
        if hits and rng.random() < 0.6:
            loaded = blocks[start : start + hits]
            log.append(["load", slots_of(manager.prepare_load(loaded))])
            loads.append(loaded)
        first = start + (hits or 0)
        if first < length:
            end = rng.randint(first + 1, length)
            result = manager.prepare_store(blocks[first:end])
            log.append(["store", first, end, store_result(result)])
            if result is not None and result.block_hashes_to_store:
                stores.append(list(result.block_hashes_to_store))
                manager.touch(blocks[:end])
        while loads and rng.random() < 0.5:
            manager.complete_load(loads.pop(rng.randrange(len(loads))))
        while stores and rng.random() < 0.6:
            success = rng.random() < 0.9
            manager.complete_store(stores.pop(rng.randrange(len(stores))), success)
        if rng.random() < 0.3:
            log.append(["events", events_of(manager)])
    log.append(["events", events_of(manager)])
    return log


def run_all(build: Callable[[dict[str, Any]], Any]) -> list[list[Any]]:
    return [drive(build(s), s["seed"]) for s in SCENARIOS]


def run_vllm(timeout: float = 600) -> list[list[Any]]:
    completed = subprocess.run(
        [str(VLLM_PYTHON), __file__, "vllm"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "VLLM_CONFIGURE_LOGGING": "0", "PYTHONPATH": ""},
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"vLLM run failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def first_difference(ours: list[Any], theirs: list[Any]) -> str | None:
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return f"call {i}: kvframe {a} != vLLM {b}"
    if len(ours) != len(theirs):
        return f"logs differ in length: kvframe {len(ours)}, vLLM {len(theirs)}"
    return None


def main(argv: Sequence[str]) -> int:
    what = argv[0] if argv else "compare"
    if what in ("vllm", "kvframe"):
        print(json.dumps(run_all(build_vllm if what == "vllm" else build_kvframe)))
        return 0
    ours = json.loads(json.dumps(run_all(build_kvframe)))
    theirs = run_vllm()
    bad = 0
    for scenario, a, b in zip(SCENARIOS, ours, theirs, strict=True):
        diff = first_difference(a, b)
        kinds: dict[str, int] = {}
        for entry in a:
            if entry[0] == "store":
                outcome = (
                    "refused" if entry[3] is None else ("evicting" if entry[3][2] else "plain")
                )
                kinds[outcome] = kinds.get(outcome, 0) + 1
        print(f"{scenario}: {len(a)} calls, stores {kinds}: {'same' if diff is None else diff}")
        bad += diff is not None
    print("all equal" if not bad else f"{bad} scenarios differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
