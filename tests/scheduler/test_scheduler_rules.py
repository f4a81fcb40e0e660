"""Each of vLLM V1's scheduling rules, one at a time, on small hand-checked cases."""

from __future__ import annotations

import pytest
from kvframe_fcfs import FCFSPolicy
from kvframe_priority import PriorityPolicy

from kvframe.core.scheduler import PolicyContractError
from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.domain.request import RequestStatus

from .helpers import SAMPLED_TOKEN, add, make_scheduler, run_to_completion, sample_for, step


def test_prefill_fills_the_budget_then_chunks_the_next_prompt():
    s = make_scheduler(max_num_batched_tokens=20)
    add(s, "a", 12)
    add(s, "b", 12)
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 12, "b": 8}
    # b is a partial chunk: it samples nothing and continues next step.
    assert s.requests["b"].num_output_tokens == 0
    out, _ = step(s)
    # running first, in running order: a decodes one token, b finishes its prompt.
    assert list(out.num_scheduled_tokens.items()) == [("a", 1), ("b", 4)]


def test_long_prefill_threshold_caps_tokens_per_request_per_step():
    s = make_scheduler(max_num_batched_tokens=64, long_prefill_token_threshold=5)
    add(s, "a", 12)
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 5}
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 5}
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 2}


def test_running_requests_are_scheduled_before_waiting_ones():
    s = make_scheduler(max_num_batched_tokens=10)
    add(s, "a", 9, max_tokens=5)
    step(s)
    add(s, "b", 30)
    out, _ = step(s)
    assert list(out.num_scheduled_tokens) == ["a", "b"]
    assert out.num_scheduled_tokens == {"a": 1, "b": 9}


def test_budget_exhaustion_stops_admission():
    s = make_scheduler(max_num_batched_tokens=8)
    add(s, "a", 8)
    add(s, "b", 4)
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 8}
    assert len(s.waiting) == 1


def test_max_num_seqs_limits_running_requests():
    s = make_scheduler(max_num_seqs=2)
    for rid in "abc":
        add(s, rid, 4)
    out, _ = step(s)
    assert set(out.num_scheduled_tokens) == {"a", "b"}
    assert len(s.running) == 2 and len(s.waiting) == 1


def test_no_chunking_rule_stops_at_a_prompt_larger_than_the_budget_left():
    s = make_scheduler(max_num_batched_tokens=256, enable_chunked_prefill=False)
    add(s, "a", 200)
    add(s, "b", 100)
    add(s, "c", 10)
    out, _ = step(s)
    # b does not fit in the 56 tokens left and may not be chunked; c waits behind it.
    assert out.num_scheduled_tokens == {"a": 200}


def test_allocation_failure_stops_admission():
    # 9 usable blocks of 4 tokens: a needs 5 blocks, b needs 5 more.
    s = make_scheduler(num_gpu_blocks=10)
    add(s, "a", 20)
    add(s, "b", 20)
    add(s, "c", 4)
    out, _ = step(s)
    assert out.num_scheduled_tokens == {"a": 20}
    # FCFS: c is not admitted past b even though it would fit.
    assert [r.request_id for r in s.waiting] == ["b", "c"]


def test_fcfs_preempts_the_tail_of_running_and_admits_nothing_that_step():
    # 6 usable blocks; each prompt fills exactly 2, the first decode token needs a 3rd.
    s = make_scheduler(num_gpu_blocks=7, max_num_batched_tokens=64)
    for rid in "abc":
        add(s, rid, 8, max_tokens=8)
    step(s)
    assert s.kv_cache_manager.num_free_blocks == 0
    add(s, "d", 1)
    out, _ = step(s)
    # a needs a block: the tail (c) is preempted, which frees enough for a and b.
    assert out.preempted_req_ids == {"c"}
    assert list(out.num_scheduled_tokens) == ["a", "b"]
    # no admission in a step with preemptions, even though d is waiting.
    assert "d" not in out.num_scheduled_tokens
    # the preempted request goes back to the head of the waiting queue.
    assert [r.request_id for r in s.waiting] == ["c", "d"]
    c = s.requests["c"]
    assert c.status == RequestStatus.PREEMPTED
    assert c.num_computed_tokens == 0
    assert c.num_preemptions == 1
    assert s.stats.num_preemptions == 1


def test_a_request_that_must_preempt_itself_is_not_scheduled():
    s = make_scheduler(num_gpu_blocks=3)
    add(s, "a", 8, max_tokens=8)
    step(s)
    out, _ = step(s)
    assert out.preempted_req_ids == {"a"}
    assert out.num_scheduled_tokens == {}


def test_priority_preempts_the_least_important():
    s = make_scheduler(PriorityPolicy(), num_gpu_blocks=7)
    add(s, "low", 8, max_tokens=8, priority=5, arrival_time=0.0)
    add(s, "high", 8, max_tokens=8, priority=0, arrival_time=1.0)
    add(s, "mid", 8, max_tokens=8, priority=2, arrival_time=2.0)
    step(s)
    # Admission follows the heap: high, mid, low.
    assert [r.request_id for r in s.running] == ["high", "mid", "low"]
    out, _ = step(s)
    assert out.preempted_req_ids == {"low"}
    assert list(out.num_scheduled_tokens) == ["high", "mid"]


def test_priority_victim_already_scheduled_gives_back_its_budget_and_blocks():
    s = make_scheduler(PriorityPolicy(), num_gpu_blocks=8)
    # "late" is first in the running list but the least important.
    add(s, "late", 8, max_tokens=8, priority=9, arrival_time=0.0)
    step(s)
    add(s, "x", 8, max_tokens=8, priority=0, arrival_time=1.0)
    add(s, "y", 8, max_tokens=8, priority=0, arrival_time=2.0)
    step(s)
    assert [r.request_id for r in s.running] == ["late", "x", "y"]
    assert s.kv_cache_manager.num_free_blocks == 0
    out, _ = step(s)
    # late is scheduled first (no new block needed); x then needs a block and
    # late, already scheduled, is the victim: its token goes back to the budget.
    assert out.preempted_req_ids == {"late"}
    assert list(out.num_scheduled_tokens) == ["x", "y"]
    assert out.total_num_scheduled_tokens == 2


def test_preempted_request_resumes_first_and_is_reported_as_resumed():
    s = make_scheduler(num_gpu_blocks=7)
    for rid in "abc":
        add(s, rid, 8, max_tokens=8)
    step(s)
    out, _ = step(s)
    assert out.preempted_req_ids == {"c"}
    # d arrives after c was preempted but before it could resume: c goes first.
    add(s, "d", 8, max_tokens=2)
    first_scheduled = {}
    for index in range(60):
        out, _ = step(s)
        for order, request_id in enumerate(out.num_scheduled_tokens):
            first_scheduled.setdefault(request_id, (index, order))
        if "c" in out.scheduled_cached_reqs.resumed_req_ids:
            assert [r.req_id for r in out.scheduled_new_reqs] in ([], ["d"])
        if not s.has_unfinished_requests():
            break
    assert not s.has_unfinished_requests()
    assert first_scheduled["c"] < first_scheduled["d"]


def test_stop_on_max_tokens():
    s = make_scheduler()
    a = add(s, "a", 4, max_tokens=3)
    finished = []
    for _ in range(3):
        finished += step(s)[1]
    assert finished == [a]
    assert a.status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert a.output_token_ids == [SAMPLED_TOKEN] * 3


def test_stop_on_stop_token():
    s = make_scheduler()
    a = add(s, "a", 4, max_tokens=10, stop_token_ids=[SAMPLED_TOKEN])
    _, finished = step(s)
    assert finished == [a]
    assert a.status == RequestStatus.FINISHED_STOPPED
    assert a.stop_reason == SAMPLED_TOKEN


def test_stop_at_max_model_len():
    s = make_scheduler(max_model_len=10)
    a = add(s, "a", 8, max_tokens=100)
    run_to_completion(s)
    assert a.num_tokens == 10
    assert a.status == RequestStatus.FINISHED_LENGTH_CAPPED


def test_finished_requests_free_their_blocks_and_are_reported_next_step():
    s = make_scheduler()
    add(s, "a", 6, max_tokens=1)
    free_before = s.kv_cache_manager.num_free_blocks
    _, finished = step(s)
    assert [r.request_id for r in finished] == ["a"]
    assert s.kv_cache_manager.num_free_blocks == free_before
    out, _ = step(s)
    assert out.finished_req_ids == {"a"}


def test_abort_running_and_waiting_requests():
    s = make_scheduler(max_num_batched_tokens=8)
    add(s, "a", 8, max_tokens=10)
    add(s, "b", 8)
    step(s)
    aborted = s.finish_requests(["a", "b", "unknown"])
    assert {r.request_id for r in aborted} == {"a", "b"}
    assert all(r.status == RequestStatus.FINISHED_ABORTED for r in aborted)
    assert not s.running and not s.waiting
    assert s.kv_cache_manager.num_free_blocks == s.config.num_gpu_blocks - 1
    out, _ = step(s)
    assert out.finished_req_ids == {"a", "b"}


def test_rejected_speculative_tokens_roll_back_computed_tokens():
    s = make_scheduler(num_speculative_tokens=3)
    a = add(s, "a", 8, max_tokens=20)
    out = s.schedule()
    s.update_from_output(
        out, ModelRunnerOutput({"a": [SAMPLED_TOKEN]}, draft_token_ids={"a": [1, 2, 3]})
    )
    out = s.schedule()
    assert out.scheduled_spec_decode_tokens == {"a": [1, 2, 3]}
    assert out.num_scheduled_tokens == {"a": 4}
    assert a.num_computed_tokens == 9 + 3
    # one draft accepted (two tokens come back), two rejected.
    s.update_from_output(out, ModelRunnerOutput({"a": [1, SAMPLED_TOKEN]}))
    assert a.num_computed_tokens == 10
    assert a.num_tokens == 11
    assert a.spec_token_ids == []


def test_lookahead_slots_only_for_methods_that_draft_on_the_kv_cache():
    # vLLM reserves num_speculative_tokens lookahead slots for EAGLE and draft
    # models only; ngram proposes from the token history and gets none.
    blocks = {}
    for method in ("draft_model", "eagle", "ngram"):
        s = make_scheduler(num_speculative_tokens=3, speculative_method=method)
        add(s, "a", 8, max_tokens=20)
        out = s.schedule()
        s.update_from_output(
            out, ModelRunnerOutput({"a": [SAMPLED_TOKEN]}, draft_token_ids={"a": [1, 2, 3]})
        )
        out = s.schedule()
        assert out.num_scheduled_tokens == {"a": 4}
        blocks[method] = len(s.kv_cache_manager.get_blocks("a"))
    # 12 tokens after this step (+3 lookahead slots): 4 blocks with lookahead, 3 without.
    assert blocks == {"draft_model": 4, "eagle": 4, "ngram": 3}


def test_eagle_drops_the_last_block_of_a_prefix_hit():
    hits = {}
    for method in ("draft_model", "eagle"):
        s = make_scheduler(num_speculative_tokens=2, speculative_method=method)
        add(s, "a", list(range(100, 112)), max_tokens=1)
        step(s)
        add(s, "b", [*range(100, 112), 7, 8, 9, 10], max_tokens=1)
        out, _ = step(s)
        hits[method] = out.first_admissions[0].local_hit_tokens
    assert hits == {"draft_model": 12, "eagle": 8}


def test_drafts_for_a_partial_prefill_are_dropped():
    s = make_scheduler(num_speculative_tokens=2)
    a = add(s, "a", 100, max_tokens=5)
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 64}
    s.update_from_output(out, ModelRunnerOutput({}, draft_token_ids={"a": [1, 2]}))
    assert a.spec_token_ids == []
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 36} and out.scheduled_spec_decode_tokens == {}


def test_an_unknown_speculative_method_is_refused():
    with pytest.raises(ValueError, match="speculative_method"):
        make_scheduler(num_speculative_tokens=2, speculative_method="medusa2")


def test_new_and_cached_request_data():
    s = make_scheduler()
    add(s, "a", 6)
    out, _ = step(s)
    [new] = out.scheduled_new_reqs
    assert new.req_id == "a" and new.num_computed_tokens == 0 and len(new.block_ids) == 2
    out, _ = step(s)
    cached = out.scheduled_cached_reqs
    assert cached.req_ids == ["a"]
    assert cached.new_block_ids == [None]  # 7 tokens still fit in 2 blocks
    assert cached.num_computed_tokens == [6]
    out, _ = step(s)
    assert out.scheduled_cached_reqs.new_block_ids == [None]  # 8 tokens: still 2 blocks
    out, _ = step(s)
    assert out.scheduled_cached_reqs.num_computed_tokens == [8]
    [new_ids] = out.scheduled_cached_reqs.new_block_ids
    assert new_ids is not None and len(new_ids) == 1  # the 9th token opens a 3rd block


def test_prefix_hits_counted_once_at_first_admission():
    s = make_scheduler(max_num_batched_tokens=64)
    prompt = list(range(100, 116))
    add(s, "a", prompt, max_tokens=1)
    step(s)
    b = add(s, "b", [*prompt, 1, 2], max_tokens=1)
    out, _ = step(s)
    [hit] = out.first_admissions
    assert (hit.req_id, hit.local_hit_tokens) == ("b", 16)
    assert b.num_cached_tokens == 16
    assert s.stats.prefix_cache_queries == 16 + 18
    assert s.stats.prefix_cache_hits == 16


def test_full_prompt_hit_recomputes_the_last_token():
    s = make_scheduler()
    prompt = list(range(100, 116))
    add(s, "a", prompt, max_tokens=1)
    step(s)
    add(s, "b", prompt, max_tokens=1)
    out, _ = step(s)
    # 16 tokens = 4 full blocks cached, but the last block is recomputed so the
    # request can sample: the hit is capped at 12 tokens.
    assert out.num_scheduled_tokens == {"b": 4}


@pytest.mark.parametrize("reserve", [False, True])
def test_reserve_full_sequence_gate_blocks_admission(reserve):
    # 8 usable blocks; chunks of 4 tokens. b's whole prompt needs all 8 blocks.
    s = make_scheduler(
        num_gpu_blocks=9, long_prefill_token_threshold=4, reserve_full_sequence=reserve
    )
    add(s, "a", 24)
    add(s, "b", 32)
    out, _ = step(s)
    expected = ["a"] if reserve else ["a", "b"]
    assert list(out.num_scheduled_tokens) == expected


def test_policy_that_names_a_non_running_victim_is_reported():
    class BadVictim(FCFSPolicy):
        name = "bad-victim"

        def choose_victim(self, running):
            return self._context.waiting.peek_request()

        def attach(self, context):
            self._context = context

    s = make_scheduler(BadVictim(), num_gpu_blocks=3)
    add(s, "a", 8, max_tokens=8)
    step(s)
    add(s, "b", 4)
    with pytest.raises(PolicyContractError, match=r"bad-victim.*not a running request"):
        step(s)


def test_every_request_finishes_and_all_blocks_return():
    s = make_scheduler(num_gpu_blocks=12, max_num_batched_tokens=16)
    for i in range(20):
        add(s, f"r{i}", 5 + i % 7, max_tokens=3 + i % 5)
    run_to_completion(s)
    assert s.kv_cache_manager.num_free_blocks == 11
    assert not s.running and not s.waiting and not s.skipped_waiting


def test_sample_for_only_samples_fully_computed_prompts():
    s = make_scheduler(max_num_batched_tokens=4)
    add(s, "a", 10)
    out = s.schedule()
    assert sample_for(s, out).sampled_token_ids == {}


def test_readmission_reports_the_tokens_computed_again():
    s = make_scheduler(num_gpu_blocks=7)
    for rid in "abc":
        add(s, rid, 8, max_tokens=8)
    step(s)
    computed_before: dict[str, int] = {}
    reported: dict[str, int] = {}
    expected: dict[str, int] = {}
    for _ in range(40):
        before = {r.request_id: r.num_computed_tokens for r in s.running}
        out, _ = step(s)
        for request_id in out.preempted_req_ids:
            computed_before[request_id] = before[request_id]
        cached = out.scheduled_cached_reqs
        for request_id, hit in zip(cached.req_ids, cached.num_computed_tokens, strict=True):
            if request_id in cached.resumed_req_ids:
                # A resumed request starts from its prefix hit; the rest of what it
                # had computed before the preemption is computed again.
                expected[request_id] = computed_before[request_id] - hit
        reported.update(out.recomputed_tokens)
        if "c" in cached.resumed_req_ids:
            break
    assert "c" in reported and computed_before["c"] == 8
    assert reported == expected
    assert sum(reported.values()) == s.stats.num_recomputed_tokens


def test_abort_tells_the_policy():
    aborted = []

    class Watching(FCFSPolicy):
        name = "watching"

        def on_abort(self, request):
            aborted.append(request.request_id)

    s = make_scheduler(Watching())
    add(s, "a", 8)
    step(s)
    s.finish_requests(["a"])
    assert aborted == ["a"]
