"""The bridge inside vLLM's real ``EngineCore``, against vLLM's own ``Scheduler``.

``engine_core_harness.py`` runs the same scenarios -- aborts at every phase,
pause in each mode with and without clearing the cache then resume, resets
with running requests, ``--scheduling-policy priority`` with preemptions,
streaming-input sessions (chunks queued while running and sent while waiting,
a session aborted while it waits for input, the closing chunk), a refused
request among served ones, a duplicate id -- through an ``EngineCore``
with a fake executor, once with ``--scheduler-cls`` unset (vLLM's
``Scheduler``) and once with the bridge. Every engine call's record must be
equal: each ``SchedulerOutput`` the executor saw, each ``EngineCoreOutputs``
(tokens, finish and stop reasons, request event types, cached tokens,
finished sets, ``SchedulerStats`` with prefix-cache counters, 0.33's
``PrefillStats``), the cascade hint (``num_common_prefix_blocks``), the
KV-cache events published in the step with every field the release declares
(``--kv-events-config``: vLLM's hashes, token ids, extra keys; 0.33's group and
spec kind), and what the pause / reset / abort / count calls returned. The
one departure the bridge makes on purpose, vLLM 0.19.1's stale block hash of a
streaming session (``stale-session-block``), has its own test; the random
scripts compare vLLM 0.19.1 with 0.33's fix of it (``--session-hash-fix``).
Run on vLLM 0.19.1 (``$KVFRAME_VLLM_PYTHON``) and 0.33.0
(``$KVFRAME_VLLM033_PYTHON``), each with async scheduling off and on; each
release's tests skip without its reference interpreter.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from vllm_reference import harness_env, reference_python

_spec = importlib.util.spec_from_file_location(
    "engine_core_scripts", Path(__file__).resolve().parent / "engine_core_scripts.py"
)
assert _spec is not None and _spec.loader is not None
scripts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scripts)
BLOCK_SIZE: int = scripts.BLOCK_SIZE
"""The harness's block size (its scripts module, loaded without vLLM)."""
token = scripts.token

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REFUSED_IDS = {"min", "xarg", "last"}
ERROR = 3
"""vLLM's ``FinishReason.ERROR``."""


def _run(python: Path, scheduler: str, out: Path, *flags: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(python), str(HERE / "engine_core_harness.py"), scheduler, str(out), *flags],
        capture_output=True,
        text=True,
        env=harness_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _python(version: str = "0.19.1") -> Path:
    return reference_python(version, probe="import vllm.v1.engine.core, kvframe_vllm")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    python = _python()
    out = tmp_path_factory.mktemp("engine-core")
    return _run(python, "vllm", out / "vllm.json"), _run(python, "bridge", out / "bridge.json")


@pytest.fixture(scope="module")
def runs_v2(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same with Model Runner V2 (``VLLM_USE_V2_MODEL_RUNNER=1``)."""
    python = _python()
    out = tmp_path_factory.mktemp("engine-core-v2")
    return (
        _run(python, "vllm", out / "vllm.json", "--v2"),
        _run(python, "bridge", out / "bridge.json", "--v2"),
    )


@pytest.fixture(scope="module")
def runs_async(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same with async scheduling on (vLLM's default): vLLM's ``AsyncScheduler``
    against the bridge in kvframe's async mode, the engine's batch queue of two."""
    python = _python()
    out = tmp_path_factory.mktemp("engine-core-async")
    return (
        _run(python, "vllm", out / "vllm.json", "--async-scheduling"),
        _run(python, "bridge", out / "bridge.json", "--async-scheduling"),
    )


@pytest.fixture(scope="module")
def runs_033(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    """vLLM 0.33.0 (``$KVFRAME_VLLM033_PYTHON``): its ``Scheduler`` / ``AsyncScheduler``
    against the bridge, per mode: ``sync`` and ``async`` with 0.33's default Model
    Runner V2, ``sync-v1`` with the V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``)."""
    python = _python("0.33.0")
    out = tmp_path_factory.mktemp("engine-core-033")
    modes = {"sync": (), "async": ("--async-scheduling",), "sync-v1": ("--v1",)}
    return {
        mode: (
            _run(python, "vllm", out / f"vllm-{mode}.json", *flags),
            _run(python, "bridge", out / f"bridge-{mode}.json", *flags),
        )
        for mode, flags in modes.items()
    }


SAME = [
    "aborts",
    "first-token",
    "priority",
    "reset-mid-prefill",
    "streaming",
    *(f"pause-{m}-{c}" for m in ("abort", "wait", "keep") for c in ("clear", "keepcache")),
]


@pytest.mark.parametrize("scenario", SAME)
def test_the_engine_records_are_vllms(runs: Any, scenario: str) -> None:
    vllm, bridge = runs
    assert vllm[scenario]["scheduler"] == "Scheduler"
    assert bridge[scenario]["scheduler"] == "KvframeScheduler"
    ours, theirs = bridge[scenario]["log"], vllm[scenario]["log"]
    for index, (mine, ref) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == ref, f"{scenario}: record {index} differs"


@pytest.mark.parametrize("scenario", SAME)
def test_the_engine_records_are_vllms_with_model_runner_v2(runs_v2: Any, scenario: str) -> None:
    """V2 takes resumed requests as new ones with ``prefill_token_ids``."""
    vllm, bridge = runs_v2
    ours, theirs = bridge[scenario]["log"], vllm[scenario]["log"]
    for index, (mine, ref) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == ref, f"{scenario} (V2): record {index} differs"


@pytest.mark.parametrize("scenario", SAME)
def test_the_engine_records_are_async_schedulers(runs_async: Any, scenario: str) -> None:
    vllm, bridge = runs_async
    assert vllm[scenario]["scheduler"] == "AsyncScheduler"
    assert bridge[scenario]["scheduler"] == "KvframeScheduler"
    ours, theirs = bridge[scenario]["log"], vllm[scenario]["log"]
    for index, (mine, ref) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == ref, f"{scenario} (async): record {index} differs"


@pytest.mark.parametrize("mode", ["sync", "async", "sync-v1"])
@pytest.mark.parametrize("scenario", SAME)
def test_the_engine_records_are_vllm_033s(runs_033: Any, mode: str, scenario: str) -> None:
    """vLLM 0.33.0: records per admission prefix stats, ``PrefillStats`` on first
    outputs, reset preemptions in the next step's ``preempted_req_ids`` and, under
    async scheduling, a reset drops exactly the tokens in flight."""
    vllm, bridge = runs_033[mode]
    expected = "AsyncScheduler" if mode == "async" else "Scheduler"
    assert vllm[scenario]["scheduler"] == expected
    assert bridge[scenario]["scheduler"] == "KvframeScheduler"
    ours, theirs = bridge[scenario]["log"], vllm[scenario]["log"]
    for index, (mine, ref) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == ref, f"{scenario} (0.33.0, {mode}): record {index} differs"


@pytest.mark.parametrize("mode", ["sync", "async", "sync-v1"])
def test_refused_and_duplicate_requests_under_vllm_033(runs_033: Any, mode: str) -> None:
    chosen = copy.deepcopy(runs_033[mode])
    test_a_refused_request_finishes_with_an_error_and_the_engine_serves_on(chosen)
    test_a_duplicate_id_kills_vllms_engine_not_the_bridges(chosen)


def test_vllm_033_scenarios_reach_what_they_claim(runs_033: Any) -> None:
    """Under 0.33.0 too: preemptions, every event kind, prefix hits, the runners'
    difference (V2 resends resumed requests as new ones), and a reset under async
    scheduling dropping the in-flight decode token but not the chunk's first one."""
    test_the_scenarios_reach_what_they_claim(runs_033["sync"])
    for mode in ("sync", "sync-v1"):
        steps = _steps(runs_033[mode][0]["priority"]["log"])
        resumed_cached = sum(1 for s in steps for row in s[1]["cached"] if row[3])
        assert (resumed_cached == 0) == (mode == "sync"), mode
    sync_chunk = _tokens(runs_033["sync"][0]["reset-mid-prefill"]["log"], "chunk")
    async_chunk = _tokens(runs_033["async"][0]["reset-mid-prefill"]["log"], "chunk")
    assert len(sync_chunk) == len(async_chunk) == 5
    assert async_chunk == sync_chunk  # position 0 kept: the chunk had no token in flight
    sync_dec = _tokens(runs_033["sync"][0]["reset-mid-prefill"]["log"], "dec")
    async_dec = _tokens(runs_033["async"][0]["reset-mid-prefill"]["log"], "dec")
    assert async_dec != sync_dec and len(async_dec) == len(sync_dec) == 10


def _new_order(log: list[Any], rid: str) -> list[list[str]]:
    """The ids of each step's new requests, for the steps where ``rid`` is one."""
    return [
        [row[0] for row in s[1]["new"]]
        for s in _steps(log)
        if any(row[0] == rid for row in s[1]["new"])
    ]


def test_the_streaming_scenario_reaches_what_it_claims(runs: Any, runs_033: Any) -> None:
    """Sessions wait for input (idle engine, sessions still queued), turns end with a
    finish reason while the session goes on, each release requeues a session resumed
    at its stop where it says (0.19.1 behind ``w``, 0.33.0 ahead) and 0.33.0 takes the
    chunk's ``max_tokens`` and counts waiting sessions as skipped-waiting."""
    old, new = runs[0]["streaming"]["log"], runs_033["sync"][0]["streaming"]["log"]
    for log in (old, new):
        assert ["idle", ["UNPAUSED", 0, False, [0, 2], False]] in log
        s_outputs = [o for st in _steps(log) for c in st[2].values() for o in c["outputs"]]
        s_turns = [o[2] for o in s_outputs if o[0] == "s" and o[2] is not None]
        assert len(s_turns) == 3  # two turns end, then the closed session finishes
        finished = {rid for st in _steps(log) for rid in st[1]["finished"]}
        assert {"s", "t", "u", "q"} <= finished
    assert _new_order(old, "q")[1] == ["w", "q"]
    assert _new_order(new, "q")[1] == ["q", "w"]
    assert len(_tokens(old, "q")) == 2 and len(_tokens(new, "q")) == 3
    skipped = [c["stats"]["skipped_waiting"] for st in _steps(new) for c in st[2].values()]
    assert max(skipped) == 2


def _tokens(log: list[Any], rid: str) -> list[int]:
    return [
        t
        for s in _steps(log)
        for c in s[2].values()
        for o in c["outputs"]
        if o[0] == rid
        for t in o[1]
    ]


def test_async_scheduling_runs_a_step_ahead(runs: Any, runs_async: Any) -> None:
    """The batch queue held two steps (a step scheduled with no output applied), and
    a reset with requests running dropped their next tokens as vLLM 0.19.1 does:
    the decode in flight, and for the request whose step in flight was a partial
    prefill chunk, the first token it sampled after resuming (position 0)."""
    vllm, _ = runs_async
    for scenario in SAME:
        steps = _steps(vllm[scenario]["log"])
        assert any(not s[2] and s[3] for s in steps), scenario

    def tokens(log: list[Any], rid: str) -> list[int]:
        return [
            t
            for s in _steps(log)
            for c in s[2].values()
            for o in c["outputs"]
            if o[0] == rid
            for t in o[1]
        ]

    sync_chunk = tokens(runs[0]["reset-mid-prefill"]["log"], "chunk")
    async_chunk = tokens(vllm["reset-mid-prefill"]["log"], "chunk")
    assert len(sync_chunk) == len(async_chunk) == 5
    assert async_chunk[:4] == sync_chunk[1:]  # the fake model's position 0 was dropped


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_refused_and_duplicate_requests_under_both_modes(
    runs: Any, runs_async: Any, mode: str
) -> None:
    """The refused-request checks below hold with async scheduling on too."""
    # A copy: those checks filter the logs in place.
    chosen = copy.deepcopy(runs if mode == "sync" else runs_async)
    test_a_refused_request_finishes_with_an_error_and_the_engine_serves_on(chosen)
    test_a_duplicate_id_kills_vllms_engine_not_the_bridges(chosen)


def test_v2_sends_resumed_requests_as_new_ones(runs_v2: Any) -> None:
    vllm, _ = runs_v2
    steps = _steps(vllm["priority"]["log"])
    assert not any(row[3] for s in steps for row in s[1]["cached"])  # none flagged resumed
    assert sum(1 for s in steps for row in s[1]["new"] if row[0] == "lo") >= 2


def _steps(log: list[Any]) -> list[Any]:
    return [entry for entry in log if entry[0] == "step" and entry[1] is not None]


def test_the_scenarios_reach_what_they_claim(runs: Any) -> None:
    """Preemptions happen, pause keeps the engine idle, stats and events are there."""
    vllm, _ = runs
    for scenario in ("aborts", "priority"):
        assert any(s[1]["preempted"] for s in _steps(vllm[scenario]["log"])), scenario
    assert ["preempted_now", ["b"]] in vllm["aborts"]["log"]
    keep = vllm["pause-keep-clear"]["log"]
    paused = keep.index(next(e for e in keep if e[0] == "paused"))
    assert [e[3] for e in keep[paused + 2 : paused + 5]] == [False] * 3  # nothing ran
    events = {
        kind
        for scenario in ("aborts", "priority")
        for s in _steps(vllm[scenario]["log"])
        for client in s[2].values()
        for out in client["outputs"]
        for kind in out[4]
    }
    assert events == {1, 2, 3}  # QUEUED, SCHEDULED, PREEMPTED
    kv_events = {event[0] for log in vllm.values() for s in _steps(log["log"]) for event in s[4]}
    assert kv_events == {"BlockStored", "BlockRemoved", "AllBlocksCleared"}
    salted = [
        event
        for s in _steps(vllm["priority"]["log"])
        for event in s[4]
        if event[0] == "BlockStored" and event[8] and event[8][0] == ["s1"]
    ]
    assert salted, "the salted request's first block was not stored with its salt"
    hits = [
        c["stats"]["prefix"][3]
        for s in _steps(vllm["pause-wait-keepcache"]["log"])
        for c in s[2].values()
    ]
    assert sum(hits) > 0


def test_a_refused_request_finishes_with_an_error_and_the_engine_serves_on(runs: Any) -> None:
    vllm, bridge = runs
    log = bridge["refused"]["log"]
    errors = {}
    kept = []
    for entry in log:
        if entry[0] == "refused":
            assert len(entry) == 2, entry  # add_request did not raise
            continue
        if entry[0] == "step":
            for client in entry[2].values():
                mine = [o for o in client["outputs"] if o[0] in REFUSED_IDS]
                for out in mine:
                    errors[out[0]] = out
                client["outputs"] = [o for o in client["outputs"] if o[0] not in REFUSED_IDS]
        kept.append(entry)
    assert set(errors) == REFUSED_IDS
    for rid, out in errors.items():
        assert out[1] == [] and out[2] == ERROR, out
        assert isinstance(out[3], str) and rid in out[3], out
    # Apart from the error outputs, the engine ran as vLLM's without those requests.
    assert kept == vllm["refused"]["log"]


def test_a_duplicate_id_kills_vllms_engine_not_the_bridges(runs: Any) -> None:
    vllm, bridge = runs
    theirs = vllm["duplicate"]["log"]
    assert ["add", "d1", "raised", "AssertionError"] in theirs
    ours = bridge["duplicate"]["log"]
    assert ["add", "d1"] in ours[2:]  # the second add did not raise
    outputs = [o for s in _steps(ours) for c in s[2].values() for o in c["outputs"]]
    d1 = [o for o in outputs if o[0] == "d1"]
    assert d1[-1][2] == ERROR and "already being served" in d1[-1][3]
    d2 = [o for o in outputs if o[0] == "d2"]
    assert sum(len(o[1]) for o in d2) == 3 and d2[-1][2] is not None


# -- seeded random scripts -----------------------------------------------------------

RANDOM_FLAGS = ("--seeds=0:20", "--random-only", "--session-hash-fix")
"""The 20 seeds; vLLM 0.19.1 compared with 0.33's fix of its stale session hash (the
bridge's rule; ``test_vllm_0191_caches_a_session_block_under_a_stale_hash``)."""
RANDOM_MODES = {
    ("0.19.1", "sync"): (),
    ("0.19.1", "async"): ("--async-scheduling",),
    ("0.33.0", "sync"): (),
    ("0.33.0", "async"): ("--async-scheduling",),
}


@pytest.fixture(scope="module")
def random_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[Any, tuple[Any, Any]]:
    """Both sides of the random scripts, per release and mode (a release without its
    interpreter is left out; its tests skip)."""
    out = tmp_path_factory.mktemp("engine-core-random")
    runs: dict[Any, tuple[Any, Any]] = {}
    for (release, mode), flags in RANDOM_MODES.items():
        try:
            python = _python(release)
        except pytest.skip.Exception:
            continue
        tag = f"{release}-{mode}"
        runs[release, mode] = (
            _run(python, "vllm", out / f"vllm-{tag}.json", *RANDOM_FLAGS, *flags),
            _run(python, "bridge", out / f"bridge-{tag}.json", *RANDOM_FLAGS, *flags),
        )
    return runs


def _random_pair(random_runs: Any, release: str, mode: str) -> tuple[Any, Any]:
    if (release, mode) not in random_runs:
        pytest.skip(f"no vLLM {release} reference interpreter")
    return random_runs[release, mode]


@pytest.mark.parametrize(("release", "mode"), list(RANDOM_MODES))
def test_random_scripts_are_vllms_record_for_record(
    random_runs: Any, release: str, mode: str
) -> None:
    vllm, bridge = _random_pair(random_runs, release, mode)
    assert sorted(vllm) == sorted(bridge) == sorted(f"random-{s}" for s in range(20))
    for name, ref in vllm.items():
        ours, theirs = bridge[name]["log"], ref["log"]
        assert len(ours) == len(theirs), f"{name} ({release} {mode}): record counts differ"
        for index, (mine, rec) in enumerate(zip(ours, theirs, strict=True)):
            assert mine == rec, f"{name} ({release} {mode}): record {index} differs"


def _entries(results: dict[str, Any], kind: str) -> list[Any]:
    return [e for r in results.values() for e in r["log"] if e[0] == kind]


@pytest.mark.parametrize(("release", "mode"), list(RANDOM_MODES))
def test_random_scripts_reach_what_they_claim(random_runs: Any, release: str, mode: str) -> None:
    """Guard against a vacuous pass: the scripts preempt, abort, pause, reset, refuse a
    reset (sessions hold blocks), resume sessions, hit the prefix cache, finish
    requests with their first token, and no script crashed or ran out of steps."""
    vllm, _ = _random_pair(random_runs, release, mode)
    assert not _entries(vllm, "crashed")
    steps = [s for s in _entries(vllm, "step") if s[1] is not None]
    assert sum(len(s[1]["preempted"]) for s in steps) >= 5
    assert len(_entries(vllm, "abort")) > 20 and len(_entries(vllm, "resumed")) > 5
    assert len(_entries(vllm, "reset")) > 10 and len(_entries(vllm, "close")) > 10
    assert any(isinstance(e[2], list) for e in _entries(vllm, "reset"))  # raised
    first_token = {
        (name, o[0])
        for name, result in vllm.items()
        for s in _steps(result["log"])
        for c in s[2].values()
        for o in c["outputs"]
        if o[2] is not None and len(o[1]) == 1
    }
    assert len(first_token) > 50
    kinds = {e[0] for s in steps for e in s[4]}
    assert kinds == {"BlockStored", "BlockRemoved", "AllBlocksCleared"}


# -- what vLLM's clients read: cascade hint, event fields, first-token prefill stats ----


def test_each_release_sends_its_cascade_hint(runs: Any, runs_033: Any) -> None:
    """vLLM 0.19.1 sends the blocks every running request shares (compared, and not
    always 0); 0.33 removed cascade attention and sends an empty list."""
    old = {tuple(s[1]["common_prefix_blocks"]) for s in _steps(runs[0]["aborts"]["log"])}
    assert len(old) > 1 and all(len(hint) == 1 for hint in old)
    new = {
        tuple(s[1]["common_prefix_blocks"]) for s in _steps(runs_033["sync"][0]["aborts"]["log"])
    }
    assert new == {()}


def test_vllm_033_events_name_their_group_and_kind(runs_033: Any) -> None:
    """0.33's ``BlockStored`` carries ``group_idx`` 0 and ``kv_cache_spec_kind``, its
    ``BlockRemoved`` the group: fields the records compare (both sides)."""
    for side in runs_033["sync"]:
        events = [e for s in _steps(side["aborts"]["log"]) for e in s[4]]
        stored = [e for e in events if e[0] == "BlockStored"]
        removed = [e for e in events if e[0] == "BlockRemoved"]
        assert stored and all(e[9:11] == [0, "full_attention"] for e in stored)
        assert removed and all(e[3] == 0 for e in removed)


def test_a_first_token_finish_reports_the_blocks_it_cached(runs_033: Any) -> None:
    """vLLM 0.33 finalizes ``PrefillStats`` before freeing the request: a 50-token
    prompt with ``max_tokens=1`` created its full blocks' tokens in the cache, the same
    prompt again hit them and created none."""
    for mode in ("sync", "async"):
        for side in runs_033[mode]:
            outputs = {
                o[0]: o
                for s in _steps(side["first-token"]["log"])
                for c in s[2].values()
                for o in c["outputs"]
            }
            full = 50 // BLOCK_SIZE * BLOCK_SIZE
            assert outputs["one"][5][5] == full and outputs["one"][2] is not None
            assert outputs["again"][5][2] == full and outputs["again"][5][5] == 0


# -- issue 52 item 4: vLLM 0.19.1's stale block hash of a streaming session -------------


def _probe_hit(log: list[Any]) -> Any:
    return next(
        o[5] for s in _steps(log) for c in s[2].values() for o in c["outputs"] if o[0] == "probe"
    )


def test_vllm_0191_caches_a_session_block_under_a_stale_hash(
    runs: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The minimal reproduction (``stale-session-block``): a session's discarded sampled
    token filled block 2; vLLM 0.19.1 caches the block, computed with the next chunk's
    token, under the discarded token's hash, and a prompt with that token is served
    48 cached tokens -- the last one's KV is the chunk's. The bridge (like vLLM 0.33)
    hashes the block again and serves 32. With 0.33's fix applied to vLLM 0.19.1
    (``--session-hash-fix``) every record is the bridge's."""
    vllm, bridge = runs
    theirs, ours = vllm["stale-session-block"]["log"], bridge["stale-session-block"]["log"]
    assert _probe_hit(theirs) == 3 * BLOCK_SIZE and _probe_hit(ours) == 2 * BLOCK_SIZE
    stored = [e for s in _steps(theirs) for e in s[4] if e[0] == "BlockStored"]
    session_block = stored[1]  # block 2, stored when the resumed session computed it
    stale_hash, tokens = session_block[1][0], session_block[3]
    assert tokens[-1] != token("s", 0)  # it holds the chunk's token ...
    mine = [e for s in _steps(ours) for e in s[4] if e[0] == "BlockStored"]
    assert mine[1][3] == tokens and mine[1][1] != [stale_hash]  # ... hashed as such
    # ... while its hash is that of the discarded token: the bridge stores that hash
    # when the probe computes the block that really holds it.
    probe_block = next(e for e in mine[2:] if stale_hash in e[1])
    index = probe_block[1].index(stale_hash)
    held = probe_block[3][index * BLOCK_SIZE : (index + 1) * BLOCK_SIZE]
    assert held[:-1] == tokens[:-1] and held[-1] == token("s", 0)
    fixed = _run(
        _python(),
        "vllm",
        tmp_path_factory.mktemp("stale") / "vllm.json",
        "--only=stale-session-block",
        "--session-hash-fix",
    )
    assert fixed["stale-session-block"]["log"] == ours


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vllm_033_hashes_the_session_block_again(runs_033: Any, mode: str) -> None:
    vllm, bridge = runs_033[mode]
    assert vllm["stale-session-block"]["log"] == bridge["stale-session-block"]["log"]
    assert _probe_hit(vllm["stale-session-block"]["log"])[2] == 2 * BLOCK_SIZE
