"""Switch T20: a request set aside without KV rejoins the waiting queue (vLLM 0.33.0).

vLLM 0.19.1 puts every waiting request it sets aside in an admission pass --
a connector lookup that answers "ask again" (``None``) included -- into
``skipped_waiting``, which FCFS drains before ``waiting``. vLLM 0.33.0 keeps a
``kv_holding_waiting`` queue for the requests holding KV blocks (a load in
flight or landed) and puts the others back at the front of ``waiting``
(``Scheduler.schedule``'s ``skip_request`` and ``_holds_kv_blocks``,
``vllm/v1/core/sched/scheduler.py`` ~1051-1061 and ~2697-2716 in 0.33.0). So a
request preempted after another was set aside goes ahead of it in 0.33.0 and
behind it in 0.19.1.

The run below is built so the rule decides at step 2: ``a``'s lookup is not
ready at step 0 (set aside), ``q`` preempts itself at step 1, and at step 2
0.19.1 admits ``a`` (skipped first) while 0.33.0 tries ``q`` first, which does
not fit, and stops. In the differential harness the same rule is what made
``compare.py --bridge --tier --vllm-version 0.33.0`` differ first
(``tier-prefix``, step 59, before the switch existed).
"""

from __future__ import annotations

import zlib

import attrs
from kvframe_fcfs import FCFSPolicy

from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.domain.fidelity import Fidelity, fidelity_for
from kvframe.domain.request import Request


class PendingLookups:
    """A connector with nothing in its tier whose answer for some requests is not
    ready before a given step (``None``: ask again next step)."""

    def __init__(self, ready_at: dict[str, int]) -> None:
        self.ready_at = ready_at
        self.step = 0
        self.lookups: list[tuple[int, str]] = []

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        self.lookups.append((self.step, request.request_id))
        if self.step < self.ready_at.get(request.request_id, 0):
            return None, False
        return 0, False

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


def add(s: Scheduler, request_id: str, n: int, max_tokens: int) -> None:
    base = zlib.crc32(request_id.encode()) % 10_000 * 100
    s.add_request(
        Request(request_id, [base + i for i in range(n)], max_tokens, block_hasher=s.block_hasher)
    )


def run(fidelity: str | Fidelity, num_steps: int = 4) -> tuple[list[dict[str, int]], list]:
    """Per step the tokens scheduled; and the connector's lookups (step, request)."""
    connector = PendingLookups({"a": 2})
    config = SchedulerConfig(
        block_size=4,
        num_gpu_blocks=6,  # 5 usable
        max_num_batched_tokens=64,
        max_num_seqs=8,
        max_model_len=64,
        fidelity=fidelity,
    )
    s = Scheduler(config, FCFSPolicy(), connector=connector)
    add(s, "p", 8, max_tokens=20)
    add(s, "q", 8, max_tokens=20)
    add(s, "a", 4, max_tokens=20)
    steps = []
    for step in range(num_steps):
        connector.step = step
        out = s.schedule()
        steps.append(dict(out.num_scheduled_tokens))
        sampled = {
            rid: [1]
            for rid in out.num_scheduled_tokens
            if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens
        }
        s.update_from_output(out, ModelRunnerOutput(sampled))
    return steps, connector.lookups


def test_a_preempted_request_goes_ahead_of_a_pending_lookup_under_0_33() -> None:
    (old, old_lookups), (new, new_lookups) = run("0.19.1"), run("0.33.0")
    # Step 0: p and q run, a's lookup is not ready; step 1: q preempts itself.
    assert old[:2] == new[:2] == [{"p": 8, "q": 8}, {"p": 1}]
    # Step 2: 0.19.1 takes a from skipped_waiting first; q does not fit after it.
    assert old[2] == {"p": 1, "a": 4}
    # 0.33.0: a is behind q in waiting; q does not fit, and FCFS stops there.
    assert new[2] == {"p": 1}
    assert (2, "a") in old_lookups and (2, "a") not in new_lookups


def test_the_switch_alone_makes_the_difference() -> None:
    alone = attrs.evolve(fidelity_for("0.19.1"), holding_queue_first=True)
    assert run(alone)[0][:3] == run("0.33.0")[0][:3]
    without = attrs.evolve(fidelity_for("0.33.0"), holding_queue_first=False)
    assert run(without)[0][:3] == run("0.19.1")[0][:3]


def test_nothing_changes_without_a_request_set_aside() -> None:
    """With every lookup ready the two rules never meet (the switch alone on 0.19.1
    gives 0.19.1's run)."""
    alone = attrs.evolve(fidelity_for("0.19.1"), holding_queue_first=True)

    def ready(fidelity: Fidelity) -> list[dict[str, int]]:
        config = SchedulerConfig(
            block_size=4,
            num_gpu_blocks=6,
            max_num_batched_tokens=64,
            max_num_seqs=8,
            max_model_len=64,
            fidelity=fidelity,
        )
        s = Scheduler(config, FCFSPolicy(), connector=PendingLookups({}))
        for rid in ("p", "q", "a"):
            add(s, rid, 8 if rid != "a" else 4, max_tokens=20)
        steps = []
        for _ in range(6):
            out = s.schedule()
            steps.append(dict(out.num_scheduled_tokens))
            s.update_from_output(
                out,
                ModelRunnerOutput(
                    {
                        rid: [1]
                        for rid in out.num_scheduled_tokens
                        if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens
                    }
                ),
            )
        return steps

    assert ready(alone) == ready(fidelity_for("0.19.1"))
