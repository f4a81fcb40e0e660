"""Differential fidelity check: kvframe's scheduler against vLLM V1's, step by step.

::

    python tools/differential/compare.py                      # every workload, both policies
    python tools/differential/compare.py --workload pressure --workload prefix
    python tools/differential/compare.py --vllm-python /path/to/venv/bin/python
    python tools/differential/compare.py --vllm-only          # sanity-check the vLLM side
    python tools/differential/compare.py --tier               # with a CPU offload tier
    python tools/differential/compare.py --bridge --policy fcfs --policy priority \
        --policy continuum                                    # the kvframe-vllm bridge
    python tools/differential/compare.py --bridge --vllm-version 0.33.0 --blocks
    python tools/differential/compare.py --bridge --tier --policy fcfs   # bridge + vLLM's tier
    python tools/differential/compare.py --bridge --tier --vllm-version 0.33.0 --blocks
    python tools/differential/compare.py --tier --workload tier-reuse --eviction arc \
        --factor 2 --store-threshold 2 --rule seeded
    python tools/differential/compare.py --vllm-version 0.33.0 --blocks
    python tools/differential/compare.py --switches --blocks --vllm-version 0.33.0
    python tools/differential/compare.py --scheduling both --blocks   # sync and async

``--tier`` runs the tier set instead (``workloads.TIER_WORKLOADS``): each
workload x eviction policy x ``block_size_factor`` x ``store_threshold`` x
completion rule, under fcfs unless ``--policy`` says otherwise, with vLLM's
OffloadingConnector on one side and kvframe's on the other, the worker played
by ``stepping.ScriptedWorker`` for both. Against vLLM 0.33.0 (``--tier
--vllm-version 0.33.0``) the connectors are 0.33.0's, whose transfers are
numbered jobs: vLLM's own on one side, kvframe's ``JobOffloadingConnector``
over its ``RequestScopedOffloadManager`` on the other, the worker played by
``stepping.JobWorker`` for both (docs/fidelity.md, "The tier under vLLM
0.33.0"). ``--bridge --tier --vllm-version 0.33.0`` compares the bridge
(kvframe's scheduler inside vLLM 0.33.0, driving 0.33.0's own connector and
CPU tier) with vLLM 0.33.0's scheduler and the same connector, the same
``JobWorker`` on both sides (fcfs and priority).

Generates the workloads (``workloads.py``), runs ``vllm_driver.py`` under the
vLLM reference virtualenv and ``kvframe_driver.py`` under this interpreter —
two subprocesses, in parallel — then diffs their per-step records. Prints one
row per (workload, policy) and, for the first differing step of each, both
records side by side. Exits 1 on any difference or driver crash, 2 when no
vLLM interpreter can be found.

``--scheduling async`` (or ``both``) runs vLLM's ``AsyncScheduler`` against
kvframe's asynchronous-scheduling mode, driven in the engine core's batch-queue
order (``stepping.run_async``: step N+1 scheduled before step N's output is
applied); the async runs are named ``<workload>-async``. With ``--bridge`` the
bridge runs under the same loop against vLLM's ``AsyncScheduler`` (fcfs,
priority) and kvframe's async mode (continuum). With ``--tier`` the connector's
metadata is run by the scripted worker (0.33.0: ``JobWorker``) when its step is
queued, and the worker's report is applied with that step's output (with
``--bridge``, against vLLM 0.19.1 only).

``--vllm-version`` picks the release compared against, 0.19.1 (the default)
or 0.33.0: the workloads carry it (``config["vllm"]``), kvframe's driver runs
the core with that fidelity target, and vLLM's driver refuses an interpreter
of another release. The vLLM interpreter is, in order: ``--vllm-python``, the
release's environment variable (``$KVFRAME_VLLM_PYTHON`` for 0.19.1,
``$KVFRAME_VLLM033_PYTHON`` for 0.33.0), ``<repo>/.vllm-reference-venv/bin/python``
(0.19.1) or ``<repo>/.vllm033-reference-venv/bin/python`` (0.33.0). Build them with
``bash ../shared/tools/vllm-reference/install.sh .vllm-reference-venv`` and
``bash tools/vllm-reference/install-0.33.sh .vllm033-reference-venv``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybrid_workloads import HYBRID_NAMES, hybrid_names, hybrid_workloads
from switch_workloads import SWITCH_WORKLOADS, switch_workload
from workloads import (
    BRIDGE_POLICIES,
    COMPLETION_RULES,
    DEFAULT_NUM_REQUESTS,
    POLICIES,
    TIER_EVICTIONS,
    TIER_FACTORS,
    TIER_THRESHOLDS,
    TIER_WORKLOADS,
    WORKLOADS,
    all_workloads,
    tier_workloads,
    write_workload,
)

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
DEFAULT_OUT_DIR = REPO_ROOT / "out" / "differential"
VLLM_PYTHON_ENV = "KVFRAME_VLLM_PYTHON"
VLLM_VERSIONS = ("0.19.1", "0.33.0")
"""The vLLM releases the harness compares against (kvframe's fidelity targets)."""
_VENVS = {
    "0.19.1": (VLLM_PYTHON_ENV, ".vllm-reference-venv"),
    "0.33.0": ("KVFRAME_VLLM033_PYTHON", ".vllm033-reference-venv"),
}

Record = dict[str, Any]


def find_vllm_python(
    explicit: str | os.PathLike[str] | None = None, version: str = "0.19.1"
) -> Path | None:
    """The reference interpreter of vLLM ``version``, or None when there is none to use."""
    env_var, venv = _VENVS[version]
    candidates: list[str | os.PathLike[str]] = []
    if explicit:
        candidates.append(explicit)
    if os.environ.get(env_var):
        candidates.append(os.environ[env_var])
    candidates.append(REPO_ROOT / venv / "bin" / "python")
    for candidate in candidates:
        path = Path(candidate)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        if explicit and candidate is explicit:
            return None  # an explicit choice that does not exist is not silently replaced
    return None


# --------------------------------------------------------------------------
# Running the drivers
# --------------------------------------------------------------------------


@dataclass
class DriverRun:
    side: str
    returncode: int
    output: str


def tree_paths() -> list[str]:
    """This checkout's kvframe and plugin packages, first on a driver's import path.

    The vLLM interpreter may have kvframe installed from another checkout (the
    bridge driver imports kvframe there); putting this tree first makes every
    driver run the code under test. Entry points still come from whatever is
    installed, and resolve to these modules.
    """
    plugins = sorted(str(p.parent) for p in (REPO_ROOT / "plugins").glob("*/pyproject.toml"))
    examples = sorted(str(p.parent) for p in (REPO_ROOT / "examples").glob("*/pyproject.toml"))
    return [str(REPO_ROOT), *plugins, *examples]


def _run_driver(
    side: str, python: Path | str, script: str, paths: Sequence[Path], out_dir: Path, blocks: bool
) -> DriverRun:
    cmd = [str(python), str(HERE / script), *map(str, paths), "--out-dir", str(out_dir)]
    if blocks:
        cmd.append("--blocks")
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join([*tree_paths(), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE)
    return DriverRun(side, proc.returncode, proc.stdout + proc.stderr)


def run_drivers(
    workload_paths: Sequence[Path],
    out_dir: Path,
    *,
    vllm_python: Path | None,
    kvframe_python: Path | str | None = sys.executable,
    blocks: bool = False,
) -> dict[str, DriverRun]:
    """Run the drivers (both in parallel); records land in ``out_dir/{vllm,kvframe}``."""
    jobs: list[tuple[str, Path | str, str, Sequence[Path]]] = []
    if vllm_python is not None:
        jobs.append(("vllm", vllm_python, "vllm_driver.py", workload_paths))
    if kvframe_python is not None:
        jobs.append(("kvframe", kvframe_python, "kvframe_driver.py", workload_paths))
    with ThreadPoolExecutor(max_workers=len(jobs) or 1) as pool:
        futures = [
            pool.submit(_run_driver, side, py, script, paths, out_dir / side, blocks)
            for side, py, script, paths in jobs
            if paths
        ]
        return {f.result().side: f.result() for f in futures}


def iter_records(path: Path) -> Iterator[Record]:
    """Step records of one run, streamed; a driver's in-band error record included."""
    if not path.exists():
        yield {"error": f"no records at {path}"}
        return
    with path.open() as fh:
        for line in fh:
            yield json.loads(line)


# --------------------------------------------------------------------------
# Diffing and reporting
# --------------------------------------------------------------------------


OPTIONAL_FIELDS = ("blocks", "outputs", "connector")
"""Record fields compared only when both sides recorded them (``--blocks``;
``outputs`` and, with a tier, ``connector`` -- the connector's stats and the KV
events -- exist only in vLLM-typed records: vLLM's and the bridge's)."""


def same_step(a: Record, b: Record) -> bool:
    """Records agree; an optional field counts only when both sides recorded it."""
    drop = {k for k in OPTIONAL_FIELDS if (k in a) != (k in b)}
    if drop:
        a = {k: v for k, v in a.items() if k not in drop}
        b = {k: v for k, v in b.items() if k not in drop}
    return a == b


class Summary:
    """Running totals of one side's records (what the table shows)."""

    __slots__ = (
        "evictions",
        "external_tokens",
        "hit_tokens",
        "loads",
        "preemptions",
        "requests",
        "steps",
        "stores",
    )

    def __init__(self) -> None:
        self.steps = self.requests = self.preemptions = self.hit_tokens = 0
        self.external_tokens = self.loads = self.stores = self.evictions = 0

    def add(self, r: Record) -> None:
        self.steps += 1
        self.requests += len(r["new"])
        self.preemptions += len(r["preempted"])
        self.hit_tokens += sum(r["prefix_hits"].values())
        if "loads" in r:
            self.loads += len(r["loads"])
            self.stores += len(r["stores"])
            self.evictions += len(r["tier_evicted"])
            self.external_tokens += sum(r["external_hits"][rid] for rid in r["loads"])

    def as_dict(self) -> dict[str, int]:
        return {
            "steps": self.steps,
            "requests": self.requests,
            "preemptions": self.preemptions,
            "prefix_hit_tokens": self.hit_tokens,
            "tier_hit_tokens": self.external_tokens,
            "tier_loads": self.loads,
            "tier_stores": self.stores,
            "tier_evictions": self.evictions,
        }


def summarize(records: Iterable[Record]) -> dict[str, int]:
    """Totals used in the table: steps, requests, preemptions, prefix-hit tokens."""
    summary = Summary()
    for r in records:
        if "error" not in r:
            summary.add(r)
    return summary.as_dict()


@dataclass
class Result:
    """The comparison of one workload under one policy.

    Only totals and the first differing step are kept: a 1000-request
    pressure run is ~25,000 steps per side, too many to hold for 26 runs.
    """

    workload: str
    vllm_path: Path
    kvframe_path: Path | None
    vllm: dict[str, int] = field(default_factory=dict)
    kvframe: dict[str, int] | None = None
    vllm_error: str | None = None
    kvframe_error: str | None = None
    num_diffs: int = 0
    first_diff: int | None = None
    first_pair: tuple[Record | None, Record | None] = (None, None)
    previous: Record | None = None
    """The step before the first differing one (identical on both sides)."""
    vllm_hang: int | None = None
    """vLLM deadlocked at this step: from it to the step cap it scheduled nothing
    and its records did not change, and kvframe matched every step before it.
    The state kvframe's admission-stall breaker breaks (docs/fidelity.md)."""

    @property
    def ok(self) -> bool:
        if self.vllm_hang is not None:
            return not self.kvframe_error
        return not (self.num_diffs or self.vllm_error or self.kvframe_error)


def _still(record: Record) -> Record:
    """A record without its step number: equal for two steps where nothing happened."""
    return {k: v for k, v in record.items() if k != "step"}


def _error_text(r: Record) -> str:
    return r["error"] + ("\n" + r["traceback"] if r.get("traceback") else "")


def compare_runs(workload: str, vllm_path: Path, kvframe_path: Path | None) -> Result:
    """Stream both record files side by side; a step only one side has differs."""
    res = Result(workload, vllm_path, kvframe_path)
    vs, ks = Summary(), Summary()
    other: Iterator[Record] = iter_records(kvframe_path) if kvframe_path else iter(())
    prev: Record | None = None
    sentinel: Record = {}
    frozen: Record | None = None  # vLLM's record at the first difference, if idle since
    for a in iter_records(vllm_path):
        if "error" in a:
            res.vllm_error = _error_text(a)
            a = sentinel
        else:
            vs.add(a)
            if res.first_diff is not None and frozen is not None and _still(a) != frozen:
                frozen = None
        b = next(other, None) if kvframe_path else sentinel
        if b is not None and "error" in b:
            res.kvframe_error = _error_text(b)
            b = None
        elif b is not None and b is not sentinel:
            ks.add(b)
        if kvframe_path and a is not sentinel and (b is None or not same_step(a, b)):
            res.num_diffs += 1
            if res.first_diff is None:
                res.first_diff, res.first_pair, res.previous = a["step"], (a, b), prev
                frozen = _still(a) if not a["scheduled"] else None
        prev = a
    for b in other:  # steps only kvframe ran
        if "error" in b:
            res.kvframe_error = _error_text(b)
            continue
        ks.add(b)
        res.num_diffs += 1
        if res.first_diff is None:
            res.first_diff, res.first_pair, res.previous = b["step"], (None, b), prev
    if (
        frozen is not None
        and res.vllm_error is not None
        and "StepCapExceeded" in res.vllm_error
        and not res.kvframe_error
    ):
        res.vllm_hang = res.first_diff
    res.vllm = vs.as_dict()
    res.kvframe = ks.as_dict() if kvframe_path else None
    return res


def _fmt_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


TIER_COLUMNS = ("tier_hit_tokens", "tier_loads", "tier_stores", "tier_evictions")


def format_table(results: Sequence[Result], tier: bool = False, bridge: bool = False) -> str:
    header = [
        "workload",
        "policy",
        "steps",
        "requests",
        "preemptions",
        "prefix-hit tok",
        *(["tier-hit tok", "loads", "stores", "evictions"] if tier else []),
        "diff steps",
    ]
    rows = [header]
    for res in results:
        s = res.vllm
        name, mode = res.workload, ""
        if name.endswith("-async"):
            name, mode = name[: -len("-async")], " async"
        base, _, policy = name.rpartition("-")
        policy += mode
        if res.kvframe is None:
            diff = "-"
        elif res.vllm_hang is not None:
            diff = f"0, vLLM hangs at {res.vllm_hang}"
        elif res.vllm_error or res.kvframe_error:
            diff = "CRASH"
        else:
            diff = str(res.num_diffs)
        k = res.kvframe if res.kvframe is not None else s

        def cell(key: str, s: dict[str, int] = s, k: dict[str, int] = k) -> str:
            return str(s[key]) if s[key] == k[key] else f"{s[key]}/{k[key]}"

        rows.append(
            [
                base,
                policy,
                cell("steps"),
                cell("requests"),
                cell("preemptions"),
                cell("prefix_hit_tokens"),
                *(cell(k) for k in TIER_COLUMNS if tier),
                diff,
            ]
        )
    note = (
        "(a/b: reference/bridge where they disagree; the reference is vLLM for fcfs and "
        "priority, kvframe for continuum)"
        if bridge
        else "(a/b: vLLM/kvframe where they disagree)"
    )
    return _fmt_table(rows) + "\n" + note


def _wrap(value: Any, width: int) -> list[str]:
    text = json.dumps(value, separators=(",", ":"))
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def side_by_side(a: Record | None, b: Record | None, width: int = 64) -> str:
    """Both records of one step in two columns; differing fields marked ``!``."""
    lines = [f"  {'':12} {'vLLM':<{width}} | kvframe"]
    keys = list((a or b or {}).keys())
    for extra in b or {}:
        if extra not in keys:
            keys.append(extra)
    for key in keys:
        va = a.get(key, "<absent>") if a is not None else "<no step>"
        vb = b.get(key, "<absent>") if b is not None else "<no step>"
        mark = "!" if va != vb else " "
        left, right = _wrap(va, width), _wrap(vb, width)
        for i in range(max(len(left), len(right))):
            label = f"{mark}{key}" if i == 0 else ""
            lc = left[i] if i < len(left) else ""
            rc = right[i] if i < len(right) else ""
            lines.append(f"  {label:12} {lc:<{width}} | {rc}")
    if a is not None and b is not None and a.get("scheduled") != b.get("scheduled"):
        sa, sb = a["scheduled"], b["scheduled"]
        i = next(
            (j for j, (x, y) in enumerate(zip(sa, sb, strict=False)) if x != y),
            min(len(sa), len(sb)),
        )
        lines.append(
            f"  scheduled lists agree on their first {i} entries; then vLLM "
            f"{sa[i] if i < len(sa) else '<end>'} vs kvframe {sb[i] if i < len(sb) else '<end>'}"
        )
    return "\n".join(lines)


def format_details(res: Result) -> str:
    out = [f"== {res.workload}"]
    if res.vllm_error:
        out.append(f"vLLM driver crashed after {res.vllm['steps']} steps:\n{res.vllm_error}")
    if res.kvframe_error:
        steps = res.kvframe["steps"] if res.kvframe else 0
        out.append(f"kvframe driver crashed after {steps} steps:\n{res.kvframe_error}")
    if res.first_diff is not None and res.kvframe is not None:
        out.append(
            f"first differing step: {res.first_diff} ({res.num_diffs} differing steps; "
            f"vLLM ran {res.vllm['steps']} steps, kvframe {res.kvframe['steps']})"
        )
        if res.previous is not None:
            out.append("previous step (identical on both sides):")
            out.append("  " + json.dumps(res.previous, separators=(",", ":"))[:2000])
        out.append(side_by_side(*res.first_pair))
    out.append(f"records: {res.vllm_path}  {res.kvframe_path or ''}".rstrip())
    return "\n".join(out)


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


def run_comparison(
    names: Sequence[str] | None = None,
    policies: Sequence[str] = POLICIES,
    *,
    num_requests: int = DEFAULT_NUM_REQUESTS,
    seed: int = 0,
    vllm_python: Path,
    kvframe_python: Path | str | None = sys.executable,
    out_dir: Path = DEFAULT_OUT_DIR,
    blocks: bool = False,
    tier: dict[str, Sequence[Any]] | None = None,
    bridge: bool = False,
    vllm_version: str = "0.19.1",
    switches: bool = False,
    scheduling: Sequence[str] = ("sync",),
) -> tuple[list[Result], dict[str, DriverRun]]:
    """Generate, run both drivers, diff. ``kvframe_python=None`` runs vLLM only.

    ``vllm_version``: the release ``vllm_python`` holds; the workloads carry it
    (``config["vllm"]``) so that kvframe's driver runs that fidelity target.

    ``switches`` runs the small workloads of ``switch_workloads.py`` instead,
    one per fidelity switch, each where vLLM 0.19.1 and 0.33.0 decide apart.

    ``scheduling``: ``"sync"`` and/or ``"async"``; each async run is the workload
    with ``config["async_scheduling"]`` set, named ``<workload>-async``.

    ``tier`` selects the tier set instead: a dict of ``evictions``, ``factors``,
    ``thresholds`` and ``rules`` (each optional; every value by default).

    ``bridge`` compares the kvframe-vllm bridge (kvframe's core behind vLLM's
    scheduler interface, in vLLM's types) instead of kvframe: against vLLM for
    vLLM's policies, against kvframe for ``BRIDGE_POLICIES`` (Continuum), which
    vLLM lacks. The results' "kvframe" side is then the bridge.
    """
    if switches:
        workloads = [switch_workload(name, vllm_version) for name in SWITCH_WORKLOADS]
    elif (names and all(name in HYBRID_NAMES for name in names)) or names == ["hybrid"]:
        hybrid = list(hybrid_names(vllm_version)) if names == ["hybrid"] else list(names)
        workloads = hybrid_workloads(hybrid, tuple(policies), num_requests, seed)
    elif tier is not None:
        workloads = tier_workloads(names, policies, num_requests=num_requests, seed=seed, **tier)
    else:
        workloads = all_workloads(names, policies, num_requests, seed)
    for wl in workloads:
        wl["config"]["vllm"] = vllm_version
    workloads = with_scheduling(workloads, scheduling)
    return run_workloads(
        workloads,
        vllm_python=vllm_python,
        kvframe_python=kvframe_python,
        out_dir=out_dir,
        blocks=blocks,
        bridge=bridge,
    )


def run_workloads(
    workloads: Sequence[dict[str, Any]],
    *,
    vllm_python: Path,
    kvframe_python: Path | str | None = sys.executable,
    out_dir: Path = DEFAULT_OUT_DIR,
    blocks: bool = False,
    bridge: bool = False,
) -> tuple[list[Result], dict[str, DriverRun]]:
    """Run both drivers over workloads already built, and diff: ``run_comparison``'s
    second half, for a caller whose set of workloads is not one of its matrices (the
    tests' covering sets of tier variants: ``tests/differential``)."""
    if bridge:
        return _run_bridge_comparison(workloads, out_dir, vllm_python, kvframe_python, blocks)
    paths = [write_workload(wl, out_dir / "workloads" / f"{wl['name']}.json") for wl in workloads]
    runs = run_drivers(
        paths, out_dir, vllm_python=vllm_python, kvframe_python=kvframe_python, blocks=blocks
    )
    results = [
        compare_runs(
            wl["name"],
            out_dir / "vllm" / f"{wl['name']}.jsonl",
            out_dir / "kvframe" / f"{wl['name']}.jsonl" if kvframe_python is not None else None,
        )
        for wl in workloads
    ]
    return results, runs


SCHEDULING_MODES = {"sync": ("sync",), "async": ("async",), "both": ("sync", "async")}


def with_scheduling(
    workloads: Sequence[dict[str, Any]], scheduling: Sequence[str]
) -> list[dict[str, Any]]:
    """The workloads once per scheduling mode: as they are for ``sync``, renamed
    ``<name>-async`` with ``config["async_scheduling"]`` for ``async``."""
    out: list[dict[str, Any]] = []
    for mode in scheduling:
        if mode not in ("sync", "async"):
            raise ValueError(f"unknown scheduling mode {mode!r} (sync or async)")
    for wl in workloads:
        if "sync" in scheduling:
            out.append(wl)
        if "async" in scheduling:
            out.append(
                {
                    **wl,
                    "name": f"{wl['name']}-async",
                    "config": {**wl["config"], "async_scheduling": True},
                }
            )
    return out


def _run_bridge_comparison(
    workloads: Sequence[dict[str, Any]],
    out_dir: Path,
    vllm_python: Path,
    kvframe_python: Path | str | None,
    blocks: bool,
) -> tuple[list[Result], dict[str, DriverRun]]:
    def path(wl: dict[str, Any]) -> Path:
        return write_workload(wl, out_dir / "workloads" / f"{wl['name']}.json")

    vllm_side = [wl for wl in workloads if wl["config"]["policy"] in POLICIES]
    kvframe_side = [wl for wl in workloads if wl["config"]["policy"] not in POLICIES]
    runs = {}
    with ThreadPoolExecutor(max_workers=3) as pool:
        jobs = [
            ("vllm", vllm_python, "vllm_driver.py", vllm_side),
            ("bridge", vllm_python, "bridge_driver.py", workloads),
            ("kvframe", kvframe_python or sys.executable, "kvframe_driver.py", kvframe_side),
        ]
        futures = [
            pool.submit(
                _run_driver, side, py, script, [path(w) for w in wls], out_dir / side, blocks
            )
            for side, py, script, wls in jobs
            if wls
        ]
        runs = {f.result().side: f.result() for f in futures}
    results = [
        compare_runs(
            wl["name"],
            out_dir / ("vllm" if wl in vllm_side else "kvframe") / f"{wl['name']}.jsonl",
            out_dir / "bridge" / f"{wl['name']}.jsonl",
        )
        for wl in workloads
    ]
    return results, runs


def _eviction(value: str) -> str:
    """``--eviction``: one of vLLM's tier policies, or ``kvframe:<config string>``."""
    if value in TIER_EVICTIONS or (value.startswith("kvframe:") and len(value) > 8):
        return value
    raise argparse.ArgumentTypeError(
        f"{value!r}: expected one of {', '.join(TIER_EVICTIONS)} or kvframe:<config string>"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="workloads:\n"
        + "\n".join(f"  {n:20} {desc}" for n, (_, _, desc) in WORKLOADS.items()),
    )
    parser.add_argument(
        "--workload",
        action="append",
        choices=[*WORKLOADS, *TIER_WORKLOADS, *HYBRID_NAMES, "hybrid"],
        dest="names",
        help="hybrid-*: KV-cache groups (hybrid_workloads.py); 'hybrid': all of them",
    )
    parser.add_argument(
        "--policy", action="append", choices=[*POLICIES, *BRIDGE_POLICIES], dest="policies"
    )
    parser.add_argument(
        "--bridge",
        action="store_true",
        help="compare the kvframe-vllm bridge scheduler (vLLM types) with vLLM "
        "(fcfs, priority) and with kvframe (continuum); needs kvframe in the vLLM env; "
        "with --tier the bridge drives vLLM's OffloadingConnector with KvframeOffloadingSpec",
    )
    tier = parser.add_argument_group("offload tier (--tier)")
    tier.add_argument("--tier", action="store_true", help="run the tier set (CPU offload tier)")
    tier.add_argument(
        "--eviction",
        action="append",
        type=_eviction,
        dest="evictions",
        metavar="{" + ",".join(TIER_EVICTIONS) + ",kvframe:<spec>}",
        help="kvframe:<spec>: a kvframe eviction plugin in vLLM 0.33.0's tier, loaded by "
        "vLLM's CachePolicyFactory on both sides (--vllm-version 0.33.0, --bridge or "
        "--vllm-only)",
    )
    tier.add_argument("--factor", action="append", type=int, choices=TIER_FACTORS, dest="factors")
    tier.add_argument(
        "--store-threshold", action="append", type=int, choices=TIER_THRESHOLDS, dest="thresholds"
    )
    tier.add_argument("--rule", action="append", choices=list(COMPLETION_RULES), dest="rules")
    parser.add_argument("--num-requests", type=int, default=DEFAULT_NUM_REQUESTS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--vllm-version",
        choices=VLLM_VERSIONS,
        default="0.19.1",
        help="the vLLM release to compare against (and kvframe's fidelity target)",
    )
    parser.add_argument(
        "--vllm-python",
        help=f"default: ${VLLM_PYTHON_ENV} (0.19.1) / $KVFRAME_VLLM033_PYTHON (0.33.0) "
        "or the repo's venv",
    )
    parser.add_argument("--kvframe-python", default=sys.executable)
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR)
    parser.add_argument(
        "--blocks", action="store_true", help="also compare block ids (the free-queue order)"
    )
    parser.add_argument("--vllm-only", action="store_true", help="run and summarize vLLM only")
    parser.add_argument(
        "--switches",
        action="store_true",
        help="run the one-per-switch workloads where vLLM 0.19.1 and 0.33.0 differ",
    )
    parser.add_argument(
        "--scheduling",
        choices=list(SCHEDULING_MODES),
        default="sync",
        help="vLLM's synchronous Scheduler, its AsyncScheduler in the engine's "
        "batch-queue order, or both (async runs are named <workload>-async)",
    )
    parser.add_argument(
        "--async",
        action="store_const",
        const="async",
        dest="scheduling",
        help="short for --scheduling async",
    )
    args = parser.parse_args(argv)
    scheduling = SCHEDULING_MODES[args.scheduling]
    tier_matrix: dict[str, Sequence[Any]] | None = None
    if args.tier:
        wrong = [n for n in args.names or () if n not in TIER_WORKLOADS]
        if wrong:
            parser.error(f"--tier runs the tier workloads only, not {', '.join(wrong)}")
        tier_matrix = {
            k: v
            for k, v in {
                "evictions": args.evictions,
                "factors": args.factors,
                "thresholds": args.thresholds,
                "rules": args.rules,
            }.items()
            if v
        }
        plugins = [e for e in args.evictions or () if e.startswith("kvframe:")]
        if plugins and not (args.vllm_version == "0.33.0" and (args.bridge or args.vllm_only)):
            parser.error(
                f"--eviction {plugins[0]}: a kvframe plugin through vLLM's cache-policy "
                "factory needs --vllm-version 0.33.0 with --bridge or --vllm-only"
            )
    elif any(n in TIER_WORKLOADS for n in args.names or ()):
        parser.error("the tier-* workloads need --tier")
    policies = args.policies or (("fcfs",) if args.tier else POLICIES)
    if not args.bridge and any(p in BRIDGE_POLICIES for p in policies):
        parser.error(f"{', '.join(BRIDGE_POLICIES)} has no vLLM counterpart: use --bridge")

    if args.switches and (args.tier or args.bridge or args.names):
        parser.error("--switches runs its own workloads: no --tier, --bridge or --workload")
    vllm_python = find_vllm_python(args.vllm_python, args.vllm_version)
    if vllm_python is None:
        env_var, venv = _VENVS[args.vllm_version]
        recipe = (
            "../shared/tools/vllm-reference/install.sh"
            if args.vllm_version == "0.19.1"
            else "tools/vllm-reference/install-0.33.sh"
        )
        print(
            f"no vLLM {args.vllm_version} reference interpreter: pass --vllm-python, set "
            f"{env_var}, or build <repo>/{venv} with `bash {recipe} {venv}`",
            file=sys.stderr,
        )
        return 2
    results, runs = run_comparison(
        args.names,
        policies,
        num_requests=args.num_requests,
        seed=args.seed,
        vllm_python=vllm_python,
        kvframe_python=None if args.vllm_only else args.kvframe_python,
        out_dir=args.out_dir,
        blocks=args.blocks,
        tier=tier_matrix,
        bridge=args.bridge,
        vllm_version=args.vllm_version,
        switches=args.switches,
        scheduling=scheduling,
    )
    for run in runs.values():
        if run.returncode != 0 and not any(
            (r.vllm_error if run.side == "vllm" else r.kvframe_error) for r in results
        ):
            print(f"{run.side} driver exited {run.returncode}:\n{run.output}", file=sys.stderr)
    print(format_table(results, tier=args.tier, bridge=args.bridge))
    failed = [r for r in results if not r.ok]
    for res in failed:
        print()
        print(format_details(res))
    print(f"\nrecords and workloads: {args.out_dir}")
    hangs_only = all(r.vllm_hang is not None for r in results if r.vllm_error)
    crashed = [
        run
        for run in runs.values()
        if run.returncode != 0 and not (run.side == "vllm" and hangs_only)
    ]
    if failed or crashed:
        print(f"{len(failed)} of {len(results)} runs differ or crashed")
        return 1
    hung = [r for r in results if r.vllm_hang is not None]
    if args.vllm_only:
        print(f"vLLM only: {len(results)} runs completed (nothing compared)")
    elif hung:
        print(
            f"all {len(results)} runs identical step by step; in {len(hung)} of them vLLM "
            "deadlocks (nothing scheduled and nothing changing until the step cap) at the "
            "step where kvframe's admission-stall breaker goes on"
        )
    else:
        print(f"all {len(results)} runs identical step by step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
