"""Shortest remaining prompt first, with linear aging and a hard bound on overtaking.

Proposal: SJF and residual SJF scheduling for vLLM (vLLM issues #29406 /
#29366 and #51375, collected under the scheduler-plugin RFC #51608, all
open): serve the waiting request with the least prefill left, so short
requests are not queued behind long ones -- but age the waiting requests so
that a long prompt is not starved by a steady stream of short ones.

The order, smallest key first::

    key = arrival_time + min(remaining / tokens_per_s, max_wait_s)

where ``remaining`` is the prefill a request still needs when it is queued
(``num_tokens - num_computed_tokens``: its whole context after a recompute
preemption). Why this is SJF with aging: ordering at time ``now`` by
``remaining - tokens_per_s * (now - arrival_time)`` (each second waited is
worth ``tokens_per_s`` tokens) is the same order for every ``now``, since the
``now`` term is common to all requests, and it is the order of the key above
without the cap. The cap is the bound: a request is never overtaken by one
that arrived more than ``max_wait_s`` seconds after it. Equal keys go first
come, first served.

The key is computed when a request is queued (kvframe's sorted queues), from
what does not change while it waits. The victim of a preemption is the base
class's for a sorted policy: the running request with the largest key (the
one whose prefill counts as longest, aged).
"""

from __future__ import annotations

import kvframe
from kvframe import Request

__all__ = ["SJFPolicy"]


class SJFPolicy(kvframe.SchedulingPolicy):
    """Least prefill left first; every second waited is worth ``tokens_per_s`` tokens."""

    name = "sjf"
    description = "Shortest remaining prompt first, aged; never overtaken after max_wait_s."

    def __init__(self, *, tokens_per_s: float = 1000.0, max_wait_s: float = 10.0) -> None:
        if not tokens_per_s > 0:
            raise ValueError(f"tokens_per_s must be > 0, not {tokens_per_s}")
        if not max_wait_s >= 0:
            raise ValueError(f"max_wait_s must be >= 0, not {max_wait_s}")
        self.tokens_per_s = tokens_per_s
        self.max_wait_s = max_wait_s

    def sort_key(self, request: Request) -> float:
        remaining = request.num_tokens - request.num_computed_tokens
        return request.arrival_time + min(remaining / self.tokens_per_s, self.max_wait_s)
