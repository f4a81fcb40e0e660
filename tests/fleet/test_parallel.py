"""Replicas in parallel processes (kvframe.fleet.parallel): the single-process run's results.

A router that reads no replica state (uses_kv_events, uses_loads and uses_finishes
false) routes from the requests alone; each replica then runs alone in a forked
child. Its requests.csv, counters, metadata and per-replica summaries must be
those of :meth:`Fleet.run` (all but the wall clock), sync and async, under
pressure (preemptions); a router or workload that does not allow it is refused
with the reason.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from kvframe.contract.routing import FleetInfo, Router
from kvframe.engine import EngineConfig
from kvframe.fleet import Fleet
from kvframe.fleet.parallel import parallel_problem, run_parallel
from kvframe.workloads import load_workload
from kvframe.workloads.agentic import generate_agentic
from kvframe.workloads.chat import generate_chat

HEAD = Path(__file__).resolve().parents[1] / "core" / "data" / "mooncake_conversation_head300.jsonl"
TRACE = list(load_workload(HEAD, limit=120).requests)
CHAT = list(generate_chat(num_requests=100, seed=4, rate=12.0, system_prompt_length=300))


class Alternating(Router):
    """Requests to replicas 0, 0, 1, 1, ... (reads no replica state)."""

    name = "test-alternating"
    description = "two requests to each replica in turn"
    uses_loads = False
    uses_finishes = False

    def attach(self, fleet: FleetInfo) -> None:
        self.n, self.i = fleet.num_replicas, 0

    def route(self, request: Any, view: Any) -> int:
        self.i += 1
        return (self.i // 2) % self.n


class ReadsOutstanding(Alternating):
    """Declares it reads no replica state, then asks for outstanding counts."""

    name = "test-reads-outstanding"

    def route(self, request: Any, view: Any) -> int:
        return min(range(view.num_replicas), key=view.num_outstanding)


def _wall_free(summary: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    out = io.StringIO()
    summary.write_csv(out)
    counters = {k: v for k, v in summary.counters.items() if "wall" not in k}
    return out.getvalue(), counters, dict(summary.metadata)


def _fleet(router: Router | str, replicas: int, **config: Any) -> Fleet:
    return Fleet.from_config(EngineConfig(**config), router, replicas=replicas)


@pytest.mark.parametrize(
    ("specs", "router", "config"),
    [
        (TRACE, "round-robin", {}),
        (TRACE, "random", {"async_scheduling": True}),
        (TRACE, "prefix-affinity", {"num_gpu_blocks": 300}),
        (CHAT, Alternating, {"num_gpu_blocks": 300, "async_scheduling": True}),
    ],
)
def test_parallel_replicas_give_the_single_process_results(
    specs: list[Any], router: Any, config: dict[str, Any]
) -> None:
    make = (lambda: router()) if isinstance(router, type) else (lambda: router)
    one = _fleet(make(), 3, **config).run(specs)
    many = run_parallel(_fleet(make(), 3, **config), specs, processes=2)
    assert _wall_free(many.summary) == _wall_free(one.summary)
    for a, b in zip(one.replicas, many.replicas, strict=True):
        assert _wall_free(b) == _wall_free(a)
    assert one.summary.counters["num_requests"] == len(specs)
    if config.get("num_gpu_blocks") == 300 and specs is TRACE:
        assert one.summary.counters["num_preemptions"] > 0  # the case under pressure


@pytest.mark.parametrize("router", ["dynamo-kv", "least-loaded", "cache-aware"])
def test_a_router_that_reads_replica_state_is_refused_with_its_flags(router: str) -> None:
    fleet = _fleet(router, 2)
    problem = parallel_problem(fleet, TRACE)
    assert problem is not None and "reads replica state" in problem
    with pytest.raises(ValueError, match="cannot run the replicas in parallel"):
        run_parallel(fleet, TRACE)


def test_closed_loop_agentic_turns_and_offload_tiers_are_refused() -> None:
    agentic = list(generate_agentic(num_jobs=6, seed=3))
    problem = parallel_problem(_fleet("round-robin", 2), agentic)
    assert problem is not None and "agentic turns" in problem
    tiered = _fleet("round-robin", 2, num_gpu_blocks=400, offload="cpu:capacity=1GiB")
    problem = parallel_problem(tiered, TRACE)
    assert problem is not None and "offload tier" in problem


def test_a_router_reading_what_it_declared_not_to_read_is_told_so() -> None:
    with pytest.raises(RuntimeError, match="uses_finishes = True"):
        run_parallel(_fleet(ReadsOutstanding(), 2), TRACE[:10])
    with pytest.raises(RuntimeError, match="uses_finishes = True"):
        _fleet(ReadsOutstanding(), 2).run(TRACE[:10])  # the single process tells it too


def test_bad_process_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="--processes must be an integer >= 1"):
        run_parallel(_fleet("round-robin", 2), TRACE, processes=0)


def test_one_process_runs_the_replicas_one_after_another_with_the_same_results() -> None:
    one = _fleet("round-robin", 3, num_gpu_blocks=300).run(TRACE)
    alone = run_parallel(_fleet("round-robin", 3, num_gpu_blocks=300), TRACE, processes=1)
    assert _wall_free(alone.summary) == _wall_free(one.summary)
