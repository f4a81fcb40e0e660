"""The engine under asynchronous scheduling: vLLM's batch queue on the virtual clock.

``EngineConfig(async_scheduling=True)`` runs :mod:`kvframe.engine.batch_queue`:
step N+1 is scheduled before step N's output is applied. These tests check
the loop's own promises (the GPU timeline, every request finishing with all its
tokens, the clock jumps and stalls of the synchronous loop, the 0.33.0 batch
queue rule) and where sync and async runs must differ; that the decisions are
vLLM's AsyncScheduler's is the differential harness's job.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import pytest

import kvframe
from kvframe.domain.request import Request
from kvframe.engine import Engine, EngineConfig, EngineStalled
from kvframe.host.registry import PluginRegistry
from kvframe.workloads import RequestSpec


def spec(request_id: str, num_prompt: int, max_tokens: int, arrival: float = 0.0) -> RequestSpec:
    base = 1000 * (zlib.crc32(request_id.encode()) % 100_000 + 1)
    return RequestSpec(
        request_id=request_id,
        prompt=[base + i for i in range(num_prompt)],
        max_tokens=max_tokens,
        arrival_time=arrival,
    )


def run(specs: Sequence[RequestSpec], registry: PluginRegistry | None = None, **config):
    engine = Engine.from_config(EngineConfig(**config), registry)
    return engine, engine.run(specs)


def rows(result) -> dict:
    return {row.request_id: row for row in result.summary.requests}


def test_a_lone_request_costs_no_time_for_the_lag():
    """One request: the GPU runs the same steps back to back either way (the next step
    is scheduled while the previous one runs), so every time is the synchronous one,
    and no step is scheduled past max_tokens."""
    specs = [spec("a", 300, 12)]
    sync_engine, sync = run(specs, num_gpu_blocks=128)
    async_engine, lagged = run(specs, num_gpu_blocks=128, async_scheduling=True)
    a, b = rows(sync)["a"], rows(lagged)["a"]
    assert b.num_output_tokens == a.num_output_tokens == 12
    assert b.time_to_first_token_seconds == pytest.approx(a.time_to_first_token_seconds)
    assert b.e2e_request_latency_seconds == pytest.approx(a.e2e_request_latency_seconds)
    assert sync.counters["num_steps"] == 12
    # Two more schedule() calls that schedule nothing: one while the last token is
    # in flight (no step past max_tokens), one that reports the finished request
    # (vLLM's has_requests() holds while finished ids are unreported).
    assert lagged.counters["num_steps"] == 14
    assert async_engine._collector.num_steps == sync_engine._collector.num_steps == 12


def test_every_request_finishes_with_all_its_tokens(conversation_chains):
    """A pressured slice of the Mooncake trace: the lagged run finishes every request
    with its max_tokens, and it decides differently from the synchronous run."""
    _, sync = run(conversation_chains, num_gpu_blocks=600)
    engine, lagged = run(conversation_chains, num_gpu_blocks=600, async_scheduling=True)
    # Every request finishes as in sync: with its max_tokens, or ignored (too long).
    wanted = {r.request_id: (r.num_output_tokens, r.finish_status) for r in sync.summary.requests}
    got = {r.request_id: (r.num_output_tokens, r.finish_status) for r in lagged.summary.requests}
    assert got == wanted
    assert sum(n for n, _ in got.values()) > 0
    assert not engine.scheduler.requests
    assert lagged.summary.metadata["engine"]["async_scheduling"] is True
    assert sync.summary.metadata["engine"]["async_scheduling"] is False
    keys = ("num_steps", "num_preemptions", "prefix_cache_hits")
    assert [lagged.counters[k] for k in keys] != [sync.counters[k] for k in keys]


def test_the_clock_jumps_over_an_idle_gap():
    _, result = run(
        [spec("a", 32, 2), spec("b", 32, 2, arrival=100.0)],
        num_gpu_blocks=64,
        async_scheduling=True,
    )
    b = rows(result)["b"]
    assert b.num_output_tokens == 2
    assert (
        b.time_to_first_token_seconds < 1.0
    )  # scheduled at its arrival, not after a crawl through the gap


class _AdmitFromOne(kvframe.SchedulingPolicy):
    """Test-only FCFS that admits nothing before t = 1 s (a blocked admission with
    nothing running: the case where the two releases' batch queues differ)."""

    name = "admit-from-one"

    def __init__(self) -> None:
        from kvframe_fcfs import FCFSPolicy

        self._fcfs = FCFSPolicy()
        self._view = None

    def attach(self, view) -> None:
        self._view = view

    def create_queue(self):
        return self._fcfs.create_queue()

    def select_queue(self, waiting, skipped_waiting):
        return self._fcfs.select_queue(waiting, skipped_waiting)

    def choose_victim(self, running):
        return running[-1]

    def may_admit(self, request: Request) -> bool:
        return self._view.now >= 1.0


def test_an_empty_step_with_nothing_in_flight_keeps_the_queue_only_in_0_33(
    registry: PluginRegistry,
):
    """vLLM 0.33.0's batch queue schedules again after an empty step while requests
    remain; 0.19.1 first applies the (empty) step: one more scheduled step per
    such pause under 0.33, and the same requests' results."""
    registry.register_class(_AdmitFromOne)
    specs = [spec("a", 16, 2), spec("b", 16, 2, arrival=1.0)]
    common = dict(scheduling="admit-from-one", num_gpu_blocks=16, async_scheduling=True)
    old_engine, old = run(specs, registry, vllm="0.19.1", **common)
    new_engine, new = run(specs, registry, vllm="0.33", **common)
    assert new_engine.scheduler.stats.num_steps == old_engine.scheduler.stats.num_steps + 1
    assert {
        r: (x.time_to_first_token_seconds, x.e2e_request_latency_seconds)
        for r, x in rows(old).items()
    } == {
        r: (x.time_to_first_token_seconds, x.e2e_request_latency_seconds)
        for r, x in rows(new).items()
    }


class _NeverAdmit(_AdmitFromOne):
    """Test-only: admits nothing, ever."""

    name = "never-admit"

    def may_admit(self, request: Request) -> bool:
        return False


def test_a_stall_still_raises(registry: PluginRegistry):
    registry.register_class(_NeverAdmit)
    engine = Engine.from_config(
        EngineConfig(scheduling="never-admit", num_gpu_blocks=16, async_scheduling=True),
        registry,
    )
    with pytest.raises(EngineStalled, match="stalled"):
        engine.run([spec("a", 16, 1), spec("b", 16, 1, arrival=50.0)])
    assert engine.now == 50.0  # it jumped to b's arrival, then gave up


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"executor": "torch"}, "async_scheduling runs with the sim executor only"),
    ],
)
def test_what_async_scheduling_does_not_model_is_refused(extra, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(num_gpu_blocks=64, async_scheduling=True, **extra)


@pytest.mark.parametrize("vllm", ["0.19.1", "0.33"])
def test_a_tier_runs_asynchronously_under_either_target(vllm):
    """Both releases' connectors under the batch queue are modelled (test_batch_queue_tier;
    0.33.0's with switch T22, tests/scheduler/test_deferred_frees.py)."""
    config = EngineConfig(
        num_gpu_blocks=64, async_scheduling=True, offload="cpu:capacity=1GiB", vllm=vllm
    )
    assert config.async_scheduling and config.offload is not None


def test_the_setting_reaches_the_core_and_the_metadata():
    config = EngineConfig.from_settings({"async_scheduling": "on", "num_gpu_blocks": 64})
    assert config.async_scheduling
    assert config.scheduler_config().async_scheduling
    assert config.describe()["async_scheduling"] is True
    assert not EngineConfig(num_gpu_blocks=64).scheduler_config().async_scheduling
