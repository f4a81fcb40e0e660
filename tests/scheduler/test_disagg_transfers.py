"""A transfer that fails or is aborted in flight loses nothing (issue 48), kvframe alone.

Prefill/decode disaggregation through the connector seam, with the NIXL-like
scripted connector of the disaggregation harness (``tools/differential/disagg.py``,
whose rules are ``disagg_script.NixlRules``): a decode-side request loading its
prompt that fails recomputes from the first bad block (or finishes with
``error``), one aborted while its load is in flight keeps its blocks until the
load lands and then frees them, a prefill-side request holds its blocks until
the send lands. Every block comes back and the scheduler's counters say what
happened. That these are vLLM's decisions is ``tests/differential/test_disagg.py``.
"""

from __future__ import annotations

from typing import Any

import disagg
import disagg_script
import pytest

from kvframe.core.scheduler_output import KVConnectorOutput, ModelRunnerOutput
from kvframe.domain.fidelity import VLLM_TARGETS
from kvframe.domain.request import RequestStatus

BLOCK = disagg_script.CONFIG["block_size"]
NUM_BLOCKS = disagg_script.CONFIG["num_gpu_blocks"]


def spec(request_id: str, params: dict[str, Any] | None, **over: Any) -> dict[str, Any]:
    """One request of a hand-written script: a 16-token prompt, 3 tokens out."""
    base = {
        "request_id": request_id,
        "arrival_step": 0,
        "prompt_token_ids": list(range(100, 116)),
        "max_tokens": 3,
        "params": params,
        "delay": 2,
        "abort_after": None,
        "fail_block": None,
    }
    return {**base, **over}


def side_for(policy: str = "recompute", vllm: str = "0.19.1") -> disagg.KvframeSide:
    script = {"config": dict(disagg_script.CONFIG), "failure_policy": policy, "requests": []}
    return disagg.KvframeSide(script, vllm)


CONSUMER = {"do_remote_prefill": True, "remote_block_ids": [1]}


def step(
    side: disagg.KvframeSide,
    *,
    recving: tuple[str, ...] = (),
    sending: tuple[str, ...] = (),
    invalid: tuple[int, ...] = (),
) -> tuple[dict[str, int], list[Any]]:
    """One step: schedule, sample for every request past its prompt, report transfers."""
    out, scheduled = side.schedule()
    sampled = {}
    for request_id in scheduled:
        computed, num_tokens = side.progress(request_id)
        if computed >= num_tokens:
            sampled[request_id] = [7]
    output = ModelRunnerOutput(
        sampled_token_ids=sampled,
        kv_connector_output=KVConnectorOutput(
            finished_sending=set(sending),
            finished_recving=set(recving),
            invalid_block_ids=set(invalid),
        ),
    )
    return scheduled, side.scheduler.update_from_output(out, output)


def loading(side: disagg.KvframeSide, request_id: str) -> list[int]:
    """Start the load of a consumer request: the blocks it loads into."""
    side.add(spec(request_id, dict(CONSUMER)))
    step(side)
    assert side.scheduler.requests[request_id].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    return side.rules.take_started()[request_id]


@pytest.mark.parametrize("vllm", VLLM_TARGETS)
def test_a_failed_load_recomputes_from_its_first_bad_block(vllm: str) -> None:
    side = side_for("recompute", vllm)
    blocks = loading(side, "c")
    assert len(blocks) == 4
    step(side, recving=("c",), invalid=(blocks[1], blocks[3]))
    request = side.scheduler.requests["c"]
    assert request.num_computed_tokens == BLOCK  # the first block loaded
    stats = side.scheduler.stats
    assert (stats.num_failed_kv_loads, stats.num_failed_kv_load_tokens) == (1, 16 - BLOCK)
    # Switch L: 0.19.1 lowered the external count by what was lost.
    assert request.num_external_computed_tokens == (16 if vllm == "0.33.0" else BLOCK)
    scheduled, _ = step(side)
    assert scheduled == {"c": 16 - BLOCK}
    while side.scheduler.requests:
        step(side)
    assert side.scheduler.kv_cache_manager.num_free_blocks == NUM_BLOCKS - 1


def test_a_load_failed_from_its_first_block_frees_and_computes_locally() -> None:
    side = side_for("recompute")
    blocks = loading(side, "c")
    step(side, recving=("c",), invalid=(blocks[0],))
    scheduled, _ = step(side)
    # Its blocks went back at promotion; the retry allocates afresh and, the
    # connector having cleared do_remote_prefill, computes the whole prompt.
    assert scheduled == {"c": 16}
    assert not side.rules.take_started()


def test_a_failed_load_under_policy_fail_finishes_with_error_and_frees() -> None:
    side = side_for("fail")
    blocks = loading(side, "c")
    free_while_loading = side.scheduler.kv_cache_manager.num_free_blocks
    assert free_while_loading == NUM_BLOCKS - 1 - len(blocks)
    _, finished = step(side, recving=("c",), invalid=(blocks[2],))
    assert [(r.request_id, r.get_finished_reason()) for r in finished] == [("c", "error")]
    assert side.scheduler.stats.num_failed_kv_loads == 1
    assert side.scheduler.stats.num_aborted == 0
    assert side.scheduler.kv_cache_manager.num_free_blocks == NUM_BLOCKS - 1
    assert not side.scheduler.requests


def test_an_abort_while_loading_holds_the_blocks_until_the_load_lands() -> None:
    side = side_for()
    blocks = loading(side, "c")
    side.abort("c")
    kv = side.scheduler.kv_cache_manager
    assert kv.num_free_blocks == NUM_BLOCKS - 1 - len(blocks)  # the worker still writes them
    assert side.state()["held"] == ["c"]
    step(side)
    assert kv.num_free_blocks == NUM_BLOCKS - 1 - len(blocks)
    step(side, recving=("c",))
    assert kv.num_free_blocks == NUM_BLOCKS - 1
    assert side.state()["held"] == []
    assert side.scheduler.stats.num_aborted == 1


def test_a_producer_holds_its_blocks_until_the_send_lands_and_an_abort_frees_at_once() -> None:
    side = side_for()
    producer = {"do_remote_decode": True}
    side.add(spec("p", dict(producer), max_tokens=1))
    side.add(spec("q", dict(producer), max_tokens=1, prompt_token_ids=list(range(200, 216))))
    side.abort("q")  # before it ran: freed at once, nothing sent
    _, finished = step(side)
    assert [(r.request_id, r.get_finished_reason()) for r in finished] == [("p", "length")]
    assert side.rules.sends_started == [("p", [1, 2, 3, 4])]
    kv = side.scheduler.kv_cache_manager
    assert kv.num_free_blocks == NUM_BLOCKS - 1 - 4
    step(side, sending=("p",))
    assert kv.num_free_blocks == NUM_BLOCKS - 1


@pytest.mark.parametrize("vllm", VLLM_TARGETS)
def test_a_held_producer_keeps_the_engine_stepping_only_in_0_33(vllm: str) -> None:
    """Switch held_requests_keep_engine: vLLM 0.33.0's ``has_requests`` counts finished
    requests whose blocks wait for a transfer; 0.19.1's does not."""
    side = side_for(vllm=vllm)
    side.add(spec("p", {"do_remote_decode": True}, max_tokens=1))
    step(side)
    step(side)  # the next output reports p's finish; now only its send is left
    assert side.state()["held"] == ["p"]
    assert side.scheduler.has_requests() is (vllm == "0.33.0")
    step(side, sending=("p",))
    assert not side.scheduler.has_requests()


def test_a_failed_block_of_a_running_request_is_refused() -> None:
    side = side_for()
    side.add(spec("r", None))
    step(side)
    with pytest.raises(ValueError, match="running request 'r'"):
        step(side, invalid=(1,))


@pytest.mark.parametrize("vllm", VLLM_TARGETS)
@pytest.mark.parametrize("role", disagg_script.ROLES)
def test_seeded_scripts_free_every_block_and_finish_every_request(vllm: str, role: str) -> None:
    failed_loads = errors = 0
    for seed in range(8):
        script = disagg.full_script(seed, role)
        side = disagg.KvframeSide(script, vllm)
        records = disagg.run(script, side)
        last = records[-1]
        assert last["end"]
        assert (last["live"], last["held"]) == ({}, [])
        assert last["free_blocks"] == NUM_BLOCKS - 1
        finished = {rid for r in records[:-1] for rid, _ in r["finished"]}
        aborted = {s["request_id"] for s in script["requests"] if s["abort_after"] is not None}
        assert {s["request_id"] for s in script["requests"]} <= finished | aborted
        stats = side.scheduler.stats
        seed_errors = sum(1 for r in records[:-1] for _, why in r["finished"] if why == "error")
        if script["failure_policy"] == "fail":
            assert seed_errors == stats.num_failed_kv_loads
        else:
            assert seed_errors == 0
        failed_loads += stats.num_failed_kv_loads
        errors += seed_errors
    if role == "consumer":
        assert failed_loads > errors > 0  # both policies were exercised
