"""The test classes ``pytest --kvframe-plugin KIND:SPEC`` collects.

See :mod:`kvframe.testing.plugin`.

One class per kind, each the kind's suite unchanged. The plugin parametrizes
``kvframe_target`` with the selected plugins and drops the classes of kinds
that were not selected. It is collected when the option is given; without the
option, its classes collect nothing, so a run that happens to walk into
kvframe's installed files finds no tests here.
"""

from __future__ import annotations

from kvframe.testing.eviction import EvictionPolicySuite
from kvframe.testing.offload import OffloadSpecSuite
from kvframe.testing.reuse_filter import ReuseFilterSuite
from kvframe.testing.routing import RouterSuite
from kvframe.testing.scheduling import SchedulingPolicySuite
from kvframe.testing.tracer import TracerSuite


class TestSchedulingPolicy(SchedulingPolicySuite):
    _kvframe_cli_kind = "scheduling"


class TestEvictionPolicy(EvictionPolicySuite):
    _kvframe_cli_kind = "eviction"


class TestOffloadSpec(OffloadSpecSuite):
    _kvframe_cli_kind = "offload"


class TestReuseFilter(ReuseFilterSuite):
    _kvframe_cli_kind = "reuse_filter"


class TestTracer(TracerSuite):
    _kvframe_cli_kind = "tracer"


class TestRouter(RouterSuite):
    _kvframe_cli_kind = "routing"
