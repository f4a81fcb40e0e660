"""The fleet (kvframe.fleet): replicas on one clock behind a router, and the signals it sees.

A fleet of one replica must be step-identical to the single engine (the same
requests.csv and counters, sync and async, with and without a CPU tier, with
closed-loop agentic turns); N replicas under round-robin must each run exactly
as a single engine on their share; the router's view must hold only what was
published, no sooner than the configured delay and interval allow.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kvframe.contract.routing import FleetInfo, PublishedEvent, ReplicaLoad, Router
from kvframe.engine import Engine, EngineConfig
from kvframe.fleet import Fleet, FleetSettings, RoutingError
from kvframe.workloads import load_workload
from kvframe.workloads.agentic import generate_agentic
from kvframe.workloads.chat import generate_chat

HEAD = Path(__file__).resolve().parents[1] / "core" / "data" / "mooncake_conversation_head300.jsonl"
TRACE = list(load_workload(HEAD, limit=150).requests)
CHAT = list(generate_chat(num_requests=120, seed=4, rate=12.0, system_prompt_length=300))


class RoundRobin(Router):
    """Request i to replica i % N (the test's own; the bundled ones live in a plugin)."""

    name = "test-rr"
    description = "each replica in turn"
    uses_loads = False

    def attach(self, fleet: FleetInfo) -> None:
        self.n, self.next = fleet.num_replicas, 0

    def route(self, request: Any, view: Any) -> int:
        choice = self.next
        self.next = (self.next + 1) % self.n
        return choice


def _csv(summary: Any) -> str:
    out = io.StringIO()
    summary.write_csv(out)
    return out.getvalue()


def _counters(summary: Any) -> dict[str, Any]:
    return {k: v for k, v in summary.counters.items() if "wall" not in k}


def _agentic() -> list[Any]:
    return list(generate_agentic(num_jobs=12, seed=3))


@pytest.mark.parametrize(
    ("specs", "config"),
    [
        (TRACE, {}),
        (TRACE, {"async_scheduling": True}),
        (TRACE, {"num_gpu_blocks": 300}),
        (CHAT, {"num_gpu_blocks": 300, "async_scheduling": True}),
        (TRACE, {"num_gpu_blocks": 400, "offload": "cpu:capacity=64GiB"}),
        (TRACE, {"num_gpu_blocks": 400, "offload": "cpu:capacity=64GiB", "async_scheduling": True}),
        ("agentic", {}),
        ("agentic", {"async_scheduling": True}),
    ],
    ids=[
        "sync",
        "async",
        "pressure",
        "async-pressure",
        "cpu-tier",
        "cpu-tier-async",
        "agentic",
        "agentic-async",
    ],
)
def test_one_replica_is_step_identical_to_the_single_engine(specs: Any, config: dict) -> None:
    if specs == "agentic":
        specs = _agentic()
    if "offload" in config:
        pytest.importorskip("kvframe_cpu_offload")
    single = Engine.from_config(EngineConfig(**config)).run(specs)
    fleet = Fleet.from_config(EngineConfig(**config), RoundRobin(), replicas=1).run(specs)
    assert single.counters["num_requests_finished"] > 0
    assert _csv(fleet.replicas[0]) == _csv(single.summary)
    assert _counters(fleet.replicas[0]) == _counters(single.summary)
    # The fleet's own summary is the one replica's, plus the replica column.
    assert _csv(fleet.summary).splitlines()[1].endswith(",0")
    assert fleet.summary.counters["num_steps"] == single.counters["num_steps"]
    assert fleet.summary.counters["prefix_cache_hits"] == single.counters["prefix_cache_hits"]


@pytest.mark.parametrize("config", [{}, {"async_scheduling": True}, {"num_gpu_blocks": 250}])
def test_round_robin_replicas_each_run_as_a_single_engine_on_their_share(config: dict) -> None:
    fleet = Fleet.from_config(EngineConfig(**config), RoundRobin(), replicas=4).run(CHAT)
    replicas = fleet.summary.request_replicas
    assert replicas == {spec.request_id: i % 4 for i, spec in enumerate(CHAT)}
    for r in range(4):
        share = CHAT[r::4]
        alone = Engine.from_config(EngineConfig(**config)).run(share)
        assert _csv(fleet.replicas[r]) == _csv(alone.summary)
        assert _counters(fleet.replicas[r]) == _counters(alone.summary)
    counters = fleet.summary.counters
    assert counters["num_requests_finished"] == len(CHAT)
    assert counters["num_steps"] == sum(s.counters["num_steps"] for s in fleet.replicas)
    assert counters["fleet_replicas"] == 4
    assert counters["fleet_request_imbalance"] == pytest.approx(30 / 30)
    per_replica = fleet.summary.metadata["fleet"]["per_replica"]
    assert [e["counters"]["num_requests"] for e in per_replica] == [30, 30, 30, 30]


def test_agentic_turns_follow_their_job_across_replicas() -> None:
    """Closed loop: a job's next turn is released when the previous finishes, wherever."""
    specs = _agentic()
    fleet = Fleet.from_config(EngineConfig(), RoundRobin(), replicas=3).run(specs)
    rows = {row.request_id: row for row in fleet.summary.requests}
    assert fleet.summary.counters["num_requests_finished"] == len(specs)
    by_job: dict[str, list[Any]] = {}
    for spec in specs:
        by_job.setdefault(spec.job_id, []).append(spec)
    for turns in by_job.values():
        turns.sort(key=lambda s: s.turn)
        for before, after in itertools.pairwise(turns):
            gap = before.tool_duration or 0.0
            assert (
                rows[after.request_id].arrival_time
                >= rows[before.request_id].finish_time + gap - 1e-12
            )


class Recorder(Router):
    """Keeps what the view showed at each arrival, and the finishes it was told of."""

    name = "test-recorder"
    description = "records its view"
    uses_kv_events = True

    def attach(self, fleet: FleetInfo) -> None:
        self.n = fleet.num_replicas
        self.seen: list[tuple[float, Sequence[PublishedEvent], Sequence[ReplicaLoad]]] = []
        self.finished: dict[str, tuple[int, float]] = {}
        self.outstanding: list[list[int]] = []
        self.count = 0

    def route(self, request: Any, view: Any) -> int:
        self.seen.append((view.now, list(view.take_kv_events()), list(view.loads())))
        self.outstanding.append([view.num_outstanding(r) for r in range(self.n)])
        assert request.block_hashes  # computed with the replicas' hasher, on demand
        self.count += 1
        return (self.count - 1) % self.n

    def on_finished(self, request_id: str, replica: int, now: float) -> None:
        self.finished[request_id] = (replica, now)


@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_kv_events_reach_the_router_after_the_configured_delay(delay: float) -> None:
    router = Recorder()
    fleet = Fleet.from_config(
        EngineConfig(num_gpu_blocks=300),
        router,
        replicas=2,
        settings=FleetSettings(kv_event_delay=delay),
    )
    fleet.run(TRACE[:80])
    previous = -1.0
    delivered = 0
    for now, events, _ in router.seen:
        for published in events:
            assert previous < published.time + delay <= now
        delivered += len(events)
        previous = now
    assert delivered > 0


def test_kv_event_hashes_match_the_requests_block_hashes() -> None:
    router = Recorder()
    Fleet.from_config(EngineConfig(), router, replicas=1).run(TRACE[:40])
    stored = {
        h
        for _, events, _ in router.seen
        for p in events
        for h in getattr(p.event, "block_hashes", ())
    }
    assert stored, "no BlockStored event reached the router"


@pytest.mark.parametrize("interval", [0.0, 0.25])
def test_load_reports_come_at_the_configured_interval(interval: float) -> None:
    router = Recorder()
    Fleet.from_config(
        EngineConfig(),
        router,
        replicas=2,
        settings=FleetSettings(load_report_interval=interval),
    ).run(CHAT)
    times: dict[int, list[float]] = {0: [], 1: []}
    for now, _, loads in router.seen:
        for load in loads:
            assert load.time <= now
            if not times[load.replica] or times[load.replica][-1] != load.time:
                times[load.replica].append(load.time)
    assert any(len(t) > 3 for t in times.values())
    for series in times.values():
        gaps = [b - a for a, b in itertools.pairwise(series[1:])]
        assert all(gap >= interval for gap in gaps)
    assert any(load.num_running for _, _, loads in router.seen for load in loads)


def test_on_finished_comes_at_each_finish_and_outstanding_counts_sends() -> None:
    router = Recorder()
    result = Fleet.from_config(EngineConfig(), router, replicas=2).run(CHAT[:60])
    rows = {row.request_id: row for row in result.summary.requests}
    assert set(router.finished) == set(rows)
    for request_id, (replica, now) in router.finished.items():
        assert now == rows[request_id].finish_time
        assert replica == result.summary.request_replicas[request_id]
    assert router.outstanding[0] == [0, 0]
    assert max(sum(o) for o in router.outstanding) > 1


class Seventh(RoundRobin):
    name = "test-seventh"

    def route(self, request: Any, view: Any) -> int:
        choice = super().route(request, view)
        return 7 if request.request_id == CHAT[40].request_id else choice


def test_a_replica_out_of_range_is_a_clear_error_with_partial_results() -> None:
    fleet = Fleet.from_config(EngineConfig(), Seventh(), replicas=4)
    with pytest.raises(RoutingError) as caught:
        fleet.run(CHAT)
    message = str(caught.value)
    assert "test-seventh" in message and CHAT[40].request_id in message and "range(4)" in message
    result = caught.value.result
    assert result is not None and result.partial
    assert result.summary.counters["num_requests"] == 40
    assert result.summary.metadata["fleet"]["error"] == message


class ReadsLoadsUndeclared(RoundRobin):
    name = "test-sneaky"

    def route(self, request: Any, view: Any) -> int:
        view.loads()
        return 0


def test_a_router_that_reads_loads_it_did_not_declare_is_told_so() -> None:
    with pytest.raises(RuntimeError, match="uses_loads"):
        Fleet.from_config(EngineConfig(), ReadsLoadsUndeclared(), replicas=2).run(CHAT[:5])


def test_the_view_reaches_no_engine() -> None:
    router = Recorder()
    fleet = Fleet.from_config(EngineConfig(), router, replicas=2)
    seen: list[Any] = []
    original = router.route

    def route(request: Any, view: Any) -> int:
        seen.append(view)
        return original(request, view)

    router.route = route  # type: ignore[method-assign]
    fleet.run(CHAT[:10])
    view = seen[0]
    assert not hasattr(view, "__dict__")
    for name in view.__slots__:
        value = getattr(view, name)
        items = value if isinstance(value, list) else [value]
        while any(isinstance(item, tuple | list) for item in items):  # KV event batches
            items = [x for i in items for x in (i if isinstance(i, tuple | list) else [i])]
        for item in items:
            assert not isinstance(item, Engine)
            assert isinstance(item, int | float | str | bool) or type(item).__module__ in (
                "kvframe.contract.routing",
                "kvframe.contract.records",
            )


def test_bad_settings_and_replica_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="--kv-event-delay"):
        FleetSettings(kv_event_delay=-1.0)
    with pytest.raises(ValueError, match="--replicas"):
        Fleet.from_config(EngineConfig(), RoundRobin(), replicas=0)


def test_a_heterogeneous_fleet_runs_each_replica_with_its_own_config() -> None:
    configs = [EngineConfig(num_gpu_blocks=250), EngineConfig(num_gpu_blocks=2000)]
    fleet = Fleet.from_config(configs, RoundRobin()).run(CHAT)
    blocks = [s.counters["num_gpu_blocks"] for s in fleet.replicas]
    assert blocks == [250, 2000]
    alone = Engine.from_config(configs[0]).run(CHAT[0::2])
    assert _csv(fleet.replicas[0]) == _csv(alone.summary)
    with pytest.raises(ValueError, match="block size"):
        Fleet.from_config([EngineConfig(), EngineConfig(block_size=32)], RoundRobin())
