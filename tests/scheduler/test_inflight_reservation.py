"""Switch T16: an async load leaves room for the prefills in flight (vLLM 0.33.0).

vLLM 0.33.0's scheduler admits a request whose prefix a connector loads
asynchronously only if its blocks fit in the free blocks less the blocks the
in-flight prefills still need for their whole sequence
(``Scheduler._inflight_prefill_reserved_blocks``, ``allocate_slots(reserved_blocks=...)``,
``vllm/v1/core/sched/scheduler.py`` ~1420-1431 and ~3404-3436 in 0.33.0);
vLLM 0.19.1 admits it whenever its blocks are free. The run below is built so
the rule decides at step 0: a long prompt ``a`` is mid-prefill (chunks of 8
tokens) and ``b``'s 20-token load (5 blocks) fits the free blocks but not what
``a`` leaves of them.

The switch is shown with a scripted connector (kvframe's own 0.33.0 tier is
not modelled, so kvframe's driver cannot compare a tier run under 0.33.0 yet;
the vLLM bridge does, with vLLM 0.33.0's own connector:
``compare.py --bridge --tier --vllm-version 0.33.0``). The last test runs
the same script in vLLM 0.33.0's own ``Scheduler``
(``inflight_reservation_vllm033.py``, with ``$KVFRAME_VLLM033_PYTHON``) and
requires the same steps, with the rule and with it undone in vLLM. What the
rule changes on the tier workloads in vLLM 0.33.0 itself is measured in
docs/fidelity.md (``tier-reuse`` from step 274, ``tier-pressure`` from 214,
``tier-pressure-tight`` from 80).
"""

from __future__ import annotations

import json
import subprocess
import zlib
from pathlib import Path

import attrs
import pytest
from kvframe_fcfs import FCFSPolicy
from vllm_reference import harness_env, reference_python

from kvframe.core.inflight import InflightPrefills, NoReservation
from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import KVConnectorOutput, ModelRunnerOutput
from kvframe.domain.fidelity import Fidelity, fidelity_for
from kvframe.domain.request import Request, RequestStatus


class FixedLoads:
    """A connector that offers the same asynchronous hit for a request on every lookup."""

    def __init__(self, hits: dict[str, int]) -> None:
        self.hits = hits

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        hit = self.hits.get(request.request_id, 0)
        return (hit, True) if hit else (0, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        pass

    def build_connector_meta(self, scheduler_output):
        return None

    def update_connector_output(self, output):
        pass

    def request_finished(self, request, block_ids):
        return False

    def take_events(self):
        return []


def make(fidelity: str | Fidelity) -> Scheduler:
    config = SchedulerConfig(
        block_size=4,
        num_gpu_blocks=21,  # 20 usable
        max_num_batched_tokens=64,
        max_num_seqs=8,
        max_model_len=128,
        long_prefill_token_threshold=8,
        fidelity=fidelity,
    )
    return Scheduler(config, FCFSPolicy(), connector=FixedLoads({"b": 20}))


def add(s: Scheduler, request_id: str, n: int, max_tokens: int) -> Request:
    base = zlib.crc32(request_id.encode()) % 10_000 * 100
    request = Request(
        request_id, [base + i for i in range(n)], max_tokens, block_hasher=s.block_hasher
    )
    s.add_request(request)
    return request


def run(fidelity: str | Fidelity, num_steps: int = 12) -> list[tuple[dict[str, int], str]]:
    """Per step: the tokens scheduled and ``b``'s status after the step is scheduled."""
    s = make(fidelity)
    add(s, "a", 64, max_tokens=1)  # 16 blocks, prefilled 8 tokens a step
    b = add(s, "b", 24, max_tokens=1)  # 20 tokens loaded: 5 blocks
    steps = []
    for _ in range(num_steps):
        out = s.schedule()
        steps.append((dict(out.num_scheduled_tokens), b.status.name))
        sampled = {
            rid: [1]
            for rid, n in out.num_scheduled_tokens.items()
            if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens
        }
        landed = {"b"} if b.status == RequestStatus.WAITING_FOR_REMOTE_KVS else set()
        s.update_from_output(
            out,
            ModelRunnerOutput(
                sampled, kv_connector_output=KVConnectorOutput(finished_recving=landed)
            ),
        )
    return steps


def test_the_load_waits_for_the_prefill_in_flight_under_0_33() -> None:
    old, new = run("0.19.1"), run("0.33.0")
    # 0.19.1: 18 blocks free after a's first chunk, b's 5 fit: its load starts at once.
    assert old[0] == ({"a": 8}, "WAITING_FOR_REMOTE_KVS")
    # 0.33.0: a still needs 14 blocks, so only 18 - 14 = 4 are b's to take: b waits.
    assert new[0] == ({"a": 8}, "WAITING")
    # a's prefill ends at step 7 (64 tokens, 8 a step) and a finishes; only then
    # does b's load start, and b runs once it has landed.
    assert [status for _, status in new[:8]] == ["WAITING"] * 8
    assert new[8] == ({}, "WAITING_FOR_REMOTE_KVS")
    assert new[9] == ({"b": 4}, "RUNNING")
    assert old != new


def b_statuses(steps: list[tuple[dict[str, int], str]]) -> list[str]:
    return [status for _, status in steps]


def test_the_switch_alone_decides_when_the_load_starts() -> None:
    """T16 alone on 0.19.1 delays ``b`` as 0.33.0 does; 0.33.0 without it admits ``b``
    at once as 0.19.1 does. (The runs differ in ``a``'s chunks once ``b`` is gone:
    switch A lets a lone request take the whole budget.)"""
    alone = attrs.evolve(fidelity_for("0.19.1"), reserve_for_inflight_prefills=True)
    assert b_statuses(run(alone)) == b_statuses(run("0.33.0"))
    assert run(alone) != run("0.19.1")
    without = attrs.evolve(fidelity_for("0.33.0"), reserve_for_inflight_prefills=False)
    assert b_statuses(run(without)) == b_statuses(run("0.19.1"))
    assert run(without) != run("0.33.0")


@pytest.mark.parametrize("target", ["0.19.1", "0.33.0"])
def test_the_reservation_counts_what_each_prefill_still_needs(target: str) -> None:
    s = make(target)
    add(s, "a", 64, max_tokens=1)
    add(s, "c", 4, max_tokens=1)  # company: the long-prefill threshold applies to a
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 8, "c": 4}
    inflight = s._inflight
    if target == "0.19.1":
        assert isinstance(inflight, NoReservation)  # tracks nothing, reserves nothing
        assert "a" not in inflight
        assert inflight.reserved_blocks() == 0
        return
    assert isinstance(inflight, InflightPrefills)
    assert "a" in inflight
    assert "c" not in inflight  # its one chunk reached its last token
    assert inflight.reserved_blocks() == 16 - 2  # a holds 2 of its 16 blocks
    s.update_from_output(out, ModelRunnerOutput({"c": [1]}))
    # Preemption takes a out of flight: it holds nothing and reserves nothing.
    s._preempt(s.running.pop())
    assert len(inflight) == 0
    assert inflight.reserved_blocks() == 0


VLLM033_SIDE = Path(__file__).resolve().parent / "inflight_reservation_vllm033.py"


def vllm033_run(*args: str) -> list[tuple[dict[str, int], str]]:
    """The same run in vLLM 0.33.0's own Scheduler (``inflight_reservation_vllm033.py``)."""
    done = subprocess.run(
        [str(reference_python("0.33.0")), str(VLLM033_SIDE), *args],
        capture_output=True,
        text=True,
        check=True,
        env=harness_env(),
        timeout=300,
    )
    return [(dict(scheduled), status) for scheduled, status in json.loads(done.stdout)]


@pytest.mark.vllm
def test_each_side_of_the_switch_matches_vllm_033() -> None:
    """kvframe's 0.33.0 run is vLLM 0.33.0's, step for step; with the switch off it is
    vLLM 0.33.0's with ``_inflight_prefill_reserved_blocks`` answering 0."""
    assert run("0.33.0") == vllm033_run()
    without = attrs.evolve(fidelity_for("0.33.0"), reserve_for_inflight_prefills=False)
    assert run(without) == vllm033_run("--no-reservation")
