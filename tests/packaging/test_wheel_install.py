"""The main job from a wheelhouse: no editable install, no repository on the path, no index.

Why a test: the bundled traces are package data, and package data is the kind
of thing that works from a checkout and silently goes missing from a wheel
(a glob in pyproject that matches nothing). And until kvframe is published, the
wheelhouse is how the docs tell people to install it outside a checkout, so the
command the docs give must work. So this runs ``scripts/wheelhouse`` (wheels of
kvframe, every bundled plugin and their dependencies), installs ``kvframe`` and
``kvframe-fcfs`` from it into a fresh virtualenv with ``--no-index``, and runs
``kvframe run mooncake:conversation --limit 200`` there from an empty
directory; then the third-party example (examples/third_party_policy), whose
``kvframe>=0.1.0`` must resolve from the same wheelhouse.

Cost, measured on the 2-core development machine (busy): 29 s, most of it
pip (marked slow: .ci/run runs it, the developer's loop does not). The
virtualenv is made without pip (the dev environment's pip installs into it with
``--python``). The wheelhouse's dependency wheels and the example's build
backend come from the package registry through pip's cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(*argv: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [os.fspath(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, (
        f"{' '.join(map(str, argv))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def test_the_main_job_runs_from_a_wheelhouse(tmp_path: Path) -> None:
    house = tmp_path / "wheelhouse"
    _run(REPO / "scripts" / "wheelhouse", house, cwd=REPO)
    ours = sorted(w.name.split("-")[0] for w in house.glob("kvframe*.whl"))
    plugins = sorted(p.name.replace("-", "_") for p in (REPO / "plugins").iterdir())
    assert ours == sorted(["kvframe", *plugins])

    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    pip = (sys.executable, "-m", "pip", "--python", python, "install", "-q")
    _run(*pip, "--no-index", "--find-links", house, "kvframe", "kvframe-fcfs", cwd=tmp_path)

    work = tmp_path / "work"
    work.mkdir()
    # KVFRAME_CORE too: .ci/run forces the compiled core for its own run, and a wheel
    # built without the compiled core must pick the Python one (core=auto).
    clean_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KVFRAME_CORE")
    }
    where = _run(python, "-c", "import kvframe; print(kvframe.__file__)", cwd=work, env=clean_env)
    assert Path(where.strip()).is_relative_to(env_dir), where  # the wheel, not the checkout

    out = _run(
        env_dir / "bin" / "kvframe",
        "run",
        "mooncake:conversation",
        "--limit",
        "200",
        "--out",
        "run",
        cwd=work,
        env=clean_env,
    )
    assert "requests finished / arrived" in out
    finished = next(line for line in out.splitlines() if line.startswith("requests finished"))
    assert finished.split()[-3:] == ["200", "/", "200"]
    assert (work / "run" / "metrics.json").is_file()

    # A third-party plugin: built from a copy (no build/ left in the checkout).
    example = tmp_path / "third_party_policy"
    shutil.copytree(
        REPO / "examples" / "third_party_policy",
        example,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"),
    )
    _run(*pip, "--find-links", house, example, cwd=tmp_path)
    listing = _run(
        env_dir / "bin" / "kvframe", "plugins", "--kind", "eviction", cwd=work, env=clean_env
    )
    assert any(line.split()[:2] == ["eviction", "s3fifo"] for line in listing.splitlines()), listing
