"""Eviction policies of the offload tier: cost per operation, and hit ratios on Mooncake.

    .venv/bin/python benchmarks/eviction_policies.py [--quick] [--ops|--hits] [--no-vllm]

**Operations** (``--ops``). Each policy is filled to its capacity (10k and 1M
blocks) with ready, idle blocks and every block touched once, then runs three
mixes in this order; one *op* is one access:

* ``hit``: ``touch([k])`` of a resident key (uniformly random);
* ``replay``: the stream replay of ``docs/offload.md`` (touch, get, on a miss
  evict + insert) over keys uniform in 1.25 x capacity, about 80% hits;
* ``miss``: a key never seen: ``evict(1, {k})`` then ``insert(k)``.

The *baseline* does the same accesses on a bare ``OrderedDict`` LRU
(``move_to_end`` / ``popitem`` / assignment). ``ratio`` is policy / baseline;
``1M/10k`` is the per-op time at 1M over that at 10k (a flat per-op cost reads
about 1; the baseline's own growth, in brackets, is what a bigger table costs
in cache misses alone). When the vLLM reference venv exists, vLLM 0.19.1's
``LRUCachePolicy``/``ARCCachePolicy`` run the same accesses *in this process*
(their source files are loaded from that venv with stub ``vllm`` modules for
their two imports; nothing of vLLM is copied): column ``vs vLLM`` = kvframe /
vLLM. Each mix runs in 20 chunks with the implementations alternating chunk
by chunk, so machine noise hits them alike; each figure is the best chunk over
all repeats.

**Hit ratios** (``--hits``): ``tests/offload/policy_replay.py`` on both Mooncake
hash-id streams at 1k/4k/16k/64k blocks, for ``lru``, ``arc`` (vLLM) and
``arc:variant=paper``, in both replay modes; each cell also gives the hits as
a multiple of LRU's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import time
import types
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SIZES = (10_000, 1_000_000)
CHUNKS = 20
MIXES = ("hit", "replay", "miss")  # in this order: a miss replaces resident keys


def load_replay() -> Any:
    path = REPO / "tests" / "offload" / "policy_replay.py"
    spec = importlib.util.spec_from_file_location("policy_replay", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["policy_replay"] = module
    spec.loader.exec_module(module)
    return module


replay_module = load_replay()
Block = replay_module.Block


# -- operation mixes ------------------------------------------------------------


def filled(factory: Callable[[int], Any], capacity: int) -> Any:
    policy = factory(capacity)
    insert = policy.insert
    for key in range(capacity):
        insert(key, Block())
    # One touch of everything: ARC's blocks then sit in T2, its steady state
    # on a reused working set.
    policy.touch(list(range(capacity)))
    return policy


def streams(capacity: int, n: int, seed: int = 0) -> dict[str, list[int]]:
    rng = random.Random(seed)
    return {
        "hit": [rng.randrange(capacity) for _ in range(n)],
        "replay": [rng.randrange(capacity + capacity // 4) for _ in range(n)],
        "miss": list(range(2 * capacity, 2 * capacity + n)),
    }


def run_mix(policy: Any, mix: str, keys: list[int], capacity: int) -> float:
    """Seconds for the accesses of one mix."""
    touch, get, evict, insert = policy.touch, policy.get, policy.evict, policy.insert
    start = time.perf_counter()
    if mix == "miss":
        for k in keys:
            evict(1, {k})
            insert(k, Block())
    elif mix == "hit":
        for k in keys:
            touch([k])
    else:
        size = capacity
        for k in keys:
            touch([k])
            if get(k) is None:
                if size >= capacity:
                    evict(1, {k})
                    size -= 1
                insert(k, Block())
                size += 1
    return time.perf_counter() - start


class BaselineLRU:
    """A bare ``OrderedDict`` doing each mix's accesses inline (no policy interface)."""

    def __init__(self, capacity: int) -> None:
        self.cache: OrderedDict[int, Block] = OrderedDict((k, Block()) for k in range(capacity))


def run_baseline(baseline: BaselineLRU, mix: str, keys: list[int]) -> float:
    cache = baseline.cache
    move, pop = cache.move_to_end, cache.popitem
    start = time.perf_counter()
    if mix == "miss":
        for k in keys:
            pop(last=False)
            cache[k] = Block()
    elif mix == "hit":
        for k in keys:
            move(k)
    else:
        for k in keys:
            if k in cache:
                move(k)
                continue
            pop(last=False)
            cache[k] = Block()
    return time.perf_counter() - start


def kvframe_factories() -> dict[str, Callable[[int], Any]]:
    from kvframe_arc import ARCPolicy
    from kvframe_lru import LRUPolicy

    return {
        "lru": LRUPolicy,
        "arc": ARCPolicy,
        "arc:variant=paper": lambda c: ARCPolicy(c, variant="paper"),
    }


def load_vllm(*modules: str) -> dict[str, types.ModuleType]:
    """Modules of vLLM 0.19.1's ``v1/kv_offload`` loaded from the reference venv, or {}.

    ``modules`` are paths under ``vllm.v1.kv_offload`` (``"cpu.policies.lru"``),
    dependencies first. They import only ``BlockHash`` (a ``bytes`` alias) from
    outside ``kv_offload``, and ``mediums`` numpy; stub parent packages let them
    load without importing vLLM and torch. Without numpy, a stub keeps the block
    ids of a ``LoadStoreSpec`` as a list (sparing vLLM one ``np.array`` per
    call). The stubs are removed again afterwards.
    """
    python = Path(
        os.environ.get("KVFRAME_VLLM_PYTHON", REPO / ".vllm-reference-venv" / "bin" / "python")
    )
    found = sorted(python.parent.parent.glob("lib/python3*/site-packages/vllm"))
    if not found:
        return {}
    root = found[0] / "v1" / "kv_offload"
    packages = ["vllm", "vllm.v1", "vllm.v1.core", "vllm.v1.kv_offload"]
    packages += ["vllm.v1.kv_offload.cpu", "vllm.v1.kv_offload.cpu.policies"]
    names = [*packages, "vllm.v1.core.kv_cache_utils", "numpy"]
    names += [f"vllm.v1.kv_offload.{m}" for m in modules]
    saved = {name: sys.modules.get(name) for name in names}
    loaded: dict[str, types.ModuleType] = {}
    try:
        for name in packages:
            package = types.ModuleType(name)
            package.__path__ = []
            sys.modules[name] = package
        utils = types.ModuleType("vllm.v1.core.kv_cache_utils")
        utils.BlockHash = bytes  # type: ignore[attr-defined]
        sys.modules["vllm.v1.core.kv_cache_utils"] = utils
        try:
            import numpy  # noqa: F401
        except ImportError:
            numpy_stub = types.ModuleType("numpy")
            numpy_stub.int64 = int  # type: ignore[attr-defined]
            numpy_stub.array = lambda values, dtype=None: list(values)  # type: ignore[attr-defined]
            sys.modules["numpy"] = numpy_stub
        for name in modules:
            full = f"vllm.v1.kv_offload.{name}"
            path = root.joinpath(*name.split(".")).with_suffix(".py")
            spec = importlib.util.spec_from_file_location(full, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[full] = module
            spec.loader.exec_module(module)
            loaded[name] = module
    except Exception as err:  # another vLLM layout: leave the vLLM column out
        print(f"(vLLM modules not loaded: {err!r})", file=sys.stderr)
        return {}
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return loaded


def vllm_factories() -> dict[str, Callable[[int], Any]]:
    """vLLM 0.19.1's ``LRUCachePolicy`` and ``ARCCachePolicy``, or {} without the venv."""
    loaded = load_vllm("cpu.policies.abstract", "cpu.policies.lru", "cpu.policies.arc")
    if not loaded:
        return {}
    return {
        "vllm lru": loaded["cpu.policies.lru"].LRUCachePolicy,
        "vllm arc": loaded["cpu.policies.arc"].ARCCachePolicy,
    }


def time_policies(
    factories: dict[str, Callable[[int], Any]], n: int, repeats: int
) -> dict[tuple[str, int, str], float]:
    """Best ns/op per (implementation, capacity, mix), the baseline as ``"baseline"``."""
    best: dict[tuple[str, int, str], float] = {}
    for capacity in SIZES:
        keys = streams(capacity, n)
        for _ in range(repeats):
            subjects: list[tuple[str, Any]] = [("baseline", BaselineLRU(capacity))]
            subjects += [(name, filled(f, capacity)) for name, f in factories.items()]
            for mix in MIXES:
                # Short chunks, implementations alternating: a burst of load
                # from elsewhere spoils a chunk of each, not a whole run of one.
                size = max(1, n // CHUNKS)
                for start in range(0, n, size):
                    chunk = keys[mix][start : start + size]
                    for name, subject in subjects:
                        if name == "baseline":
                            seconds = run_baseline(subject, mix, chunk)
                        else:
                            seconds = run_mix(subject, mix, chunk, capacity)
                        ns = seconds / len(chunk) * 1e9
                        best[name, capacity, mix] = min(best.get((name, capacity, mix), ns), ns)
            del subjects
    return best


def print_ops(best: dict[tuple[str, int, str], float], with_vllm: bool) -> None:
    head = "| policy | capacity | mix | ns/op | baseline ns/op | ratio | 1M/10k (baseline) |"
    print(head + (" vs vLLM |" if with_vllm else ""))
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |" + (" ---: |" if with_vllm else ""))
    small, large = SIZES
    for capacity in SIZES:
        for name in ("lru", "arc", "arc:variant=paper"):
            for mix in MIXES:
                ns = best[name, capacity, mix]
                base = best["baseline", capacity, mix]
                growth = ""
                if capacity == large:
                    growth = (
                        f"{ns / best[name, small, mix]:.2f} "
                        f"({base / best['baseline', small, mix]:.2f})"
                    )
                line = (
                    f"| {name} | {capacity:,} | {mix} | {ns:.0f} | {base:.0f} | "
                    f"{ns / base:.2f} | {growth} |"
                )
                if with_vllm:
                    other = best.get((f"vllm {name}", capacity, mix))
                    line += f" {ns / other:.2f} |" if other else " |"
                print(line)


# -- hit ratios -----------------------------------------------------------------


def hit_table(quick: bool) -> None:
    factories = kvframe_factories()
    capacities = replay_module.CAPACITIES
    print("| trace | replay mode | capacity | accesses | lru | arc (vllm) | arc (paper) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for trace in replay_module.TRACES:
        stream = replay_module.load_stream(trace, max_requests=1000 if quick else None)
        for mode in replay_module.MODES:
            for capacity in capacities:
                hits = {
                    name: replay_module.replay(factory(capacity), stream, capacity, mode=mode)
                    for name, factory in factories.items()
                }
                cells = [f"{hits['lru'] / len(stream):.4f} ({hits['lru']:,})"]
                for name in ("arc", "arc:variant=paper"):
                    cells.append(
                        f"{hits[name] / len(stream):.4f} ({hits[name]:,}; "
                        f"x{hits[name] / max(hits['lru'], 1):.3f})"
                    )
                print(
                    f"| {trace} | {mode} | {capacity:,} | {len(stream):,} | "
                    + " | ".join(cells)
                    + " |"
                )
    print("\ncells: hit ratio (hits; vs LRU's hits)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer ops, first 1000 requests")
    parser.add_argument("--ops", action="store_true", help="only the operation timings")
    parser.add_argument("--hits", action="store_true", help="only the hit-ratio table")
    parser.add_argument("--no-vllm", action="store_true", help="skip vLLM's policies")
    parser.add_argument("--n", type=int, default=None, help="accesses per mix")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.n or (20_000 if args.quick else 200_000)
    both = not (args.ops or args.hits)
    if args.ops or both:
        factories = kvframe_factories()
        vllm = {} if args.no_vllm else vllm_factories()
        best = time_policies({**factories, **vllm}, n, args.repeats)
        print(f"## policy operations ({n:,} accesses per mix, best of {args.repeats})\n")
        print_ops(best, bool(vllm))
        print()
    if args.hits or both:
        print("## hit ratios on the Mooncake hash-id streams\n")
        hit_table(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
