"""`kvframe run --vllm 0.33` with a CPU tier: vLLM 0.33.0's connector in the engine loop.

The 0.33.0 connector offers a finished request's last stores the step *after*
it finished, and that step may schedule nothing (the request was the last
one running): the engine must take that step, submit the stores one step
later, wait for them to land, and only then end the run -- as vLLM 0.33.0's
engine keeps stepping while its connector has pending work.
"""

from __future__ import annotations

from kvframe.engine.config import EngineConfig
from kvframe.engine.engine import Engine
from kvframe.offload.jobs.connector import JobOffloadingConnector
from kvframe.workloads.spec import RequestSpec


def _chunk_bytes() -> int:
    """Bytes of one tier chunk of the default preset (16-token blocks)."""
    probe = Engine.from_config(
        EngineConfig(num_gpu_blocks=64, vllm="0.33", offload="cpu:capacity=1GiB")
    )
    connector = probe.scheduler.connector
    assert isinstance(connector, JobOffloadingConnector)
    return (1 << 30) // connector.manager.num_chunks


def test_a_finished_requests_last_store_runs_after_the_last_step() -> None:
    # Five chunks: r0's four pending chunks leave no room for r1's four, so r1's
    # store is refused while it runs; it finishes at once (one output token) and
    # its store is offered again after r0's has landed, in a step with nothing
    # left to schedule.
    capacity = 5 * _chunk_bytes()
    specs = [
        RequestSpec("r0", list(range(64)), 2, arrival_time=0.0),
        RequestSpec("r1", list(range(1000, 1064)), 1, arrival_time=0.001),
    ]
    engine = Engine.from_config(
        EngineConfig(num_gpu_blocks=64, vllm="0.33", offload=f"cpu:capacity={capacity}")
    )
    connector = engine.scheduler.connector
    assert isinstance(connector, JobOffloadingConnector)
    build = connector._build_store_jobs
    late_stores: list[tuple[str, bool]] = []

    def recording(output, finished):  # type: ignore[no-untyped-def]
        jobs = build(output, finished)
        late_stores.extend(
            (job.request_id, bool(output.num_scheduled_tokens))
            for job in jobs.values()
            if job.request_id in finished
        )
        return jobs

    connector._build_store_jobs = recording  # type: ignore[method-assign]
    result = engine.run(specs)
    assert late_stores == [("r1", False)]
    assert result.counters["offload_store_refused"] == 1
    assert result.counters["offload_stored_blocks"] == 8  # r1's four chunks too
    assert not connector.busy and not engine.executor.offload_worker.busy
