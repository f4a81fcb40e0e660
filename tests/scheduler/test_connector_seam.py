"""The scheduler's side of the connector seam, with a scripted connector."""

from __future__ import annotations

import zlib

from kvframe_fcfs import FCFSPolicy
from kvframe_priority import PriorityPolicy

from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import KVConnectorOutput, ModelRunnerOutput
from kvframe.domain.request import Request, RequestStatus


class ScriptedConnector:
    """Answers lookups from a per-request script; records every call."""

    def __init__(self, answers: dict[str, list[tuple[int | None, bool]]]) -> None:
        self.answers = answers
        self.allocs: list[tuple[str, int, int]] = []
        self.finished: list[str] = []
        self.keep_blocks_for: set[str] = set()
        self.outputs: list[KVConnectorOutput] = []

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        script = self.answers.get(request.request_id)
        if not script:
            return 0, False
        return script.pop(0)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self.allocs.append((request.request_id, len(blocks), num_external_tokens))

    def build_connector_meta(self, scheduler_output):
        return {"step_tokens": scheduler_output.total_num_scheduled_tokens}

    def update_connector_output(self, output):
        self.outputs.append(output)

    def request_finished(self, request, block_ids):
        self.finished.append(request.request_id)
        return request.request_id in self.keep_blocks_for

    def take_events(self):
        return []


def make(connector) -> Scheduler:
    config = SchedulerConfig(
        block_size=4,
        num_gpu_blocks=32,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        max_model_len=128,
    )
    return Scheduler(config, FCFSPolicy(), connector=connector)


def add(s: Scheduler, request_id: str, n: int, max_tokens: int = 2) -> Request:
    base = zlib.crc32(request_id.encode()) % 10_000 * 100
    request = Request(
        request_id, [base + i for i in range(n)], max_tokens, block_hasher=s.block_hasher
    )
    s.add_request(request)
    return request


def empty_output(**kwargs) -> ModelRunnerOutput:
    return ModelRunnerOutput({}, kv_connector_output=KVConnectorOutput(**kwargs))


def test_unknown_external_hit_moves_the_request_aside_without_blocking_others():
    connector = ScriptedConnector({"a": [(None, False)]})
    s = make(connector)
    add(s, "a", 8)
    add(s, "b", 8)
    out = s.schedule()
    assert list(out.num_scheduled_tokens) == ["b"]
    assert [r.request_id for r in s.skipped_waiting] == ["a"]
    assert out.kv_connector_metadata == {"step_tokens": 8}
    s.update_from_output(out, ModelRunnerOutput({"b": [7]}))
    out = s.schedule()
    # FCFS serves skipped-waiting first; the connector now reports no hit.
    assert list(out.num_scheduled_tokens) == ["b", "a"]


def test_async_load_waits_in_skipped_waiting_then_resumes_with_loaded_tokens():
    connector = ScriptedConnector({"a": [(8, True)]})
    s = make(connector)
    a = add(s, "a", 12)
    out = s.schedule()
    assert out.num_scheduled_tokens == {}
    assert a.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert connector.allocs == [("a", 2, 8)]
    assert out.first_admissions[0].external_hit_tokens == 8
    s.update_from_output(out, empty_output())
    out = s.schedule()
    assert out.num_scheduled_tokens == {}  # the load has not landed
    s.update_from_output(out, empty_output(finished_recving={"a"}))
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 4}
    assert a.num_cached_tokens == 8
    assert [r.req_id for r in out.scheduled_new_reqs] == ["a"]
    assert s.stats.connector_prefix_cache_hits == 8


def test_blocks_of_a_finished_request_stay_until_its_store_lands():
    connector = ScriptedConnector({})
    connector.keep_blocks_for.add("a")
    s = make(connector)
    add(s, "a", 8, max_tokens=1)
    out = s.schedule()
    s.update_from_output(out, ModelRunnerOutput({"a": [7]}))
    assert connector.finished == ["a"]
    assert s.kv_cache_manager.num_free_blocks == 31 - 2
    out = s.schedule()
    s.update_from_output(out, empty_output(finished_sending={"a"}))
    assert s.kv_cache_manager.num_free_blocks == 31


def test_aborting_during_a_load_frees_blocks_only_when_the_load_lands():
    connector = ScriptedConnector({"a": [(8, True)]})
    s = make(connector)
    add(s, "a", 12)
    out = s.schedule()
    s.update_from_output(out, empty_output())
    s.finish_requests("a")
    assert s.kv_cache_manager.num_free_blocks == 31 - 2
    out = s.schedule()
    s.update_from_output(out, empty_output(finished_recving={"a"}))
    assert s.kv_cache_manager.num_free_blocks == 31


def test_two_loaded_requests_that_each_need_more_blocks_do_not_deadlock():
    # 8 usable blocks. a and b each load 12 tokens (3 blocks) of a 24-token
    # prompt; both loads land; a then needs 3 more blocks with only 2 free and
    # nothing runs: b gives its loaded blocks back so a can run.
    connector = ScriptedConnector({"a": [(12, True)], "b": [(12, True)]})
    config = SchedulerConfig(
        block_size=4,
        num_gpu_blocks=9,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        max_model_len=128,
        reserve_full_sequence=False,
    )
    s = Scheduler(config, FCFSPolicy(), connector=connector)
    a = add(s, "a", 24)
    b = add(s, "b", 24)
    out = s.schedule()
    admitted = [hit.req_id for hit in out.first_admissions]
    assert s.kv_cache_manager.num_free_blocks == 2
    s.update_from_output(out, empty_output(finished_recving={"a", "b"}))
    out = s.schedule()
    admitted += [hit.req_id for hit in out.first_admissions]
    assert out.num_scheduled_tokens == {"a": 12}
    assert b.num_computed_tokens == 0
    assert s.stats.num_loaded_requests_released == 1
    while s.has_unfinished_requests():
        sampled = {
            rid: [7]
            for rid in out.num_scheduled_tokens
            if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens
        }
        s.update_from_output(out, ModelRunnerOutput(sampled))
        out = s.schedule()
        admitted += [hit.req_id for hit in out.first_admissions]
    assert a.is_finished() and b.is_finished()
    assert s.kv_cache_manager.num_free_blocks == 8
    # b's loaded blocks were given back and b looked its prefix up again: still
    # one first admission each, and each prompt counted once.
    assert admitted == ["a", "b"]
    assert s.stats.prefix_cache_queries == 48


def test_the_stall_breaker_waits_while_a_finished_request_s_store_is_in_flight():
    # Issue 32: nothing runs, a's landed load needs more blocks than are free and
    # b holds another landed load, but c's store is in flight and will free c's
    # blocks. vLLM 0.19.1 schedules nothing for a step and goes on; so must the
    # breaker (it would release b's load, which vLLM never does).
    connector = ScriptedConnector({"a": [(8, True)], "b": [(8, True)]})
    connector.keep_blocks_for.add("c")
    config = SchedulerConfig(
        block_size=4,
        num_gpu_blocks=9,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        max_model_len=128,
        reserve_full_sequence=False,
    )
    s = Scheduler(config, FCFSPolicy(), connector=connector)
    add(s, "c", 8, max_tokens=1)
    out = s.schedule()
    s.update_from_output(out, ModelRunnerOutput({"c": [7]}))
    assert connector.finished == ["c"]  # its 2 blocks wait for the store
    a = add(s, "a", 24)
    b = add(s, "b", 24)
    out = s.schedule()
    assert [hit.req_id for hit in out.first_admissions] == ["a", "b"]
    s.update_from_output(out, empty_output(finished_recving={"a", "b"}))
    assert s.kv_cache_manager.num_free_blocks == 2
    out = s.schedule()
    assert out.num_scheduled_tokens == {}
    assert s.stats.num_loaded_requests_released == 0
    assert b.num_computed_tokens == 8  # b keeps its landed load
    s.update_from_output(out, empty_output(finished_sending={"c"}))
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 16}
    while s.has_unfinished_requests():
        sampled = {
            rid: [7]
            for rid in out.num_scheduled_tokens
            if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens
        }
        s.update_from_output(out, ModelRunnerOutput(sampled))
        out = s.schedule()
    assert a.is_finished() and b.is_finished()
    assert s.stats.num_loaded_requests_released == 0
    assert s.kv_cache_manager.num_free_blocks == 8


def test_the_stall_breaker_waits_for_a_load_started_earlier_in_the_same_step():
    # h (priority 3) holds a landed load; in the next step d (priority 0) starts a
    # load and e (priority 1) does not fit, with nothing running. d's load is in
    # flight, so vLLM schedules nothing that step: the breaker must see loads
    # started in the step it is deciding in, not only those queued before it.
    connector = ScriptedConnector({"h": [(12, True)], "d": [(4, True)]})
    config = SchedulerConfig(
        block_size=4,
        num_gpu_blocks=9,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        max_model_len=128,
        reserve_full_sequence=False,
    )
    s = Scheduler(config, PriorityPolicy(), connector=connector)

    def add_p(request_id: str, n: int, priority: int) -> Request:
        base = zlib.crc32(request_id.encode()) % 10_000 * 100
        request = Request(
            request_id,
            [base + i for i in range(n)],
            2,
            priority=priority,
            block_hasher=s.block_hasher,
        )
        s.add_request(request)
        return request

    h = add_p("h", 24, 3)
    out = s.schedule()
    s.update_from_output(out, empty_output(finished_recving={"h"}))
    add_p("d", 8, 0)
    add_p("e", 28, 1)
    out = s.schedule()
    assert [hit.req_id for hit in out.first_admissions] == ["d"]  # d's load starts
    assert out.num_scheduled_tokens == {}
    assert s.stats.num_loaded_requests_released == 0
    assert h.num_computed_tokens == 12
    s.update_from_output(out, empty_output(finished_recving={"d"}))
    while s.has_unfinished_requests():
        out = s.schedule()
        sampled = {
            rid: [7]
            for rid in out.num_scheduled_tokens
            if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens
        }
        s.update_from_output(out, ModelRunnerOutput(sampled))
    assert s.kv_cache_manager.num_free_blocks == 8


def test_a_preempted_request_readmitted_through_a_load_is_counted_once():
    connector = ScriptedConnector({"a": [(0, False), (8, True)]})
    config = SchedulerConfig(
        block_size=4,
        num_gpu_blocks=32,
        max_num_batched_tokens=64,
        max_model_len=128,
        enable_prefix_caching=False,  # every hit comes from the tier
    )
    s = Scheduler(config, FCFSPolicy(), connector=connector)
    a = add(s, "a", 12)
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 12}
    s.update_from_output(out, ModelRunnerOutput({"a": [7]}))
    # Preempt a by recompute, as the running phase would.
    s.running.remove(a)
    s._preempt(a)
    out = s.schedule()  # the load of 8 tokens starts
    assert a.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert s.stats.preempted_prefix_cache_queries == 13
    s.update_from_output(out, empty_output(finished_recving={"a"}))
    out = s.schedule()  # promoted and resumed
    assert out.num_scheduled_tokens == {"a": 5}
    assert a.status == RequestStatus.RUNNING
    assert s.stats.preempted_prefix_cache_queries == 13
    assert s.stats.preempted_prefix_cache_hits == 8
    assert s.stats.num_recomputed_tokens == 4


class _RetainAll(FCFSPolicy):
    """Retains every finished request until told to release (one per reclaim call)."""

    name = "retain-all"

    def attach(self, context) -> None:
        self.context = context

    def on_finish(self, request):
        return self.context.now + 1000.0

    def reclaim_retained(self, num_blocks_needed: int) -> bool:
        for request_id in list(self.context.retained):
            self.context.release(request_id)
            return True
        return False


def test_a_retry_after_a_reclaim_does_not_ask_the_connector_again():
    # 8 usable blocks. a (16 tokens, 4 blocks + 1 for its output) and b are
    # retained; c (16 tokens) needs 4 blocks with 3 free: the policy releases a
    # and c is admitted in the same step, with the tier asked once.
    connector = ScriptedConnector({})
    calls: list[str] = []
    lookup = connector.get_num_new_matched_tokens

    def counting(request, num_computed_tokens):
        calls.append(request.request_id)
        return lookup(request, num_computed_tokens)

    connector.get_num_new_matched_tokens = counting
    config = SchedulerConfig(
        block_size=4, num_gpu_blocks=9, max_num_batched_tokens=64, max_model_len=128
    )
    s = Scheduler(config, _RetainAll(), connector=connector)
    add(s, "a", 12, max_tokens=1)
    add(s, "b", 8, max_tokens=1)
    out = s.schedule(now=0.0)
    s.update_from_output(out, ModelRunnerOutput({"a": [7], "b": [7]}))
    assert set(s.retained) == {"a", "b"}
    assert s.kv_cache_manager.num_free_blocks == 3
    calls.clear()
    add(s, "c", 16, max_tokens=1)
    out = s.schedule(now=1.0)
    assert "a" not in s.retained
    assert out.num_scheduled_tokens == {"c": 16}
    assert calls == ["c"]


def test_on_abort_runs_while_a_pending_load_still_holds_the_blocks():
    """What ``SchedulingPolicy.on_abort`` documents: not "blocks already released"."""
    seen: list[int] = []

    class Watching(FCFSPolicy):
        def on_abort(self, request) -> None:
            seen.append(s.kv_cache_manager.num_free_blocks)

    connector = ScriptedConnector({"a": [(8, True)]})
    s = make(connector)
    s.policy = Watching()
    add(s, "a", 12)
    out = s.schedule()
    s.update_from_output(out, empty_output())
    s.finish_requests("a")
    assert seen == [31 - 2]  # the load still writes into a's blocks
    out = s.schedule()
    s.update_from_output(out, empty_output(finished_recving={"a"}))
    assert s.kv_cache_manager.num_free_blocks == 31
