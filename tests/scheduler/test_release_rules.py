"""How the scheduler is built for a release: the class from the config, the rules once.

A release difference with state is an object the scheduler chooses when it is
built, whose default does what vLLM 0.19.1 does (docs/scheduler.md, "Where the
code lives"); asynchronous scheduling is a subclass that ``make_scheduler``
picks. These tests pin down those choices; that the decisions are vLLM's is the
differential harness's job.
"""

from __future__ import annotations

import pytest
from kvframe_fcfs import FCFSPolicy

from kvframe.core.admission import HoldingQueue, HoldingQueueFirst, SkippedWaiting
from kvframe.core.async_scheduler import AsyncScheduler
from kvframe.core.deferred_frees import DeferredFrees, ImmediateFrees
from kvframe.core.factory import make_scheduler
from kvframe.core.inflight import InflightPrefills, NoReservation
from kvframe.core.scheduler import Scheduler
from kvframe.core.scheduler_config import SchedulerConfig
from kvframe.core.sessions import FrontierSessions, Sessions


def config(**overrides) -> SchedulerConfig:
    return SchedulerConfig(**{"num_gpu_blocks": 16, "block_size": 4, **overrides})


class _OwnQueueChoice(FCFSPolicy):
    def select_queue(self, waiting, skipped_waiting):
        return skipped_waiting or waiting


class _Connector:
    """Just enough of a connector for the scheduler to be built with one."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 0, False


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_make_scheduler_picks_the_class_from_the_config(async_scheduling: bool) -> None:
    scheduler = make_scheduler(config(async_scheduling=async_scheduling), FCFSPolicy())
    assert type(scheduler) is (AsyncScheduler if async_scheduling else Scheduler)
    assert scheduler.async_scheduling is async_scheduling


def test_a_scheduler_class_that_does_not_match_the_config_is_refused() -> None:
    with pytest.raises(ValueError) as caught:
        Scheduler(config(async_scheduling=True), FCFSPolicy())
    assert str(caught.value) == (
        "SchedulerConfig(async_scheduling=True) is scheduled by AsyncScheduler, not "
        "Scheduler: build it with kvframe.core.factory.make_scheduler(config, policy, ...)"
    )
    with pytest.raises(ValueError, match="is scheduled by Scheduler, not AsyncScheduler"):
        AsyncScheduler(config(), FCFSPolicy())


def test_vllm_0_19_1_gets_the_do_nothing_rules() -> None:
    scheduler = make_scheduler(
        config(async_scheduling=True, fidelity="0.19.1"), FCFSPolicy(), connector=_Connector()
    )
    assert isinstance(scheduler._frees, ImmediateFrees)
    assert isinstance(scheduler._inflight, NoReservation)
    assert type(scheduler._queue_rule) is SkippedWaiting
    assert type(scheduler.sessions) is Sessions


def test_vllm_0_33_0_gets_its_rules_once() -> None:
    scheduler = make_scheduler(
        config(async_scheduling=True, fidelity="0.33"), FCFSPolicy(), connector=_Connector()
    )
    assert isinstance(scheduler._frees, DeferredFrees)
    assert isinstance(scheduler._inflight, InflightPrefills)
    assert type(scheduler._queue_rule) is HoldingQueueFirst
    assert type(scheduler.sessions) is FrontierSessions
    # A policy choosing its own queue keeps choosing; T22 needs a step in flight.
    sync = make_scheduler(config(fidelity="0.33"), _OwnQueueChoice(), connector=_Connector())
    assert type(sync._queue_rule) is HoldingQueue
    assert isinstance(sync._frees, ImmediateFrees)
    # T22 needs a connector too.
    assert isinstance(
        make_scheduler(config(async_scheduling=True, fidelity="0.33"), FCFSPolicy())._frees,
        ImmediateFrees,
    )
