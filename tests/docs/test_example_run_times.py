"""An example's header and its README state the same run time.

Why: a sweep file said "~10 minutes" while its README measured 41, another "~1
minute" beside the README's "25-40 s": whoever re-measures updates one of the two.
So a run time in the first lines of an example's file (a ``(... N minutes ...)`` or
``N-M s`` figure) must be one its README states.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if (p / "README.md").is_file())
FIGURE = re.compile(r"\b(\d+(?:[.,-]\d+)*)\s*(s|seconds?|minutes?)\b")


def header_figures(path: Path) -> list[str]:
    """Run times in a file's opening comment lines (``#``), as ``N unit``."""
    figures = []
    for line in path.read_text(encoding="utf-8").splitlines()[:4]:
        if line.startswith("#") and ("core" in line or "minute" in line):
            figures += [f"{n} {u}" for n, u in FIGURE.findall(line)]
    return figures


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_an_examples_header_run_times_are_its_readmes(example: Path) -> None:
    readme = " ".join((example / "README.md").read_text(encoding="utf-8").split())
    stated = {f"{n} {u}" for n, u in FIGURE.findall(readme)}
    for path in sorted([*example.glob("*.toml"), *example.glob("*.sh")]):
        for figure in header_figures(path):
            assert figure in stated, (
                f"{path.relative_to(ROOT)} says {figure!r} in its header; "
                f"{example.name}/README.md states {sorted(stated)}"
            )


def test_the_check_reads_the_headers_it_is_about() -> None:
    figures = header_figures(ROOT / "examples" / "eviction_comparison" / "repeats.toml")
    assert figures == ["25-45 s"]
