"""The one way to build a scheduler: the class follows the config.

vLLM's engine core builds its ``AsyncScheduler`` when asynchronous scheduling is
on and its ``Scheduler`` otherwise; :func:`make_scheduler` makes the same choice
from :attr:`SchedulerConfig.async_scheduling
<kvframe.core.scheduler_config.SchedulerConfig.async_scheduling>`, so a host (the
engine, the vLLM bridge, the differential harness, a test) never picks a class.
It lives beside both classes rather than in either, so that neither module
imports the other's subclass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvframe.core.async_scheduler import AsyncScheduler
from kvframe.core.scheduler import Scheduler

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy, SchedulingPolicy
    from kvframe.core.connector import SchedulerConnector
    from kvframe.core.scheduler_config import SchedulerConfig
    from kvframe.domain.costs import CostModel

__all__ = ["make_scheduler"]


def make_scheduler(
    config: SchedulerConfig,
    policy: SchedulingPolicy,
    *,
    connector: SchedulerConnector | None = None,
    eviction_policy: EvictionPolicy | None = None,
    cost_model: CostModel | None = None,
) -> Scheduler:
    """A :class:`~kvframe.core.async_scheduler.AsyncScheduler` when ``config`` asks for
    asynchronous scheduling, else a synchronous :class:`~kvframe.core.scheduler.Scheduler`."""
    cls = AsyncScheduler if config.async_scheduling else Scheduler
    return cls(
        config,
        policy,
        connector=connector,
        eviction_policy=eviction_policy,
        cost_model=cost_model,
    )
