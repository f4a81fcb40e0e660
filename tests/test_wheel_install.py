"""The main job from a built wheel: no editable install, no repository on the path.

Why a test: the bundled traces are package data, and package data is the kind
of thing that works from a checkout and silently goes missing from a wheel
(a glob in pyproject that matches nothing). So this builds the wheels of
kvframe and of the one plugin the default run needs (``kvframe-fcfs``),
installs them into a fresh virtualenv (sources copied out of the checkout
first), and runs
``kvframe run mooncake:conversation --limit 200`` there from an empty
directory.

Cost, measured on the 2-core development machine: about 10-15 s, most of it
pip. To keep it there: both wheels are built in one ``pip wheel`` call
without build isolation (setuptools comes from the dev environment instead of
a fresh download), the virtualenv is made without pip (the dev environment's
pip installs into it with ``--python``), and the dependencies (pluggy, attrs,
structlog, importlib-metadata) come from the package registry through pip's
cache. It needs the registry, as ``scripts/bootstrap`` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(*argv: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [os.fspath(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, (
        f"{' '.join(map(str, argv))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def _copy_sources(tmp_path: Path) -> tuple[Path, Path]:
    """What the two distributions are built from, copied: building in the checkout
    would leave ``build/`` there, whose stale files could end up in a later wheel."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
    core = tmp_path / "src" / "kvframe"
    shutil.copytree(REPO / "kvframe", core / "kvframe", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "NOTICE"):
        shutil.copy2(REPO / name, core / name)
    plugin = tmp_path / "src" / "kvframe-fcfs"
    shutil.copytree(REPO / "plugins" / "kvframe-fcfs", plugin, ignore=ignore)
    return core, plugin


def test_the_main_job_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        dist,
        *_copy_sources(tmp_path),
        cwd=tmp_path,
    )
    wheels = sorted(dist.glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["kvframe", "kvframe_fcfs"]

    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        *wheels,
        cwd=tmp_path,
    )

    work = tmp_path / "work"
    work.mkdir()
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
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
