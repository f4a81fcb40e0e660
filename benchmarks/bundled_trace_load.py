"""Reading the bundled ``.jsonl.gz`` trace vs the same trace as plain JSONL.

    .venv/bin/python benchmarks/bundled_trace_load.py [--repeat 5] [--limit N]

The main job reads ``mooncake:conversation`` straight from the gzip file that
ships inside kvframe. This measures what that costs against reading the
decompressed JSONL (what the main job read before the trace was bundled):
``load_workload`` on each, interleaved ``--repeat`` times, best of each kept
(CPU seconds of this process, so other load on a shared machine stays out of
it as far as possible), printed with their ratio. The plain copy is written to
a temporary directory first.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import tempfile
import time
from pathlib import Path

import structlog

from kvframe.workloads import BUNDLED_WORKLOADS, load_workload


def _cpu_seconds(source: str | Path, limit: int | None) -> tuple[float, int]:
    start = time.process_time()
    workload = load_workload(source, limit=limit)
    return time.process_time() - start, len(workload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="mooncake:conversation")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None, help="requests (default: all)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    bundled = BUNDLED_WORKLOADS[args.name]
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "trace.jsonl"
        with gzip.open(bundled.traversable(), "rb") as f:
            plain.write_bytes(f.read())
        best_gz = best_plain = float("inf")
        for _ in range(args.repeat):
            seconds, n = _cpu_seconds(args.name, args.limit)
            best_gz = min(best_gz, seconds)
            seconds, n_plain = _cpu_seconds(plain, args.limit)
            best_plain = min(best_plain, seconds)
            assert n == n_plain
    print(f"{args.name}: {n} requests, best of {args.repeat} (CPU s)")
    print(f"  plain JSONL   {best_plain:8.3f}")
    print(f"  bundled .gz   {best_gz:8.3f}")
    print(f"  ratio gz/plain {best_gz / best_plain:7.3f}")


if __name__ == "__main__":
    main()
