"""One scheduler step as data, and the phases that fill it.

:meth:`Scheduler.schedule <kvframe.core.scheduler.Scheduler.schedule>` is three
phases around a :class:`StepPlan`: :meth:`~StepPhases.begin_step` (the clock,
the step count, expired retentions, the policy's step start), the running and
waiting phases that decide tokens and blocks, and
:meth:`~StepPhases.finish_step` (the output, the connector's metadata, computed
tokens advanced). A :class:`~kvframe.core.decode_run.DecodeRun` composes the
same public phases, skipping the running phase it does in bulk, so the two
paths cannot drift apart; :class:`StepPhases` is what it needs of a scheduler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvframe.core.kv_cache_manager import KVCacheManager
    from kvframe.core.scheduler_config import SchedulerConfig
    from kvframe.core.scheduler_output import PrefixHit, SchedulerOutput
    from kvframe.domain.request import Request

__all__ = ["StepPhases", "StepPlan"]


class StepPlan:
    """What one step has decided so far: filled in by the scheduler's phases.

    A plain slotted class, not attrs: one is built per step (and per step of a
    decode run), and attrs' per-field factories cost more than the fields.
    """

    __slots__ = (
        "first_admissions",
        "long_prefill_token_threshold",
        "new_block_ids",
        "num_scheduled_tokens",
        "preempted",
        "recomputed_tokens",
        "scheduled_new",
        "scheduled_resumed",
        "scheduled_running",
        "spec_decode_tokens",
        "token_budget",
    )

    def __init__(self, token_budget: int, long_prefill_token_threshold: int = 0) -> None:
        self.token_budget = token_budget
        # This step's chunk cap (0: none): the config's, unless the fidelity
        # target lifts it for a lone request (Scheduler.begin_step).
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.num_scheduled_tokens: dict[str, int] = {}
        self.scheduled_running: list[Request] = []
        self.scheduled_new: list[Request] = []
        self.scheduled_resumed: list[Request] = []
        self.preempted: list[Request] = []
        self.new_block_ids: dict[str, list[int] | None] = {}
        self.spec_decode_tokens: dict[str, list[int]] = {}
        self.first_admissions: list[PrefixHit] = []
        self.recomputed_tokens: dict[str, int] = {}


class StepPhases(Protocol):
    """The scheduler as a :class:`~kvframe.core.decode_run.DecodeRun` drives it."""

    running: list[Request]
    kv_cache_manager: KVCacheManager
    num_lookahead_tokens: int
    config: SchedulerConfig
    finished_req_ids: set[str]
    max_model_len: int

    def begin_step(self, now: float | None, token_budget: int | None = None) -> StepPlan:
        """Start a step at ``now``; a plan with ``token_budget`` (default: the whole budget)."""
        ...

    def schedule_waiting(self, plan: StepPlan) -> None:
        """Admit waiting requests into ``plan`` while its budget and the blocks allow."""
        ...

    def finish_step(self, plan: StepPlan) -> SchedulerOutput:
        """``plan`` as an output; the scheduled requests advanced."""
        ...
