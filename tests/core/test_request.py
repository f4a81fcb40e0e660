"""Request and RequestStatus: token bookkeeping, ordering, finish reasons."""

from __future__ import annotations

import pytest

from kvframe.core.hashing import make_block_hasher
from kvframe.domain.request import Request, RequestStatus


def test_defaults() -> None:
    request = Request("r1", [1, 2, 3], 8)
    assert request.status is RequestStatus.WAITING
    assert request.num_prompt_tokens == 3
    assert request.num_tokens == 3
    assert request.num_output_tokens == 0
    assert request.num_tokens_with_spec == 3
    assert request.num_computed_tokens == 0
    assert request.num_cached_tokens == -1
    assert request.num_external_computed_tokens == 0
    assert request.num_output_placeholders == 0
    assert request.num_preemptions == 0
    assert request.block_hashes == []
    assert request.stop_reason is None
    assert request.first_token_time is None and request.finish_time is None
    assert request.is_last_turn is True
    assert not request.is_finished()
    assert request.get_finished_reason() is None


def test_request_has_slots_only() -> None:
    request = Request("r", [1], 1)
    with pytest.raises(AttributeError):
        request.some_new_field = 1  # type: ignore[attr-defined]


def test_prompt_is_copied_into_all_token_ids() -> None:
    prompt = [1, 2, 3]
    request = Request("r", prompt, 4)
    request.append_output_token_ids(9)
    assert prompt == [1, 2, 3]
    assert request.all_token_ids == [1, 2, 3, 9]
    assert request.output_token_ids == [9]


def test_append_output_tokens_int_and_list() -> None:
    request = Request("r", [1, 2], 10)
    request.append_output_token_ids(3)
    request.append_output_token_ids([4, 5])
    assert request.output_token_ids == [3, 4, 5]
    assert request.all_token_ids == [1, 2, 3, 4, 5]
    assert request.num_tokens == 5 and request.num_output_tokens == 3
    request.spec_token_ids = [7, 7]
    assert request.num_tokens_with_spec == 7


def test_prompt_hashed_at_construction_and_outputs_incrementally() -> None:
    hasher = make_block_hasher(2)
    request = Request("r", [1, 2, 3], 10, block_hasher=hasher)
    assert len(request.block_hashes) == 1
    request.append_output_token_ids(4)
    assert len(request.block_hashes) == 2
    request.spec_token_ids = [5, 6]  # never hashed
    request.append_output_token_ids(5)
    assert len(request.block_hashes) == 2


def test_set_block_hasher_later() -> None:
    hasher = make_block_hasher(2)
    late = Request("r", [1, 2, 3, 4, 5], 10)
    late.set_block_hasher(hasher)
    assert late.block_hashes == Request("s", [1, 2, 3, 4, 5], 10, block_hasher=hasher).block_hashes
    late.set_block_hasher(hasher)  # same hasher again: nothing new
    assert len(late.block_hashes) == 2
    with pytest.raises(ValueError):
        late.set_block_hasher(make_block_hasher(2, seed=1))


def test_stop_token_ids_is_a_set() -> None:
    request = Request("r", [1], 4, stop_token_ids=[2, 3, 2])
    assert request.stop_token_ids == frozenset({2, 3})


def test_status_order_and_is_finished() -> None:
    unfinished = [
        RequestStatus.WAITING,
        RequestStatus.WAITING_FOR_REMOTE_KVS,
        RequestStatus.RUNNING,
        RequestStatus.PREEMPTED,
    ]
    finished = [
        RequestStatus.FINISHED_STOPPED,
        RequestStatus.FINISHED_LENGTH_CAPPED,
        RequestStatus.FINISHED_ABORTED,
        RequestStatus.FINISHED_IGNORED,
    ]
    assert all(not RequestStatus.is_finished(s) for s in unfinished)
    assert all(RequestStatus.is_finished(s) for s in finished)
    assert max(unfinished) < min(finished)
    assert str(RequestStatus.RUNNING) == "RUNNING"


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (RequestStatus.FINISHED_STOPPED, "stop"),
        (RequestStatus.FINISHED_LENGTH_CAPPED, "length"),
        (RequestStatus.FINISHED_ABORTED, "abort"),
        (RequestStatus.FINISHED_IGNORED, "length"),
        (RequestStatus.RUNNING, None),
    ],
)
def test_finished_reason(status: RequestStatus, reason: str | None) -> None:
    request = Request("r", [1], 1)
    request.status = status
    assert request.get_finished_reason() == reason
    assert RequestStatus.get_finished_reason(status) == reason
    assert request.is_finished() == (reason is not None)


def test_ordering_priority_then_arrival_then_id() -> None:
    a = Request("b", [1], 1, priority=0, arrival_time=5.0)
    b = Request("a", [1], 1, priority=1, arrival_time=0.0)
    c = Request("c", [1], 1, priority=0, arrival_time=1.0)
    d = Request("a", [1], 1, priority=0, arrival_time=5.0)
    assert sorted([a, b, c, d]) == [c, d, a, b]
    twin = Request("a", [1], 1, priority=0, arrival_time=5.0)
    assert (d < twin) != (twin < d)  # identity breaks the last tie
