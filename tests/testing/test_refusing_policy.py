"""A policy that refuses every eviction gets a verdict from the memory check, not a KeyError."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

REFUSER = """
import kvframe
from broken_plugins import GoodLRU


class RefusesAll(GoodLRU):
    name = "refuses-all"
    description = "Test-only: never evicts."

    def evict(self, n, protected):
        return None
"""


def test_the_memory_check_measures_a_policy_that_refuses_every_eviction(
    pytester: pytest.Pytester,
) -> None:
    from pathlib import Path

    pytester.syspathinsert(Path(__file__).parent)
    pytester.makepyfile(refuser=REFUSER)
    pytester.syspathinsert()
    result = pytester.runpytest(
        "-p", "kvframe.testing", "--assert=plain", "-p", "no:cacheprovider",
        "--kvframe-plugin", "eviction:refuser:RefusesAll", "-k", "bounded_by_capacity",
    )  # fmt: skip
    assert "KeyError" not in "\n".join(result.outlines)
    result.assert_outcomes(passed=1)
