"""The README's first command, ``scripts/bootstrap``, in a copy of the repository.

Why a test: the main job's set-up is what every new user runs first, and what
it installs (kvframe and every bundled plugin, nothing heavy) and prints (each
step, its time, the venv's size) is a promise the README makes with figures.
So this copies the repository's sources (not its ``.venv``) to a temporary
directory, runs ``scripts/bootstrap`` there, checks what it printed, that the
venv lists every bundled plugin and has no torch, and that a second run does
nothing.

Cost, measured on the 2-core development machine at load average 9: 37 s, nearly all pip
(marked slow: .ci/run runs it). It needs the package registry, or pip's cache,
as ``scripts/bootstrap`` does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

SOURCES = ("kvframe", "plugins", "scripts", "pyproject.toml", "setup.py", "README.md", "NOTICE")


def _run(argv: list[str], cwd: Path) -> str:
    # KVFRAME_CORE too: the copy has no compiled core, whatever core the caller forces.
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "KVFRAME_CORE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_bootstrap_installs_the_main_job_and_says_what_it_did(tmp_path: Path) -> None:
    ignore = shutil.ignore_patterns(
        "__pycache__",
        "*.egg-info",
        "build",
        "dist",
        "tests",
        "*.so",
        "_block_pool_c.[cs]*",
        "_hashing_compiled.[cs]*",
    )
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=ignore)
        else:
            shutil.copy2(source, tmp_path / name)

    printed = _run(["scripts/bootstrap"], tmp_path).splitlines()
    plugins = sorted(p.name for p in (REPO / "plugins").iterdir() if p.is_dir())
    assert printed[0].startswith("bootstrap: created .venv with Python 3.")
    assert printed[2] == (
        f"bootstrap: installed kvframe and {len(plugins)} bundled plugins, editable: "
        f"{' '.join(plugins)} ({printed[2].rsplit('(', 1)[1]}"
    )
    assert re.fullmatch(r"bootstrap: done, main set-up in \d+ s; \.venv is \S+", printed[3])

    venv = tmp_path / ".venv" / "bin"
    listing = json.loads(_run([str(venv / "kvframe"), "plugins", "--json"], tmp_path))
    distributions = {p["distribution"] for p in listing["plugins"] if p["status"] == "ok"}
    # kvframe-vllm is the bridge vLLM loads, not a kvframe plugin: it lists nothing.
    assert distributions == {p for p in plugins if p != "kvframe-vllm"}
    installed = _run([str(venv / "python"), "-m", "pip", "list", "--format", "json"], tmp_path)
    assert "torch" not in {p["name"] for p in json.loads(installed)}

    assert _run(["scripts/bootstrap"], tmp_path).splitlines() == [
        "bootstrap: .venv is up to date (main set-up); nothing to do"
    ]
