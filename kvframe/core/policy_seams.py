"""The scheduling policy as the core sees it: its optional seams resolved once, and
the error for a policy that breaks its contract.

A policy overrides only the hooks it needs (:class:`kvframe.SchedulingPolicy`).
The scheduler asks, once when it is built, which defaults a policy keeps, so
that a step pays nothing for a seam the policy does not use: no ``may_admit``
call per waiting request, the default queue choice open to switch T20
(:mod:`kvframe.core.admission`), decode runs (:mod:`kvframe.core.decode_run`)
only for a policy that cannot tell them apart from single steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvframe.contract.bases import SchedulingPolicy
    from kvframe.domain.request import Request

__all__ = ["PolicyContractError", "allows_decode_runs", "default_select_queue", "may_admit_of"]


class PolicyContractError(RuntimeError):
    """A scheduling policy returned something the contract does not allow."""


def may_admit_of(policy: SchedulingPolicy) -> Callable[[Request], bool] | None:
    """The policy's bound :meth:`~kvframe.SchedulingPolicy.may_admit`, or ``None`` when
    its class keeps the default (admit everything), so the scheduler skips the call."""
    from kvframe.contract.bases import SchedulingPolicy

    own = getattr(type(policy), "may_admit", None)
    if own is None or own is SchedulingPolicy.may_admit:
        return None  # the default, or a duck-typed policy that offers none
    return policy.may_admit  # type: ignore[no-any-return]


def default_select_queue(policy: SchedulingPolicy) -> bool:
    """Whether the policy keeps :meth:`~kvframe.SchedulingPolicy.select_queue`'s default."""
    from kvframe.contract.bases import SchedulingPolicy

    own = getattr(type(policy), "select_queue", None)
    return own is None or own is SchedulingPolicy.select_queue


def allows_decode_runs(policy: SchedulingPolicy) -> bool:
    """The policy's :attr:`~kvframe.SchedulingPolicy.allows_decode_runs`, its default resolved."""
    allowed = getattr(policy, "allows_decode_runs", None)
    if allowed is not None:
        return bool(allowed)
    from kvframe.contract.bases import SchedulingPolicy

    return all(
        getattr(type(policy), name, None) is getattr(SchedulingPolicy, name)
        for name in ("on_step_start", "on_arrival", "select_queue", "may_admit")
    )
