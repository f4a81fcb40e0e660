"""kvframe makes vLLM V1's decisions, step for step, on both releases (issues 4, 18, 39).

One parametrized comparison over the whole matrix (``vllm_reference.CASES``):

* **release**: vLLM 0.19.1 and vLLM 0.33.0, kvframe on the matching fidelity target;
* **scheduling**: synchronous (vLLM's ``Scheduler``), and asynchronous (its
  ``AsyncScheduler`` against kvframe's async mode, both driven in the engine
  core's batch-queue order, ``tools/differential/stepping.run_async``);
* **tier**: none, or the CPU tier (vLLM's ``OffloadingConnector`` against
  kvframe's connector; the worker played on both sides by one script,
  ``ScriptedWorker`` for 0.19.1, ``JobWorker`` for 0.33.0's numbered jobs), over
  a covering set of tier variants (``vllm_reference.COVERING`` / ``SEEDED`` /
  ``BRIDGED``);
* **bridge**: kvframe's core in its own types, or the kvframe-vllm bridge
  (``KvframeScheduler``, kvframe's core behind vLLM's scheduler interface, in
  vLLM's types, engine outputs compared too); ``continuum`` (vLLM has none) is
  compared between the bridge and kvframe's own scheduler.

Every workload runs at 40 requests, block ids included; ``docs/fidelity.md``
records the full 240-request matrix. Each case is one start-up of each driver
(``conftest.comparisons``); the guards below make sure no case passes vacuously.
The switch workloads (``tools/differential/switch_workloads.py``) show each
fidelity target matching its own vLLM where the two releases part.

Needs the vLLM reference interpreters (``$KVFRAME_VLLM_PYTHON``,
``$KVFRAME_VLLM033_PYTHON``); without one, its cases skip at once saying which
is missing, so CI pays nothing. A combination never compared is skipped with why.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import compare
import pytest
from switch_workloads import SWITCH_WORKLOADS, switch_workload
from vllm_reference import CASES, RELEASES, SCHEDULINGS, Case, reference_python

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

Comparisons = Callable[[Case], dict[str, compare.Result]]


def _matrix() -> list[object]:
    params: list[object] = []
    for case in CASES:
        if case.never_run:
            params.append(
                pytest.param(case, "", marks=pytest.mark.skip(case.never_run), id=case.id)
            )
            continue
        for run in case.runs():
            name = run.name(case.scheduling)
            params.append(pytest.param(case, name, id=f"{case.id}:{name}"))
    return params


@pytest.mark.parametrize(("case", "name"), _matrix())
def test_kvframe_decides_like_its_reference(
    comparisons: Comparisons, case: Case, name: str
) -> None:
    """Like vLLM's scheduler (with its tier); with the bridge under ``continuum``,
    like kvframe's own scheduler."""
    result = comparisons(case)[name]
    if result.vllm_error:
        pytest.fail(f"the reference driver itself failed (a harness bug):\n{result.vllm_error}")
    assert result.vllm["steps"] > 0, "the reference driver produced no records"
    assert result.ok, compare.format_details(result)


def _kind(comparisons: Comparisons, release: str, *, tier: bool, bridge: bool) -> dict:
    """Every result of one release's kind, both scheduling modes (those compared)."""
    merged: dict[str, compare.Result] = {}
    for scheduling in SCHEDULINGS:
        case = Case(release, scheduling, tier, bridge)
        if not case.never_run:
            merged.update(comparisons(case))
    return merged


@pytest.mark.parametrize("release", RELEASES)
def test_the_core_workloads_preempt_hit_and_chunk(comparisons: Comparisons, release: str) -> None:
    """Guard against a vacuous pass: the small workloads still preempt, hit and chunk."""
    results = _kind(comparisons, release, tier=False, bridge=False)
    for policy in ("fcfs-async", "priority-async", "fcfs", "priority"):
        assert results[f"pressure-{policy}"].vllm["preemptions"] > 0
        assert results[f"priorities-{policy}"].vllm["preemptions"] > 0
        assert results[f"prefix-{policy}"].vllm["prefix_hit_tokens"] > 0
        assert results[f"prefix-nocache-{policy}"].vllm["prefix_hit_tokens"] == 0
        chunked = compare.iter_records(results[f"chunked-{policy}"].vllm_path)
        budget_steps = sum(1 for r in chunked if sum(n for _, n in r["scheduled"]) == 192)
        assert budget_steps > 0, f"chunked-{policy} never filled its token budget"


@pytest.mark.parametrize("release", RELEASES)
def test_the_tier_workloads_load_store_and_evict(comparisons: Comparisons, release: str) -> None:
    """Guard against a vacuous pass: without the reuse filter every computed block is
    offered to the tier; loads, tier hits and tier evictions all happen."""
    results = _kind(comparisons, release, tier=True, bridge=False)
    assert all(r.vllm["tier_stores"] > 0 for name, r in results.items() if ".t0." in name)
    for counter in ("tier_loads", "tier_stores", "tier_evictions", "tier_hit_tokens"):
        assert sum(r.vllm[counter] for r in results.values()) > 0, counter
    reuse = [r for name, r in results.items() if name.startswith("tier-reuse.")]
    for result in reuse:
        assert result.vllm["tier_hit_tokens"] > 0, f"{result.workload} never hit the tier"
    if release == "0.19.1":  # issue 32's run: the stall came with preemptions
        assert results["tier-pressure-tight.lru.f1.t0.seeded-priority"].vllm["preemptions"] > 0


@pytest.mark.parametrize("release", RELEASES)
def test_the_bridge_records_outputs_resumptions_and_pinning(
    comparisons: Comparisons, release: str
) -> None:
    """Guard against a vacuous pass: engine outputs are compared, preempted requests
    resume (Model Runner V2 gets them as new ones on 0.33.0), continuum pins."""
    results = _kind(comparisons, release, tier=False, bridge=True)
    records = list(compare.iter_records(results["prefix-fcfs"].kvframe_path))
    assert any(r.get("outputs") for r in records), "the bridge's EngineCoreOutputs not recorded"
    finished = [o for r in records for o in r["outputs"] if o[2] is not None]
    assert finished and all(o[2] == "length" for o in finished)
    pressure = list(compare.iter_records(results["pressure-fcfs"].kvframe_path))
    assert sum(len(r["preempted"]) for r in pressure) > 0
    assert sum(len(r["resumed"]) for r in pressure) > 0
    pinned = compare.compare_runs(
        "continuum vs fcfs",
        results["agentic-fcfs"].kvframe_path,
        results["agentic-continuum"].kvframe_path,
    )
    assert pinned.num_diffs > 0, "continuum decided exactly as fcfs: nothing was pinned"


# Through the bridge, both modes together: loads, stores, evictions, preemptions.
_BRIDGED_TIER_AT_LEAST = {"0.19.1": (50, 500, 500, 50), "0.33.0": (50, 300, 300, 50)}


@pytest.mark.parametrize("release", RELEASES)
def test_the_bridges_tier_was_exercised(comparisons: Comparisons, release: str) -> None:
    """Guard against a vacuous pass: through the bridge, vLLM's connector loaded,
    stored and evicted; on 0.33.0 it also flushed jobs (preempted requests' stores,
    stores whose source blocks were allocated again) and had requests wait for loads."""
    results = _kind(comparisons, release, tier=True, bridge=True)
    bridged = [r.kvframe for r in results.values()]
    counters = ("tier_loads", "tier_stores", "tier_evictions", "preemptions")
    for counter, least in zip(counters, _BRIDGED_TIER_AT_LEAST[release], strict=True):
        assert sum(s[counter] for s in bridged) > least, counter
    _assert_connector_reported(results)
    if release == "0.19.1":
        return
    flushed = waiting = completed = 0
    for result in results.values():
        for record in compare.iter_records(result.kvframe_path):
            flushed += len(record.get("jobs_to_flush", ()))
            waiting += len(record.get("waiting_remote", ()))
            completed += len(record.get("completed_jobs", ()))
    assert flushed > 10 and waiting > 10 and completed > 300, (flushed, waiting, completed)


def _assert_connector_reported(results: dict[str, compare.Result]) -> None:
    """What vLLM's clients read of the tier was compared (the ``connector`` field of
    both sides' records): the connector's prefix-cache lookups and hits, and the
    tier's own KV events (medium ``CPU``) beside the GPU's."""
    queries = hits = tier_events = 0
    for result in results.values():
        for record in compare.iter_records(result.kvframe_path):
            if "connector" not in record:
                continue  # async: the last step scheduled, never applied
            prefix, _, events = record["connector"]
            if prefix is not None:
                queries, hits = queries + prefix[2], hits + prefix[3]
            tier_events += sum(1 for e in events if "CPU" in e[1:])
    assert queries > 0 and hits > 0 and tier_events > 0, (queries, hits, tier_events)


@pytest.mark.parametrize("release", RELEASES)
def test_each_switch_workload_matches_its_vllm(
    release: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each fidelity target matches its own vLLM where the two releases part."""
    results, _ = compare.run_comparison(
        vllm_python=reference_python(release),
        kvframe_python=sys.executable,
        out_dir=tmp_path_factory.mktemp(f"switches-{release}"),
        blocks=True,
        vllm_version=release,
        switches=True,
    )
    names = [switch_workload(name)["name"] for name in SWITCH_WORKLOADS]
    assert [r.workload for r in results] == names
    for result in results:
        assert result.vllm["steps"] > 0, result.vllm_error
        assert result.ok, compare.format_details(result)
