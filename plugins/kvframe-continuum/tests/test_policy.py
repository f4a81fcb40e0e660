"""The Continuum policy through a real scheduler: pin lifecycle, expiry, learning, robustness."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from kvframe_continuum import ContinuumPolicy, choose_ttl

from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.scheduler_output import ModelRunnerOutput
from kvframe.domain.costs import CostModel
from kvframe.domain.request import Request

SAMPLED = 7


def make_scheduler(policy: ContinuumPolicy, **overrides) -> Scheduler:
    settings = dict(
        block_size=4,
        num_gpu_blocks=64,
        max_num_batched_tokens=64,
        max_num_seqs=16,
        max_model_len=512,
    )
    settings.update(overrides)
    return Scheduler(SchedulerConfig(**settings), policy)


def context_tokens(job: str, n: int) -> list[int]:
    """A job's deterministic context: turn k's prompt is a prefix of turn k+1's."""
    base = 1000 * (sum(map(ord, job)) + 1)
    return [base + i for i in range(n)]


def add(
    s: Scheduler,
    request_id: str,
    prompt: list[int],
    *,
    max_tokens: int = 1,
    arrival: float | None = None,
    job: str | None = None,
    turn: int = 0,
    last: bool = False,
    tool: str | None = "grep",
) -> Request:
    request = Request(
        request_id,
        prompt,
        max_tokens,
        arrival_time=s.now if arrival is None else arrival,
        job_id=job,
        turn=turn if job is not None else None,
        is_last_turn=last,
        tool_name=tool if job is not None else None,
    )
    s.add_request(request)
    return request


def step(s: Scheduler, now: float):
    output = s.schedule(now)
    sampled = {
        rid: [SAMPLED]
        for rid in output.num_scheduled_tokens
        if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens
    }
    finished = s.update_from_output(output, ModelRunnerOutput(sampled_token_ids=sampled))
    return output, finished


def usable(s: Scheduler) -> int:
    return s.config.num_gpu_blocks - 1


# ---------------------------------------------------------------- pin lifecycle


def test_non_final_turns_are_pinned_final_turns_and_jobless_requests_are_not():
    policy = ContinuumPolicy(cold_start_ttl=3.0, queued_grace=10.0)
    s = make_scheduler(policy)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    add(s, "solo", context_tokens("S", 16))
    _, finished = step(s, 0.0)
    assert {r.request_id for r in finished} == {"J-t0", "solo"}
    assert set(s.retained) == {"J-t0"}
    assert s.retained["J-t0"].deadline == 13.0  # soft 3 s + grace 10 s for the core
    assert policy.job_pin("J") == "J-t0"
    assert policy.last_decision.source == "cold-start" and policy.last_decision.ttl == 3.0

    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1, last=True)
    _, finished = step(s, 1.0)
    assert [r.request_id for r in finished] == ["J-t1"]
    assert not s.retained
    assert policy.stats.released_final == 1
    assert s.kv_cache_manager.num_free_blocks == usable(s)


def test_one_pin_per_job_and_the_shared_prefix_is_hit_and_stays():
    policy = ContinuumPolicy(ttl="fixed", fixed_ttl=5.0)  # pin every turn
    s = make_scheduler(policy)
    add(s, "J-t0", context_tokens("J", 14), job="J")
    step(s, 0.0)
    assert s.num_retained_blocks == 4  # 14 computed tokens: 3 full blocks + 1 partial

    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1)
    output, finished = step(s, 0.5)
    # Turn 1 found the three full blocks of turn 0's prompt on the GPU.
    assert output.first_admissions[0].local_hit_tokens == 12
    assert [r.request_id for r in finished] == ["J-t1"]
    # Its own pin replaced turn 0's: one pin per job.
    assert set(s.retained) == {"J-t1"}
    assert policy.job_pin("J") == "J-t1"
    assert policy.stats.released_replaced == 1
    # The shared blocks stay (held by turn 1's pin); turn 0's partial block went back.
    assert s.num_retained_blocks == 6
    assert s.kv_cache_manager.num_free_blocks == usable(s) - 6


def test_a_pin_expires_at_its_ttl_when_the_job_has_nothing_queued_and_stays_cached():
    policy = ContinuumPolicy(cold_start_ttl=1.0, queued_grace=30.0)
    s = make_scheduler(policy)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    step(s, 0.9)
    assert "J-t0" in s.retained
    step(s, 1.0)  # the soft deadline: nothing of job J is queued
    assert not s.retained
    assert policy.stats.released_expired == 1 and s.stats.num_retentions_released == 1
    assert s.kv_cache_manager.num_free_blocks == usable(s)
    # The next turn comes late (the client took its time): still a prefix hit.
    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1, last=True)
    output, _ = step(s, 7.0)
    assert output.first_admissions[0].local_hit_tokens == 16


def test_a_pin_outlives_its_ttl_while_the_jobs_next_turn_is_queued():
    policy = ContinuumPolicy(cold_start_ttl=1.0, queued_grace=3.0)
    s = make_scheduler(policy, max_num_seqs=1)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    add(s, "X", context_tokens("X", 8), max_tokens=40)  # holds the only sequence slot
    step(s, 0.1)
    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1, arrival=0.5)
    now = 0.5
    while now < 2.0:
        step(s, now)
        now += 0.1
    assert "J-t0" in s.retained  # past the soft deadline, but J-t1 waits
    assert policy.stats.released_expired == 0
    while "X" in s.requests:
        step(s, now)
        now += 0.1
    output, _ = step(s, now)
    assert [hit.req_id for hit in output.first_admissions] == ["J-t1"]
    assert output.first_admissions[0].local_hit_tokens == 16


def test_the_core_releases_a_queued_jobs_pin_at_the_hard_deadline():
    policy = ContinuumPolicy(cold_start_ttl=1.0, queued_grace=0.5)
    s = make_scheduler(policy, max_num_seqs=1)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    add(s, "X", context_tokens("X", 8), max_tokens=40)
    step(s, 0.1)
    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1, arrival=0.5)
    step(s, 1.4)
    assert "J-t0" in s.retained
    step(s, 1.5)
    assert "J-t0" not in s.retained
    assert policy.stats.lost_to_core == 1 and policy.job_pin("J") is None
    assert s.stats.num_retentions_expired == 1


def test_the_pin_is_released_once_the_jobs_next_turn_is_admitted():
    # TTL 1 s, grace 30 s. Turn 1 arrives at 0.5 s and prefills for several
    # steps (16-token budget): once admitted it holds the shared blocks, so the
    # pin -- which would only keep turn 0's tail -- goes at the next step start.
    policy = ContinuumPolicy(cold_start_ttl=1.0, queued_grace=30.0)
    s = make_scheduler(policy, max_num_batched_tokens=16)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    assert "J-t0" in s.retained and s.num_retained_blocks == 4
    add(s, "J-t1", context_tokens("J", 64), job="J", turn=1, last=True)
    output, _ = step(s, 0.5)
    assert output.first_admissions[0].local_hit_tokens == 16
    output, _ = step(s, 0.6)
    assert "J-t1" in output.num_scheduled_tokens and "J-t1" in s.requests
    assert not s.retained and policy.job_pin("J") is None
    assert policy.stats.released_admitted == 1
    # The shared blocks stay, held by turn 1.
    held = s.kv_cache_manager.get_blocks("J-t1")
    assert len(held) == 12 and s.kv_cache_manager.num_free_blocks == usable(s) - 12


# ---------------------------------------------------------------- robustness


def test_every_block_pinned_and_a_new_turn_waiting_releases_pins_not_a_stall():
    policy = ContinuumPolicy(cold_start_ttl=100.0)
    s = make_scheduler(policy, num_gpu_blocks=13)  # 12 usable
    for i, job in enumerate("ABC"):
        add(s, f"{job}-t0", context_tokens(job, 16), job=job, arrival=float(i))
    step(s, 0.0)
    assert set(s.retained) == {"A-t0", "B-t0", "C-t0"}
    assert s.kv_cache_manager.num_free_blocks == 0  # 3 pins x 4 blocks
    add(s, "D-t0", context_tokens("D", 16), job="D")
    output, _ = step(s, 1.0)
    assert output.num_scheduled_tokens == {"D-t0": 16}
    # The latest job's pin went first, and one was enough.
    assert set(s.retained) == {"A-t0", "B-t0", "D-t0"}
    assert policy.stats.released_reclaimed == 1
    assert s.stats.num_retentions_released == 1  # by the policy, not the core's safety net


def test_a_pinned_jobs_own_turn_gets_memory_from_the_latest_other_job():
    policy = ContinuumPolicy(ttl="fixed", fixed_ttl=100.0)
    s = make_scheduler(policy, num_gpu_blocks=13)
    for i, job in enumerate("ABC"):
        add(s, f"{job}-t0", context_tokens(job, 16), job=job, arrival=float(i))
    step(s, 0.0)
    add(s, "A-t1", context_tokens("A", 24), job="A", turn=1)
    output, finished = step(s, 1.0)
    assert output.first_admissions[0].local_hit_tokens == 16  # its own pin, kept
    assert [r.request_id for r in finished] == ["A-t1"]
    # C (the latest job) made room; A's new pin replaced its old one.
    assert set(s.retained) == {"B-t0", "A-t1"}
    assert policy.stats.released_reclaimed == 1 and policy.stats.released_replaced == 1


def test_aborting_a_waiting_turn_releases_its_jobs_pin():
    policy = ContinuumPolicy(cold_start_ttl=10.0)
    s = make_scheduler(policy, max_num_seqs=1)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    add(s, "X", context_tokens("X", 8), max_tokens=40)
    step(s, 0.1)
    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1)
    step(s, 0.2)
    s.finish_requests("J-t1")
    step(s, 0.3)
    assert "J-t0" not in s.retained
    assert policy.stats.released_aborted == 1


def test_aborting_the_pinned_request_itself_is_the_cores_and_the_policy_forgets_it():
    policy = ContinuumPolicy(cold_start_ttl=1.0)
    s = make_scheduler(policy)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    s.finish_requests("J-t0")  # the engine aborts the job: the core releases the pin
    assert not s.retained
    assert policy.job_pin("J") is None
    step(s, 2.0)
    assert policy.stats.lost_to_core == 1


# ---------------------------------------------------------------- learning


def test_tool_durations_are_learned_from_finish_to_next_arrival():
    policy = ContinuumPolicy()
    s = make_scheduler(policy)
    add(s, "J-t0", context_tokens("J", 16), job="J", tool="pytest")
    step(s, 2.0)
    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1, arrival=2.75, tool="grep")
    assert policy.durations.num_observations("pytest") == 1
    assert list(policy.durations.distribution("pytest")[0]) == [0.75]
    assert policy.durations.num_observations("grep") == 0


def test_queueing_delay_is_sampled_from_turns_that_arrive_without_a_pin():
    policy = ContinuumPolicy(max_ttl=0.0)  # never pin: every follow-up turn is sampled
    s = make_scheduler(policy, max_num_seqs=1)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    assert not s.retained and policy.stats.num_not_pinned == 1
    add(s, "X", context_tokens("X", 8), max_tokens=5)
    step(s, 0.1)
    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1, arrival=0.2, last=True)
    now = 0.2
    while "X" in s.requests:
        step(s, now)
        now += 0.1
    admitted_at = now
    step(s, admitted_at)  # admits J-t1
    step(s, admitted_at + 0.1)  # the policy confirms the admission at the next step start
    assert policy.stats.num_delay_samples == 1
    assert policy.queue_delay.mean == pytest.approx(admitted_at - 0.2)


def test_a_pinned_turn_is_not_a_queueing_delay_sample():
    policy = ContinuumPolicy(cold_start_ttl=5.0)
    s = make_scheduler(policy)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1, last=True)
    step(s, 1.0)
    step(s, 1.1)
    assert policy.stats.num_delay_samples == 0


def test_eta_is_learned_from_finished_jobs():
    policy = ContinuumPolicy(cold_start_ttl=0.0)
    s = make_scheduler(policy)
    now = 0.0
    for job, turns in (("A", 2), ("B", 3)):
        for k in range(turns):
            add(s, f"{job}-t{k}", context_tokens(job, 8 + 8 * k), job=job, turn=k,
                last=k == turns - 1)  # fmt: skip
            step(s, now)
            now += 1.0
    assert policy.turns.eta == pytest.approx(0.5)


# ---------------------------------------------------------------- the TTL decision


def unit_cost_model() -> CostModel:
    # reload(r) = 0.1 + 0.01 * num_tokens seconds.
    return CostModel(
        per_step_s=0.1,
        per_prefill_token_s=0.01,
        per_decode_seq_s=0.0,
        per_context_token_s=0.0,
        transfer_bytes_per_s=1e9,
    )


def finish_turn(policy: ContinuumPolicy, s: Scheduler, job: str, tool: str, now: float):
    add(s, f"{job}-t0", context_tokens(job, 9), job=job, tool=tool)  # 9 + 1 output = 10 tokens
    _, finished = step(s, now)
    assert [r.request_id for r in finished] == [f"{job}-t0"]
    return s.retained.get(f"{job}-t0")


def test_the_ttl_rule_combines_delay_eta_and_reload():
    policy = ContinuumPolicy(min_samples=3, queued_grace=0.0)
    policy.set_cost_model(unit_cost_model())
    for value in (0.5, 1.0, 4.0):
        policy.durations.add("grep", value)
    policy.queue_delay.add(2.0)
    policy.turns.add_job(5)  # eta = 1
    policy.turns.add_job(5)
    s = make_scheduler(policy)
    retention = finish_turn(policy, s, "J", "grep", now=10.0)
    decision = policy.last_decision
    # benefit = 2.0 * 1 + (0.1 + 0.01 * 10) = 2.2; U(0.5)=0.233, U(1)=0.467, U(4)=-1.8.
    assert decision.reload == pytest.approx(0.2)
    assert (decision.queue_delay, decision.eta, decision.source) == (2.0, 1.0, "tool")
    assert decision.benefit == pytest.approx(2.2)
    assert decision.ttl == 1.0
    assert retention is not None and retention.deadline == pytest.approx(11.0)


def test_fewer_than_k_observations_use_the_global_distribution():
    policy = ContinuumPolicy(min_samples=3)
    policy.set_cost_model(unit_cost_model())
    policy.durations.add("grep", 0.1)  # grep: 1 < K observations
    policy.durations.add("pytest", 0.15)
    policy.durations.add("pytest", 30.0)
    s = make_scheduler(policy)
    finish_turn(policy, s, "J", "grep", now=0.0)
    decision = policy.last_decision
    assert decision.source == "global"
    # No delay observed yet: benefit = reload = 0.2 over {0.1, 0.15, 30}:
    # U(0.1)=0.0667-0.1, U(0.15)=0.133-0.15 -> nothing beats 0.
    assert decision.ttl == choose_ttl([0.1, 0.15, 30.0], 0.2) == 0.0
    assert "J-t0" not in s.retained and policy.stats.num_not_pinned == 1


def test_before_k_observations_overall_the_cold_start_models_durations_as_exponential():
    policy = ContinuumPolicy(min_samples=100, eta=0.0)
    policy.set_cost_model(unit_cost_model())
    policy.durations.add("grep", 0.05)  # one observation: the empirical CDF would say tau = 0.05
    s = make_scheduler(policy)
    finish_turn(policy, s, "J", "grep", now=0.0)
    decision = policy.last_decision
    # benefit = reload = 0.2 > mean 0.05: tau = 0.05 * ln(0.2 / 0.05).
    assert decision.source == "exponential"
    assert decision.ttl == pytest.approx(0.05 * math.log(4.0))
    assert decision.hit_probability == pytest.approx(0.75)

    empirical = ContinuumPolicy(min_samples=100, eta=0.0, cold_start="empirical")
    empirical.set_cost_model(unit_cost_model())
    empirical.durations.add("grep", 0.05)
    finish_turn(empirical, make_scheduler(empirical), "J", "grep", now=0.0)
    assert (empirical.last_decision.source, empirical.last_decision.ttl) == ("global", 0.05)


def test_cold_start_without_any_observation():
    policy = ContinuumPolicy(cold_start_ttl=1.5, max_ttl=1.0)
    s = make_scheduler(policy)
    retention = finish_turn(policy, s, "J", "grep", now=0.0)
    assert policy.last_decision.source == "cold-start"
    assert policy.last_decision.ttl == 1.0  # capped by max_ttl
    assert retention is not None


def test_fixed_mode_pins_for_two_seconds_unless_the_tool_is_slow_on_average():
    policy = ContinuumPolicy(ttl="fixed", queued_grace=0.0)
    s = make_scheduler(policy)
    retention = finish_turn(policy, s, "A", "grep", now=0.0)  # no history: pin
    assert retention.deadline == 2.0 and policy.last_decision.source == "fixed"
    policy.durations.add("pytest", 1.0)
    policy.durations.add("pytest", 4.0)  # running mean 2.5 > 2
    assert finish_turn(policy, s, "B", "pytest", now=1.0) is None
    policy.durations.add("grep", 1.9)
    assert finish_turn(policy, s, "C", "grep", now=1.0).deadline == 3.0


def test_ttl_none_never_pins_and_the_next_turn_recomputes_or_hits_the_free_cache():
    """Program-level FCFS alone (the paper's Fig. 16 ablation): no turn is retained."""
    policy = ContinuumPolicy(ttl="none")
    s = make_scheduler(policy)
    for job in ("A", "B"):
        assert finish_turn(policy, s, job, "grep", now=0.0) is None
        assert policy.last_decision.source == "none" and policy.last_decision.ttl == 0.0
    assert not s.retained and policy.job_pin("A") is None
    assert (policy.stats.num_pinned, policy.stats.num_not_pinned) == (0, 2)
    # The freed blocks stay in the prefix cache: the next turn still hits them
    # when nothing evicted them (what is lost is the guarantee, not the cache).
    add(s, "A-t1", context_tokens("A", 16), job="A", turn=1, last=True)
    output, _ = step(s, 1.0)
    assert output.first_admissions[0].local_hit_tokens == 8
    assert s.kv_cache_manager.num_free_blocks == usable(s)


def test_options_are_validated_and_reachable_by_config_string():
    from kvframe.host.registry import get_registry

    with pytest.raises(ValueError, match="cold_eta"):
        ContinuumPolicy(cold_eta=2.0)
    with pytest.raises(ValueError, match="min_samples"):
        ContinuumPolicy(min_samples=0)
    with pytest.raises(ValueError):
        ContinuumPolicy(preset="no-such-preset")
    with pytest.raises(ValueError, match="'dynamic', 'fixed' or 'none'"):
        ContinuumPolicy(ttl="off")  # type: ignore[arg-type]
    policy = get_registry().create("scheduling", "continuum:ttl=fixed,max_ttl=10,min_samples=50")
    assert isinstance(policy, ContinuumPolicy)
    assert (policy.ttl_mode, policy.max_ttl, policy.durations.min_samples) == ("fixed", 10.0, 50)
    # "none" is a choice of ttl here, not a null: the program-FCFS ablation.
    assert get_registry().create("scheduling", "continuum:ttl=none").ttl_mode == "none"


# ---------------------------------------------------------------- engine seams


def test_aborting_a_running_turn_releases_its_jobs_pin_at_once():
    policy = ContinuumPolicy(cold_start_ttl=10.0)
    s = make_scheduler(policy)
    add(s, "J-t0", context_tokens("J", 16), job="J")
    step(s, 0.0)
    assert "J-t0" in s.retained
    add(s, "J-t1", context_tokens("J", 24), job="J", turn=1, max_tokens=20)
    step(s, 0.1)
    assert s.requests["J-t1"].status.name == "RUNNING"
    s.finish_requests("J-t1")
    assert not s.retained  # no step needed: on_abort released the pin
    assert policy.stats.released_aborted == 1
    assert s.kv_cache_manager.num_free_blocks == usable(s)


def test_reload_is_priced_with_the_schedulers_cost_model_unless_a_preset_is_given():
    engine_model = CostModel(
        per_step_s=0.5,
        per_prefill_token_s=0.25,
        per_decode_seq_s=0.0,
        per_context_token_s=0.0,
        transfer_bytes_per_s=1.0,
    )
    config = SchedulerConfig(block_size=4, num_gpu_blocks=16, max_model_len=64)
    request = Request("r", list(range(8)), 1)

    default = ContinuumPolicy()
    Scheduler(config, default, cost_model=engine_model)
    assert default.reload_time(request) == 0.5 + 0.25 * 8

    explicit = ContinuumPolicy(preset="llama3.1-70b-4xh100")
    Scheduler(config, explicit, cost_model=engine_model)
    assert explicit.reload_time(request) != default.reload_time(request)

    standalone = ContinuumPolicy()
    Scheduler(config, standalone)
    assert standalone.reload_time(request) > 0


class _Tier:
    """A tier view that holds the first ``held`` tokens of every request."""

    medium = "CPU"
    block_size = 4

    def __init__(self, held: int) -> None:
        self.held = held

    def num_cached_tokens(self, request: Request) -> int:
        return self.held

    def load_time(self, num_tokens: int) -> float:
        return 0.01 * num_tokens


def test_reload_loads_what_the_tier_holds_and_prefills_the_rest():
    model = CostModel(
        per_step_s=0.5,
        per_prefill_token_s=0.25,
        per_decode_seq_s=0.0,
        per_context_token_s=0.0,
        transfer_bytes_per_s=1.0,
    )
    request = Request("r", list(range(12)), 1)
    for held, expected in ((0, 0.5 + 0.25 * 12), (8, 0.01 * 8 + 0.5 + 0.25 * 4), (12, 0.12)):
        policy = ContinuumPolicy()
        policy.attach(SimpleNamespace(retained={}, cost_model=model, offload=_Tier(held)))
        assert policy.reload_time(request) == pytest.approx(expected)
    # The tier may hold more than the request's tokens (its output's blocks): capped.
    policy = ContinuumPolicy()
    policy.attach(SimpleNamespace(retained={}, cost_model=model, offload=_Tier(100)))
    assert policy.reload_time(request) == pytest.approx(0.12)


def test_with_the_cpu_tier_a_cheap_reload_shortens_the_ttl():
    # Same durations, same T and eta: the tier makes a hit worth less, so the
    # rule pins for less (here: not at all) where a full re-prefill pays.
    model = CostModel(
        per_step_s=0.0,
        per_prefill_token_s=0.1,
        per_decode_seq_s=0.0,
        per_context_token_s=0.0,
        transfer_bytes_per_s=1.0,
    )
    ttls = {}
    for held in (0, 20):
        policy = ContinuumPolicy(eta=0.0, min_samples=1)
        policy.attach(SimpleNamespace(retained={}, cost_model=model, offload=_Tier(held), now=0.0))
        for d in (0.5, 1.0, 1.5):
            policy.durations.add("grep", d)
        request = Request(
            "J-t0", list(range(20)), 1, job_id="J", turn=0, is_last_turn=False, tool_name="grep"
        )
        policy.on_arrival(request)
        ttls[held] = policy.on_finish(request)
        assert policy.last_decision is not None
    assert policy.last_decision.reload == pytest.approx(0.2)
    assert ttls[20] is None  # reload 0.2 s from the tier: no duration pays
    assert ttls[0] is not None  # reload 2 s as a prefill: pin


def test_a_pin_never_starves_an_admission_beyond_its_ttl():
    # A running request of an unpinned job holds part of the pool and job A's
    # pin the rest; X cannot be admitted. Admissions wait for pins, but only
    # until the pin's TTL: A's tool call never returns, and at the first step
    # at or after the TTL the pin goes and X is admitted.
    policy = ContinuumPolicy(ttl="fixed", fixed_ttl=5.0)
    s = make_scheduler(policy, num_gpu_blocks=13, max_num_batched_tokens=64)  # 12 usable
    add(s, "A-t0", context_tokens("A", 24), job="A")
    step(s, 0.0)
    assert set(s.retained) == {"A-t0"}  # 6 blocks pinned
    add(s, "U", context_tokens("U", 16), max_tokens=200)  # 4 blocks, then grows
    add(s, "X", context_tokens("X", 16))  # 4 more blocks: does not fit beside the pin
    admitted_at = None
    now = 0.0
    while admitted_at is None and now < 20.0:
        now += 0.5
        output, _ = step(s, now)
        if "X" in output.num_scheduled_tokens:
            admitted_at = now
    assert admitted_at == 5.0
    assert policy.stats.released_expired == 1
    assert s.requests["U"].num_preemptions == 0
