"""The conformance suite catches every mutant in ``mutants.py``, at default settings.

Each mutant is a bundled policy with one defect. The check that must catch it
runs in this process, at the suite's default settings (no
``--kvframe-max-examples``), and its message must name the rule and the calls
that led there. ``benchmarks/conformance_power.py`` runs the *whole* suite on
each mutant through ``pytest --kvframe-plugin`` and reports the catch rate and
time (``docs/plugin-authors.md``).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from kvframe.testing import ContractViolation, EvictionPolicySuite, SchedulingPolicySuite
from kvframe.testing.common import resolve_target

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def mutants(request: pytest.FixtureRequest):
    # mutants.py imports its neighbour lfu_aging by its bare name: this folder on the
    # path for the import only.
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(HERE))
        import mutants as module
    return module


def _ids() -> list[str]:
    text = (HERE / "mutants.py").read_text()
    return [
        line.split("(")[0].split()[1]
        for line in text.splitlines()
        if "(kvframe" not in line and line.startswith("class ") and not line.startswith("class _")
    ]


@pytest.mark.parametrize("name", _ids())
def test_the_suite_catches_the_mutant(mutants, name: str) -> None:
    entry = next((m for m in mutants.MUTANTS if m[0].__name__ == name), None)
    assert entry is not None, f"{name} is not listed in MUTANTS"
    cls, kind, check, words = entry
    suite = {"eviction": EvictionPolicySuite, "scheduling": SchedulingPolicySuite}[kind]()
    tests = [n for n, _ in inspect.getmembers(type(suite)) if n.startswith("test_") and check in n]
    assert len(tests) == 1, tests
    target = resolve_target(kind, cls)
    with pytest.raises(ContractViolation) as caught:
        getattr(suite, tests[0])(target)
    message = str(caught.value)
    for word in words:
        assert word in message, f"{word!r} not in:\n{message}"


def test_the_mutants_cover_four_bundled_policies_and_lfu_aging(mutants) -> None:
    bases = {cls.__mro__[1].name for cls, *_ in mutants.MUTANTS}
    assert bases == {"lru", "arc", "fcfs", "priority", "lfu-aging"}
    assert len({cls for cls, *_ in mutants.MUTANTS}) == len(mutants.MUTANTS)
