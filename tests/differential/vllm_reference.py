"""What every test that needs a vLLM reference interpreter shares (issue 45).

* **The interpreters.** One per release (``RELEASES``): ``$KVFRAME_VLLM_PYTHON``
  for vLLM 0.19.1, ``$KVFRAME_VLLM033_PYTHON`` for vLLM 0.33.0, or the
  repository's reference venvs (``compare.find_vllm_python``).
  :func:`reference_python` skips the calling test at once, naming the variable,
  when there is none, so CI (which builds none) pays nothing; with ``probe`` it
  also skips, naming what failed, when the interpreter cannot run that line with
  this tree first on its import path (the bridge's tests need kvframe there).
* **Scripts under it.** :func:`run_script` runs one of the tests' vLLM-side
  scripts there, with this tree and the harness (``tools/differential``) first
  on its import path, and returns the JSON of its last line.
* **The differential matrix.** A :class:`Case` is one combination of release x
  scheduling (sync, async) x tier (none, the CPU tier) x bridge (kvframe's core
  against vLLM, or the kvframe-vllm bridge inside vLLM); its :class:`Run` s are
  the workloads it compares, 40 requests each; :func:`run_case` runs them all
  with one start-up of each driver. The test module is
  ``tests/differential/test_vllm_decisions.py``.

This is a plain module on pytest's ``pythonpath`` (pyproject.toml), not a
conftest, so that ``plugins/kvframe-vllm/tests`` share it too.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import compare
import pytest
from workloads import (
    BRIDGE_POLICIES,
    DEFAULT_NUM_REQUESTS,
    POLICIES,
    TIER_WORKLOADS,
    WORKLOADS,
    generate,
    generate_tier,
)

RELEASES: tuple[str, ...] = compare.VLLM_VERSIONS
SCHEDULINGS = ("sync", "async")
NUM_REQUESTS = 40
"""Every differential run's size: small enough for a test, large enough to preempt."""

_INSTALL = {
    "0.19.1": ("KVFRAME_VLLM_PYTHON", "../shared/tools/vllm-reference/install.sh"),
    "0.33.0": ("KVFRAME_VLLM033_PYTHON", "tools/vllm-reference/install-0.33.sh --with-kvframe"),
}


# --------------------------------------------------------------------------
# The interpreters, and scripts run under them
# --------------------------------------------------------------------------


def harness_env(*extra_paths: str, **variables: str) -> dict[str, str]:
    """This process's environment with this tree's packages and the harness first on
    ``PYTHONPATH``: a script under the vLLM interpreter imports the code under test
    (``compare.tree_paths``) and the harness's modules by their bare names."""
    paths = [*compare.tree_paths(), str(compare.HERE), *extra_paths]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **variables)


@functools.cache
def _find(release: str, probe: str) -> tuple[Path | None, str]:
    """The interpreter, or why there is none to use (cached: a probe starts vLLM)."""
    python = compare.find_vllm_python(version=release)
    if python is None:
        env_var, install = _INSTALL[release]
        return None, (
            f"no vLLM {release} reference interpreter: set {env_var} or build it with "
            f"{install} (docs/fidelity.md)"
        )
    if probe:
        done = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, env=harness_env()
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            lines = probe.strip().splitlines()
            shown = lines[0] + (" ..." if len(lines) > 1 else "")
            return None, (
                f"the vLLM {release} interpreter {python} cannot run {shown!r} with this "
                f"tree first on its path ({last}); install kvframe and its plugins there "
                "as docs/vllm.md says"
            )
    return python, ""


def reference_python(release: str = "0.19.1", *, probe: str = "") -> Path:
    """vLLM ``release``'s reference interpreter; skips the calling test without it, or
    when it cannot run ``probe`` (a line of Python) with this tree on its path."""
    python, why = _find(release, probe)
    if python is None:
        pytest.skip(why)
    return python


def run_script(
    python: Path, script: Path, *args: str, extra_paths: Sequence[str] = (), timeout: int = 600
) -> Any:
    """Run a vLLM-side script of the tests under ``python``; the JSON of its last line."""
    done = subprocess.run(
        [str(python), str(script), *args],
        capture_output=True,
        text=True,
        env=harness_env(*extra_paths, VLLM_LOGGING_LEVEL="ERROR"),
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# The differential matrix
# --------------------------------------------------------------------------


@attrs.frozen
class TierVariant:
    """One tier configuration: eviction policy, offloaded-block size in GPU blocks,
    the reuse filter's store threshold (0: off), when transfers land."""

    eviction: str
    factor: int
    threshold: int
    rule: str

    @property
    def suffix(self) -> str:
        """The part of a tier workload's name the harness gives this variant."""
        return f".{self.eviction}.f{self.factor}.t{self.threshold}.{self.rule}"


COVERING = (
    TierVariant("lru", 1, 0, "next-step"),
    TierVariant("arc", 2, 2, "seeded"),
    TierVariant("lru", 2, 2, "next-step"),
    TierVariant("arc", 1, 0, "seeded"),
)
"""Every value of every axis appears, and each pair of axes meets in two variants."""
SEEDED = (TierVariant("arc", 2, 2, "seeded"), TierVariant("lru", 1, 0, "seeded"))
"""Asynchronous scheduling: transfers land 0..3 steps after they start."""
BRIDGED = (TierVariant("lru", 1, 0, "next-step"), TierVariant("arc", 2, 2, "seeded"))
"""The bridge with vLLM's own connector: the two ends of the covering set."""


@attrs.frozen
class Run:
    """One workload of a case under one policy (and tier variant)."""

    workload: str
    policy: str
    variant: TierVariant | None = None
    num_requests: int = NUM_REQUESTS

    def name(self, scheduling: str) -> str:
        """The harness's name for this run (``compare.with_scheduling`` adds ``-async``)."""
        middle = self.variant.suffix if self.variant else ""
        return f"{self.workload}{middle}-{self.policy}" + (
            "-async" if scheduling == "async" else ""
        )

    def build(self, release: str) -> dict[str, Any]:
        """The workload, synchronous, for ``release``'s fidelity target."""
        if self.variant is None:
            workload = generate(self.workload, self.policy, self.num_requests, 0)
        else:
            workload = generate_tier(
                self.workload,
                self.policy,
                eviction=self.variant.eviction,
                block_size_factor=self.variant.factor,
                store_threshold=self.variant.threshold,
                rule=self.variant.rule,
                num_requests=self.num_requests,
            )
        workload["config"]["vllm"] = release
        return workload


def _runs(
    names: Sequence[str], policies: Sequence[str], variants: Sequence[TierVariant | None]
) -> tuple[Run, ...]:
    return tuple(Run(n, p, v) for n in names for v in variants for p in policies)


_BOTH = (*POLICIES, *BRIDGE_POLICIES)
"""vLLM's policies, and continuum: the bridge compared with kvframe's own scheduler."""

_TIERED: dict[tuple[str, str, bool], tuple[Run, ...]] = {
    # (release, scheduling, bridge): the tier runs
    ("0.19.1", "sync", False): (
        *_runs(list(TIER_WORKLOADS), ("fcfs",), COVERING),
        # Issue 32: a 240-request run under priority that reached the admission-stall
        # breaker while a finished request's store was in flight (vLLM waits a step).
        Run("tier-pressure-tight", "priority", SEEDED[1], DEFAULT_NUM_REQUESTS),
    ),
    ("0.33.0", "sync", False): _runs(list(TIER_WORKLOADS), POLICIES, COVERING),
    ("0.19.1", "async", False): _runs(list(TIER_WORKLOADS), POLICIES, SEEDED),
    ("0.33.0", "async", False): _runs(list(TIER_WORKLOADS), POLICIES, SEEDED),
    ("0.19.1", "sync", True): _runs(list(TIER_WORKLOADS), _BOTH, BRIDGED),
    ("0.19.1", "async", True): _runs(list(TIER_WORKLOADS), _BOTH, BRIDGED),
    # 0.33.0's tier: continuum not compared (that side of the harness was never run
    # there), and the bridge's async run with one variant, vLLM's default rule.
    ("0.33.0", "sync", True): _runs(list(TIER_WORKLOADS), POLICIES, BRIDGED),
    ("0.33.0", "async", True): _runs(list(TIER_WORKLOADS), POLICIES, BRIDGED[1:]),
}

_NEVER_RUN = {
    ("0.33.0", "async", False, True): (
        "the bridge on vLLM 0.33.0 without a tier was only ever compared synchronously; "
        "its async mode is covered by the EngineCore harness "
        "(plugins/kvframe-vllm/tests/test_engine_core.py) and by hand with "
        "compare.py --bridge --vllm-version 0.33.0 --scheduling async"
    ),
}


@attrs.frozen
class Case:
    """One combination of the matrix: release x scheduling x tier x bridge."""

    release: str
    scheduling: str
    tier: bool
    bridge: bool

    @property
    def id(self) -> str:
        tier = "cpu-tier" if self.tier else "no-tier"
        return f"{self.release}-{self.scheduling}-{tier}-{'bridge' if self.bridge else 'core'}"

    @property
    def never_run(self) -> str | None:
        """Why this combination is not compared, or None: it is."""
        return _NEVER_RUN.get((self.release, self.scheduling, self.tier, self.bridge))

    def runs(self) -> tuple[Run, ...]:
        if self.tier:
            return _TIERED[(self.release, self.scheduling, self.bridge)]
        return _runs(list(WORKLOADS), _BOTH if self.bridge else POLICIES, (None,))


CASES = tuple(
    Case(release, scheduling, tier, bridge)
    for bridge in (False, True)
    for tier in (False, True)
    for release in RELEASES
    for scheduling in SCHEDULINGS
)

BRIDGE_PROBE = (
    "import vllm, kvframe, kvframe_vllm, kvframe_fcfs, kvframe_priority, kvframe_continuum, "
    "kvframe_lru, kvframe_arc; assert vllm.__version__.startswith({major!r})"
)
"""What the bridge's drivers import in the vLLM interpreter, and the release it holds."""


def bridge_python(release: str) -> Path:
    """``release``'s interpreter, able to import kvframe and the bundled plugins."""
    return reference_python(release, probe=BRIDGE_PROBE.format(major=release[:4]))


def run_case(case: Case, out_dir: Path) -> dict[str, compare.Result]:
    """Every run of ``case`` through both drivers (one start-up each), by run name."""
    python = bridge_python(case.release) if case.bridge else reference_python(case.release)
    workloads = compare.with_scheduling(
        [run.build(case.release) for run in case.runs()], (case.scheduling,)
    )
    names = [wl["name"] for wl in workloads]
    assert names == [run.name(case.scheduling) for run in case.runs()], names
    results, _ = compare.run_workloads(
        workloads,
        vllm_python=python,
        kvframe_python=sys.executable,
        out_dir=out_dir,
        blocks=True,
        bridge=case.bridge,
    )
    return {result.workload: result for result in results}
