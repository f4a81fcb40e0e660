"""Make ``lmcache`` selectable by name for these tests, installed or not.

From a source checkout (the package on ``PYTHONPATH``, the distribution not
yet installed) there is no entry point; registering the class, as the entry
point would, lets the engine tests select the tier by its config string.
"""

from __future__ import annotations

import pytest

import kvframe


@pytest.fixture(autouse=True, scope="session")
def _lmcache_selectable() -> None:
    try:
        from kvframe_lmcache import LMCacheOffloadSpec
    except ImportError:
        return
    registry = kvframe.get_registry()
    if "lmcache" not in registry.names("offload"):
        registry.register_class(LMCacheOffloadSpec)
