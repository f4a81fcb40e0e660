"""First-come-first-served scheduling, as vLLM V1 does it by default.

* Waiting requests are served in arrival order; a preempted request goes back
  to the *head* of the queue (the core prepends it), so it resumes first.
* Requests that were skipped because they wait on the connector are older than
  anything in the waiting queue, so the skipped-waiting queue is served first.
* The victim of a preemption is the request at the tail of the running list:
  the one admitted last, whose loss wastes the least work under FCFS.

These are :class:`kvframe.SchedulingPolicy`'s defaults, so the policy is its
name: the queue is the host's :class:`~kvframe.domain.queues.FIFORequestQueue`.
"""

from __future__ import annotations

import kvframe
from kvframe import FIFORequestQueue

__all__ = ["FCFSPolicy", "FCFSQueue"]

FCFSQueue = FIFORequestQueue
"""The queue FCFS uses (the host's FIFO queue; the name is kept for importers)."""


class FCFSPolicy(kvframe.SchedulingPolicy):
    """Serve requests in arrival order; preempt the most recently admitted."""

    name = "fcfs"
    description = "First come, first served; preempts the newest running request (vLLM default)."
