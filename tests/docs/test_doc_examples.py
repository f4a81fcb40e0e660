"""Every shell and TOML example in README.md and docs/*.md, run as written.

Why: examples rot silently. A flag is renamed, a file moves, a TOML key lands
in the wrong table, and the page still reads well. So the examples are
extracted from the Markdown and executed, and one that fails when followed
literally fails CI. The rules (also in CONTRIBUTING.md, "Documentation"):

* **Which blocks.** Fenced blocks tagged ``bash``, ``sh``, ``shell``,
  ``console`` or ``toml`` in ``README.md`` and every ``docs/*.md`` (new pages
  are picked up automatically). ``text``, ``python`` and untagged blocks are
  not run.
* **Skipping.** A block right after ``<!-- doc-test: skip REASON -->`` is
  skipped and the reason is shown. Use it for what cannot run here (vLLM, a
  GPU, a plugin that is not installed) or must not (installing packages into
  the test environment: an unmarked block containing ``pip install`` fails
  with a message asking for the marker).
* **Where.** Each shell block runs as one ``bash -eo pipefail`` script in a
  fresh temporary directory laid out like the repository root (its top-level
  entries are symlinked; ``.venv`` is the running environment), so paths such
  as ``.venv/bin/python`` or ``plugins/...`` resolve, and files the example
  writes (``chat.jsonl``, ``runs/``) land in the temporary directory. The
  environment's ``bin`` comes first on ``PATH``, so bare ``kvframe`` works as
  after activating ``.venv``.
* **Bounded cost.** ``scripts/bootstrap`` is a no-op (the tests already run in
  the environment it made). ``kvframe run`` is capped at ``--limit 20``: the
  test appends it when the example has no ``--limit`` and lowers a larger one,
  so the flags, names and files of the example are all exercised but no
  example replays a whole trace. An example that loads a real model
  (``--text MODEL``, ``--executor torch:model=...``) is marked ``slow``: it
  runs in ``.ci/run`` and ``pytest -m slow``, not in the default selection.
  ``pytest`` commands (also as
  ``python -m pytest``) only collect (``--collect-only``), which checks their
  options and paths; one with no arguments at all is the whole suite and is
  not re-run from inside it.
* **console blocks** are a transcript: lines starting with ``$`` are run one
  by one; the lines under a command are its expected output and must match
  what it prints (stdout and stderr, trailing spaces ignored; a list of
  installed plugins may name more than the page) — unless the block is
  marked ``<!-- doc-test: illustrative output -->``. A command whose
  shown output contains ``error:`` must exit non-zero; every other command,
  and every ``bash`` line, must exit 0.
* **Files a page shows.** A ``python`` block whose first line is ``# NAME.py``
  (a bare file name, no folder) is that file: it is written into the
  temporary directory before each shell example of the same page runs, so a
  page can run what it shows (the README's policy, then ``PYTHONPATH=.
  kvframe run ... --scheduler my_policy:ShortestFirst``). Other ``python``
  blocks are not run here; the README's policy also goes through the
  conformance suite below.
* **TOML blocks** must parse. One with a ``[project...]``, ``[build-system]``
  or ``[tool...]`` table is a ``pyproject.toml`` fragment and is only parsed;
  any other is a ``kvframe.toml`` and is used as one for
  ``kvframe run mooncake:conversation --limit 5``, which must succeed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import attrs
import pytest

from kvframe.cli import main
from kvframe.testing import SchedulingPolicySuite

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
RUN_LIMIT = 20
MARKER = re.compile(r"<!--\s*doc-test:\s*(skip|illustrative output)\s*(.*?)\s*-->")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w-]*)")


@attrs.frozen
class Example:
    path: str
    line: int
    lang: str
    body: str
    marker: str | None
    reason: str

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}-{self.lang}"


def extract(path: Path, root: Path = REPO) -> list[Example]:
    """The fenced shell and TOML blocks of one Markdown file, with their markers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if lang in SHELL_LANGS or lang == "toml":
            prev = next((t for t in reversed(lines[:i]) if t.strip()), "")
            mark = MARKER.search(prev)
            found.append(
                Example(
                    path=path.relative_to(root).as_posix(),
                    line=i + 1,
                    lang=lang,
                    body="\n".join(lines[i + 1 : end]),
                    marker=mark.group(1) if mark else None,
                    reason=mark.group(2) if mark else "",
                )
            )
        i = end + 1
    return found


PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHOWN_FILE = re.compile(r"```python\n# ([\w-]+\.py)\n(.*?)```", re.S)


def all_examples() -> list[Example]:
    return [example for f in PAGES for example in extract(f)]


def shown_files(path: Path) -> dict[str, str]:
    """The files a page shows whole: ``python`` blocks whose first line is ``# NAME.py``."""
    text = path.read_text(encoding="utf-8")
    return {m.group(1): f"# {m.group(1)}\n{m.group(2)}" for m in SHOWN_FILE.finditer(text)}


EXAMPLES = all_examples()
SHOWN_FILES = {f.relative_to(REPO).as_posix(): shown_files(f) for f in PAGES}

# Runs before each example's script: the caps and stand-ins the module docstring states.
PRELUDE = f"""
set -eo pipefail
kvframe() {{
  local args=() prev="" seen=0 a
  for a in "$@"; do
    if [ "$prev" = --limit ]; then seen=1; [ "$a" -gt {RUN_LIMIT} ] 2>/dev/null && a={RUN_LIMIT}; fi
    args+=("$a"); prev=$a
  done
  if [ "${{1-}}" = run ] && [ $seen = 0 ]; then args+=(--limit {RUN_LIMIT}); fi
  command kvframe "${{args[@]}}"
}}
pytest() {{
  if [ $# = 0 ]; then echo "doc-test: the whole suite is not re-run from inside it"; return 0; fi
  command python -m pytest --collect-only -q -p no:cacheprovider "$@" >/dev/null
}}
"""


def _rewrite(script: str) -> str:
    """Route the venv's ``kvframe`` and ``pytest`` through the prelude's functions."""
    script = re.sub(r"(?:\./)?\.venv/bin/python\s+-m\s+pytest\b", "pytest", script)
    script = re.sub(r"\bpython3?\s+-m\s+pytest\b", "pytest", script)
    return re.sub(r"(?:\./)?\.venv/bin/(kvframe|pytest)\b", r"\1", script)


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """A directory that looks like the repository root, writable, with a no-op bootstrap."""
    for entry in REPO.iterdir():
        if entry.name in {".git", ".venv", "scripts", "runs", "out"} or entry.name.startswith("."):
            continue
        (tmp_path / entry.name).symlink_to(entry)
    (tmp_path / ".venv").symlink_to(sys.prefix)
    (tmp_path / "scripts").mkdir()
    bootstrap = tmp_path / "scripts" / "bootstrap"
    bootstrap.write_text("#!/bin/sh\n# doc-test: the environment is already set up\n")
    bootstrap.chmod(0o755)
    return tmp_path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", PRELUDE + _rewrite(script)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _transcript(body: str) -> list[tuple[str, list[str]]]:
    """``$`` commands (with ``\\`` continuations) and the output lines shown under each."""
    steps: list[tuple[str, list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$"):
            if steps:
                steps[-1][1].append(lines[i])
            i += 1
            continue
        command = lines[i][1:].strip()
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        steps.append((command, []))
        i += 1
    return steps


def _normalise(text: str) -> list[str]:
    out = [line.rstrip() for line in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    return out


_INSTALLED = re.compile(r"^(\s*installed [a-z ]+: )(.*)$")


def _matches(printed: list[str], shown: list[str]) -> bool:
    """Whether a command printed what the page shows.

    Line for line, except a list of installed plugins (``installed eviction
    policies: arc, lru``): it depends on the environment, so it matches when
    it names at least the plugins the page names -- a developer's ``.venv``
    may also hold a third-party one (the s3fifo example) that CI installs only
    after the tests.
    """
    if len(printed) != len(shown):
        return False
    for got, want in zip(printed, shown, strict=True):
        if got == want:
            continue
        got_list, want_list = _INSTALLED.match(got), _INSTALLED.match(want)
        if not (got_list and want_list and got_list[1] == want_list[1]):
            return False
        if not set(want_list[2].split(", ")) <= set(got_list[2].split(", ")):
            return False
    return True


def _run_shell(example: Example, cwd: Path) -> None:
    where = f"{example.path}:{example.line}"
    if re.search(r"\bpip3?\s+(install|uninstall)\b", example.body):
        pytest.fail(
            f"{where}: this example installs packages into the environment the tests run "
            "in; mark it with <!-- doc-test: skip REASON --> on the line before the fence"
        )
    if example.lang != "console" or not example.body.lstrip().startswith("$"):
        proc = _bash(example.body, cwd)
        assert proc.returncode == 0, (
            f"{where}: the example exited {proc.returncode}\n--- stdout\n{proc.stdout}"
            f"\n--- stderr\n{proc.stderr}"
        )
        return
    for command, shown in _transcript(example.body):
        proc = _bash(command + " 2>&1", cwd)
        expect_error = any("error:" in line for line in shown)
        assert (proc.returncode != 0) == expect_error, (
            f"{where}: `{command}` exited {proc.returncode}, but the page shows "
            f"{'an error' if expect_error else 'success'}:\n{proc.stdout}{proc.stderr}"
        )
        if example.marker != "illustrative output" and shown:
            assert _matches(_normalise(proc.stdout), _normalise("\n".join(shown))), (
                f"{where}: `{command}` printed something else than the page shows "
                "(update the page, or mark the block <!-- doc-test: illustrative output -->)"
            )


def _run_toml(example: Example, cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where = f"{example.path}:{example.line}"
    try:
        data = tomllib.loads(example.body)
    except tomllib.TOMLDecodeError as err:
        pytest.fail(f"{where}: not valid TOML: {err}")
    if {"project", "build-system", "tool"} & data.keys():
        return  # a pyproject.toml fragment: parsing is all a fragment can show
    (cwd / "kvframe.toml").write_text(example.body + "\n", encoding="utf-8")
    os.chdir(cwd)
    code = main(["run", "mooncake:conversation", "--limit", "5", "--out", "o", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, f"{where}: `kvframe run` with this kvframe.toml exited {code}\n{captured.err}"


# Examples that load a real model (its tokenizer or its weights) take 20-30 s each: they
# run with the slow tests (.ci/run), not in the developer's loop.
REAL_MODEL = re.compile(r"--text\s|torch:model=")


def _param(example: Example) -> object:
    slow = example.lang != "toml" and REAL_MODEL.search(example.body)
    return pytest.param(example, id=example.id, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("example", [_param(e) for e in EXAMPLES])
def test_doc_example(
    example: Example,
    sandbox: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if example.marker == "skip":
        pytest.skip(f"marked in {example.path}: {example.reason or '(no reason given)'}")
    monkeypatch.chdir(sandbox)
    if example.lang == "toml":
        _run_toml(example, sandbox, capsys)
    else:
        for name, source in SHOWN_FILES[example.path].items():
            (sandbox / name).write_text(source, encoding="utf-8")
        _run_shell(example, sandbox)


def test_the_extractor_finds_blocks_markers_and_transcripts(tmp_path: Path) -> None:
    text = (
        "# t\n\n<!-- doc-test: skip needs a GPU -->\n```bash\nnvidia-smi\n```\n\n"
        "```console\n$ kvframe plugins \\\n    --json\nout 1\n"
        "$ kvframe x\nkvframe: error: no\n```\n"
        "```python\nprint(1)\n```\n~~~toml\na = 1\n~~~\n"
    )
    page = tmp_path / "p.md"
    page.write_text(text)
    found = extract(page, root=tmp_path)
    assert [(e.line, e.lang, e.marker, e.reason) for e in found] == [
        (4, "bash", "skip", "needs a GPU"),
        (8, "console", None, ""),
        (18, "toml", None, ""),
    ]
    assert _transcript(found[1].body) == [
        ("kvframe plugins  --json", ["out 1"]),
        ("kvframe x", ["kvframe: error: no"]),
    ]
    assert _rewrite(".venv/bin/kvframe run x && .venv/bin/python -m pytest -q") == (
        "kvframe run x && pytest -q"
    )


def test_an_installed_plugin_list_may_name_more_than_the_page() -> None:
    """Extra installed plugins pass; a missing one, another kind or another line does not."""
    head = "kvframe check: error: unknown"
    shown = [head, "  installed eviction policies: arc, lru"]
    assert _matches([head, "  installed eviction policies: arc, lru, s3fifo"], shown)
    assert not _matches([head, "  installed eviction policies: lru, s3fifo"], shown)
    assert not _matches([head, "  installed scheduling policies: arc, lru"], shown)
    assert not _matches(["kvframe check: error: other", shown[1]], shown)
    assert not _matches([head], shown)


# -- the README's first screen ------------------------------------------------------

README = REPO / "README.md"
FIRST_SCREEN = 70
"""Lines a newcomer sees before scrolling: the idea, the two commands, what the main
job prints and a whole policy must all be above this line (issue 45)."""


def _readme_policy() -> type:
    source = shown_files(README)["my_policy.py"]
    module = types.ModuleType("my_policy")
    exec(compile(source, f"{README}:my_policy.py", "exec"), module.__dict__)
    return module.ShortestFirst


def test_the_readme_opens_with_the_two_commands_and_a_whole_policy() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    first_bash = lines.index("```bash")
    assert [line.split("#")[0].strip() for line in lines[first_bash + 1 : first_bash + 3]] == [
        "scripts/bootstrap && .venv/bin/kvframe run mooncake:conversation",
        "scripts/bootstrap --all && .venv/bin/python -m pytest",
    ]
    assert not any(line.startswith("## ") for line in lines[:first_bash])
    policy_start = lines.index("# my_policy.py")
    policy_end = lines.index("```", policy_start)
    assert policy_end < FIRST_SCREEN, f"the README's policy ends on line {policy_end + 1}"
    code = shown_files(README)["my_policy.py"]
    assert "..." not in code and len([x for x in code.splitlines() if x.strip()]) <= 16


class TestTheReadmePolicy(SchedulingPolicySuite):
    """The policy the README shows, as printed, passes the conformance suite."""

    plugin = _readme_policy()


class TestTheReadmePolicyWithItsOption(SchedulingPolicySuite):
    plugin = _readme_policy()
    options = {"tokens_per_s": 50.0}


# -- links of the pages Sphinx does not build ----------------------------------------

LINKED_PAGES = ("README.md", "CONTRIBUTING.md", "benchmarks/README.md")
"""Read on GitHub, outside the docs site: nothing else checks their links."""
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, blanks as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    fence = ""
    for line in page.read_text(encoding="utf-8").splitlines():
        m = FENCE.match(line)
        if m and (not fence or line.strip().startswith(fence)):
            fence = "" if fence else m.group(1)
            continue
        if not fence and (h := re.match(r"#{1,6} (.+)", line)):
            slug = _slug(h.group(1))
            n = sum(1 for a in anchors if a == slug or re.fullmatch(rf"{re.escape(slug)}-\d+", a))
            anchors.add(f"{slug}-{n}" if n else slug)
    return anchors


@pytest.mark.parametrize("name", LINKED_PAGES)
def test_every_relative_link_and_anchor_resolves(name: str) -> None:
    page = REPO / name
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading with that anchor in {path or name}")
    assert not broken, f"{name}: " + "; ".join(broken)
