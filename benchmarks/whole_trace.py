"""Wall time and peak memory of a whole-trace run: the engine against its step-by-step reference.

    .venv/bin/python benchmarks/whole_trace.py                        # whole conversation trace
    .venv/bin/python benchmarks/whole_trace.py --sizes 1000,4000,12031
    .venv/bin/python benchmarks/whole_trace.py --trace mooncake:synthetic
    .venv/bin/python benchmarks/whole_trace.py --trace chat.jsonl      # e.g. from kvframe gen chat
    .venv/bin/python benchmarks/whole_trace.py --modes fast,step,eager
    git worktree add /tmp/kvframe-before eb26949                      # an older kvframe ...
    .venv/bin/python benchmarks/whole_trace.py --modes fast,step,tree --tree /tmp/kvframe-before
    .venv/bin/python benchmarks/whole_trace.py --modes python,compiled --rounds 3   # the two cores

Each run is a fresh subprocess (so its peak RSS is its own, read from
``getrusage``) that loads the trace and replays it through
``Engine.from_config(EngineConfig(...))`` as ``kvframe run`` does. Modes, run
interleaved per size:

* ``fast`` -- the engine as it ships: runs of plain decode steps taken in one
  go (:mod:`kvframe.core.decode_run`), lazy prompts.
* ``step`` -- the step-by-step reference: ``EngineConfig(step_by_step=True)``,
  every step through the whole scheduler and executor.
* ``eager`` -- step by step *and* every prompt materialised as a list of ints
  (with ``all_token_ids`` a copy), the request representation before lazy
  prompts: the memory reference.
* ``python`` / ``compiled`` -- ``fast`` with the block pool's core forced
  (``EngineConfig(core=...)``, :mod:`kvframe.core.compiled`): the pure-Python
  reference and the compiled core (``scripts/build-core``), for their ratio.
* ``tree`` -- another checkout of kvframe (``--tree DIR``, e.g. a ``git
  worktree`` of an older commit) and its bundled plugins imported first through
  ``PYTHONPATH``, run as that version runs it: a before/after comparison in one run, on one machine.

Printed per size and mode: wall seconds, CPU seconds, peak RSS, engine steps,
and each mode's ratio to the base mode (``fast`` when run, else the first
mode); then which summary counters differ between the modes (none expected:
the modes must decide identically). ``--rounds N`` repeats the modes N times,
alternating, so a loaded machine's drift hits every mode alike.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

_EXCLUDED = {"wall_clock_seconds", "simulated_requests_per_wall_second"}
MODES = ("fast", "step", "eager", "tree", "python", "compiled")


def _child(
    trace: str, limit: int, mode: str, offload: str | None, gpu_eviction: str | None = None
) -> None:
    from kvframe.engine import Engine, EngineConfig
    from kvframe.workloads import load_workload

    if mode == "eager":
        import importlib

        # The reference representation: prompts as lists of Python ints. The module
        # that builds requests: kvframe.engine.step (kvframe.engine.engine before it).
        for name in ("kvframe.engine.step", "kvframe.engine.engine"):
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            if hasattr(module, "PromptTokens"):
                module.PromptTokens = lambda prompt: prompt.token_ids()
                break
    wall0, cpu0 = time.perf_counter(), time.process_time()
    workload = load_workload(trace, limit=limit or None)
    if mode == "tree":
        config = EngineConfig(offload=offload)  # that version's default path
    else:
        config = EngineConfig(
            offload=offload,
            step_by_step=mode in ("step", "eager"),
            core=mode if mode in ("python", "compiled") else "auto",
            gpu_eviction=gpu_eviction,
        )
    engine = Engine.from_config(config)
    result = engine.run(workload)
    row = {
        "requests": len(workload),
        "mode": mode,
        "wall_seconds": time.perf_counter() - wall0,
        "cpu_seconds": time.process_time() - cpu0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "run_steps": getattr(engine, "num_decode_run_steps", 0),
        "core": getattr(engine.scheduler.kv_cache_manager, "core", "python"),
        "counters": {k: v for k, v in result.counters.items() if k not in _EXCLUDED},
    }
    print("ROW " + json.dumps(row))


def tree_env(tree: str) -> dict[str, str]:
    """The environment that makes a child import kvframe from the checkout ``tree``,
    with that checkout's own bundled plugins (written against its kvframe)."""
    env = dict(os.environ)
    plugins = sorted(str(p) for p in Path(tree, "plugins").glob("*/") if p.is_dir())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, *plugins, env.get("PYTHONPATH")]))
    return env


def _run(
    trace: str,
    limit: int,
    mode: str,
    offload: str | None,
    tree: str | None,
    gpu_eviction: str | None = None,
) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--trace", trace,
               "--sizes", str(limit)]  # fmt: skip
    if offload:
        command += ["--offload", offload]
    if gpu_eviction:
        command += ["--gpu-eviction", gpu_eviction]
    env = tree_env(tree) if mode == "tree" else dict(os.environ)  # type: ignore[arg-type]
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    line = next(line for line in out.splitlines() if line.startswith("ROW "))
    return json.loads(line[4:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trace", default="mooncake:conversation", help="a bundled trace name or a path"
    )
    parser.add_argument("--sizes", default="0", help="request counts, 0 = the whole trace")
    parser.add_argument("--offload", help="an offload tier, e.g. cpu:capacity=8GiB")
    parser.add_argument(
        "--gpu-eviction", help="a GPU eviction policy, e.g. lru (runs on the Python pool)"
    )
    parser.add_argument("--modes", default="fast,step", help=f"of {', '.join(MODES)}")
    parser.add_argument("--tree", help="for mode 'tree': a kvframe checkout to compare with")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the modes, alternating")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.trace, int(args.sizes), args.child, args.offload, args.gpu_eviction)
        return

    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    if "tree" in modes and not (args.tree and os.path.isdir(os.path.join(args.tree, "kvframe"))):
        parser.error("mode 'tree' needs --tree DIR, a checkout with a kvframe/ package")
    print(f"trace {args.trace}, tier {args.offload or 'none'}, "
          f"GPU eviction {args.gpu_eviction or 'vLLM free queue'}, "
          f"load average {os.getloadavg()[0]:.1f} at start")  # fmt: skip
    header = (
        f"{'requests':>9}{'mode':>9}{'wall s':>9}{'cpu s':>9}{'peak MB':>9}"
        f"{'steps':>9}{'in runs':>9}{'core':>9}{'cpu/base':>10}{'MB/base':>9}"
    )
    print(header)
    print("-" * len(header))
    for size in (int(s) for s in args.sizes.split(",")):
        all_rows = []
        base_mode = "fast" if "fast" in modes else modes[0]
        for _ in range(args.rounds):
            rows = {}
            for mode in modes:
                row = rows[mode] = _run(
                    args.trace, size, mode, args.offload, args.tree, args.gpu_eviction
                )
                all_rows.append(row)
                base = rows.get(base_mode)
                cpu_ratio = f"{row['cpu_seconds'] / base['cpu_seconds']:.2f}" if base else ""
                mb_ratio = f"{row['peak_rss_mb'] / base['peak_rss_mb']:.2f}" if base else ""
                print(
                    f"{row['requests']:>9}{mode:>9}{row['wall_seconds']:>9.1f}"
                    f"{row['cpu_seconds']:>9.1f}{row['peak_rss_mb']:>9.0f}"
                    f"{row['counters']['num_steps']:>9}{row['run_steps']:>9}"
                    f"{row.get('core', ''):>9}{cpu_ratio:>10}{mb_ratio:>9}",
                    flush=True,
                )
        first = all_rows[0]
        differ = sorted(
            {
                key
                for row in all_rows
                for key in first["counters"]
                if row["counters"].get(key) != first["counters"][key]
            }
        )
        print(f"{'':>9}counters differing between modes: {differ or 'none'}")
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
