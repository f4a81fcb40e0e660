"""The core's retention facility: a policy keeps a finished request's blocks for a while."""

from __future__ import annotations

from kvframe_fcfs import FCFSPolicy

from .helpers import add, make_scheduler, step


class RetainFor(FCFSPolicy):
    """Test policy: retain every finished request for ``ttl`` seconds."""

    name = "retain-for"

    def __init__(self, *, ttl: float = 5.0, reclaim: bool = False) -> None:
        self.ttl = ttl
        self.reclaim = reclaim
        self.reclaim_calls: list[int] = []

    def attach(self, context) -> None:
        self.context = context

    def on_finish(self, request):
        return self.context.now + self.ttl

    def reclaim_retained(self, num_blocks_needed: int) -> bool:
        self.reclaim_calls.append(num_blocks_needed)
        if not self.reclaim:
            return False
        for request_id in list(self.context.retained):
            self.context.release(request_id)
            return True
        return False


def usable(s) -> int:
    return s.config.num_gpu_blocks - 1


def test_retained_blocks_are_held_until_the_deadline_then_released_at_step_start():
    policy = RetainFor(ttl=5.0)
    s = make_scheduler(policy)
    add(s, "a", 8, max_tokens=1)
    _, finished = step(s, now=0.0)
    assert [r.request_id for r in finished] == ["a"]
    assert "a" in s.retained and s.retained["a"].deadline == 5.0
    assert s.kv_cache_manager.num_free_blocks == usable(s) - 2
    assert s.num_retained_blocks == 2
    step(s, now=4.9)
    assert "a" in s.retained
    step(s, now=5.0)
    assert "a" not in s.retained
    assert s.kv_cache_manager.num_free_blocks == usable(s)
    assert s.stats.num_retentions == 1 and s.stats.num_retentions_expired == 1


def test_a_retained_prefix_is_hit_by_the_next_request():
    s = make_scheduler(RetainFor(ttl=100.0))
    prompt = list(range(500, 508))
    add(s, "turn1", prompt, max_tokens=1)
    step(s, now=0.0)
    add(s, "turn2", [*prompt, 7, 1, 2, 3], max_tokens=1)
    out, _ = step(s, now=1.0)
    [hit] = out.first_admissions
    assert hit.local_hit_tokens == 8


def test_policy_can_release_a_retention_and_the_blocks_stay_cached():
    policy = RetainFor(ttl=100.0)
    s = make_scheduler(policy)
    prompt = list(range(500, 508))
    add(s, "a", prompt, max_tokens=1)
    step(s, now=0.0)
    policy.context.release("a")
    assert not s.retained
    assert s.kv_cache_manager.num_free_blocks == usable(s)
    assert s.stats.num_retentions_released == 1
    add(s, "b", [*prompt, 1], max_tokens=1)
    out, _ = step(s, now=1.0)
    assert out.first_admissions[0].local_hit_tokens == 8


def test_retention_never_deadlocks_admission():
    # 4 usable blocks, both filled by retained requests; c needs 3 blocks and
    # nothing is running: the core releases retentions, earliest deadline first.
    s = make_scheduler(RetainFor(ttl=100.0), num_gpu_blocks=5)
    add(s, "a", 8, max_tokens=1)
    step(s, now=0.0)
    add(s, "b", 8, max_tokens=1)
    step(s, now=1.0)
    assert len(s.retained) == 2 and s.kv_cache_manager.num_free_blocks == 0
    add(s, "c", 12, max_tokens=1)
    out, _ = step(s, now=2.0)
    assert list(out.num_scheduled_tokens) == ["c"]
    assert "a" not in s.retained  # the earliest deadline went first


def test_policy_reclaims_retained_blocks_before_a_running_request_is_preempted():
    policy = RetainFor(ttl=100.0, reclaim=True)
    s = make_scheduler(policy, num_gpu_blocks=5)
    add(s, "a", 8, max_tokens=1)
    step(s, now=0.0)  # a retained: 2 blocks held
    add(s, "b", 8, max_tokens=4)
    step(s, now=1.0)  # b prefilled: the last 2 blocks
    out, _ = step(s, now=2.0)  # b needs a 3rd block
    assert policy.reclaim_calls == [1]
    assert not out.preempted_req_ids
    assert out.num_scheduled_tokens == {"b": 1}
    assert not s.retained


def test_aborting_a_retained_request_releases_it():
    s = make_scheduler(RetainFor(ttl=100.0))
    add(s, "a", 8, max_tokens=1)
    step(s, now=0.0)
    s.finish_requests("a")
    assert not s.retained
    assert s.kv_cache_manager.num_free_blocks == usable(s)


def test_default_policies_never_retain():
    s = make_scheduler()
    add(s, "a", 8, max_tokens=1)
    step(s)
    assert not s.retained and s.stats.num_retentions == 0


class Recording(RetainFor):
    """Retains like RetainFor and records the finish / abort hooks."""

    name = "recording"

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.finished: list[str] = []
        self.aborted: list[str] = []

    def on_finish(self, request):
        self.finished.append(request.request_id)
        return super().on_finish(request)

    def on_abort(self, request) -> None:
        self.aborted.append(request.request_id)


def test_finishing_from_outside_with_a_stop_status_calls_on_finish():
    """A stop string found by the front end is a normal finish: the policy hears of it."""
    from kvframe.domain.request import RequestStatus

    policy = Recording(ttl=100.0)
    s = make_scheduler(policy)
    add(s, "a", 8, max_tokens=10)
    step(s, now=0.0)
    s.finish_requests("a", RequestStatus.FINISHED_STOPPED)
    assert policy.finished == ["a"] and policy.aborted == []
    assert "a" in s.retained  # and it may retain, as after any finish
    s.finish_requests("b", RequestStatus.FINISHED_STOPPED)  # unknown: ignored
    assert policy.finished == ["a"]


def test_abort_calls_on_abort_only():
    policy = Recording(ttl=100.0)
    s = make_scheduler(policy)
    add(s, "a", 8, max_tokens=10)
    step(s, now=0.0)
    s.finish_requests("a")
    assert policy.aborted == ["a"] and policy.finished == []
    assert not s.retained and s.kv_cache_manager.num_free_blocks == usable(s)


def test_finishing_everything_releases_retained_requests_too():
    from kvframe.domain.request import RequestStatus

    policy = Recording(ttl=100.0)
    s = make_scheduler(policy)
    add(s, "a", 8, max_tokens=1)
    step(s, now=0.0)
    assert "a" in s.retained
    add(s, "b", 8, max_tokens=10)
    step(s, now=1.0)
    finished = s.finish_requests(None, RequestStatus.FINISHED_STOPPED)
    assert [r.request_id for r in finished] == ["b"]
    assert policy.finished == ["a", "b"]  # b finished normally, but nothing is retained
    assert not s.retained and s.kv_cache_manager.num_free_blocks == usable(s)
