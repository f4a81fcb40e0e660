"""kvframe's conformance suite for plugins, shipped as a pytest plugin.

Run it for an installed plugin, with no test code of your own::

    pytest --kvframe-plugin eviction:lru
    pytest --kvframe-plugin eviction:arc:variant=paper --kvframe-plugin scheduling:fcfs
    pytest --kvframe-plugin offload:cpu:capacity=512
    pytest --kvframe-plugin my_pkg.policies:LFU        # a class by path; its kind is found

(``-p kvframe.testing`` loads the plugin where the ``pytest11`` entry point is not
installed, e.g. from a source checkout.) Or subclass a suite in your own tests
to add fixtures or skip a documented capability::

    from kvframe.testing import EvictionPolicySuite

    class TestMyLFU(EvictionPolicySuite):
        plugin = MyLFU

The suites (:class:`SchedulingPolicySuite`, :class:`EvictionPolicySuite`,
:class:`OffloadSpecSuite`, :class:`ReuseFilterSuite`, :class:`TracerSuite`,
:class:`RouterSuite`) are
loaded on first access, so that activating the pytest plugin in an unrelated
project costs nothing: this package imports only pytest and its ``plugin``
module until a suite is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# The pytest hooks: this package *is* the pytest plugin (entry point and `-p`
# both name it), so that it is registered once under one name either way.
from kvframe.testing.plugin import (
    pytest_addoption,
    pytest_collect_file,
    pytest_configure,
    pytest_generate_tests,
    pytest_pycollect_makeitem,
    pytest_report_header,
    pytest_runtest_makereport,
)

if TYPE_CHECKING:
    from kvframe.testing.common import ContractViolation, PluginSuite, PluginTarget
    from kvframe.testing.eviction import EvictionPolicySuite
    from kvframe.testing.offload import OffloadSpecSuite
    from kvframe.testing.reuse_filter import ReuseFilterSuite
    from kvframe.testing.routing import RouterSuite
    from kvframe.testing.scheduling import SchedulingPolicySuite
    from kvframe.testing.tracer import TracerSuite

_LAZY = {
    "ContractViolation": "kvframe.testing.common",
    "PluginSuite": "kvframe.testing.common",
    "PluginTarget": "kvframe.testing.common",
    "EvictionPolicySuite": "kvframe.testing.eviction",
    "OffloadSpecSuite": "kvframe.testing.offload",
    "ReuseFilterSuite": "kvframe.testing.reuse_filter",
    "RouterSuite": "kvframe.testing.routing",
    "SchedulingPolicySuite": "kvframe.testing.scheduling",
    "TracerSuite": "kvframe.testing.tracer",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvframe.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ContractViolation",
    "EvictionPolicySuite",
    "OffloadSpecSuite",
    "PluginSuite",
    "PluginTarget",
    "ReuseFilterSuite",
    "RouterSuite",
    "SchedulingPolicySuite",
    "TracerSuite",
    "pytest_addoption",
    "pytest_collect_file",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_pycollect_makeitem",
    "pytest_report_header",
    "pytest_runtest_makereport",
]
