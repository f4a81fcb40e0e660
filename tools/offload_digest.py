"""Digest every call and answer of an offload tier's ledger: proof that a change changes nothing.

    .venv/bin/python tools/offload_digest.py [--limit 400] [--config OFFLOAD[|REUSE_FILTER]] ...

Runs the first ``--limit`` requests of the bundled Mooncake conversation trace
through the engine (as ``offload_speed.py`` does) once per ``--config`` and
prints, per configuration, a SHA-256 of every :class:`SlotOffloadManager` call
(its name, its arguments, its result, in order) and of the run's counters
(wall-clock ones left out), plus the call count. Run it on two trees and
compare the lines: equal digests mean the tier was asked the same things and
answered the same, so every eviction, store, load and hit is unchanged.

To run another tree's kvframe with this script, put that tree and its plugin
folders first on ``PYTHONPATH``; the script prints the files it imported.
``--config`` takes an offload config string, optionally followed by ``|`` and
a reuse-filter config string (``cpu:capacity=8GiB|threshold``). Without
``--config`` it runs the set that issue 22's changes were checked on.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import sys
from collections.abc import Callable
from typing import Any

DEFAULT_CONFIGS = (
    "cpu:capacity=8GiB",
    "cpu:capacity=8GiB,eviction=arc",
    "cpu:capacity=8GiB,eviction='arc:variant=paper'",
    "cpu:capacity=8GiB,block_size_factor=2",
    "cpu:capacity=8GiB|threshold",
    "cpu:capacity=8GiB,eviction=arc|threshold",
    "cpu:capacity=2GiB",
    "cpu:capacity=2GiB,eviction=arc",
)
METHODS = (
    "lookup",
    "prepare_load",
    "touch",
    "complete_load",
    "prepare_store",
    "complete_store",
    "take_events",
)


def _record(log: Any, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any) -> Any:
        # Iterables are materialised so the digest sees them; the ledger gets a list.
        args = tuple(list(a) if not isinstance(a, int | bool | list | tuple) else a for a in args)
        result = method(self, *args)
        log.update(repr((name, args, result)).encode())
        log.calls += 1
        return result

    return wrapper


class _Log:
    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.calls = 0

    def update(self, data: bytes) -> None:
        self.sha.update(data)


def run(limit: int, config: str) -> tuple[str, str, int]:
    from kvframe.engine import Engine, EngineConfig
    from kvframe.offload.slots.manager import SlotOffloadManager
    from kvframe.workloads import load_workload

    offload, _, reuse = config.partition("|")
    log = _Log()
    saved = {name: getattr(SlotOffloadManager, name) for name in METHODS}
    for name, method in saved.items():
        setattr(SlotOffloadManager, name, _record(log, name, method))
    try:
        engine = Engine.from_config(EngineConfig(offload=offload, reuse_filter=reuse or None))
        result = engine.run(load_workload("mooncake:conversation", limit=limit))
    finally:
        for name, method in saved.items():
            setattr(SlotOffloadManager, name, method)
    counters = sorted(
        (k, v) for k, v in result.counters.items() if "wall" not in k and "decode_run" not in k
    )
    counter_digest = hashlib.sha256(repr(counters).encode()).hexdigest()[:16]
    return log.sha.hexdigest()[:16], counter_digest, log.calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=400)
    parser.add_argument("--config", action="append", help="OFFLOAD[|REUSE_FILTER] (repeatable)")
    args = parser.parse_args()
    import kvframe

    print(f"kvframe from {kvframe.__file__}")
    for config in args.config or DEFAULT_CONFIGS:
        calls_digest, counter_digest, calls = run(args.limit, config)
        print(f"{config:50} calls={calls:8d} ledger={calls_digest} counters={counter_digest}")
    plugins = sorted(
        f"{name} from {module.__file__}"
        for name, module in sys.modules.items()
        if name.startswith("kvframe_") and "." not in name and getattr(module, "__file__", None)
    )
    print("\n".join(plugins))


if __name__ == "__main__":
    main()
