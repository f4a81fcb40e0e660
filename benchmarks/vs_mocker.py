"""kvframe against NVIDIA Dynamo's mocker on one trace: CPU time, peak RSS, decisions.

    # benchmark-only: the mocker lives in its own venv, never in kvframe's
    python3.11 -m venv /work/mocker-venv
    /work/mocker-venv/bin/pip install ai-dynamo-runtime==1.6.1
    export KVFRAME_MOCKER_PYTHON=/work/mocker-venv/bin/python

    .venv/bin/python benchmarks/vs_mocker.py                       # whole trace, 3 rounds
    .venv/bin/python benchmarks/vs_mocker.py --core python,compiled
    .venv/bin/python benchmarks/vs_mocker.py --limit 2000 --rounds 1
    .venv/bin/python benchmarks/vs_mocker.py --block-size 512 --usable-blocks 868
    .venv/bin/python benchmarks/vs_mocker.py --tree /tmp/kvframe-before  # + an older kvframe
    .venv/bin/python benchmarks/vs_mocker.py --core python,compiled \
        --tree /work/main --tree-core python,compiled   # both cores of both checkouts

The mocker ("DynoSim", PyPI ``ai-dynamo-runtime``) is a Rust simulator of
vLLM-like engines; ``dynamo._core.run_mocker_trace_replay`` replays a
Mooncake trace offline on a virtual clock. Both sides get the settings of
kvframe's main job: one worker, ``--usable-blocks`` blocks of
``--block-size`` tokens (the mocker counts usable blocks; kvframe is given
one more, vLLM's null block), 8,192 batched tokens, 256 sequences, prefix
caching, chunked prefill, LIFO preemption, and kvframe's preset context
length (131,072 tokens) as ``max_model_len``. The Mooncake trace's hash ids
stand for 512-token chunks on both sides.

Each side runs as a fresh subprocess, one after the other, rounds alternating
which side goes first; its CPU time (user + system) and peak RSS come from
``os.wait4`` on that one child, so interpreter start-up and trace loading are
included on both sides. kvframe runs as ``kvframe run`` does (the main job,
``metrics.json`` and ``requests.csv`` written to a temporary folder), once per
``--core`` when ``kvframe run`` has that option (otherwise once, and the
script says so). The mocker reads the trace decompressed (done once, before
the rounds; kvframe decompresses its bundled ``.jsonl.gz`` inside its run).

Printed: per round and side, wall and CPU seconds and peak MB, with
kvframe/mocker ratios; then the decisions both expose: the prefix-cache hit
rate at first admission, over all admissions (with re-admissions after a
preemption), preemptions, and how many requests got the same first-admission
prefix hit and the same number of preemptions on both sides (matched by
arrival time, prompt and output length).

The two are not the same model: the mocker times steps with its own
polynomial, kvframe with its cost model of Llama-3.1-8B on an H100, so the
simulated timelines (and with them which requests share a step) differ;
equal decisions are evidence, not a proof, of the mocker's cache logic.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from whole_trace import tree_env  # this folder is on sys.path when run as a script

MOCKER_PYTHON_ENV = "KVFRAME_MOCKER_PYTHON"
INSTALL_HINT = (
    "python3.11 -m venv /work/mocker-venv && "
    "/work/mocker-venv/bin/pip install ai-dynamo-runtime==1.6.1"
)
TRACE_CHUNK_TOKENS = 512  # a Mooncake hash id covers this many tokens
MAX_MODEL_LEN = 131_072  # kvframe's default preset (Llama-3.1-8B) context length


# ----------------------------------------------------------------- children


def _mocker_child(args: argparse.Namespace) -> None:
    """Runs in the mocker's interpreter: stdlib + ``dynamo`` only, no kvframe."""
    from dynamo._core import run_mocker_trace_replay  # type: ignore[import-not-found]

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
    result = run_mocker_trace_replay(
        [args.mocker_child],
        extra_engine_args={"engine": engine},
        num_workers=1,
        replay_mode="offline",
        trace_block_size=TRACE_CHUNK_TOKENS,
        capture_per_request=True,
    )
    summary = result.summary
    requests = []
    for record in result.per_request:
        first = next(a for a in record["admission_history"] if not a["is_readmission"])
        requests.append(
            [
                record["arrival_time_ms"],
                record["input_length"],
                record["requested_output_length"],
                first["reused_input_tokens"],
                record["readmission_count"],
            ]
        )
    row = {
        "completed": summary["completed_requests"],
        "first_admission_hit_rate": summary["first_admission_prefix_cache_reused_ratio"],
        "all_admissions_hit_rate": summary["prefix_cache_reused_ratio"],
        "preemptions": sum(r[4] for r in requests),
        "simulated_seconds": summary["duration_ms"] / 1000,
        "requests": requests,
    }
    print("ROW " + json.dumps(row))


def _kvframe_row(out_dir: Path, trace_keys: list[tuple[int, int, int]]) -> dict[str, Any]:
    """The decisions of a ``kvframe run`` from the files it wrote."""
    counters = json.loads((out_dir / "metrics.json").read_text())["counters"]
    requests = []
    with (out_dir / "requests.csv").open(newline="") as handle:
        for rec in csv.DictReader(handle):
            # request ids are "line-N" (1-based trace line) for Mooncake traces
            timestamp, prompt, output = trace_keys[int(rec["request_id"].rsplit("-", 1)[1]) - 1]
            hits, preempted = int(rec["num_cached_tokens"]), int(rec["num_preemptions"])
            requests.append([timestamp, prompt, output, hits, preempted])
    queries = counters["prefix_cache_queries"] + counters["preempted_prefix_cache_queries"]
    hits = counters["prefix_cache_hits"] + counters["preempted_prefix_cache_hits"]
    return {
        "completed": counters["num_finished_requests"]
        if "num_finished_requests" in counters
        else len(requests),
        "first_admission_hit_rate": counters["prefix_cache_hit_rate"],
        "all_admissions_hit_rate": hits / queries if queries else 0.0,
        "preemptions": counters["num_preemptions"],
        "simulated_seconds": counters["simulated_duration_seconds"],
        "requests": requests,
    }


# ------------------------------------------------------------------ running


def _measure(command: list[str], env: dict[str, str] | None = None) -> tuple[dict, str]:
    """Run ``command``; its own CPU seconds, peak RSS and wall time (``os.wait4``)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        wall0 = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - wall0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if child.returncode:
        raise SystemExit(
            f"{' '.join(command[:4])} ... failed (exit {child.returncode}):\n{stderr[-3000:]}"
        )
    figures = {
        "wall_seconds": wall,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
    }
    return figures, stdout


def _run_mocker(python: str, trace_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        python, __file__, "--mocker-child", str(trace_path),
        "--block-size", str(args.block_size), "--usable-blocks", str(args.usable_blocks),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens),
        "--max-num-seqs", str(args.max_num_seqs),
    ]  # fmt: skip
    figures, stdout = _measure(command)
    line = next(line for line in stdout.splitlines() if line.startswith("ROW "))
    return {**figures, **json.loads(line[4:])}


def _run_kvframe(
    core: str | None,
    args: argparse.Namespace,
    trace_keys: list[tuple[int, int, int]],
    tree: str | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vs-mocker-") as out_dir:
        command = [
            sys.executable, "-m", "kvframe.cli", "run", args.trace,
            "--no-config", "--no-progress", "-q", "--json", "--force", "--out", out_dir,
            "--num-gpu-blocks", str(args.usable_blocks + 1),  # + vLLM's null block
            "--block-size", str(args.block_size),
            "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            "--max-num-seqs", str(args.max_num_seqs),
        ]  # fmt: skip
        if args.limit:
            command += ["--limit", str(args.limit)]
        if core is not None:
            command += ["--core", core]
        figures, _ = _measure(command, tree_env(tree) if tree else None)
        return {**figures, **_kvframe_row(Path(out_dir), trace_keys)}


def _kvframe_has_core_option() -> bool:
    text = subprocess.run(
        [sys.executable, "-m", "kvframe.cli", "run", "--help"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return "--core" in text


def _plain_trace(trace: str, limit: int, folder: Path) -> tuple[Path, list[tuple[int, int, int]]]:
    """The trace as plain JSONL for the mocker (first ``limit`` lines), and each
    line's (timestamp, prompt length, output length) for matching requests."""
    from kvframe.workloads.bundled import find_bundled

    bundled = find_bundled(trace)
    if bundled is not None:
        opener = bundled.open_text
    else:
        import gzip

        path = Path(trace)
        if not path.is_file():
            raise SystemExit(f"--trace {trace}: neither a bundled workload nor a file")

        def opener() -> Any:
            return gzip.open(path, "rt") if path.suffix == ".gz" else path.open()

    target = folder / "trace.jsonl"
    keys = []
    with opener() as source, target.open("w") as sink:
        for line in source:
            if not line.strip():
                continue
            if limit and len(keys) == limit:
                break
            sink.write(line)
            rec = json.loads(line)
            keys.append((rec["timestamp"], rec["input_length"], rec["output_length"]))
    return target, keys


# ------------------------------------------------------------------ report


def _agreement(a: list[list], b: list[list]) -> tuple[int, int, int]:
    """Requests with equal first-admission hits and equal preemption counts, matched
    by (arrival, prompt, output); identical keys are compared as sorted groups."""

    def grouped(rows: list[list]) -> dict[tuple, list[tuple[int, int]]]:
        groups: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for row in rows:
            groups[(float(row[0]), row[1], row[2])].append((row[3], row[4]))
        return groups

    ga, gb = grouped(a), grouped(b)
    same_hits = same_preempt = matched = 0
    for key, rows in ga.items():
        other = gb.get(key)
        if other is None or len(other) != len(rows):
            continue
        matched += len(rows)
        for column in (0, 1):
            pairs = zip(
                sorted(r[column] for r in rows), sorted(r[column] for r in other), strict=True
            )
            same = sum(x == y for x, y in pairs)
            if column == 0:
                same_hits += same
            else:
                same_preempt += same
    return matched, same_hits, same_preempt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="mooncake:conversation", help="bundled name or path")
    parser.add_argument("--limit", type=int, default=0, help="first N requests (0: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--core",
        help="kvframe cores to run, e.g. python,compiled (passed as `kvframe run --core`)",
    )
    parser.add_argument(
        "--mocker-python",
        default=os.environ.get(MOCKER_PYTHON_ENV),
        help=f"interpreter with ai-dynamo-runtime installed (default: ${MOCKER_PYTHON_ENV})",
    )
    parser.add_argument(
        "--tree",
        help="also run kvframe from this checkout (e.g. a git worktree of an older commit)",
    )
    parser.add_argument(
        "--tree-core",
        help="cores to run the --tree checkout on, e.g. python,compiled (default: its auto)",
    )
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--usable-blocks", type=int, default=27_770)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--mocker-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mocker_child:
        _mocker_child(args)
        return
    if not args.mocker_python:
        parser.error(
            f"give --mocker-python or set ${MOCKER_PYTHON_ENV}: an interpreter with "
            f"ai-dynamo-runtime, e.g. after `{INSTALL_HINT}`"
        )
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")

    cores: list[str | None] = [None]
    if args.core:
        if _kvframe_has_core_option():
            cores = list(args.core.split(","))
        else:
            print(f"note: `kvframe run` has no --core option in this checkout (pure Python "
                  f"core only); --core {args.core} ignored, kvframe runs once a round")  # fmt: skip
    labels = ["mocker"] + [f"kvframe ({c})" if c else "kvframe" for c in cores]
    tree_cores: dict[str, str | None] = {}
    if args.tree:
        if not os.path.isdir(os.path.join(args.tree, "kvframe")):
            parser.error(f"--tree {args.tree}: not a checkout with a kvframe/ package")
        for core in args.tree_core.split(",") if args.tree_core else [None]:
            tree_cores[f"tree ({core})" if core else "kvframe (--tree)"] = core
        labels.extend(tree_cores)

    with tempfile.TemporaryDirectory(prefix="vs-mocker-trace-") as folder:
        trace_path, keys = _plain_trace(args.trace, args.limit, Path(folder))
        print(
            f"trace {args.trace} ({len(keys)} requests), {args.usable_blocks} usable blocks x "
            f"{args.block_size} tokens, {args.max_num_batched_tokens} batched tokens, "
            f"{args.max_num_seqs} seqs; load average {os.getloadavg()[0]:.1f} at start"
        )
        header = (
            f"{'round':>5}  {'side':<20}{'wall s':>8}{'cpu s':>8}{'peak MB':>9}"
            f"{'cpu/mocker':>12}{'MB/mocker':>11}"
        )
        print(header)
        print("-" * len(header))
        rows: dict[str, list[dict]] = {label: [] for label in labels}
        for round_no in range(1, args.rounds + 1):
            order = labels if round_no % 2 else labels[1:] + labels[:1]
            results = {}
            for label in order:
                if label == "mocker":
                    results[label] = _run_mocker(args.mocker_python, trace_path, args)
                elif label in tree_cores:
                    results[label] = _run_kvframe(tree_cores[label], args, keys, args.tree)
                else:
                    results[label] = _run_kvframe(cores[labels.index(label) - 1], args, keys)
            base = results["mocker"]
            for label in labels:
                row = results[label]
                rows[label].append(row)
                ratios = ("", "")
                if label != "mocker":
                    ratios = (
                        f"{row['cpu_seconds'] / base['cpu_seconds']:.2f}",
                        f"{row['peak_rss_mb'] / base['peak_rss_mb']:.2f}",
                    )
                print(
                    f"{round_no:>5}  {label:<20}{row['wall_seconds']:>8.1f}"
                    f"{row['cpu_seconds']:>8.1f}{row['peak_rss_mb']:>9.0f}"
                    f"{ratios[0]:>12}{ratios[1]:>11}",
                    flush=True,
                )

    print()
    print("decisions (last round; per-request agreement with the mocker)")
    header = (
        f"{'side':<20}{'done':>7}{'hit 1st adm':>13}{'hit all adm':>13}{'preempt':>9}"
        f"{'sim s':>10}{'same hits':>14}{'same preempt':>15}"
    )
    print(header)
    print("-" * len(header))
    mocker = rows["mocker"][-1]
    for label in labels:
        row = rows[label][-1]
        matched, same_hits, same_preempt = _agreement(row["requests"], mocker["requests"])
        print(
            f"{label:<20}{row['completed']:>7}{row['first_admission_hit_rate']:>13.4%}"
            f"{row['all_admissions_hit_rate']:>13.4%}{row['preemptions']:>9}"
            f"{row['simulated_seconds']:>10.0f}"
            f"{f'{same_hits}/{matched}':>14}{f'{same_preempt}/{matched}':>15}"
        )
    if len(labels) > 2:
        first = rows[labels[1]][-1]
        for label in labels[2:]:
            same = rows[label][-1]["requests"] == first["requests"]
            print(f"{label} decisions identical to {labels[1]}: {same}")
    print()
    print("cpu s, min / median over rounds, and the ratio of the minima to the mocker's")
    base_min = min(r["cpu_seconds"] for r in rows["mocker"])
    for label in labels:
        cpu = sorted(r["cpu_seconds"] for r in rows[label])
        print(
            f"  {label:<20}{cpu[0]:>8.2f}{cpu[len(cpu) // 2]:>8.2f}"
            f"{cpu[0] / base_min:>8.2f}x   peak {max(r['peak_rss_mb'] for r in rows[label]):.0f} MB"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
