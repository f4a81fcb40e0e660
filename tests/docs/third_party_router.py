"""A router written from docs/plugin-authors.md's router section alone, in one class.

SGLang router's ``power_of_two`` policy: draw two distinct replicas, send the
request to the one with fewer outstanding requests (ties: the first drawn).
Only what the page documents is used: ``kvframe.Router``, ``attach`` with
``FleetInfo.num_replicas`` and ``.seed``, ``route`` returning an int, and
``view.num_outstanding``. Not a test module; ``test_plugin_authors_router.py``
runs the routing suite on it.
"""

import random

import kvframe


class PowerOfTwo(kvframe.Router):
    """Two random replicas; the one with fewer outstanding requests."""

    name = "power-of-two"
    description = "Two replicas drawn at random (seeded); the less busy one."

    def attach(self, fleet: kvframe.FleetInfo) -> None:
        self.rng = random.Random(fleet.seed)

    def route(self, request: kvframe.RoutingRequest, view: kvframe.FleetView) -> int:
        if view.num_replicas == 1:
            return 0
        a, b = self.rng.sample(range(view.num_replicas), 2)
        return b if view.num_outstanding(b) < view.num_outstanding(a) else a
