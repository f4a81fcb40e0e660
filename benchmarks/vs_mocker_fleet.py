"""kvframe fleets against NVIDIA Dynamo's mocker fleets: the worker each request went to.

    # benchmark-only: the mocker lives in its own venv, never in kvframe's
    python3.11 -m venv /work/mocker-venv
    /work/mocker-venv/bin/pip install ai-dynamo-runtime==1.6.1
    export KVFRAME_MOCKER_PYTHON=/work/mocker-venv/bin/python

    .venv/bin/python benchmarks/vs_mocker_fleet.py                   # 4 and 8 workers, whole trace
    .venv/bin/python benchmarks/vs_mocker_fleet.py --limit 2000 --workers 4
    .venv/bin/python benchmarks/vs_mocker_fleet.py --modes kv --mocker-repeats 3

The same trace and engine settings as ``vs_mocker.py`` (one worker's settings,
on every worker), replayed by Dynamo's mocker (``run_mocker_trace_replay``
with ``num_workers=N``) with ``router_mode="round_robin"`` and ``"kv_router"``
(``KvRouterConfig()``: overlap weight 1.0, temperature 0, KV events, prefill
tokens tracked), and by a kvframe fleet (:class:`kvframe.fleet.Fleet`, which ``kvframe run
--replicas N`` runs) with the routers ``round-robin`` and ``dynamo-kv`` (the
same defaults). Each side runs in a fresh subprocess.
``--kv-event-delay`` is passed to both (the mocker's ``kv_event_lag_ms``).

Printed per worker count and mode: the fleet's prefix-cache hit rate at first
admission on each side; how many requests went to the same worker (requests
matched by arrival time, prompt and output length, as ``vs_mocker.py`` does;
identical keys compared as multisets), also under the best renaming of the
workers and as a Rand index (see :func:`label_free`); how many got the same
prefix hit; the
first request (in trace order) whose worker differs; and the requests per
worker on each side. ``--mocker-repeats R`` replays the mocker R times: its KV
router draws among tied workers with an unseeded generator, so two mocker runs
need not agree with each other, and the agreement between mocker runs is the
baseline an agreement with kvframe is read against.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from vs_mocker import (  # this folder is on sys.path when run as a script
    INSTALL_HINT,
    MAX_MODEL_LEN,
    MOCKER_PYTHON_ENV,
    TRACE_CHUNK_TOKENS,
    _measure,
    _plain_trace,
)

MODES = {"round_robin": "round-robin", "kv": "dynamo-kv"}
"""The mocker's router mode -> the kvframe router run against it."""

Row = tuple[float, int, int, int, int]
"""(arrival ms, prompt tokens, output tokens, worker, first-admission hit tokens)."""


# ----------------------------------------------------------------- children


def _mocker_child(args: argparse.Namespace) -> None:
    """Runs in the mocker's interpreter: stdlib + ``dynamo`` only, no kvframe."""
    from dynamo._core import (  # type: ignore[import-not-found]
        KvRouterConfig,
        run_mocker_trace_replay,
    )

    engine = {
        "backend": "vllm",
        "block_size": args.block_size,
        "num_gpu_blocks": args.usable_blocks,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_num_seqs": args.max_num_seqs,
        "max_model_len": MAX_MODEL_LEN,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "preemption_mode": "lifo",
    }
    mode = "kv_router" if args.mode == "kv" else "round_robin"
    result = run_mocker_trace_replay(
        [args.mocker_child],
        extra_engine_args={"engine": engine},
        router_config=KvRouterConfig() if mode == "kv_router" else None,
        num_workers=args.num_workers,
        replay_mode="offline",
        router_mode=mode,
        trace_block_size=TRACE_CHUNK_TOKENS,
        capture_per_request=True,
        kv_event_lag_ms=args.kv_event_delay * 1000 or None,
    )
    rows = []
    for record in result.per_request:
        first = next(a for a in record["admission_history"] if not a["is_readmission"])
        rows.append(
            [
                record["arrival_time_ms"],
                record["input_length"],
                record["requested_output_length"],
                record["decode_worker_idx"],
                first["reused_input_tokens"],
            ]
        )
    summary = result.summary
    out = {"hit_rate": summary["first_admission_prefix_cache_reused_ratio"], "requests": rows}
    print("ROW " + json.dumps(out))


def _run_mocker(python: str, trace: Path, n: int, mode: str, args: argparse.Namespace) -> dict:
    command = [
        python, __file__, "--mocker-child", str(trace), "--mode", mode,
        "--num-workers", str(n), "--kv-event-delay", str(args.kv_event_delay),
        "--block-size", str(args.block_size), "--usable-blocks", str(args.usable_blocks),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens),
        "--max-num-seqs", str(args.max_num_seqs),
    ]  # fmt: skip
    figures, stdout = _measure(command)
    line = next(line for line in stdout.splitlines() if line.startswith("ROW "))
    return {**figures, **json.loads(line[4:])}


def _kvframe_child(args: argparse.Namespace) -> None:
    """Runs a kvframe fleet (:class:`kvframe.fleet.Fleet`, what ``kvframe run --replicas``
    runs) and writes ``requests.csv`` (with its ``replica`` column) and ``counters.json``."""
    from kvframe.engine import EngineConfig
    from kvframe.fleet import Fleet, FleetSettings
    from kvframe.workloads import load_workload

    config = EngineConfig(
        num_gpu_blocks=args.usable_blocks + 1,  # + vLLM's null block
        block_size=args.block_size,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
    )
    fleet = Fleet.from_config(
        config,
        args.router,
        replicas=args.num_workers,
        settings=FleetSettings(kv_event_delay=args.kv_event_delay),
    )
    workload = load_workload(args.trace, limit=args.limit or None)
    summary = fleet.run(workload).summary
    out = Path(args.kvframe_child)
    with (out / "requests.csv").open("w", newline="") as handle:
        summary.write_csv(handle)
    (out / "counters.json").write_text(json.dumps(summary.counters))


def _run_kvframe(
    n: int, router: str, args: argparse.Namespace, keys: list[tuple[int, int, int]]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vs-mocker-fleet-") as out_dir:
        command = [
            sys.executable, __file__, "--kvframe-child", out_dir, "--trace", args.trace,
            "--limit", str(args.limit), "--router", router, "--num-workers", str(n),
            "--kv-event-delay", str(args.kv_event_delay),
            "--block-size", str(args.block_size), "--usable-blocks", str(args.usable_blocks),
            "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            "--max-num-seqs", str(args.max_num_seqs),
        ]  # fmt: skip
        figures, _ = _measure(command)
        counters = json.loads((Path(out_dir) / "counters.json").read_text())
        rows = []
        with (Path(out_dir) / "requests.csv").open(newline="") as handle:
            for rec in csv.DictReader(handle):
                # request ids are "line-N" (1-based trace line) for Mooncake traces
                stamp, prompt, output = keys[int(rec["request_id"].rsplit("-", 1)[1]) - 1]
                worker, hit = int(rec["replica"]), int(rec["num_cached_tokens"])
                rows.append([stamp, prompt, output, worker, hit])
    return {**figures, "hit_rate": counters["prefix_cache_hit_rate"], "requests": rows}


# ------------------------------------------------------------------ report


def compare(a: list[Row], b: list[Row]) -> dict[str, int]:
    """Requests matched by (arrival, prompt, output); of those, how many went to the same
    worker and got the same first-admission hit. Requests with identical keys are
    compared as multisets (which one of two identical requests is which is unknowable)."""

    def grouped(rows: list[Row]) -> dict[tuple, list[Row]]:
        groups: dict[tuple, list[Row]] = defaultdict(list)
        for row in rows:
            groups[(float(row[0]), int(row[1]), int(row[2]))].append(row)
        return groups

    ga, gb = grouped(a), grouped(b)
    matched = same_worker = same_hit = same_both = 0
    for key, rows in ga.items():
        other = gb.get(key)
        if other is None or len(other) != len(rows):
            continue
        matched += len(rows)
        same_worker += sum((Counter(r[3] for r in rows) & Counter(r[3] for r in other)).values())
        same_hit += sum((Counter(r[4] for r in rows) & Counter(r[4] for r in other)).values())
        both_a = Counter((r[3], r[4]) for r in rows)
        same_both += sum((both_a & Counter((r[3], r[4]) for r in other)).values())
    return {"matched": matched, "worker": same_worker, "hit": same_hit, "both": same_both}


def _pairs(a: list[Row], b: list[Row]) -> list[tuple[int, int]]:
    """(worker in a, worker in b) of the requests matched by key, identical keys paired in
    worker order."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for row in b:
        groups[(float(row[0]), int(row[1]), int(row[2]))].append(int(row[3]))
    taken: dict[tuple, list[int]] = {k: sorted(v) for k, v in groups.items()}
    mine: dict[tuple, list[int]] = defaultdict(list)
    for row in a:
        mine[(float(row[0]), int(row[1]), int(row[2]))].append(int(row[3]))
    out = []
    for key, workers in mine.items():
        other = taken.get(key)
        if other is not None and len(other) == len(workers):
            out.extend(zip(sorted(workers), other, strict=True))
    return out


def label_free(a: list[Row], b: list[Row], n: int) -> tuple[float, float]:
    """Agreement that does not depend on which worker is called which: the share of
    requests on the same worker under the best renaming of one side's workers, and the
    Rand index (the share of request pairs that both sides put together or both apart).

    Workers start identical, so a tie drawn at random (Dynamo's, at the first request
    already) renames every later choice; these two figures see through that."""
    import itertools

    pairs = _pairs(a, b)
    if not pairs:
        return 0.0, 0.0
    table = [[0] * n for _ in range(n)]
    for x, y in pairs:
        table[x][y] += 1
    best = max(sum(table[i][p[i]] for i in range(n)) for p in itertools.permutations(range(n)))

    def together(counts: list[int]) -> int:
        return sum(c * (c - 1) // 2 for c in counts)

    total = len(pairs) * (len(pairs) - 1) // 2
    both = together([c for row in table for c in row])
    in_a = together([sum(row) for row in table])
    in_b = together([sum(table[i][j] for i in range(n)) for j in range(n)])
    rand = (total + 2 * both - in_a - in_b) / total if total else 1.0
    return best / len(pairs), rand


def first_divergence(a: list[Row], b: list[Row]) -> int | None:
    """The position (in arrival order) of the first request sent to different workers."""
    order_a = sorted(a, key=lambda r: (r[0], r[1], r[2], r[3]))
    order_b = sorted(b, key=lambda r: (r[0], r[1], r[2], r[3]))
    for i, (x, y) in enumerate(zip(order_a, order_b, strict=False)):
        if x[3] != y[3]:
            return i
    return None


def _spread(rows: list[Row], n: int) -> str:
    counts = Counter(r[3] for r in rows)
    return "/".join(str(counts.get(w, 0)) for w in range(n))


def _report(n: int, mode: str, mockers: list[dict], kvframe: dict) -> None:
    base = mockers[0]["requests"]
    agree = compare(kvframe["requests"], base)
    m = max(agree["matched"], 1)
    renamed, rand = label_free(kvframe["requests"], base, n)
    print(
        f"{n:>3} {mode:<12}{mockers[0]['hit_rate']:>10.4%}{kvframe['hit_rate']:>10.4%}"
        f"{agree['worker'] / m:>10.2%}{renamed:>10.2%}{rand:>8.3f}"
        f"{agree['hit'] / m:>10.2%}{agree['both'] / m:>10.2%}"
        f"{agree['matched']:>8}{first_divergence(kvframe['requests'], base)!s:>9}"
        f"   mocker {_spread(base, n)}  kvframe {_spread(kvframe['requests'], n)}"
        f"   cpu s: mocker {mockers[0]['cpu_seconds']:.1f}, kvframe {kvframe['cpu_seconds']:.1f}"
        f" ({kvframe['cpu_seconds'] / max(mockers[0]['cpu_seconds'], 1e-9):.2f}x the mocker;"
        f" issue 51's goal: <= 1.5x)",
        flush=True,
    )
    for i, other in enumerate(mockers[1:], start=2):
        self_agree = compare(other["requests"], base)
        mm = max(self_agree["matched"], 1)
        renamed, rand = label_free(other["requests"], base, n)
        print(
            f"{'':>3} {'  mocker #' + str(i):<12}{other['hit_rate']:>10.4%}{'':>10}"
            f"{self_agree['worker'] / mm:>10.2%}{renamed:>10.2%}{rand:>8.3f}"
            f"{self_agree['hit'] / mm:>10.2%}"
            f"{self_agree['both'] / mm:>10.2%}{self_agree['matched']:>8}"
            f"{first_divergence(other['requests'], base)!s:>9}   (against mocker #1)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="mooncake:conversation", help="bundled name or path")
    parser.add_argument("--limit", type=int, default=0, help="first N requests (0: all)")
    parser.add_argument("--workers", default="4,8", help="worker counts, e.g. 4,8")
    parser.add_argument("--modes", default="round_robin,kv", help="round_robin and/or kv")
    parser.add_argument("--mocker-repeats", type=int, default=2)
    parser.add_argument("--kv-event-delay", type=float, default=0.0, help="seconds (both sides)")
    parser.add_argument(
        "--mocker-python",
        default=os.environ.get(MOCKER_PYTHON_ENV),
        help=f"interpreter with ai-dynamo-runtime installed (default: ${MOCKER_PYTHON_ENV})",
    )
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--usable-blocks", type=int, default=27_770)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--mocker-child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--num-workers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--kvframe-child", help=argparse.SUPPRESS)
    parser.add_argument("--router", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mocker_child:
        _mocker_child(args)
        return
    if args.kvframe_child:
        _kvframe_child(args)
        return
    if not args.mocker_python:
        parser.error(
            f"give --mocker-python or set ${MOCKER_PYTHON_ENV}: an interpreter with "
            f"ai-dynamo-runtime, e.g. after `{INSTALL_HINT}`"
        )
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)}; modes are {', '.join(MODES)}")
    if args.mocker_repeats < 1:
        parser.error(f"--mocker-repeats must be >= 1, got {args.mocker_repeats}")
    workers = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="vs-mocker-fleet-trace-") as folder:
        trace_path, keys = _plain_trace(args.trace, args.limit, Path(folder))
        print(
            f"trace {args.trace} ({len(keys)} requests), {args.usable_blocks} usable blocks x "
            f"{args.block_size} tokens per worker, {args.max_num_batched_tokens} batched "
            f"tokens, {args.max_num_seqs} seqs, KV-event delay {args.kv_event_delay} s"
        )
        print(
            f"{'N':>3} {'mode':<12}{'hit mock':>10}{'hit kvf':>10}{'worker':>10}{'renamed':>10}"
            f"{'rand':>8}{'hit':>10}"
            f"{'both':>10}{'matched':>8}{'1st diff':>9}   requests per worker"
        )
        for n in workers:
            for mode in modes:
                mockers = [
                    _run_mocker(args.mocker_python, trace_path, n, mode, args)
                    for _ in range(args.mocker_repeats)
                ]
                kvframe = _run_kvframe(n, MODES[mode], args, keys)
                _report(n, mode, mockers, kvframe)


if __name__ == "__main__":
    main()
