"""The conformance suite for scheduling policies (:class:`kvframe.SchedulingPolicy`).

A scheduling policy is only meaningful inside the scheduler, so the suite runs
the real :class:`kvframe.core.scheduler.Scheduler` on workloads hypothesis
generates — bounded arrivals, prompts of varied length with shared prefixes,
agentic jobs whose next turn arrives a few steps after the previous one
finished, small KV pools that force preemption — and drives it step by step as
an executor would. Every step it checks that

* the token budget and ``max_num_seqs`` hold;
* every victim the policy names is one of the running requests,
  ``select_queue`` returns one of the two queues, non-empty, and ``may_admit``
  answers ``True`` or ``False`` without raising;
* every unfinished request is in exactly one of running / waiting /
  skipped-waiting (the policy's queues lose nothing);
* block accounting is consistent: each block's ``ref_cnt`` is the number of
  block tables holding it, and free + held = every usable block.

Besides the generated workloads, fixed ones: a crowded pool, and one that goes beyond
the policy's own numbers (:func:`beyond_defaults_workload`: prompts longer than any
number its options hold, more requests than any count in them), since no generated
prompt is long enough to cross a threshold an option sets. At the end of each run the
suite checks that every request finished within a bound on the number of steps (no
starvation: a request ``may_admit`` refuses forever is reported, with how often it
was refused), that retention was released once the clock moved past every
reasonable deadline, and that every block came back. Separately, it runs
the engine with and without runs of decode steps and requires the same results
(:attr:`kvframe.SchedulingPolicy.allows_decode_runs` is honest).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from kvframe.contract.bases import SchedulingPolicy
from kvframe.contract.views import SchedulerContext
from kvframe.domain.queues import FIFORequestQueue, RequestQueue
from kvframe.domain.request import Request, RequestStatus
from kvframe.testing.common import ContractViolation, PluginSuite, PluginTarget, suite_settings

__all__ = [
    "FIFOQueue",
    "ReferenceFIFOPolicy",
    "SchedulingPolicySuite",
    "Workload",
    "beyond_defaults_workload",
]

SAMPLED_TOKEN = 7
"""The token the suite's executor samples for every request (no stop tokens are set)."""

STEP_SECONDS = 0.01
"""Virtual time per step."""

IDLE_STEPS = 50
"""Steps in a row that schedule nothing, with requests waiting and nothing pending,
after which the run counts as stalled."""


# ==========================================================================
# A reference policy (also what other suites schedule with)
# ==========================================================================


FIFOQueue = FIFORequestQueue
"""The host's FIFO queue (kept under this name for importers of the suite)."""


class ReferenceFIFOPolicy(SchedulingPolicy):
    """First come, first served; preempts the newest. The suite's own stand-in policy.

    kvframe ships no scheduling policy in the host (they are plugins), so the
    suites of other kinds that need a scheduler (the tracer's engine run) use
    this one.
    """

    name = "kvframe-suite-fifo"
    description = "The conformance suite's reference FIFO policy."

    # The base's defaults are exactly FCFS: the host's FIFO queue, skipped
    # requests first, the newest running request as the victim.


# ==========================================================================
# Workloads
# ==========================================================================


@attrs.frozen(slots=True)
class PlannedRequest:
    """One request of a generated workload.

    A first turn (or a plain request) arrives at ``arrival_step``; a later turn
    of an agentic job arrives ``gap`` steps after the turn ``after`` finished,
    and its prompt extends that turn's prompt and output (so it can hit the
    KV a retaining policy kept).
    """

    request_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    arrival_step: int | None = None
    priority: int = 0
    job_id: str | None = None
    turn: int | None = None
    is_last_turn: bool = True
    after: str | None = None
    gap: int = 0

    def describe(self) -> str:
        when = (
            f"arrives at step {self.arrival_step}"
            if self.after is None
            else f"arrives {self.gap} steps after {self.after} finishes"
        )
        extra = f", priority {self.priority}" if self.priority else ""
        job = f", job {self.job_id} turn {self.turn}" if self.job_id is not None else ""
        last = "" if self.is_last_turn or self.job_id is None else " (not last)"
        return (
            f"{self.request_id}: {len(self.prompt)}-token prompt, max_tokens {self.max_tokens}"
            f"{extra}{job}{last}, {when}"
        )


@attrs.frozen(slots=True)
class Workload:
    """Scheduler settings and requests: one generated test case."""

    settings: tuple[tuple[str, Any], ...]
    requests: tuple[PlannedRequest, ...]

    def config(self) -> Any:
        from kvframe.core.scheduler_config import SchedulerConfig

        return SchedulerConfig(**dict(self.settings))

    def describe(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.settings)
        lines = "\n".join(f"  {r.describe()}" for r in self.requests)
        return f"scheduler: {settings}\nrequests:\n{lines}"


def workloads() -> Any:
    """A hypothesis strategy of :class:`Workload`."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw: Any) -> Workload:
        block_size = draw(st.sampled_from((2, 4)))
        plans = _draw_single_requests(draw, st)
        plans += _draw_jobs(draw, st, num_single=len(plans))
        return Workload(_draw_settings(draw, st, block_size, plans), tuple(plans))

    return build()


def _draw_single_requests(draw: Any, st: Any) -> list[PlannedRequest]:
    """Up to six one-off requests, some sharing one of two prefixes (so caching has hits).

    The draws of :func:`workloads` are split by part but made in one fixed order, so a
    hypothesis example (and its shrinking) means the same workload as before.
    """
    plans: list[PlannedRequest] = []
    prefixes = {g: [900_000 + 1000 * g + i for i in range(32)] for g in range(2)}
    num_single = draw(st.integers(0, 6))
    for i in range(num_single):
        group = draw(st.sampled_from((None, 0, 1)))
        shared = prefixes[group][: draw(st.integers(1, 16))] if group is not None else []
        own = [(i + 1) * 10_000 + j for j in range(draw(st.integers(0 if shared else 1, 24)))]
        plans.append(
            PlannedRequest(
                f"r{i}",
                tuple(shared + own),
                draw(st.integers(1, 8)),
                arrival_step=draw(st.integers(0, 12)),
                priority=draw(st.integers(0, 2)),
            )
        )
    return plans


def _draw_jobs(draw: Any, st: Any, *, num_single: int) -> list[PlannedRequest]:
    """Up to two agentic jobs (at least one when there is no single request); each turn's
    prompt is the previous turn's prompt, its outputs and a few new tokens."""
    plans: list[PlannedRequest] = []
    num_jobs = draw(st.integers(0 if num_single else 1, 2))
    for j in range(num_jobs):
        prompt = [(50 + j) * 10_000 + t for t in range(draw(st.integers(1, 16)))]
        turns = draw(st.integers(2, 3))
        priority = draw(st.integers(0, 2))
        previous: PlannedRequest | None = None
        for t in range(turns):
            max_tokens = draw(st.integers(1, 6))
            plan = PlannedRequest(
                f"j{j}t{t}",
                tuple(prompt),
                max_tokens,
                arrival_step=draw(st.integers(0, 8)) if previous is None else None,
                priority=priority,
                job_id=f"j{j}",
                turn=t,
                is_last_turn=t == turns - 1,
                after=previous.request_id if previous is not None else None,
                gap=draw(st.integers(0, 6)) if previous is not None else 0,
            )
            plans.append(plan)
            previous = plan
            new = [(60 + j) * 10_000 + 100 * t + k for k in range(draw(st.integers(1, 8)))]
            prompt = prompt + [SAMPLED_TOKEN] * max_tokens + new
    return plans


def _draw_settings(
    draw: Any, st: Any, block_size: int, plans: list[PlannedRequest]
) -> tuple[tuple[str, Any], ...]:
    """Scheduler settings sized to the requests: every request fits the model length and
    the pool, which ranges from just enough (heavy preemption) to roomy."""
    longest = max(len(p.prompt) + p.max_tokens for p in plans)
    need = -(-longest // block_size)
    max_model_len = longest + 8
    chunked = draw(st.sampled_from((True, True, True, False)))
    budget = draw(st.integers(4, 48))
    if not chunked:
        budget = max(budget, max_model_len)
    return (
        ("block_size", block_size),
        ("num_gpu_blocks", 1 + need + draw(st.sampled_from((0, 0, 1, 2, need // 2, 2 * need)))),
        ("max_num_batched_tokens", budget),
        ("max_num_seqs", draw(st.integers(1, 5))),
        ("max_model_len", max_model_len),
        ("long_prefill_token_threshold", draw(st.sampled_from((0, 0, 3, 8)))),
        ("enable_chunked_prefill", chunked),
        ("enable_prefix_caching", draw(st.sampled_from((True, True, True, False)))),
        ("reserve_full_sequence", draw(st.sampled_from((False, False, False, True)))),
    )


def pressure_workload() -> Workload:
    """A fixed workload that preempts and shares prefixes under any sensible policy."""
    shared = list(range(900_000, 900_016))
    plans = [
        PlannedRequest(
            f"p{i}",
            tuple(shared[: 4 + 3 * (i % 4)] + [10_000 * (i + 1) + k for k in range(6 + i)]),
            6 + i % 3,
            arrival_step=i // 3,
            priority=i % 3,
        )
        for i in range(10)
    ]
    prompt = list(range(700_000, 700_010))
    previous: PlannedRequest | None = None
    for t in range(3):
        plan = PlannedRequest(
            f"job-t{t}",
            tuple(prompt),
            4,
            arrival_step=1 if previous is None else None,
            job_id="job",
            turn=t,
            is_last_turn=t == 2,
            after=previous.request_id if previous is not None else None,
            gap=2,
        )
        plans.append(plan)
        previous = plan
        prompt = prompt + [SAMPLED_TOKEN] * 4 + [710_000 + 10 * t + k for k in range(5)]
    settings = (
        ("block_size", 4),
        ("num_gpu_blocks", 14),
        ("max_num_batched_tokens", 24),
        ("max_num_seqs", 4),
        ("max_model_len", 64),
    )
    return Workload(settings, tuple(plans))


LONGEST_PROMPT = 16_384
"""The cap, in tokens, on :func:`beyond_defaults_workload`'s longest prompt."""

MOST_REQUESTS = 260
"""The cap on :func:`beyond_defaults_workload`'s number of short requests."""


def _numbers_in_options(target: PluginTarget) -> list[float]:
    """The policy's numeric options as the suite builds it: each option's default, or
    the value the target gives it (bools, ``None`` and infinities aside)."""
    from kvframe.config.options import plugin_options

    values = {o.name: o.default for o in plugin_options(target.cls) if not o.required}
    values.update(target.options)
    return [
        float(v)
        for v in values.values()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    ]


def beyond_defaults_workload(target: PluginTarget) -> Workload:
    """Prompts longer than any number in the policy's options, and more requests.

    Why: the generated workloads' prompts are at most about 50 tokens and they hold
    at most ten requests. A policy whose options hold a larger number -- a cap on
    prompt tokens, a sort window, tokens of ageing per second -- is never pushed past
    it there, so it could starve long prompts (or the requests beyond a window) at
    its defaults and still pass. Here three long prompts (twice the largest number in
    the options plus one, at least 256 tokens, at most :data:`LONGEST_PROMPT`) arrive
    among short ones sharing a prefix -- more of them than any count up to
    :data:`MOST_REQUESTS` in the options -- with spread priorities, and one request
    decodes long. Every request must finish within the suite's step bound.
    """
    numbers = _numbers_in_options(target)
    long_len = int(min(LONGEST_PROMPT, max(256, 2 * max(numbers, default=0.0) + 1)))
    counts = [int(n) for n in numbers if n == int(n) and n < MOST_REQUESTS]
    num_short = min(MOST_REQUESTS, max(8, max(counts, default=0) + 4))
    shared = [800_000 + i for i in range(8)]
    plans = [
        PlannedRequest(
            f"s{i}",
            tuple(shared + [(i + 1) * 100_000 + k for k in range(4 + i % 13)]),
            2 + i % 5,
            arrival_step=i // 4,
            priority=i % 3,
        )
        for i in range(num_short)
    ]
    for n, (length, arrival, priority) in enumerate(
        ((long_len, 0, 2), (long_len // 2 + 1, 3, 0), (long_len, num_short // 8 + 5, 1))
    ):
        prompt = tuple(shared + [50_000_000 + 100_000 * n + k for k in range(length - 8)])
        plans.append(PlannedRequest(f"long{n}", prompt, 4, arrival_step=arrival, priority=priority))
    plans.append(PlannedRequest("long-decode", tuple(shared), 64, arrival_step=1, priority=2))
    need = -(-(long_len + 64) // 16)
    settings = (
        ("block_size", 16),
        ("num_gpu_blocks", 1 + 2 * need + 32),
        ("max_num_batched_tokens", 512),
        ("max_num_seqs", 8),
        ("max_model_len", long_len + 128),
    )
    return Workload(settings, tuple(plans))


# ==========================================================================
# Driving the scheduler
# ==========================================================================


class _CheckedPolicy(SchedulingPolicy):
    """Passes every call to the policy under test and checks what it returns.

    The scheduler checks some of this itself (``PolicyContractError``); checking
    here gives the message the workload and the step.
    """

    def __init__(self, inner: SchedulingPolicy) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "") or type(inner).__name__  # type: ignore[misc]
        self.num_victims = 0
        self.refusals: Counter[str] = Counter()
        """How often ``may_admit`` refused each request (for the starvation message)."""

    def attach(self, context: SchedulerContext) -> None:
        self.inner.attach(context)

    def create_queue(self) -> RequestQueue:
        queue = self.inner.create_queue()
        missing = [
            m
            for m in (
                "add_request",
                "pop_request",
                "peek_request",
                "prepend_request",
                "prepend_requests",
                "remove_request",
                "remove_requests",
                "__len__",
                "__iter__",
            )
            if not hasattr(queue, m)
        ]
        if missing:
            raise ContractViolation(
                f"create_queue returned {queue!r}, which lacks {', '.join(missing)} "
                "(see kvframe.domain.queues.RequestQueue)"
            )
        return queue

    def select_queue(self, waiting: RequestQueue, skipped_waiting: RequestQueue) -> RequestQueue:
        queue = self.inner.select_queue(waiting, skipped_waiting)
        if queue is not waiting and queue is not skipped_waiting:
            raise ContractViolation(
                f"select_queue returned {queue!r}, which is neither the waiting nor the "
                "skipped-waiting queue it was given"
            )
        if not queue:
            which = "waiting" if queue is waiting else "skipped-waiting"
            raise ContractViolation(
                f"select_queue returned the {which} queue, which is empty (the other has "
                f"{len(skipped_waiting if queue is waiting else waiting)} request(s))"
            )
        return queue

    def may_admit(self, request: Request) -> bool:
        try:
            answer = self.inner.may_admit(request)
        except Exception as err:
            raise ContractViolation(
                f"may_admit({request.request_id!r}) raised {type(err).__name__}: {err}; it "
                "must answer True or False for any waiting request"
            ) from err
        if answer is not True and answer is not False:
            raise ContractViolation(
                f"may_admit({request.request_id!r}) returned {answer!r}; it must return True "
                "or False (a bare return, or none, gives None)"
            )
        if not answer:
            self.refusals[request.request_id] += 1
        return answer

    def choose_victim(self, running: Sequence[Request]) -> Request:
        victim = self.inner.choose_victim(running)
        if not any(victim is r for r in running):
            status = getattr(getattr(victim, "status", None), "name", "?")
            victim_id = getattr(victim, "request_id", repr(victim))
            raise ContractViolation(
                f"choose_victim returned request {victim_id!r} (status {status}), which is not "
                f"one of the running requests it was given {[r.request_id for r in running]}"
            )
        self.num_victims += 1
        return victim

    def reclaim_retained(self, num_blocks_needed: int) -> bool:
        return self.inner.reclaim_retained(num_blocks_needed)

    def on_step_start(self, now: float) -> None:
        self.inner.on_step_start(now)

    def on_arrival(self, request: Request) -> None:
        self.inner.on_arrival(request)

    def on_finish(self, request: Request) -> float | None:
        deadline = self.inner.on_finish(request)
        if deadline is not None and (
            isinstance(deadline, bool)
            or not isinstance(deadline, int | float)
            or math.isnan(deadline)
        ):
            raise ContractViolation(
                f"on_finish({request.request_id!r}) returned {deadline!r}; it must return "
                "None or a deadline (a number of seconds of virtual time)"
            )
        if deadline is not None and math.isinf(deadline):
            raise ContractViolation(
                f"on_finish({request.request_id!r}) returned {deadline!r}: a retention deadline "
                "is a finite time (the core keeps the blocks until then; with no end, a "
                "policy that forgets to release them holds them forever)"
            )
        return deadline


def _room_for_a_load(workload: Workload) -> Workload:
    """The workload with a pool that fits its two longest requests at once.

    A request whose load landed waits in skipped-waiting *holding* its blocks.
    In a pool sized for one request, a policy that ranks a waiting request
    first (as vLLM's priority policy may) preempts that one over and over
    while the loaded request keeps the blocks it would need: a livelock of the
    host's mechanics (vLLM's too), not of the policy, so the connector check
    leaves room for both.
    """
    settings = dict(workload.settings)
    block_size = settings["block_size"]
    sizes = sorted(-(-(len(p.prompt) + p.max_tokens) // block_size) for p in workload.requests)
    room = 1 + sum(sizes[-2:])
    if settings["num_gpu_blocks"] >= room:
        return workload
    settings["num_gpu_blocks"] = room
    return attrs.evolve(workload, settings=tuple(settings.items()))


class ScriptedConnector:
    """A connector whose tier answers by script, so a policy meets every connector path.

    Requests are sorted into four kinds by their id: the tier cannot answer
    yet on the first ask (the request waits in *skipped-waiting*, and the
    scheduler moves that queue with ``prepend_requests``); it holds all but the
    last block of the prompt and loads it *asynchronously* (the request waits
    for the load, with blocks reserved, in skipped-waiting); it loads it at
    once; or it holds nothing. An asynchronous load lands one step after it
    was started.
    """

    SCRIPT = (
        "request ids hashed into: not known on first ask / async load of all but the last "
        "block / sync load / nothing held; async loads land a step later"
    )

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.asked: Counter[str] = Counter()
        self.is_async: dict[str, bool] = {}
        self.loading: dict[str, int] = {}

    @staticmethod
    def _kind(request_id: str) -> int:
        return sum(map(ord, request_id)) % 4

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        request_id = request.request_id
        self.asked[request_id] += 1
        kind = self._kind(request_id)
        if kind == 0 and self.asked[request_id] == 1:
            return None, False
        held = (request.num_tokens - 1) // self.block_size * self.block_size
        available = held - num_computed_tokens
        if kind == 3 or available <= 0:
            self.is_async[request_id] = False
            return 0, False
        self.is_async[request_id] = kind != 2
        return available, kind != 2

    def update_state_after_alloc(
        self, request: Request, blocks: Sequence[Any], num_external_tokens: int
    ) -> None:
        if num_external_tokens and self.is_async.get(request.request_id):
            self.loading[request.request_id] = 0

    def build_connector_meta(self, scheduler_output: Any) -> None:
        return None

    def update_connector_output(self, output: Any) -> None:
        return None

    def request_finished(self, request: Request, block_ids: Sequence[int]) -> bool:
        return False

    def take_events(self) -> tuple[()]:
        return ()

    def finished_loads(self) -> set[str]:
        """Loads that landed this step (started at least one step ago)."""
        done = {rid for rid, age in self.loading.items() if age >= 1}
        for rid in list(self.loading):
            if rid in done:
                del self.loading[rid]
            else:
                self.loading[rid] += 1
        return done


class _Driver:
    """Runs one workload through a real scheduler, checking every step."""

    def __init__(
        self,
        target: PluginTarget,
        workload: Workload,
        retention_horizon: float,
        max_retention_wait: float = 30.0,
        *,
        connector: bool = False,
    ) -> None:
        from kvframe.core.factory import make_scheduler

        self.target = target
        self.workload = workload
        self.retention_horizon = retention_horizon
        self.max_retention_wait = max_retention_wait
        self.config = workload.config()
        self.policy = _CheckedPolicy(target.create())
        self.connector = ScriptedConnector(self.config.block_size) if connector else None
        self.scheduler = make_scheduler(self.config, self.policy, connector=self.connector)
        self.step = 0
        self.now = 0.0
        self.finished_at: dict[str, int] = {}
        self.finished_requests: dict[str, Request] = {}
        self.added: set[str] = set()
        self.base_steps = self._step_bound()
        self.max_steps = self.base_steps

    def _step_bound(self) -> int:
        """Steps after which a request still unfinished counts as starved.

        Generous: every token costs a step, every request may be preempted and
        recompute everything a few times, plus all arrival gaps.
        """
        plans = self.workload.requests
        tokens = sum(len(p.prompt) + p.max_tokens for p in plans)
        waits = max((p.arrival_step or 0) for p in plans) + sum(p.gap for p in plans)
        return 100 + 4 * tokens + waits

    # -- messages -------------------------------------------------------------

    def fail(self, what: str) -> ContractViolation:
        context = (
            f"\nwith the suite's scripted connector: {ScriptedConnector.SCRIPT}"
            if self.connector is not None
            else ""
        )
        return ContractViolation(
            f"{self.target.label} at step {self.step} (t={self.now:.2f}s): {what}\n"
            f"{self.workload.describe()}{context}"
        )

    # -- the run ------------------------------------------------------------

    def run(self) -> None:
        __tracebackhide__ = True
        from kvframe.core.scheduler_output import ModelRunnerOutput

        scheduler = self.scheduler
        idle_steps = 0
        while True:
            self._arrive()
            if not scheduler.has_unfinished_requests() and not self._pending():
                break
            if self.step >= self.max_steps or idle_steps >= IDLE_STEPS:
                raise self.fail(self._starvation(idle_steps))
            output = self._call("schedule", scheduler.schedule, self.now)
            self._check_step(output)
            sampled = {}
            for request_id in output.num_scheduled_tokens:
                request = scheduler.requests[request_id]
                if request.num_computed_tokens >= request.num_tokens:
                    sampled[request_id] = [SAMPLED_TOKEN]
            transfers = None
            if self.connector is not None:
                from kvframe.core.scheduler_output import KVConnectorOutput

                transfers = KVConnectorOutput(finished_recving=self.connector.finished_loads())
            finished = self._call(
                "update_from_output",
                scheduler.update_from_output,
                output,
                ModelRunnerOutput(sampled_token_ids=sampled, kv_connector_output=transfers),
            )
            for request in finished:
                self.finished_at[request.request_id] = self.step
                self.finished_requests[request.request_id] = request
            self._extend_bound_for_retention()
            self._check_blocks()
            stuck = not output.total_num_scheduled_tokens and not self._pending()
            idle_steps = idle_steps + 1 if stuck else 0
            self.step += 1
            self.now = self.step * STEP_SECONDS
        self._finish()

    def _extend_bound_for_retention(self) -> None:
        """A request may legitimately wait for retained blocks until their deadline.

        Each live retention extends the step bound to its deadline (at most
        ``max_retention_wait`` virtual seconds ahead), so a policy that pins KV
        for a finite time is not mistaken for one that starves a request.
        """
        retained = self.scheduler.retained
        if not retained:
            return
        horizon = self.now + self.max_retention_wait
        latest = max(min(r.deadline, horizon) for r in retained.values())
        steps = math.ceil(latest / STEP_SECONDS) + self.base_steps
        if steps > self.max_steps:
            self.max_steps = steps

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        __tracebackhide__ = True
        try:
            return fn(*args)
        except ContractViolation as err:
            raise self.fail(str(err)) from None
        except Exception as err:
            raise self.fail(
                f"scheduler.{what} raised {type(err).__name__}: {err} (a policy method raised, "
                "or returned something the core cannot use)"
            ) from err

    def _pending(self) -> bool:
        return len(self.added) < len(self.workload.requests)

    def _arrive(self) -> None:
        from kvframe.domain.request import Request

        for plan in self.workload.requests:
            if plan.request_id in self.added:
                continue
            if plan.after is None:
                due = plan.arrival_step is not None and plan.arrival_step <= self.step
            else:
                done = self.finished_at.get(plan.after)
                due = done is not None and done + 1 + plan.gap <= self.step
            if not due:
                continue
            request = Request(
                plan.request_id,
                list(plan.prompt),
                plan.max_tokens,
                arrival_time=self.now,
                priority=plan.priority,
                job_id=plan.job_id,
                turn=plan.turn,
                is_last_turn=plan.is_last_turn,
                tool_name="tool" if plan.job_id is not None and not plan.is_last_turn else None,
            )
            self._call("add_request", self.scheduler.add_request, request)
            self.added.add(plan.request_id)

    # -- per-step checks ------------------------------------------------------

    def _check_step(self, output: Any) -> None:
        __tracebackhide__ = True
        scheduler = self.scheduler
        config = self.config
        scheduled = output.num_scheduled_tokens
        total = sum(scheduled.values())
        if total != output.total_num_scheduled_tokens or total > config.max_num_batched_tokens:
            raise self.fail(
                f"{total} tokens were scheduled {dict(scheduled)}, over the token budget "
                f"max_num_batched_tokens={config.max_num_batched_tokens}"
            )
        if len(scheduler.running) > config.max_num_seqs:
            raise self.fail(
                f"{len(scheduler.running)} requests are running, over max_num_seqs="
                f"{config.max_num_seqs}"
            )
        for request_id, tokens in scheduled.items():
            request = scheduler.requests.get(request_id)
            if request is None or request.status != RequestStatus.RUNNING or tokens <= 0:
                raise self.fail(
                    f"request {request_id!r} was scheduled {tokens} tokens but is "
                    f"{getattr(request, 'status', 'unknown')}"
                )
        self._check_queues()

    def _check_queues(self) -> None:
        __tracebackhide__ = True
        scheduler = self.scheduler
        where: Counter[str] = Counter()
        for label, requests in (
            ("running", scheduler.running),
            ("waiting", scheduler.waiting),
            ("skipped-waiting", scheduler.skipped_waiting),
        ):
            listed = list(requests)
            if len(listed) != len(requests):
                raise self.fail(
                    f"the {label} queue has len() {len(requests)} but iterates over "
                    f"{len(listed)} requests: the policy's queue is inconsistent"
                )
            for request in listed:
                where[request.request_id] += 1
        for request_id, request in scheduler.requests.items():
            count = where.pop(request_id, 0)
            if count == 0:
                raise self.fail(
                    f"request {request_id!r} (status {request.status.name}) is in the scheduler "
                    "but in neither the running list nor a waiting queue: the policy's queue "
                    "lost it"
                )
            if count > 1:
                raise self.fail(
                    f"request {request_id!r} appears {count} times across the running list and "
                    "the waiting queues"
                )
        if where:
            raise self.fail(
                f"finished request(s) {sorted(where)} are still in a queue or the running list"
            )

    def _check_blocks(self) -> None:
        __tracebackhide__ = True
        kv = self.scheduler.kv_cache_manager
        pool = kv.block_pool
        holders: Counter[int] = Counter(
            block.block_id
            for blocks in kv.req_to_blocks.values()
            for block in blocks
            if not block.is_null
        )
        free = 0
        for block in pool.blocks:
            if block.is_null:
                continue
            if block.ref_cnt != holders.get(block.block_id, 0):
                raise self.fail(
                    f"block accounting broke: block {block.block_id} has ref_cnt "
                    f"{block.ref_cnt} but {holders.get(block.block_id, 0)} block tables hold it"
                )
            free += block.ref_cnt == 0
        usable = self.config.num_gpu_blocks - 1
        if kv.num_free_blocks != free or free + len(holders) != usable:
            raise self.fail(
                f"block accounting broke: {kv.num_free_blocks} free blocks reported, {free} with "
                f"ref_cnt 0, {len(holders)} held, {usable} usable"
            )
        for request_id in self.scheduler.retained:
            if request_id in self.scheduler.requests:
                raise self.fail(f"request {request_id!r} is retained but still unfinished")

    # -- the end ------------------------------------------------------------

    def _starvation(self, idle_steps: int) -> str:
        scheduler = self.scheduler
        plans = {p.request_id: p for p in self.workload.requests}
        waiting = [
            f"{r.request_id} ({r.status.name}, {r.num_computed_tokens}/{r.num_tokens} tokens "
            f"computed, {r.num_output_tokens}/{r.max_tokens} generated, "
            f"{r.num_preemptions} preemptions; {plans[r.request_id].describe()})"
            for r in scheduler.requests.values()
        ]
        why = (
            f"nothing was scheduled for the last {idle_steps} steps while requests waited and "
            "nothing else was pending"
            if idle_steps >= IDLE_STEPS
            else f"{self.step} steps is the bound for this workload"
        )
        retained = scheduler.retained
        held = (
            f"; meanwhile {len(retained)} finished request(s) are retained ("
            + ", ".join(f"{rid} until t={r.deadline:g}s" for rid, r in retained.items())
            + f"), holding {scheduler.num_retained_blocks} blocks"
            if retained
            else ""
        )
        refused = self.policy.refusals
        refusals = (
            "; may_admit refused "
            + ", ".join(f"{rid} {refused[rid]} times" for rid in scheduler.requests if refused[rid])
            + " (a request refused forever starves: admit it eventually)"
            if any(refused[rid] for rid in scheduler.requests)
            else ""
        )
        return (
            "not every request finished (starvation): "
            + "; ".join(waiting)
            + f". {why}{held}{refusals}"
        )

    def _finish(self) -> None:
        """Let the clock run out every retention; then everything must be back."""
        __tracebackhide__ = True
        from kvframe.core.scheduler_output import ModelRunnerOutput

        scheduler = self.scheduler
        unfinished = [
            p.request_id for p in self.workload.requests if p.request_id not in self.finished_at
        ]
        if unfinished:
            raise self.fail(f"requests {unfinished} never finished")
        for plan in self.workload.requests:
            # No stop tokens are set and max_model_len leaves room: each request stops
            # by max_tokens, having generated all of them.
            request = self.finished_requests[plan.request_id]
            if request.num_output_tokens != plan.max_tokens:
                raise self.fail(
                    f"request {plan.request_id!r} finished ({request.status.name}) with "
                    f"{request.num_output_tokens} of {plan.max_tokens} tokens generated"
                )
        empty = ModelRunnerOutput(sampled_token_ids={})
        for extra in itertools.chain(range(1, 4), (None,)):
            self.now = (
                self.now + STEP_SECONDS if extra is not None else self.now + self.retention_horizon
            )
            output = self._call("schedule", scheduler.schedule, self.now)
            self._call("update_from_output", scheduler.update_from_output, output, empty)
            self.step += 1
        if scheduler.retained:
            held = ", ".join(
                f"{rid} (deadline {r.deadline})" for rid, r in scheduler.retained.items()
            )
            raise self.fail(
                f"every request finished and the clock moved {self.retention_horizon:g}s on, "
                f"but the core still retains {held}: retention must end (return a finite "
                "deadline from on_finish, or release)"
            )
        self._check_blocks()
        kv = scheduler.kv_cache_manager
        usable = self.config.num_gpu_blocks - 1
        if kv.req_to_blocks or kv.num_free_blocks != usable:
            raise self.fail(
                f"after every request finished, {usable - kv.num_free_blocks} blocks are still "
                f"held (block tables of {sorted(kv.req_to_blocks)})"
            )


class SchedulingPolicySuite(PluginSuite):
    """Conformance checks for a :class:`kvframe.SchedulingPolicy`, inside a real scheduler.

    Subclass it and set :attr:`plugin`, or run ``pytest --kvframe-plugin scheduling:NAME``.
    """

    kind: ClassVar[str] = "scheduling"

    max_examples: ClassVar[int] = 40
    """Generated workloads per run (hypothesis, derandomized)."""

    retention_horizon: ClassVar[float] = 1e6
    """Virtual seconds the suite lets pass after the last request finished; every
    retention the policy asked for must have ended by then."""

    max_retention_wait: ClassVar[float] = 30.0
    """How long (virtual seconds, 100 steps each) an unfinished request may be held up
    by retained KV before it counts as starved. A policy may pin blocks across an
    agent's tool call, but not indefinitely while others cannot run."""

    def test_generated_workloads_finish_within_the_rules(
        self, kvframe_target: PluginTarget
    ) -> None:
        """Budget, max_num_seqs, victims, queues, blocks, no starvation, retention released."""
        from hypothesis import given

        @suite_settings(self.examples())
        @given(workload=workloads())
        def run(workload: Workload) -> None:
            __tracebackhide__ = True
            _Driver(kvframe_target, workload, self.retention_horizon, self.max_retention_wait).run()

        run()

    def test_with_a_connector_async_loads_and_skipped_requests_finish(
        self, kvframe_target: PluginTarget
    ) -> None:
        """The same rules with a scripted connector (:class:`ScriptedConnector`): tiers that
        answer late, asynchronous loads, the skipped-waiting queue moved back with
        ``prepend_requests`` (a path only a connector reaches)."""
        from hypothesis import given

        @suite_settings(self.examples(0.5))
        @given(workload=workloads())
        def run(workload: Workload) -> None:
            __tracebackhide__ = True
            _Driver(
                kvframe_target,
                _room_for_a_load(workload),
                self.retention_horizon,
                self.max_retention_wait,
                connector=True,
            ).run()

        run()

    def test_queues_iterate_in_the_order_they_admit(self, kvframe_target: PluginTarget) -> None:
        """Every short sequence of queue calls (:mod:`kvframe.testing.queues`): iteration is
        the order pops admit, len and peek agree, prepend_requests takes a queue,
        remove_requests takes an iterator, an empty queue raises IndexError."""
        from kvframe.testing.queues import check_all_short_queue_sequences

        assert check_all_short_queue_sequences(kvframe_target) > 0

    def test_a_crowded_pool_preempts_and_still_finishes(self, kvframe_target: PluginTarget) -> None:
        """A fixed workload with preemption, shared prefixes and an agentic job."""
        driver = _Driver(
            kvframe_target, pressure_workload(), self.retention_horizon, self.max_retention_wait
        )
        driver.run()

    def test_prompts_longer_than_its_options_finish(self, kvframe_target: PluginTarget) -> None:
        """Long prompts and many requests, beyond every number in the policy's options
        (:func:`beyond_defaults_workload`): a policy that starves them at its defaults fails."""
        workload = beyond_defaults_workload(kvframe_target)
        _Driver(kvframe_target, workload, self.retention_horizon, self.max_retention_wait).run()

    def test_decode_runs_change_no_decision(self, kvframe_target: PluginTarget) -> None:
        """The engine gives the same results with and without runs of decode steps.

        A policy that allows decode runs (:attr:`~kvframe.SchedulingPolicy.allows_decode_runs`)
        must not read running requests' token counters in ``on_step_start``,
        ``on_arrival`` or ``select_queue``: during a run they lag. The check
        replays a chat and an agentic workload on a crowded pool through the
        engine both ways and compares every per-request record.
        """
        __tracebackhide__ = True
        reference = _engine_records(kvframe_target, step_by_step=True)
        fast = _engine_records(kvframe_target, step_by_step=False)
        for name in reference:
            if fast[name] != reference[name]:
                first = next(
                    i
                    for i, (a, b) in enumerate(zip(reference[name], fast[name], strict=False))
                    if a != b
                )
                raise ContractViolation(
                    f"{kvframe_target.label}: results differ between the step-by-step engine "
                    f"and decode runs on the {name} workload (first at request "
                    f"{reference[name][first][0]!r}: {reference[name][first][1:]} vs "
                    f"{fast[name][first][1:]}): its on_step_start, on_arrival or "
                    "select_queue reads running requests' token counters, which lag during "
                    "a run; declare allows_decode_runs = False"
                )


def _engine_records(target: PluginTarget, *, step_by_step: bool) -> dict[str, list[tuple]]:
    """Per-request (id, first token, finish, outputs, preemptions) of two small engine runs."""
    from kvframe.core.factory import make_scheduler
    from kvframe.engine import Engine, EngineConfig, EngineStalled
    from kvframe.executors.sim import SimExecutor
    from kvframe.workloads.agentic import generate_agentic
    from kvframe.workloads.chat import generate_chat

    workloads = {
        "chat": generate_chat(
            num_requests=60,
            seed=11,
            rate=40.0,
            system_prompt_length=200,
            user_prompt_length="uniform:low=10,high=300",
            output_length="uniform:low=5,high=80",
        ),
        "agentic": generate_agentic(num_jobs=12, seed=12, rate=4.0),
    }
    records: dict[str, list[tuple]] = {}
    for name, specs in workloads.items():
        config = EngineConfig(num_gpu_blocks=260, max_num_seqs=12, step_by_step=step_by_step)
        policy = target.create()
        scheduler = make_scheduler(config.scheduler_config(), policy)
        engine = Engine(config, scheduler, SimExecutor(config.preset_object.cost_model))
        try:
            summary = engine.run(specs).summary
        except EngineStalled as err:
            raise ContractViolation(
                f"{target.label}: the engine stalled on the {name} workload (requests wait "
                f"and the policy never lets them run: starvation): {err}"
            ) from None
        records[name] = [
            (
                r.request_id,
                r.first_token_time,
                r.finish_time,
                r.num_output_tokens,
                r.num_preemptions,
            )
            for r in summary.requests
        ]
    return records
