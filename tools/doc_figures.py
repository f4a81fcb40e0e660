"""Every figure-bearing table in the docs names the command and commit that produced it.

    .venv/bin/python tools/doc_figures.py [FILE ...]     # list unmarked tables; exit 1 if any
    .venv/bin/python tools/doc_figures.py --stale [PATH ...]
        # markers whose commit predates the last change to PATH (default: the cost model)

Why (issue 50): a table in ``docs/sweeps.md`` kept mean TTFTs of 276.2 / 305.2 s
after a cost-model change made the sweep give 329.2 / 366.3 s; nothing tied the
numbers to what produced them. CONTRIBUTING.md's rule ("Figures in the docs"):

* **Which blocks.** In ``README.md`` and ``docs/**/*.md``: a Markdown table
  whose body has a decimal number (``0.0428``, ``276.2``, ``1.6M`` does not
  count, ``1.6`` does), and a ``text`` or untagged fenced block with one. A
  ``console`` block the doc test re-runs and compares
  (``tests/docs/test_doc_examples.py``: not marked ``doc-test: skip`` or
  ``illustrative output``) is checked by re-running it and needs no marker.
* **The marker.** In the blank-or-comment lines right above the block (above a
  ``doc-test`` marker, which must stay the line right before the block)::

      <!-- figures: COMMAND @ COMMIT (YYYY-MM-DD) -->

  ``COMMAND`` is what to run to get the numbers again (``kvframe sweep
  examples/x.toml && kvframe compare runs/x/results.sqlite``, or the benchmark
  script), ``COMMIT`` the commit (7-40 hex digits) whose code produced them and
  the date they were produced. A table of inputs rather than results (defaults,
  a datasheet's figures) says so instead: ``<!-- figures: none, REASON -->``.
* **When the model changes.** A change to the cost model or the engine's
  decisions re-runs the commands of the markers it can affect and updates the
  numbers, the commit and the date together; a marker's commit older than such
  a change is how a reviewer finds what is stale.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w-]*)")
DECIMAL = re.compile(r"(?<![\w.=-])\d[\d,]*\.\d+(?![\w.'-])")
"""A decimal number: not part of a version (0.19.1, vLLM 0.19's), a name (Llama-3.1-8B),
an option's value (decay=0.5) or a file (x.py)."""
MARKER = re.compile(
    r"<!--\s*figures:\s*(?:(?P<none>none,\s*\S.*?)|"
    r"(?P<cmd>\S.*?)\s+@\s+(?P<commit>[0-9a-f]{7,40})\s+\((?P<date>\d{4}-\d{2}-\d{2})\))\s*-->"
)
ANY_MARKER = re.compile(r"<!--\s*figures:")
DOC_TEST = re.compile(r"<!--\s*doc-test:\s*(skip|illustrative output)")


@attrs.frozen
class Block:
    """One figure-bearing table or fenced block and its marker, if any."""

    path: Path
    line: int
    """1-based line of the table's first row or the opening fence."""
    kind: str
    marker: str | None
    """The marker line's text, or ``None`` when the block has none."""
    commit: str | None = None

    def where(self) -> str:
        shown = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{shown}:{self.line}"


def doc_files(root: Path = REPO) -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _marker_above(lines: list[str], start: int) -> tuple[str | None, bool]:
    """The ``figures:`` marker among the blank and comment lines right above line
    ``start`` (0-based), and whether a ``doc-test`` marker is there too."""
    marker, doc_test = None, False
    i = start - 1
    while i >= 0 and (not lines[i].strip() or lines[i].strip().startswith("<!--")):
        text = lines[i].strip()
        if ANY_MARKER.search(text) and marker is None:
            marker = text
        if DOC_TEST.search(text):
            doc_test = True
        i -= 1
    return marker, doc_test


def blocks(path: Path) -> Iterator[Block]:
    """The figure-bearing blocks of one page (see the module docstring)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith(fence.group(1)):
                end += 1
            lang = fence.group(2)
            body = lines[i + 1 : end]
            marker, doc_test = _marker_above(lines, i)
            rerun = lang == "console" and not doc_test
            if (
                lang in ("text", "console", "")
                and not rerun
                and any(DECIMAL.search(b) for b in body)
            ):
                yield _block(path, i, "fenced block", marker)
            i = end + 1
            continue
        if lines[i].startswith("|"):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            body = lines[start + 2 : i]  # the heading row and the rule carry no figures
            if any(DECIMAL.search(_without_code(row)) for row in body):
                yield _block(path, start, "table", _marker_above(lines, start)[0])
            continue
        i += 1


def _without_code(row: str) -> str:
    """A table row without its inline code: `--rate 0.5` is an option, not a figure."""
    return re.sub(r"`[^`]*`", "", row)


def _block(path: Path, index: int, kind: str, marker: str | None) -> Block:
    match = MARKER.search(marker) if marker else None
    return Block(path, index + 1, kind, marker, match.group("commit") if match else None)


def problems(files: list[Path]) -> list[str]:
    """One line per figure-bearing block without a well-formed marker."""
    out = []
    for path in files:
        for block in blocks(path):
            if block.marker is None:
                out.append(
                    f"{block.where()}: {block.kind} with figures has no <!-- figures: --> marker"
                )
            elif not MARKER.search(block.marker):
                out.append(
                    f"{block.where()}: malformed marker {block.marker!r}: expected "
                    "'<!-- figures: COMMAND @ COMMIT (YYYY-MM-DD) -->' or "
                    "'<!-- figures: none, REASON -->'"
                )
    return out


COST_MODEL = ("kvframe/executors/presets.py", "kvframe/executors/sim.py")
"""What ``--stale`` compares against by default: a change here moves every simulated time."""


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def stale(files: list[Path], paths: tuple[str, ...] = COST_MODEL) -> list[str]:
    """One line per marked block whose commit does not contain the last change to
    ``paths``: its numbers were produced before that change and may be stale."""
    last = _git("log", "-1", "--format=%H", "--", *paths).stdout.strip()
    if not last:
        return []
    out = []
    for path in files:
        for block in blocks(path):
            if block.commit is None:
                continue
            if _git("merge-base", "--is-ancestor", last, block.commit).returncode != 0:
                out.append(
                    f"{block.where()}: produced at {block.commit}, before {last[:9]} "
                    f"changed {', '.join(paths)}"
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="pages (default: README and docs/)")
    parser.add_argument(
        "--stale", action="store_true",
        help="list marked tables produced before the last change to the given paths "
        "(the positional arguments; default: the cost model) instead",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.stale:
        found = stale(doc_files(), tuple(args.files) or COST_MODEL)
    else:
        found = problems([Path(p).resolve() for p in args.files] or doc_files())
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
