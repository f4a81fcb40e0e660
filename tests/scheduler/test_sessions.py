"""Streaming-input sessions in the core (:mod:`kvframe.core.sessions`), on both targets.

vLLM 0.19.1 and 0.33.0 (``Scheduler.add_request`` for a live id,
``_handle_stopped_request``, ``_update_request_as_session``): a resumable
request that stops waits for its next chunk keeping its blocks, resumes with
what it keeps plus the chunk, and is closed by a final empty chunk. The same
rules run inside vLLM's engine through the bridge, compared record for record
with vLLM's own scheduler by the ``streaming`` scenario of
``plugins/kvframe-vllm/tests/engine_core_harness.py``; here each rule is shown
on the core alone, switch S (``sessions_resume_from_frontier``) included.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.core.hashing import make_block_hasher
from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.core.sessions import InputChunk
from kvframe.domain.request import Request, RequestStatus
from tests.scheduler.helpers import SAMPLED_TOKEN, add, make_scheduler, step

WAITING_FOR_INPUT = RequestStatus.WAITING_FOR_STREAMING_REQ
CHUNK = [500, 501, 502, 503, 504, 505]


def _session(vllm: str = "0.19.1", **overrides) -> tuple[Scheduler, Request]:
    """A scheduler with session ``s`` (a 10-token prompt, 2 output tokens) that has just
    stopped at its second token with nothing queued."""
    scheduler = make_scheduler(fidelity=vllm, **overrides)
    request = add(scheduler, "s", 10, max_tokens=2, resumable=True)
    _, finished = step(scheduler)
    assert not finished and not scheduler.session_stops
    _, finished = step(scheduler)
    assert finished == []
    return scheduler, request


def test_a_stopped_session_waits_for_input_keeping_its_blocks() -> None:
    scheduler, s = _session()
    assert scheduler.session_stops == {"s": RequestStatus.FINISHED_LENGTH_CAPPED}
    assert s.status == WAITING_FOR_INPUT
    assert "s" not in scheduler.finished_req_ids
    assert scheduler.kv_cache_manager.get_block_ids("s") == [1, 2, 3]
    assert scheduler.sessions.num_waiting_for_input == 1
    # Not unfinished work: an engine loop may idle; still a waiting request.
    assert scheduler.get_num_unfinished_requests() == 0
    assert not scheduler.has_requests()
    assert scheduler.get_request_counts() == (0, 1)
    # Admission skips it, every step.
    output, _ = step(scheduler)
    assert output.total_num_scheduled_tokens == 0
    assert s.status == WAITING_FOR_INPUT


def test_a_chunk_resumes_a_waiting_session_without_a_prefix_lookup() -> None:
    scheduler, s = _session()
    prompt = list(s.prompt_token_ids)
    queries = scheduler.stats.prefix_cache_queries
    scheduler.add_input("s", InputChunk(CHUNK, 3, arrival_time=5.0))
    # 0.19.1 keeps the outputs up to num_computed_tokens: the first, not the last.
    assert s.prompt_token_ids == [*prompt, SAMPLED_TOKEN, *CHUNK]
    assert s.num_output_tokens == 0 and s.num_computed_tokens == 11
    assert s.max_tokens == 2  # 0.19.1 keeps the first chunk's
    assert s.arrival_time == 5.0 and s.status == RequestStatus.WAITING
    assert scheduler.sessions.num_waiting_for_input == 0
    output, _ = step(scheduler)
    # Sent as a new request with its whole block table, from its computed tokens.
    (new,) = output.scheduled_new_reqs
    assert (new.req_id, new.num_computed_tokens, new.block_ids) == ("s", 11, [1, 2, 3, 4, 5])
    assert output.num_scheduled_tokens == {"s": 6}
    assert scheduler.stats.prefix_cache_queries == queries
    step(scheduler)
    assert s.num_output_tokens == 2 and s.status == WAITING_FOR_INPUT


def test_a_chunk_sent_while_running_is_taken_when_the_session_stops() -> None:
    scheduler = make_scheduler()
    s = add(scheduler, "s", 10, max_tokens=1, resumable=True)
    scheduler.add_input("s", InputChunk(CHUNK, 1, arrival_time=1.0))
    _, finished = step(scheduler)
    assert finished == [] and scheduler.session_stops == {"s": RequestStatus.FINISHED_LENGTH_CAPPED}
    # Resumed at once, back in the waiting queue; the sampled token is dropped.
    assert s.status == RequestStatus.WAITING and s.num_tokens == 16
    assert list(scheduler.waiting) == [s]
    output, _ = step(scheduler)
    assert output.num_scheduled_tokens == {"s": 6}


@pytest.mark.parametrize(("vllm", "first"), [("0.19.1", "w"), ("0.33.0", "s")])
def test_a_session_resumed_at_its_stop_queues_by_the_release(vllm: str, first: str) -> None:
    """0.19.1 requeues it at the back of the waiting queue (behind ``w``, waiting
    since before), 0.33.0 with the requests holding blocks (ahead of ``w``)."""
    scheduler = make_scheduler(fidelity=vllm, max_num_batched_tokens=30)
    add(scheduler, "s", 10, max_tokens=1, resumable=True)
    scheduler.add_input("s", InputChunk(CHUNK, 1, arrival_time=1.0))
    add(scheduler, "big", 20, max_tokens=3)
    add(scheduler, "w", 8, max_tokens=1)
    step(scheduler)  # s and big's 20 tokens fill the budget: w waits; s stops
    output, _ = step(scheduler)
    assert [r.req_id for r in output.scheduled_new_reqs] == sorted(["s", "w"], key=first.__ne__)


def test_the_closing_chunk_finishes_a_waiting_session_as_aborted() -> None:
    scheduler, s = _session()
    scheduler.add_input("s", None)
    assert s.status == RequestStatus.FINISHED_ABORTED
    assert "s" not in scheduler.requests and "s" in scheduler.finished_req_ids
    assert scheduler.kv_cache_manager.get_block_ids("s") == []
    assert scheduler.sessions.num_waiting_for_input == 0 and not scheduler.sessions


def test_the_closing_chunk_queued_lets_the_session_finish_when_it_stops() -> None:
    scheduler = make_scheduler()
    s = add(scheduler, "s", 10, max_tokens=1, resumable=True)
    scheduler.add_input("s", None)
    _, finished = step(scheduler)
    assert finished == [s] and s.status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert scheduler.session_stops == {} and not scheduler.sessions


def test_aborting_a_waiting_session_frees_it() -> None:
    scheduler, s = _session()
    assert scheduler.finish_requests("s") == [s]
    assert scheduler.sessions.num_waiting_for_input == 0 and not scheduler.sessions
    assert scheduler.kv_cache_manager.get_block_ids("s") == []
    assert len(scheduler.skipped_waiting) == 0


def test_input_for_a_request_that_is_no_session_is_refused() -> None:
    scheduler = make_scheduler()
    add(scheduler, "plain", 10)
    with pytest.raises(ValueError, match=r"'plain'.*not a live streaming-input session"):
        scheduler.add_input("plain", InputChunk(CHUNK, 1, 0.0))
    with pytest.raises(ValueError, match="'gone'"):
        scheduler.add_input("gone", None)


def test_switch_s_keeps_all_but_the_last_token_and_takes_the_chunks_max_tokens() -> None:
    scheduler, s = _session("0.33.0")
    prompt = list(s.prompt_token_ids)
    scheduler.add_input("s", InputChunk(CHUNK, 3, arrival_time=5.0))
    assert s.prompt_token_ids == [*prompt, SAMPLED_TOKEN, *CHUNK]
    assert s.max_tokens == 3


@pytest.mark.parametrize(("vllm", "admitted"), [("0.19.1", True), ("0.33.0", False)])
def test_switch_s_a_waiting_session_holds_a_sequence_slot(vllm: str, admitted: bool) -> None:
    scheduler, _ = _session(vllm, max_num_seqs=1)
    add(scheduler, "next", 8)
    output, _ = step(scheduler)
    assert ("next" in output.num_scheduled_tokens) is admitted


@pytest.mark.parametrize(("vllm", "stale_kept"), [("0.19.1", True), ("0.33.0", False)])
def test_async_the_token_in_flight_at_a_stop(vllm: str, stale_kept: bool) -> None:
    """Asynchronous scheduling: the session is scheduled again before its stop token
    arrives. 0.19.1 keeps that step's token (appended to the waiting session);
    0.33.0 drops the work in flight and discards the token when it arrives."""
    scheduler = make_scheduler(fidelity=vllm, async_scheduling=True)
    s = add(scheduler, "s", 10, max_tokens=5, resumable=True, stop_token_ids=[7])
    first = scheduler.schedule()
    second = scheduler.schedule()  # s again, on the placeholder of its first token
    assert second.num_scheduled_tokens == {"s": 1}
    scheduler.update_from_output(first, ModelRunnerOutput(sampled_token_ids={"s": [7]}))
    assert s.status == WAITING_FOR_INPUT
    assert s.num_computed_tokens == (11 if stale_kept else 10)
    scheduler.update_from_output(second, ModelRunnerOutput(sampled_token_ids={"s": [8]}))
    assert s.output_token_ids == ([7, 8] if stale_kept else [7])
    assert s.num_output_placeholders == 0 and not scheduler.sessions.stale_outputs


@settings(max_examples=60, deadline=None)
@given(
    prompt_len=st.integers(1, 40),
    outputs=st.lists(st.integers(1, 99), max_size=12),
    keep_back=st.integers(0, 12),
    chunk=st.lists(st.integers(100, 199), max_size=20),
)
def test_restart_with_prompt_hashes_as_a_fresh_request(
    prompt_len: int, outputs: list[int], keep_back: int, chunk: list[int]
) -> None:
    """Whatever is kept and appended, the block hashes are those of a fresh request
    with the same tokens (kept blocks keep their hashes, later ones are rehashed)."""
    hasher = make_block_hasher(4, 0)
    request = Request("r", list(range(prompt_len)), 99, block_hasher=hasher)
    assert len(request.block_hashes) == prompt_len // 4
    for token in outputs:
        request.append_output_token_ids(token)
    keep = max(0, request.num_tokens - keep_back)
    tokens = [*list(request.all_token_ids)[:keep], *chunk]
    request.restart_with_prompt(keep, chunk)
    fresh = Request("r", tokens, 99, block_hasher=hasher)
    assert request.prompt_token_ids == tokens and request.num_output_tokens == 0
    assert request.block_hashes == fresh.block_hashes
    request.append_output_token_ids([1, 2, 3, 4])
    fresh.append_output_token_ids([1, 2, 3, 4])
    assert request.block_hashes == fresh.block_hashes


def test_restart_with_prompt_refuses_to_keep_more_than_it_has() -> None:
    request = Request("r", [1, 2, 3], 4)
    with pytest.raises(ValueError, match="'r': cannot keep 4 of its 3 tokens"):
        request.restart_with_prompt(4, [])
