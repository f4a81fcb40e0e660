"""Issue 50, answer 6: no figure in the docs without the command and commit behind it.

As it was, ``docs/sweeps.md``'s vLLM-version grid read 276.2 / 305.2 s mean TTFT
after a cost-model change made the same sweep give 329.2 / 366.3 s: nothing tied
the numbers to what produced them. Now every figure-bearing table and text block
of README.md and docs/ carries ``<!-- figures: COMMAND @ COMMIT (DATE) -->``
(``tools/doc_figures.py``; the rule is in CONTRIBUTING.md), the cheap ones are
re-run here, and ``tools/doc_figures.py --stale`` lists the tables produced
before the last change to the cost model.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import doc_figures  # noqa: E402


def test_every_figure_bearing_table_names_its_command_and_commit() -> None:
    assert doc_figures.problems(doc_figures.doc_files()) == []


def test_an_unmarked_table_of_figures_is_found_and_a_marked_one_passes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    stale = "| scheduler | TTFT mean (s) |\n| --- | ---: |\n| fcfs | 276.2 |\n"
    page.write_text("The grid gives:\n\n" + stale, encoding="utf-8")
    (problem,) = doc_figures.problems([page])
    assert "page.md:3: table with figures has no <!-- figures: --> marker" in problem
    marked = "<!-- figures: kvframe sweep g.toml && kvframe compare g.db @ 79a35a2 (2026-11-28) -->"
    marked += "\n"
    page.write_text("The grid gives:\n\n" + marked + stale, encoding="utf-8")
    assert doc_figures.problems([page]) == []
    page.write_text("<!-- figures: kvframe sweep grid.toml -->\n" + stale, encoding="utf-8")
    (malformed,) = doc_figures.problems([page])
    assert "malformed marker" in malformed and "COMMAND @ COMMIT (YYYY-MM-DD)" in malformed


def test_versions_names_and_options_are_not_figures(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "| target | model | option |\n| --- | --- | --- |\n"
        "| vLLM 0.19.1, vLLM 0.19's | Llama-3.1-8B | `--rate 0.5`, decay=0.5 |\n\n"
        "```console\n$ kvframe run x --limit 5\nhit rate 0.25\n```\n",  # re-run by the doc test
        encoding="utf-8",
    )
    assert list(doc_figures.blocks(page)) == []


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="no git")
def test_every_markers_commit_is_in_the_history() -> None:
    shallow = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if shallow == "true":
        pytest.skip("a shallow clone lacks the older commits")
    commits = {b.commit for p in doc_figures.doc_files() for b in doc_figures.blocks(p) if b.commit}
    missing = [
        c
        for c in sorted(commits)
        if subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{c}^{{commit}}"], capture_output=True
        ).returncode
    ]
    assert missing == []


def _paper_table() -> dict[str, list[float]]:
    """The Mooncake paper's sizes on the bundled trace, as docs/analyze.md prints them."""
    text = (REPO / "docs" / "analyze.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (tokens|blocks) \(.*?\) \| ([\d. |]+) \|$", text, flags=re.MULTILINE)
    return {metric: [float(x) for x in cells.split(" | ")] for metric, cells in rows}


def test_the_analyze_paper_table_is_what_analyze_gives_today() -> None:
    """The cheap table re-run: LRU is one pass of stack distances (a few seconds)."""
    from kvframe.analyze.stack import stack_profile
    from kvframe.analyze.trace import build_block_trace
    from kvframe.workloads import load_workload

    table = _paper_table()
    assert set(table) == {"tokens", "blocks"}
    workload = load_workload("mooncake:conversation")
    for metric, shown in table.items():
        trace = build_block_trace(workload.requests, 512, name="c", metric=metric)
        profile = stack_profile(trace)
        now = [round(profile.hit_rate(size), 3) for size in (1000, 10_000, 30_000, 50_000, 100_000)]
        now.append(round(profile.hit_rate(None), 3))
        assert now == shown, f"docs/analyze.md's {metric} row is stale: re-run gives {now}"
