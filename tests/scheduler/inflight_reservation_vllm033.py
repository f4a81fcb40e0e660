"""vLLM 0.33.0's side of ``test_inflight_reservation.py``: the same run in vLLM's Scheduler.

Run with the vLLM 0.33.0 reference interpreter; prints one JSON list, per step
``[{request id: tokens scheduled}, b's status]``, the shape of
``test_inflight_reservation.run``. vLLM's ``Scheduler`` is built by the
differential harness's ``VllmAdapter`` with an ``OffloadingConnector`` tier,
then its connector's scheduler-side calls are replaced by the same script as
kvframe's ``FixedLoads`` (``b`` is offered a 20-token asynchronous hit on
every lookup, nothing is stored, the worker reports ``b``'s load landed the
step after it starts). ``--no-reservation`` undoes the rule in vLLM itself
(``_inflight_prefill_reserved_blocks`` answering 0), which must give
kvframe's 0.19.1 run of ``b``.

    PYTHONPATH=tools/differential \\
        /work/vllm033-ref-venv/bin/python tests/scheduler/inflight_reservation_vllm033.py
"""

from __future__ import annotations

import json
import sys
import zlib
from typing import Any

# The harness (tools/differential) comes on PYTHONPATH, as in the command above.

CONFIG: dict[str, Any] = {
    "vllm": "0.33",
    "block_size": 4,
    "num_gpu_blocks": 21,
    "max_num_batched_tokens": 64,
    "max_num_seqs": 8,
    "max_model_len": 128,
    "long_prefill_token_threshold": 8,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": True,
    "policy": "fcfs",
    "reserve_full_sequence": True,
    "tier": {
        "block_size_factor": 1,
        "num_cpu_blocks": 64,
        "eviction": "lru",
        "store_threshold": 0,
    },
}
HITS = {"b": 20}


def _script(connector: Any) -> None:
    """Replace the connector's scheduler-side calls by kvframe's ``FixedLoads``."""

    def lookup(request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        hit = HITS.get(request.request_id, 0)
        return (hit, True) if hit else (0, False)

    connector.get_num_new_matched_tokens = lookup
    connector.update_state_after_alloc = lambda request, blocks, num_external_tokens: None
    connector.build_connector_meta = lambda scheduler_output: _Meta()
    connector.update_connector_output = lambda output: None
    connector.request_finished = lambda request, block_ids: (False, None)
    connector.take_events = lambda: ()


class _Meta:
    """An empty connector metadata (nothing loaded or stored by the script)."""


def run(*, reservation: bool = True, num_steps: int = 12) -> list[list[Any]]:
    import vllm_driver
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus

    adapter = vllm_driver.VllmAdapter(CONFIG)
    scheduler = adapter.scheduler
    _script(scheduler.connector)
    if not reservation:
        scheduler._inflight_prefill_reserved_blocks = lambda: 0
    requests = {}
    for request_id, n in (("a", 64), ("b", 24)):
        base = zlib.crc32(request_id.encode()) % 10_000 * 100
        request = Request(
            request_id=request_id,
            prompt_token_ids=[base + i for i in range(n)],
            sampling_params=SamplingParams(max_tokens=1, ignore_eos=True),
            pooling_params=None,
            arrival_time=0.0,
            block_hasher=adapter._block_hasher,
        )
        scheduler.add_request(request)
        requests[request_id] = request
    b = requests["b"]
    steps: list[list[Any]] = []
    for _ in range(num_steps):
        out = scheduler.schedule()
        steps.append([dict(out.num_scheduled_tokens), b.status.name])
        req_ids = list(out.num_scheduled_tokens)
        done = {
            rid for rid in req_ids if requests[rid].num_computed_tokens >= requests[rid].num_tokens
        }
        landed = {"b"} if b.status == RequestStatus.WAITING_FOR_REMOTE_KVS else set()
        scheduler.update_from_output(
            out,
            ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                sampled_token_ids=[[1] if rid in done else [] for rid in req_ids],
                kv_connector_output=KVConnectorOutput(finished_recving=landed or None),
            ),
        )
    return steps


if __name__ == "__main__":
    print(json.dumps(run(reservation="--no-reservation" not in sys.argv[1:])))
