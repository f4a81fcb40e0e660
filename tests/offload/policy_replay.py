"""Replay the Mooncake traces' hash-id streams through an eviction policy.

This file is the executable definition of the replay that ``docs/offload.md``
("Replaying a key stream") describes, shared by the tests, the benchmarks and
the differential check against vLLM. It imports neither kvframe nor vLLM, so
the same code drives both: a policy is any object with vLLM's ``CachePolicy``
methods (``get``/``insert``/``touch``/``evict``).

Run it as a script to compare kvframe's policies with vLLM 0.19's own (a dev
check, not a CI dependency)::

    .venv/bin/python tests/offload/policy_replay.py compare      # needs the vLLM venv
    .venv/bin/python tests/offload/policy_replay.py kvframe      # JSON of kvframe's results
    .vllm-reference-venv/bin/python tests/offload/policy_replay.py vllm 1024 4096

The vLLM interpreter is ``$KVFRAME_VLLM_PYTHON`` or
``.vllm-reference-venv/bin/python`` at the repository root.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "kvframe" / "data" / "mooncake"  # the bundled traces, read without kvframe
TRACES = ("conversation", "synthetic")
CAPACITIES = (1024, 4096, 16384, 65536)
MODES = ("touch-all", "touch-hits")
"""``touch-all``: every access touches its key first, hit or miss, as vLLM's
connector touches all of a request's hashes before its lookup. ``touch-hits``:
only a hit touches (the literal "miss -> insert, hit -> touch")."""
VLLM_PYTHON = Path(
    os.environ.get("KVFRAME_VLLM_PYTHON", REPO / ".vllm-reference-venv" / "bin" / "python")
)


class Block:
    """The block object inserted for every miss: idle and ready (``ref_cnt == 0``)."""

    __slots__ = ("ref_cnt",)

    def __init__(self) -> None:
        self.ref_cnt = 0

    @property
    def is_ready(self) -> bool:
        """vLLM's ARC asks this (``ref_cnt >= 0``); kvframe's reads ``ref_cnt``."""
        return self.ref_cnt >= 0


def trace_path(trace: str) -> Path:
    return DATA / f"{trace}.jsonl.gz"


def load_stream(trace: str, max_requests: int | None = None) -> list[int]:
    """Every request's ``hash_ids`` in file order, concatenated: one access per id."""
    stream: list[int] = []
    with gzip.open(trace_path(trace), "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if max_requests is not None and i >= max_requests:
                break
            stream.extend(json.loads(line)["hash_ids"])
    return stream


def replay(
    policy: Any,
    stream: Iterable[int],
    capacity: int,
    *,
    mode: str = "touch-all",
    on_evict: Callable[[int], None] | None = None,
    size: int = 0,
) -> int:
    """Replay ``stream`` through ``policy`` (built for ``capacity``); return the hits.

    For each key ``k`` of the stream, in order:

    1. ``touch-all`` mode: ``policy.touch([k])``.
    2. ``policy.get(k)`` is not None: a **hit**. In ``touch-hits`` mode,
       ``policy.touch([k])`` now. Next key.
    3. Otherwise a **miss**. If the policy holds ``capacity`` blocks,
       ``policy.evict(1, {k})`` must return exactly one victim (``on_evict`` sees
       its key). Then ``policy.insert(k, Block())``: a ready, idle block.

    No key is ever removed, loaded or left not-ready, so ``ref_cnt`` is always 0.
    ``size`` is how many blocks the policy already holds (to continue a replay).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    touch_all = mode == "touch-all"
    touch, get, evict, insert = policy.touch, policy.get, policy.evict, policy.insert
    hits = 0
    for key in stream:
        if touch_all:
            touch([key])
        if get(key) is not None:
            hits += 1
            if not touch_all:
                touch([key])
            continue
        if size >= capacity:
            victims = evict(1, {key})
            if victims is None or len(victims) != 1:
                raise AssertionError(f"evict(1) returned {victims!r} on a full cache")
            if on_evict is not None:
                on_evict(victims[0][0])
            size -= 1
        insert(key, Block())
        size += 1
    return hits


def run_all(
    factories: dict[str, Callable[[int], Any]],
    traces: Sequence[str] = TRACES,
    capacities: Sequence[int] = CAPACITIES,
    modes: Sequence[str] = MODES,
) -> list[dict[str, Any]]:
    """Hits and a digest of the eviction sequence for every combination."""
    streams = {trace: load_stream(trace) for trace in traces}
    out = []
    for trace in traces:
        for mode in modes:
            for policy_name, factory in factories.items():
                for capacity in capacities:
                    evicted: list[int] = []
                    hits = replay(
                        factory(capacity),
                        streams[trace],
                        capacity,
                        mode=mode,
                        on_evict=evicted.append,
                    )
                    digest = hashlib.sha256(json.dumps(evicted).encode()).hexdigest()[:16]
                    out.append(
                        {
                            "trace": trace,
                            "mode": mode,
                            "policy": policy_name,
                            "capacity": capacity,
                            "accesses": len(streams[trace]),
                            "hits": hits,
                            "evictions": len(evicted),
                            "eviction_digest": digest,
                        }
                    )
    return out


def kvframe_factories() -> dict[str, Callable[[int], Any]]:
    from kvframe_arc import ARCPolicy
    from kvframe_lru import LRUPolicy

    return {"lru": LRUPolicy, "arc": ARCPolicy}


def vllm_factories() -> dict[str, Callable[[int], Any]]:
    from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    return {"lru": LRUCachePolicy, "arc": ARCCachePolicy}


def run_vllm(capacities: Sequence[int] = CAPACITIES, timeout: float = 900) -> list[dict[str, Any]]:
    """This script's ``vllm`` mode in the vLLM interpreter, parsed."""
    completed = subprocess.run(
        [str(VLLM_PYTHON), __file__, "vllm", *map(str, capacities)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "VLLM_CONFIGURE_LOGGING": "0", "PYTHONPATH": ""},
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"vLLM replay failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str]) -> int:
    what = argv[0] if argv else "compare"
    capacities = [int(c) for c in argv[1:]] or list(CAPACITIES)
    if what == "vllm":
        print(json.dumps(run_all(vllm_factories(), capacities=capacities)))
        return 0
    if what == "kvframe":
        print(json.dumps(run_all(kvframe_factories(), capacities=capacities)))
        return 0
    if what != "compare":
        print(f"usage: {Path(__file__).name} [compare|kvframe|vllm] [CAPACITY...]", file=sys.stderr)
        return 2
    ours = run_all(kvframe_factories(), capacities=capacities)
    theirs = run_vllm(capacities)
    bad = 0
    print(
        f"{'trace':13} {'mode':10} {'policy':6} {'capacity':>8} {'hits':>8} {'evictions':>9}  same"
    )
    for a, b in zip(ours, theirs, strict=True):
        same = a == b
        bad += not same
        print(
            f"{a['trace']:13} {a['mode']:10} {a['policy']:6} {a['capacity']:>8} "
            f"{a['hits']:>8} {a['evictions']:>9}  {'yes' if same else f'NO: vLLM {b}'}"
        )
    print("all equal" if not bad else f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
