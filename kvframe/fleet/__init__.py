"""A fleet of engine replicas behind a routing plugin, on one virtual clock (issue 47).

``kvframe run TRACE --replicas N --router NAME`` runs one; from Python::

    from kvframe.engine import EngineConfig
    from kvframe.fleet import Fleet

    fleet = Fleet.from_config(EngineConfig(), "round-robin", replicas=8)
    result = fleet.run(workload)          # FleetResult
    result.summary                        # the fleet's MetricsSummary (metadata["fleet"])
    result.replicas[3]                    # replica 3's own

See docs/fleet.md for the timing rules and :mod:`kvframe.fleet.runner` for the loop;
``disagg="P:D"`` (``--disagg``) makes prefill and decode replicas that hand KV over
(:mod:`kvframe.fleet.disagg`, docs/disaggregation.md).
"""

from kvframe.fleet import disagg as _disagg  # noqa: F401  (registers --disagg)
from kvframe.fleet.runner import Fleet, FleetResult, FleetSettings, RoutingError

__all__ = ["Fleet", "FleetResult", "FleetSettings", "RoutingError"]
