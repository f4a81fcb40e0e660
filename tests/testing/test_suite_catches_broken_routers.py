"""The routing suite catches each deliberately broken router, and says what broke.

As ``test_suite_catches_broken_plugins.py`` does for the other kinds: the suite
runs the way an author runs it (``pytest --kvframe-plugin routing:SPEC``) in a
pytester sandbox, ``-k`` narrowed to the check that should fire.
"""

from __future__ import annotations

from pathlib import Path

import hypothesis  # noqa: F401 - loaded once here, not again by every sandboxed run
import importlib_metadata  # noqa: F401 - part of the baseline (see the other suite tests)
import pytest

import kvframe.testing.test_conformance  # noqa: F401

pytest_plugins = ["pytester"]

SANDBOX = ("-p", "kvframe.testing", "--assert=plain", "-p", "no:cacheprovider")
QUICK = ("--kvframe-max-examples", "6")
HERE = Path(__file__).parent


@pytest.fixture
def suite(pytester: pytest.Pytester):
    pytester.syspathinsert(HERE)

    def run(spec: str, *args: str) -> pytest.RunResult:
        return pytester.runpytest(
            *SANDBOX, "--kvframe-plugin", f"routing:broken_routers:{spec}", *QUICK, *args
        )

    return run


def text(result: pytest.RunResult) -> str:
    return "\n".join(result.outlines)


def test_a_correct_router_passes_the_whole_routing_suite(suite) -> None:
    result = suite("GoodLeastOutstanding")
    result.assert_outcomes(passed=12)


@pytest.mark.parametrize("spec", ["OneTooFar", "ReturnsABool"])
def test_a_replica_that_does_not_exist_is_caught(suite, spec) -> None:
    result = suite(spec, "-k", "exists")
    result.assert_outcomes(failed=1)
    assert "a router returns a replica number, an int in range(" in text(result)


@pytest.mark.parametrize("spec", ["ClockSeeded", "SharedCounter"])
def test_a_router_not_deterministic_under_its_seed_is_caught(suite, spec) -> None:
    result = suite(spec, "-k", "fresh_instance")
    result.assert_outcomes(failed=1)
    assert "is not deterministic: replaying scenario" in text(result)


def test_a_router_hashing_salted_strings_is_caught_in_other_interpreters(suite) -> None:
    result = suite("SaltedHash", "-k", "other_interpreters")
    result.assert_outcomes(failed=1)
    assert "chooses differently in an interpreter with PYTHONHASHSEED=" in text(result)


def test_a_router_reading_a_replicas_internals_is_caught(suite) -> None:
    result = suite("PeeksAtReplicas", "-k", "exists")
    result.assert_outcomes(failed=1)
    assert "the router read view._replicas, which a FleetView does not offer" in text(result)


def test_a_router_keeping_the_view_is_caught(suite) -> None:
    result = suite("KeepsTheView", "-k", "keeps_no_reference")
    result.assert_outcomes(failed=1)
    assert "keeps a reference to the FleetView after route() returned" in text(result)


def test_a_router_reading_loads_it_declared_it_does_not_read_is_caught(suite) -> None:
    result = suite("ReadsLoadsItDisclaims", "-k", "exists")
    result.assert_outcomes(failed=1)
    assert "read view.loads() but declares uses_loads = False" in text(result)


def test_a_router_the_fleet_cannot_copy_for_its_decode_pool_is_caught(suite) -> None:
    result = suite("HoldsALock", "-k", "disaggregated")
    result.assert_outcomes(failed=1)
    assert "a disaggregated fleet copies the router for its decode pool" in text(result)


def test_a_router_reading_finishes_it_declared_it_does_not_read_is_caught(suite) -> None:
    result = suite("ReadsFinishesItDisclaims", "-k", "exists")
    result.assert_outcomes(failed=1)
    assert "read view.num_outstanding() but declares uses_finishes = False" in text(result)
