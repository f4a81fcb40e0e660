"""First-come-first-served scheduling that caps how many requests prefill at once.

The bundled use of the admission decision point,
:meth:`kvframe.SchedulingPolicy.may_admit` (vLLM RFC #51608, "may a waiting
request be admitted now"). A waiting request is admitted only while fewer than
``max_prefilling`` running requests are still prefilling: a burst of long
prompts then shares the token budget with fewer prompts at a time, so each
reaches its first token sooner and the decodes beside them keep their pace.

vLLM 0.19.1's ``SchedulerConfig`` has the same knob, ``max_num_partial_prefills``
("the maximum number of sequences that can be partially prefilled
concurrently", default 1), but its V1 scheduler does not read it (only the V0
scheduler did), so V1 admits as many prefills as budget and blocks allow: that
is this policy with no cap, i.e. ``fcfs``.

* A request counts as prefilling while it has more than one token left to
  compute (``num_tokens - num_computed_tokens > 1``): a new prompt, or a
  preempted request recomputing. A decoding request has exactly one.
* A refused request is set aside for the step and asked again next step, ahead
  of the requests behind it (the core's rule for ``may_admit``); nothing else
  changes: order, victims and retention are FCFS's.
* It never starves: with no request prefilling, the next one is admitted.

Cost: the count is taken once per step, at the first ``may_admit``, and then
extended by the requests admitted since (``running`` only grows in the
waiting phase), so each call is O(1) amortised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import kvframe

if TYPE_CHECKING:
    from kvframe import Request, SchedulerContext

__all__ = ["AdmissionCapPolicy"]


class AdmissionCapPolicy(kvframe.SchedulingPolicy):
    """FCFS; admits a request only while fewer than ``max_prefilling`` running ones prefill."""

    name = "admission-cap"
    description = "FCFS that admits only while fewer than max_prefilling requests prefill."

    allows_decode_runs = True
    """During a decode run every running request is decoding: its counters lag,
    but both by the same steps, so ``num_tokens - num_computed_tokens`` stays 1
    and the count is 0 either way (the suite checks it)."""

    def __init__(self, *, max_prefilling: int = 1) -> None:
        if max_prefilling < 1:
            raise ValueError(
                f"admission-cap: max_prefilling={max_prefilling} would admit nothing; "
                "it must be at least 1"
            )
        self.max_prefilling = max_prefilling
        self._context: SchedulerContext | None = None
        self._counted = -1  # running requests counted this step; -1: not yet
        self._prefilling = 0

    def attach(self, context: SchedulerContext) -> None:
        self._context = context

    def on_step_start(self, now: float) -> None:
        # The running phase may preempt: count afresh at the first may_admit.
        self._counted = -1

    def may_admit(self, request: Request) -> bool:
        running = self._context.running if self._context is not None else ()
        if self._counted < 0 or self._counted > len(running):
            self._counted = 0
            self._prefilling = 0
        for r in running[self._counted :]:
            if r.num_tokens - r.num_computed_tokens > 1:
                self._prefilling += 1
        self._counted = len(running)
        return self._prefilling < self.max_prefilling
