"""List the functions over the line limit, and whether a comment names their benchmark.

    .venv/bin/python tools/long_functions.py [PATH ...] [--limit 60]

CONTRIBUTING.md's rule: a function is at most 60 lines, from its ``def`` line
to its last line, docstring and comments included (decorators are not
counted), unless a comment inside it names the benchmark that shows why it
must stay whole -- a ``#`` comment containing ``benchmarks/`` (e.g. "...
benchmarks/whole_trace.py measures the whole path"). Paths default to
``kvframe`` and ``plugins``; files under a ``tests`` folder are skipped (a
test reads top to bottom on purpose).

Prints one line per function over the limit, longest first: its length,
``justified`` or ``NOT JUSTIFIED``, ``path:line`` and its qualified name.
Exits 1 when any is not justified, so CI can run it.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import attrs

LIMIT = 60
MARK = "benchmarks/"


@attrs.frozen
class LongFunction:
    """One function over the limit."""

    path: str
    line: int
    name: str
    length: int
    justified: bool


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.inner``)."""
    stack: list[tuple[str, ast.AST]] = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                stack.append((f"{name}.", child))
            else:
                stack.append((prefix, child))


def _comment_lines(source: str) -> dict[int, str]:
    """The ``#`` comments of a module, by line number."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {tok.start[0]: tok.string for tok in tokens if tok.type == tokenize.COMMENT}


def long_functions(path: Path, limit: int = LIMIT) -> list[LongFunction]:
    """The functions of one file longer than ``limit`` lines."""
    source = path.read_text(encoding="utf-8")
    comments = _comment_lines(source)
    found = []
    for name, fn in _functions(ast.parse(source, filename=str(path))):
        end = fn.end_lineno or fn.lineno
        length = end - fn.lineno + 1
        if length > limit:
            justified = any(
                MARK in text for line, text in comments.items() if fn.lineno <= line <= end
            )
            found.append(LongFunction(str(path), fn.lineno, name, length, justified))
    return found


def _files(paths: list[str]) -> Iterator[Path]:
    for root in map(Path, paths):
        candidates = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in candidates:
            if "tests" not in path.parts and ".venv" not in path.parts:
                yield path


def main(argv: list[str] | None = None) -> int:
    """Print the long functions of the paths; 1 if any lacks its benchmark comment."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["kvframe", "plugins"])
    parser.add_argument("--limit", type=int, default=LIMIT)
    args = parser.parse_args(argv)
    found = [f for path in _files(args.paths) for f in long_functions(path, args.limit)]
    found.sort(key=lambda f: (-f.length, f.path, f.line))
    for f in found:
        verdict = "justified" if f.justified else "NOT JUSTIFIED"
        print(f"{f.length:4d}  {verdict:13s}  {f.path}:{f.line}  {f.name}")
    bad = sum(not f.justified for f in found)
    print(f"{len(found)} functions over {args.limit} lines, {bad} without a benchmark comment")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
