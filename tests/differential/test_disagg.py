"""Prefill/decode disaggregation: kvframe's scheduler makes vLLM's decisions (issue 48).

``tools/differential/disagg.py`` drives vLLM's own ``Scheduler`` (its connector
built by vLLM's factory from the scripted NIXL-like rules) and kvframe's with
the same seeded scripts, prefill side and decode side, and compares every step:
tokens scheduled, loads and sends started with their blocks, each request's
status, computed tokens and block table, blocks held after finishing, free
blocks, finish reasons. Needs a vLLM reference interpreter; skips without one.
"""

from __future__ import annotations

import json
from typing import Any

import disagg
import disagg_script
import pytest
from vllm_reference import reference_python

SEEDS = 10


@pytest.fixture(
    scope="module",
    params=[("0.19.1", False), ("0.33.0", False), ("0.19.1", True), ("0.33.0", True)],
    ids=["0.19.1-sync", "0.33.0-sync", "0.19.1-async", "0.33.0-async"],
)
def runs(request: pytest.FixtureRequest) -> tuple[str, bool, dict[str, Any]]:
    """``(release, async scheduling, {script: (vLLM's records, kvframe's)})``."""
    release, async_scheduling = request.param
    python = reference_python(release)
    by_script = disagg.run_both(SEEDS, release, python, async_scheduling=async_scheduling)
    return release, async_scheduling, by_script


def test_every_step_is_vllms_on_both_sides(runs: Any) -> None:
    release, _, by_script = runs
    assert len(by_script) == SEEDS * len(disagg_script.ROLES)
    different = [key for key, (theirs, ours) in by_script.items() if theirs != ours]
    assert different == [], f"vLLM {release}: scripts that differ: {different}"


def test_the_scripts_cover_what_disaggregation_does(runs: Any) -> None:
    """Decode-side prefix hits, failed loads under both policies, aborts while a load is in
    flight, sends held after the producer finished: each happens in these scripts."""
    _, _, by_script = runs
    seen = {"prefix-hit-loads": 0, "failed-loads": 0, "errors": 0, "sends": 0, "abort-in-flight": 0}
    for key, (theirs, _) in by_script.items():
        role, seed = key.split("-seed")
        for field in disagg.summary(theirs).split():
            name, value = field.split("=")
            if name in seen:
                seen[name] += int(value)
        aborted = {
            s["request_id"]
            for s in disagg_script.make_script(int(seed), role)["requests"]
            if s["abort_after"] is not None
        }
        held_loading = {rid for r in theirs for rid in r["held"]} if role == "consumer" else set()
        seen["abort-in-flight"] += len(held_loading & aborted)
    assert all(seen.values()), seen


def test_a_producer_that_frees_at_once_is_caught(
    runs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison is not vacuous: a connector that does not hold a finished
    producer's blocks for the send makes the records part."""
    release, async_scheduling, by_script = runs
    monkeypatch.setattr(disagg._KvframeConnector, "request_finished", lambda *_: False)
    theirs, _ = by_script["producer-seed0"]
    script = disagg.full_script(0, "producer", async_scheduling)
    side = disagg.KvframeSide(script, release)
    loop = disagg.run_async(script, side, release) if async_scheduling else disagg.run(script, side)
    assert json.loads(json.dumps(loop)) != theirs
