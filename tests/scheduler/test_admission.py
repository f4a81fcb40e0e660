"""The admission decision point: ``SchedulingPolicy.may_admit`` (vLLM RFC #51608).

A refused request is set aside for the step like one whose connector lookup is
not ready, the requests behind it may go, and it is asked again next step.
"""

from __future__ import annotations

import pytest
from kvframe_fcfs import FCFSPolicy

from kvframe.core.scheduler import PolicyContractError
from kvframe.domain.request import Request

from .helpers import add, make_scheduler, step


class RefuseNamed(FCFSPolicy):
    """Refuses the requests named in ``refused``; records every question asked."""

    name = "refuse-named"

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.asked: list[str] = []

    def may_admit(self, request: Request) -> bool:
        self.asked.append(request.request_id)
        return request.request_id not in self.refused


def test_a_refused_request_is_set_aside_and_those_behind_it_go():
    policy = RefuseNamed({"a"})
    s = make_scheduler(policy)
    add(s, "a", 8)
    add(s, "b", 8)
    add(s, "c", 8)
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"b": 8, "c": 8}
    assert policy.asked == ["a", "b", "c"]
    assert [r.request_id for r in s.skipped_waiting] == ["a"]
    assert not s.waiting


def test_a_refused_request_is_asked_again_next_step_first():
    policy = RefuseNamed({"a", "b"})
    s = make_scheduler(policy)
    add(s, "a", 8)
    add(s, "b", 8)
    step(s)
    assert [r.request_id for r in s.skipped_waiting] == ["a", "b"]  # order kept
    policy.asked.clear()
    policy.refused = {"b"}
    add(s, "c", 8)
    out, _ = step(s)
    assert policy.asked == ["a", "b", "c"]
    assert out.num_scheduled_tokens == {"a": 8, "c": 8}
    assert [r.request_id for r in s.skipped_waiting] == ["b"]


def test_a_running_request_is_not_asked_again():
    policy = RefuseNamed(set())
    s = make_scheduler(policy, max_num_batched_tokens=4)
    add(s, "a", 8)
    step(s)  # a prefills its first chunk: from now on it is running
    step(s)
    assert policy.asked == ["a"]


def test_a_policy_that_keeps_the_default_is_never_asked():
    s = make_scheduler(FCFSPolicy())
    assert s._may_admit is None  # resolved once: no call per waiting request
    assert make_scheduler(RefuseNamed(set()))._may_admit is not None


def test_decisions_are_fcfs_when_everything_is_admitted():
    def run(policy) -> list[dict[str, int]]:
        s = make_scheduler(policy, num_gpu_blocks=10, max_num_batched_tokens=16)
        for i in range(6):
            add(s, f"r{i}", 6 + 3 * i, max_tokens=5)
        return [step(s)[0].num_scheduled_tokens for _ in range(30)]

    assert run(RefuseNamed(set())) == run(FCFSPolicy())


def test_an_answer_that_is_not_a_bool_is_a_contract_error():
    class Maybe(FCFSPolicy):
        name = "maybe"

        def may_admit(self, request):
            return 1

    s = make_scheduler(Maybe())
    add(s, "a", 8)
    with pytest.raises(PolicyContractError) as caught:
        step(s)
    assert str(caught.value) == (
        "scheduling policy 'maybe': may_admit('a') returned 1; it must return True or False"
    )


def test_a_policy_overriding_may_admit_goes_step_by_step_unless_it_declares_otherwise():
    class Declared(RefuseNamed):
        allows_decode_runs = True

    assert make_scheduler(RefuseNamed(set()))._decode_runs_allowed is False
    assert make_scheduler(Declared(set()))._decode_runs_allowed is True
