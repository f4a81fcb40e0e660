"""The differential tests' one fixture: each case's comparison, run once a session."""

from __future__ import annotations

from collections.abc import Callable

import compare
import pytest
from vllm_reference import Case, run_case


@pytest.fixture(scope="session")
def comparisons(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[Case], dict[str, compare.Result]]:
    """``comparisons(case)``: the case's results by run name, from one run of its
    drivers, the first time a test asks (the tests of a case run one after another)."""
    done: dict[Case, dict[str, compare.Result]] = {}

    def results(case: Case) -> dict[str, compare.Result]:
        if case not in done:
            done[case] = run_case(case, tmp_path_factory.mktemp(case.id))
        return done[case]

    return results
