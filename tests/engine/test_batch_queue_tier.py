"""The CPU tier under asynchronous scheduling: the connector in the batch queue's order.

vLLM 0.19.1's ``EngineCore.step_with_batch_queue`` hands each scheduled step
(its connector metadata included) to the worker at once and applies the step's
output -- the sampled tokens *and* the worker's ``KVConnectorOutput`` -- only
when the step leaves the queue. A step that schedules nothing still runs the
connector (vLLM's model runner without a forward pass). So under
``EngineConfig(async_scheduling=True)`` with a tier:

* every scheduled step, empty or not, is run by the worker once, in schedule
  order, and its output applied once, in the same order;
* a load the worker reports is seen by the scheduler only when the reporting
  step's output is applied: its request is scheduled again only after that;
* a step that schedules nothing takes no GPU time;
* when the last request left, the stores still in flight land (as in the
  synchronous loop), nothing leaks.

Each test runs under both fidelity targets: vLLM 0.33.0's job connector follows
the same order (its worker reports jobs, and switch T22 holds a freed request's
blocks until the steps in flight that may write them are applied). That the
decisions are vLLM's (AsyncScheduler + OffloadingConnector) is the differential
harness's job (``compare.py --tier --scheduling async``, against 0.19.1 and
0.33.0: ``tests/differential/test_vllm_decisions.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvframe.domain.request import RequestStatus
from kvframe.engine import Engine, EngineConfig
from kvframe.workloads import load_workload

pytest.importorskip("kvframe_cpu_offload")

NUM_GPU_BLOCKS = 1200
LIMIT = 150
TIER = {"offload": "cpu:capacity=64GiB", "eviction": "lru"}


@pytest.fixture(scope="module")
def workload(conversation_trace: str):
    return load_workload(conversation_trace, limit=LIMIT)


@pytest.fixture(scope="module", params=["0.19.1", "0.33"])
def vllm(request: pytest.FixtureRequest) -> str:
    """The fidelity target: both model the tier under the batch queue."""
    return str(request.param)


class _Recorder:
    """Logs the engine's calls into the scheduler and the executor, in order."""

    def __init__(self, engine: Engine) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.step_of: dict[int, int] = {}
        self._outputs: list[Any] = []  # alive, so that no id() is reused
        self.starts: list[float] = []
        scheduler, executor = engine.scheduler, engine.executor
        schedule, update, execute = (
            scheduler.schedule,
            scheduler.update_from_output,
            executor.execute,
        )

        def recorded_schedule(now: float | None = None, **kwargs: Any) -> Any:
            waiting = {
                rid
                for rid, r in scheduler.requests.items()
                if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
            }
            output = schedule(now, **kwargs)
            step = len(self.step_of)
            self.step_of[id(output)] = step
            self._outputs.append(output)
            self.events.append(("schedule", step, waiting, dict(output.num_scheduled_tokens)))
            return output

        def recorded_execute(output: Any, requests: Any, now: float = 0.0) -> Any:
            self.starts.append(now)
            result = execute(output, requests, now)
            self.events.append(("execute", self.step_of[id(output)], result.duration))
            return result

        def recorded_update(output: Any, model_output: Any) -> Any:
            done = model_output.kv_connector_output
            recving = set(done.finished_recving) if done is not None else set()
            sending = set(done.finished_sending) if done is not None else set()
            self.events.append(("apply", self.step_of[id(output)], recving, sending))
            return update(output, model_output)

        scheduler.schedule = recorded_schedule  # type: ignore[method-assign]
        scheduler.update_from_output = recorded_update  # type: ignore[method-assign]
        executor.execute = recorded_execute  # type: ignore[method-assign]

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == kind]


_RUNS: dict[tuple[bool, str], tuple[Engine, _Recorder, dict[str, Any]]] = {}


def _run(workload, async_scheduling: bool, vllm: str) -> tuple[Engine, _Recorder, dict[str, Any]]:
    """Each mode and target runs once per session (a few seconds each)."""
    key = (async_scheduling, vllm)
    if key not in _RUNS:
        engine = Engine.from_config(
            EngineConfig(
                num_gpu_blocks=NUM_GPU_BLOCKS,
                async_scheduling=async_scheduling,
                vllm=vllm,
                **TIER,
            )
        )
        recorder = _Recorder(engine)
        counters = engine.run(workload).summary.counters
        _RUNS[key] = (engine, recorder, counters)
    return _RUNS[key]


def test_the_tier_is_used_and_nothing_leaks(workload, vllm):
    engine, _, counters = _run(workload, True, vllm)
    assert counters["num_requests_finished"] + counters["num_requests_ignored"] == LIMIT
    assert counters["offload_hit_tokens_new"] == counters["external_prefix_cache_hits"] > 0
    assert counters["offload_hit_tokens"] == (
        counters["offload_hit_tokens_new"] + counters["offload_hit_tokens_preempted"]
    )
    assert counters["offload_num_loads"] > 0 and counters["offload_num_stores"] > 0
    scheduler = engine.scheduler
    assert scheduler.kv_cache_manager.num_free_blocks == NUM_GPU_BLOCKS - 1
    assert not scheduler.connector.busy and not engine.executor.offload_worker.busy
    assert not scheduler.requests


def test_every_step_is_run_and_applied_once_in_schedule_order(workload, vllm):
    """Empty steps too: the worker runs the connector without a forward pass."""
    _, recorder, _ = _run(workload, True, vllm)
    scheduled = [e[1] for e in recorder.of("schedule")]
    executed = [e[1] for e in recorder.of("execute")]
    applied = [e[1] for e in recorder.of("apply")]
    # The drain after the last request applies its steps through the synchronous
    # path, which runs them too: every schedule() is executed and applied once.
    assert executed == scheduled == applied == list(range(len(scheduled)))
    # The batch queue: some step is scheduled before the previous one is applied.
    position = {(e[0], e[1]): i for i, e in enumerate(recorder.events)}
    lagged = [s for s in scheduled[1:] if position[("schedule", s)] < position[("apply", s - 1)]]
    assert len(lagged) > len(scheduled) // 2


def test_a_load_is_seen_only_when_its_step_is_applied(workload, vllm):
    """A request waiting for its load is scheduled again only after the output that
    reported the load was applied -- never on the worker's report alone."""
    _, recorder, _ = _run(workload, True, vllm)
    reported_at: dict[str, int] = {}  # request -> event index of the applying update
    checked = 0
    for index, event in enumerate(recorder.events):
        if event[0] == "apply":
            for rid in event[2]:
                reported_at.setdefault(rid, index)
        elif event[0] == "schedule":
            _, _, waiting, scheduled = event
            for rid in waiting & scheduled.keys():
                # Scheduled while it was waiting for its load: the load's report
                # must have been applied before this schedule() call.
                assert rid in reported_at and reported_at[rid] < index, rid
                checked += 1
    assert checked > 0


def test_steps_without_tokens_take_no_gpu_time(workload, vllm):
    engine, recorder, _ = _run(workload, True, vllm)
    tokens = {e[1]: sum(e[3].values()) for e in recorder.of("schedule")}
    empty = [e for e in recorder.of("execute") if tokens[e[1]] == 0]
    assert empty, "the workload has steps that schedule nothing while loads run"
    # Only steps with tokens are GPU steps in the metrics.
    assert engine._collector.num_steps == sum(1 for t in tokens.values() if t)
    start_of = dict(zip([e[1] for e in recorder.of("execute")], recorder.starts, strict=True))
    # The GPU runs steps back to back: a step starts no earlier than the one before
    # it; an empty step adds nothing to the timeline (its start is the next's).
    starts = [start_of[s] for s in sorted(start_of)]
    assert starts == sorted(starts)


def test_async_and_sync_serve_the_same_requests(workload, vllm):
    _, _, sync = _run(workload, False, vllm)
    _, _, lagged = _run(workload, True, vllm)
    for key in ("num_requests_finished", "num_requests_ignored", "num_output_tokens"):
        if key in sync:
            assert lagged[key] == sync[key], key
    assert lagged["num_steps"] >= sync["num_steps"]
