"""Routers that break the routing contract on purpose, and a good one to compare with.

The routing suite is run against each (``test_suite_catches_broken_routers.py``)
to prove it catches what it claims to. Each broken class changes one thing of
``GoodLeastOutstanding``. Not a test module: the tests put this directory on
``sys.path`` and name the classes as ``broken_routers:Class``.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

import kvframe

_calls = itertools.count()


class GoodLeastOutstanding(kvframe.Router):
    """Fewest outstanding requests; ties to the lowest replica. Honours the contract."""

    name = "good-least-outstanding"
    description = "Test-only router that passes the suite."

    def route(self, request, view):
        counts = [view.num_outstanding(r) for r in range(view.num_replicas)]
        return counts.index(min(counts))


class OneTooFar(GoodLeastOutstanding):
    """Returns num_replicas for the first request: a replica that does not exist."""

    name = "one-too-far"

    def route(self, request, view):
        if request.request_id == "r0":
            return view.num_replicas
        return super().route(request, view)


class ClockSeeded(GoodLeastOutstanding):
    """Draws from a generator seeded by the wall clock, not FleetInfo.seed."""

    name = "clock-seeded"

    def attach(self, fleet):
        self.rng = random.Random(time.perf_counter_ns())

    def route(self, request, view):
        return self.rng.randrange(view.num_replicas)


class SharedCounter(GoodLeastOutstanding):
    """Round-robin on a module-level counter shared by every instance."""

    name = "shared-counter"

    def route(self, request, view):
        return next(_calls) % view.num_replicas


class SaltedHash(GoodLeastOutstanding):
    """Affinity on hash(request id): Python salts str hashes per interpreter."""

    name = "salted-hash"

    def route(self, request, view):
        return hash(request.job_id or request.request_id) % view.num_replicas


class PeeksAtReplicas(GoodLeastOutstanding):
    """Reads the replicas' queues from the view's insides instead of its load reports."""

    name = "peeks-at-replicas"

    def route(self, request, view):
        replicas = getattr(view, "_replicas", None)  # a real fleet's internals
        if replicas:
            waiting = [len(r.scheduler.waiting) for r in replicas]
            return waiting.index(min(waiting))
        return super().route(request, view)


class KeepsTheView(GoodLeastOutstanding):
    """Keeps the view to read its load reports later (e.g. at on_finished)."""

    name = "keeps-the-view"

    def route(self, request, view):
        self.view = view
        return super().route(request, view)


class ReturnsABool(GoodLeastOutstanding):
    """Returns True/False, which compare like 1/0 but are not replica numbers."""

    name = "returns-a-bool"

    def route(self, request, view):
        return view.num_replicas > 1


class ReadsLoadsItDisclaims(GoodLeastOutstanding):
    """Declares that it reads no load reports, then reads them."""

    name = "reads-loads-it-disclaims"
    uses_loads = False

    def route(self, request, view):
        waiting = [load.num_waiting for load in view.loads()]
        return waiting.index(min(waiting))


class HoldsALock(GoodLeastOutstanding):
    """Makes a lock at construction: a disaggregated fleet cannot deep-copy it for its
    decode pool."""

    name = "holds-a-lock"

    def __init__(self) -> None:
        self.lock = threading.Lock()


class ReadsFinishesItDisclaims(GoodLeastOutstanding):
    """Declares that it reads no finishes, then counts outstanding requests."""

    name = "reads-finishes-it-disclaims"
    uses_finishes = False
