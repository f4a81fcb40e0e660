"""The routers bundled with kvframe: which replica of a fleet serves an arriving request.

Each is a :class:`kvframe.Router` (one class, its rule in its module docstring),
selected with ``--router NAME[:option=value,...]``:

* ``round-robin`` -- each replica in turn (Dynamo's ``round_robin``);
* ``random`` -- uniformly at random, seeded from the run's seed;
* ``least-loaded`` -- the replica with the fewest requests in its last load
  report plus those sent to it since;
* ``dynamo-kv`` -- NVIDIA Dynamo 1.6's KV router cost (overlap weight x prefill
  blocks still to compute + active blocks), from KV events or approximate;
* ``cache-aware`` -- SGLang router's cache-aware rule (approximate radix tree
  per worker, balance thresholds);
* ``prefix-affinity`` -- consistent hashing on the first blocks, sticky per job.
"""

from __future__ import annotations

from kvframe_routers.affinity import PrefixAffinityRouter
from kvframe_routers.cache_aware import CacheAwareRouter
from kvframe_routers.dynamo import DynamoKVRouter
from kvframe_routers.simple import LeastLoadedRouter, RandomRouter, RoundRobinRouter

__all__ = [
    "CacheAwareRouter",
    "DynamoKVRouter",
    "LeastLoadedRouter",
    "PrefixAffinityRouter",
    "RandomRouter",
    "RoundRobinRouter",
]
