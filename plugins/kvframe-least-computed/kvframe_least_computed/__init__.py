"""First come, first served -- but preempt the running request that has computed least.

Proposal: preemption victim choice as a scheduler decision point (vLLM RFC
#51608, and #54644, which measures a "recompute tax" of 10-23% in online
serving, about half of it from which request is preempted). vLLM's victim is
the last admitted request (FCFS) or the lowest priority; under recompute
preemption everything the victim computed is computed again, so the cheapest
victim is the one that has computed the fewest tokens.

* Waiting order: vLLM's FCFS (the :class:`kvframe.SchedulingPolicy` defaults:
  skipped-waiting first, a preempted request back at the head).
* Victim: the running request with the smallest ``num_computed_tokens``; among
  equal counts the one admitted last (vLLM's FCFS victim).

Only the victim differs from ``fcfs``; the bundled ``fcfs``, ``priority`` and
``continuum`` keep vLLM's victims.
"""

from __future__ import annotations

from collections.abc import Sequence

import kvframe
from kvframe import Request

__all__ = ["LeastComputedPolicy"]


class LeastComputedPolicy(kvframe.SchedulingPolicy):
    """FCFS order; preempt the running request whose recompute costs least."""

    name = "least-computed"
    description = "FCFS order; preempts the running request with the fewest computed tokens."

    def choose_victim(self, running: Sequence[Request]) -> Request:
        victim = running[-1]
        fewest = victim.num_computed_tokens
        # Walk from the last admitted back: a strictly smaller count wins, so
        # among equal counts the last admitted stays the victim.
        for request in reversed(running):
            if request.num_computed_tokens < fewest:
                victim, fewest = request, request.num_computed_tokens
        return victim
