"""Disaggregated fleets (kvframe.fleet.disagg): prefill replicas hand KV to decode replicas.

A request runs its prompt on a prefill replica (``do_remote_decode``, one
token), moves to a decode replica (``do_remote_prefill``) which loads only the
blocks its own prefix cache misses, and decodes there. Pinned here: every
request finishes once with all its tokens; every block comes back on every
replica; the TTFT parts add up to the TTFT the client sees; a decode-side
prefix hit moves fewer blocks; a failed or aborted load loses nothing (the
request recomputes or finishes with its reason, both sides free, the counters
say so); a mixed fleet keeps its aggregated replicas as they were; bad layouts
are refused with the flag's name.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvframe.config import ConfigError
from kvframe.contract.routing import FleetInfo, Router
from kvframe.domain.disagg import DisaggLayout
from kvframe.engine import EngineConfig
from kvframe.fleet import Fleet
from kvframe.fleet.disagg import SPLIT_METRICS, DisaggFleet
from kvframe.fleet.runner import FleetSettings
from kvframe.host.registry import get_registry
from kvframe.workloads.spec import RequestSpec

BLOCKS = 400


def specs(n: int = 60, shared: int = 0, seed: int = 0) -> list[RequestSpec]:
    """``n`` requests 20 ms apart; with ``shared``, each prompt starts with the same
    ``shared`` tokens (a system prompt every decode replica soon caches)."""
    out = []
    for i in range(n):
        own = list(range(100_000 * (i + 1) + seed, 100_000 * (i + 1) + seed + 40 + 7 * (i % 5)))
        out.append(
            RequestSpec(f"r{i}", list(range(shared)) + own, 4 + i % 3, arrival_time=0.02 * i)
        )
    return out


class RoundRobin(Router):
    name = "test-rr"
    description = "each replica of the pool in turn"
    uses_loads = False

    def attach(self, fleet: FleetInfo) -> None:
        self.n, self.next, self.role = fleet.num_replicas, 0, fleet.role

    def route(self, request: Any, view: Any) -> int:
        choice = self.next
        self.next = (self.next + 1) % self.n
        return choice


def build(replicas: int, layout: str, **hooks: Any) -> DisaggFleet:
    policy = hooks.pop("policy", "fail")
    config = EngineConfig(
        replicas=replicas,
        disagg=layout,
        num_gpu_blocks=BLOCKS,
        kv_load_failure_policy=policy,
    )
    return DisaggFleet.build(
        [config] * replicas, RoundRobin(), "test-rr", FleetSettings(), get_registry(), **hooks
    )


def all_free(fleet: DisaggFleet) -> None:
    for engine in fleet.engines:
        scheduler = engine.scheduler
        assert not scheduler.requests
        assert not scheduler._awaiting_store and not scheduler._awaiting_load
        assert scheduler.kv_cache_manager.num_free_blocks == BLOCKS - 1


def test_every_request_finishes_once_and_every_block_comes_back() -> None:
    workload = specs()
    fleet = build(3, "1:2")
    result = fleet.run(workload)
    summary = result.summary
    counters = summary.counters
    assert counters["num_requests"] == len(workload)
    assert counters["num_requests_finished"] == len(workload)
    assert counters["generation_tokens_total"] == sum(s.max_tokens for s in workload)
    assert {r.finish_status for r in summary.requests} == {"length"}
    assert counters["disagg_requests"] == len(workload)
    assert counters["disagg_transfers"] == len(workload)
    assert counters["disagg_transfer_bytes"] > 0
    assert 0 < counters["disagg_link_utilisation_max"] <= 1
    # Prefill legs ran on replica 0, decode legs on 1 and 2 (the request's replica).
    assert set(summary.request_replicas.values()) == {1, 2}
    assert result.replicas[0].counters["num_requests"] == len(workload)
    all_free(fleet)


def test_the_ttft_parts_add_up_to_the_ttft_the_client_sees() -> None:
    workload = specs(40)
    summary = (
        Fleet.from_config(
            EngineConfig(replicas=3, disagg="1:2", num_gpu_blocks=BLOCKS), "round-robin"
        )
        .run(workload)
        .summary
    )
    ttft = summary.distributions["time_to_first_token_seconds"]
    parts = [summary.distributions[name] for name in SPLIT_METRICS]
    assert all(p is not None and p.count == len(workload) for p in parts)
    assert sum(p.mean for p in parts) == pytest.approx(ttft.mean, rel=1e-9)
    assert parts[3].mean > 0  # the transfer takes time
    arrivals = {s.request_id: s.arrival_time for s in workload}
    for row in summary.requests:
        assert row.arrival_time == arrivals[row.request_id]  # timed from the fleet arrival


def test_a_decode_side_prefix_hit_moves_fewer_blocks() -> None:
    cold = build(2, "1:1")
    cold.run(specs(30, shared=0))
    warm = build(2, "1:1")
    warm.run(specs(30, shared=160))
    block = 16
    # The shared 160 tokens (10 blocks) move once, then the decode replica's own cache has them.
    moved_cold = cold.coordinator.transfers.stats.num_blocks
    moved_warm = warm.coordinator.transfers.stats.num_blocks
    assert moved_warm < moved_cold + 160 // block * 30
    assert moved_warm <= moved_cold + 160 // block
    all_free(warm)


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_a_failed_load_loses_nothing(policy: str) -> None:
    workload = specs(40)
    failing = {f"r{i}" for i in range(0, 40, 4)}
    fleet = build(3, "1:2", policy=policy, fail_load=lambda rid: 1 if rid in failing else None)
    summary = fleet.run(workload).summary
    counters = summary.counters
    assert counters["disagg_failed_loads"] == len(failing)
    assert counters["num_failed_kv_loads"] == len(failing)
    status = {r.request_id: r.finish_status for r in summary.requests}
    assert set(status) == {s.request_id for s in workload}
    for rid, why in status.items():
        expected = "error" if policy == "fail" and rid in failing else "length"
        assert why == expected, rid
    if policy == "recompute":
        assert counters["num_requests_finished"] == len(workload)
    all_free(fleet)


def test_an_abort_while_the_load_is_in_flight_frees_both_sides() -> None:
    workload = specs(30)
    aborted = {"r3", "r7", "r12"}
    fleet = build(3, "1:2", abort_in_flight=lambda rid: rid in aborted)
    summary = fleet.run(workload).summary
    status = {r.request_id: r.finish_status for r in summary.requests}
    assert {rid for rid, why in status.items() if why == "abort"} == aborted
    assert summary.counters["num_aborted"] == len(aborted)
    assert summary.counters["num_requests_finished"] == len(workload)
    all_free(fleet)


def test_a_mixed_fleet_runs_its_aggregated_replicas_as_any_fleet() -> None:
    workload = specs(45)
    fleet = build(4, "1:2")
    summary = fleet.run(workload).summary
    on = summary.request_replicas
    aggregated = [rid for rid, r in on.items() if r == 3]
    assert aggregated  # the prefill pool (0 and 3) sent some to the aggregated replica
    assert summary.counters["disagg_requests"] == len(workload) - len(aggregated)
    assert summary.counters["num_requests_finished"] == len(workload)
    assert summary.metadata["fleet"]["disagg"]["roles"] == [
        "prefill",
        "decode",
        "decode",
        "aggregated",
    ]
    all_free(fleet)


def test_each_pool_gets_its_own_router_with_its_role_and_size() -> None:
    fleet = build(5, "2:3")
    fleet.run(specs(10))
    assert (fleet.router.role, fleet.router.n) == ("prefill", 2)
    assert (fleet.decode_router.role, fleet.decode_router.n) == ("decode", 3)


@pytest.mark.parametrize(
    ("layout", "replicas", "message"),
    [
        ("2:7", 8, "P \\+ D must be at most --replicas"),
        ("0:4", 8, "at least one prefill and one decode"),
        ("2-6", 8, "expects P:D"),
    ],
)
def test_bad_layouts_are_refused_naming_the_flag(layout: str, replicas: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DisaggLayout.parse(layout, replicas)
    problem = EngineConfig(replicas=replicas, disagg=layout)._disagg_problem()
    assert problem is not None and "--disagg" in problem


def test_disagg_needs_a_fleet_and_a_known_link() -> None:
    assert "--replicas" in (EngineConfig(disagg="1:1").fleet_problem() or "")
    assert "--disagg-link" in (
        EngineConfig(replicas=2, disagg="1:1", disagg_link="smoke")._disagg_problem() or ""
    )


def test_the_cli_flags_reach_the_fleet(tmp_path: Any) -> None:
    from kvframe.cli.main import main

    trace = tmp_path / "t.jsonl"
    import json

    with trace.open("w") as out:
        for i, s in enumerate(specs(12)):
            row = {
                "timestamp": int(s.arrival_time * 1000),
                "input_length": len(s.prompt),
                "output_length": s.max_tokens,
                "hash_ids": [i * 10 + k for k in range(3)],
            }
            out.write(json.dumps(row) + "\n")
    code = main(
        [
            "run",
            str(trace),
            "--replicas",
            "3",
            "--disagg",
            "1:2",
            "--router",
            "round-robin",
            "--disagg-link",
            "nvlink",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
        ]
    )
    assert code in (0, None)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    fleet = metrics["metadata"]["fleet"]
    assert fleet["disagg"]["link"] == "nvlink"
    assert metrics["counters"]["disagg_requests"] == 12


def test_offload_with_disagg_is_refused() -> None:
    config = EngineConfig(replicas=2, disagg="1:1", num_gpu_blocks=BLOCKS)
    from kvframe.config import parse_spec

    offloading = EngineConfig(
        replicas=2,
        disagg="1:1",
        num_gpu_blocks=BLOCKS,
        offload=parse_spec("cpu:capacity=1GiB", "offload"),
    )
    assert config.offload is None
    with pytest.raises((ValueError, ConfigError), match="offload"):
        DisaggFleet.build([offloading] * 2, RoundRobin(), None, FleetSettings(), get_registry())


@pytest.mark.parametrize("vllm", ["0.19.1", "0.33.0"])
def test_both_releases_run_synchronously_and_0_19_asynchronously(vllm: str) -> None:
    workload = specs(30)
    fleet = Fleet.from_config(
        EngineConfig(replicas=3, disagg="1:2", num_gpu_blocks=BLOCKS, vllm=vllm), "round-robin"
    )
    assert fleet.run(workload).summary.counters["num_requests_finished"] == len(workload)
    config = EngineConfig(
        replicas=3, disagg="1:2", num_gpu_blocks=BLOCKS, vllm=vllm, async_scheduling=True
    )
    if vllm == "0.33.0":
        with pytest.raises(ValueError, match="held_requests_keep_engine"):
            Fleet.from_config(config, "round-robin")
        return
    fleet = Fleet.from_config(config, "round-robin")
    assert fleet.run(workload).summary.counters["num_requests_finished"] == len(workload)
    for engine in fleet.engines:
        assert engine.scheduler.kv_cache_manager.num_free_blocks == BLOCKS - 1


@pytest.mark.parametrize("router", ["round-robin", "dynamo-kv"])
def test_agentic_turns_are_released_by_the_decode_leg_in_a_mixed_fleet(router: str) -> None:
    from kvframe.workloads.agentic import generate_agentic

    workload = list(generate_agentic(num_jobs=6, seed=3))
    fleet = Fleet.from_config(EngineConfig(replicas=4, disagg="1:2", num_gpu_blocks=2000), router)
    summary = fleet.run(workload).summary
    assert summary.counters["num_requests_finished"] == len(workload)
    assert 0 < summary.counters["disagg_requests"] <= len(workload)
    for engine in fleet.engines:
        assert engine.scheduler.kv_cache_manager.num_free_blocks == 2000 - 1


def test_the_cli_refuses_more_prefill_and_decode_replicas_than_the_fleet(capsys: Any) -> None:
    from kvframe.cli.main import main

    code = main(
        ["run", "mooncake:conversation", "--replicas", "8", "--disagg", "5:6",
         "--router", "round-robin", "--limit", "5"]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "--disagg: --disagg 5:6 asks for 11 replicas but the fleet has 8" in err


def test_the_toml_and_sweep_keys_convert_like_the_other_fleet_keys() -> None:
    config = EngineConfig.from_settings(
        {
            "replicas": 8,
            "disagg": "2:6",
            "disagg-link": "nvlink",
            "disagg_bandwidth": "25GB",
            "disagg_latency": "0.001",
            "disagg_pipeline": True,
            "kv_load_failure_policy": "recompute",
        }
    )
    assert (config.disagg, config.disagg_link) == ("2:6", "nvlink")
    assert (config.disagg_bandwidth, config.disagg_latency) == (25_000_000_000, 0.001)
    assert config.disagg_pipeline and config.kv_load_failure_policy == "recompute"
    described = config.describe()
    assert described["disagg"] == "2:6" and described["disagg_link"] == "nvlink"
    assert "disagg" not in EngineConfig(replicas=8).describe()  # aggregated: unchanged


def test_an_interrupted_run_keeps_a_partial_result() -> None:
    calls = 0

    def stop_soon(fleet: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 40:
            raise KeyboardInterrupt

    result = build(3, "1:2").run(specs(30), progress=stop_soon)
    assert result.partial
    assert 0 < result.summary.counters["num_requests"] <= 30
