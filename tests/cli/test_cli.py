"""The ``kvframe`` command: listings, selection checks, exit codes, real installs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

import kvframe
from kvframe.cli import main
from kvframe.host.registry import PluginRegistry


class Frequency(kvframe.EvictionPolicy):
    """Test-only: counts hits."""

    name = "frequency"

    def __init__(self, capacity: int, *, decay: float = 0.0, window: int = 1024) -> None:
        super().__init__(capacity)

    def get(self, key): ...  # pragma: no cover
    def insert(self, key, block): ...  # pragma: no cover
    def remove(self, key): ...  # pragma: no cover
    def touch(self, keys): ...  # pragma: no cover
    def evict(self, n, protected): ...  # pragma: no cover


class Stats(kvframe.Tracer):
    name = "stats"
    description = "Test-only counters."


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``main`` configures structlog for the process; give the next test the defaults back."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def cli_registry(registry: PluginRegistry) -> PluginRegistry:
    registry.register_class(Frequency, distribution="kvframe-test", version="9.9")
    registry.register_class(Stats)
    return registry


@pytest.fixture
def check_registry(cli_registry: PluginRegistry) -> PluginRegistry:
    """``check`` builds the engine, which needs a scheduling policy (FCFS, the default)."""
    from kvframe_fcfs import FCFSPolicy

    cli_registry.register_class(FCFSPolicy)
    return cli_registry


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"kvframe {kvframe.__version__}\n"


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "the following arguments are required: COMMAND" in capsys.readouterr().err


def test_plugins_prints_a_table_with_options(
    cli_registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins"], registry=cli_registry) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["KIND", "NAME", "DISTRIBUTION", "VERSION", "DESCRIPTION"]
    assert set(lines[1]) == {"-"}  # plain ASCII off a terminal: no box drawing, no ANSI codes
    assert lines[2].split() == [
        "eviction",
        "frequency",
        "kvframe-test",
        "9.9",
        "Test-only:",
        "counts",
        "hits.",
    ]
    assert lines[3].strip() == "options: decay: float = 0.0, window: int = 1024"
    # the options sit under the description, in its column
    assert lines[3].index("options") == lines[0].index("DESCRIPTION")
    assert lines[4].split() == ["tracer", "stats", "-", "-", "Test-only", "counters."]
    assert lines[-1] == "2 usable, 0 with problems"


def test_plugins_with_nothing_installed(
    registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins"], registry=registry) == 0
    assert capsys.readouterr().out == "no kvframe plugins installed\n"


def test_plugins_json_and_kind_filter(
    cli_registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins", "--json", "--kind", "tracer"], registry=cli_registry) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["kvframe_version"] == kvframe.__version__
    assert [(p["kind"], p["name"], p["status"]) for p in listing["plugins"]] == [
        ("tracer", "stats", "ok")
    ]


def test_check_prints_what_would_be_built(
    check_registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "--no-config", "--gpu-eviction", "frequency:window=4096", "--tracer", "stats"]
    assert main(argv, registry=check_registry) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["role", "plugin", "class", "options"]
    assert set(out[1]) == {"-"}
    assert out[2].split() == [
        "gpu_eviction", "frequency", f"{__name__}:Frequency", "decay=0.0,", "window=4096"
    ]  # fmt: skip
    assert out[3].split() == ["tracer", "stats", f"{__name__}:Stats"]
    # A size on a count (window is a number of steps) is refused, not read as 4096.
    argv[3] = "frequency:window=4KiB"
    assert main(argv, registry=check_registry) == 2
    assert "expected int (a count, not a size" in capsys.readouterr().err


def test_config_errors_exit_2_with_the_message_on_stderr_and_no_traceback(
    check_registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "--no-config", "--gpu-eviction", "frequncy"]
    assert main(argv, registry=check_registry) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "kvframe check: error: --gpu-eviction: unknown eviction policy 'frequncy'; "
        "did you mean 'frequency'?\n"
        "    frequncy\n"
        "    ^^^^^^^^\n"
        "  installed eviction policies: frequency\n"
    )


def test_check_reads_kvframe_toml_and_flags_override_it(
    check_registry: PluginRegistry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "kvframe.toml").write_text(
        'gpu_eviction = "frequency:decay=0.5"\ntracer = ["stats"]\nblock_size = 16\n'
    )
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--json"], registry=check_registry) == 0
    checked = json.loads(capsys.readouterr().out)
    assert [(p["selected_as"], p["name"], p["options"]) for p in checked["plugins"]] == [
        ("gpu_eviction", "frequency", {"decay": 0.5, "window": 1024}),
        ("tracer", "stats", {}),
    ]
    assert checked["engine"] == {"block_size": 16}
    assert checked["config_file"] == "kvframe.toml"

    argv = ["check", "--json", "--gpu-eviction", "frequency:window=1"]
    assert main(argv, registry=check_registry) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["plugins"][0]["options"] == {"decay": 0.0, "window": 1}


def test_errors_in_kvframe_toml_name_the_file_and_key(
    check_registry: PluginRegistry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.toml"
    path.write_text('gpu_eviction = "frequency:decay=fast"\n')
    assert main(["check", "--config", str(path)], registry=check_registry) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"kvframe check: error: {path}, key 'gpu_eviction': bad value for option 'decay' "
        "of eviction policy 'frequency': expected float, got 'fast' at column 17"
    )


# ==========================================================================
# The real-packages proof: pip-installed distributions seen through entry points
# ==========================================================================

DEMO_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "kvframe-demo-plugin"
version = "0.3.1"

[project.entry-points.kvframe]
lfu_demo = "kvframe_demo_plugin:DemoPolicy"

[tool.setuptools]
py-modules = ["kvframe_demo_plugin"]
"""

DEMO_MODULE = '''
"""A third-party eviction policy: one class, one entry point."""
import kvframe


class DemoPolicy(kvframe.EvictionPolicy):
    name = "lfu_demo"
    description = "Least-frequently-used (demo)."

    def __init__(self, capacity: int, *, decay: float = 0.0) -> None:
        super().__init__(capacity)
        self.decay = decay

    def get(self, key): ...
    def insert(self, key, block): ...
    def remove(self, key): ...
    def touch(self, keys): ...
    def evict(self, n, protected): ...
'''

BROKEN_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "kvframe-broken-demo"
version = "0.0.1"

[project.entry-points.kvframe]
broken_demo = "kvframe_broken_demo:Policy"

[tool.setuptools]
py-modules = ["kvframe_broken_demo"]
"""


def _write_project(root: Path, pyproject: str, module: str, source: str) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text(pyproject)
    (root / f"{module}.py").write_text(source)
    return root


def _kvframe(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "kvframe"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "kvframe.cli"]
    return subprocess.run(
        [*command, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_pip_installed_plugins_are_listed_selectable_and_broken_ones_harmless(
    tmp_path: Path,
) -> None:
    demo = _write_project(tmp_path / "demo", DEMO_PYPROJECT, "kvframe_demo_plugin", DEMO_MODULE)
    broken = _write_project(
        tmp_path / "broken",
        BROKEN_PYPROJECT,
        "kvframe_broken_demo",
        "raise ImportError('kvframe_broken_demo needs libfoo')\n",
    )
    target = tmp_path / "site"
    started = time.perf_counter()
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--no-index", "--disable-pip-version-check"),
            *("--target", str(target), str(demo), str(broken)),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    print(f"pip install of two plugin distributions: {time.perf_counter() - started:.1f}s")
    paths = [str(target), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}

    listed = _kvframe(["plugins", "--json"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    plugins = {p["name"]: p for p in json.loads(listed.stdout)["plugins"]}
    assert plugins["lfu_demo"] | {"options": None} == {
        "kind": "eviction",
        "name": "lfu_demo",
        "status": "ok",
        "error": None,
        "distribution": "kvframe-demo-plugin",
        "version": "0.3.1",
        "entry_point": "lfu_demo = kvframe_demo_plugin:DemoPolicy",
        "plugin": "kvframe-demo-plugin:lfu_demo",
        "class": "kvframe_demo_plugin:DemoPolicy",
        "description": "Least-frequently-used (demo).",
        "options": None,
    }
    assert plugins["lfu_demo"]["options"] == [
        {"name": "decay", "type": "float", "required": False, "default": 0.0}
    ]
    assert plugins["broken_demo"]["status"] == "broken"
    assert plugins["broken_demo"]["distribution"] == "kvframe-broken-demo"
    assert plugins["broken_demo"]["error"] == (
        "failed to import: ImportError: kvframe_broken_demo needs libfoo"
    )

    checked = _kvframe(
        ["check", "--no-config", "--json", "--offload", "cpu:capacity=1GiB",
         "--eviction", "lfu_demo:decay=0.5"],
        env, tmp_path,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["plugins"][0] == {
        "kind": "eviction",
        "selected_as": "eviction",
        "name": "lfu_demo",
        "class": "kvframe_demo_plugin:DemoPolicy",
        "options": {"decay": 0.5},
    }
    # The broken distribution was warned about on stderr, and did not get in the way.
    assert "plugin_load_failed" in checked.stderr
    assert "kvframe-broken-demo" in checked.stderr

    created = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                from kvframe.host.registry import get_registry
                policy = get_registry().create("eviction", "lfu_demo:decay=0.25", 8)
                print("RESULT", type(policy).__module__, type(policy).__name__,
                      policy.capacity, policy.decay)
                """
            ),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    result = [line for line in created.stdout.splitlines() if line.startswith("RESULT")]
    assert result == ["RESULT kvframe_demo_plugin DemoPolicy 8 0.25"]

    selected = _kvframe(["check", "--no-config", "--gpu-eviction", "broken_demo"], env, tmp_path)
    assert selected.returncode == 2
    assert "Traceback" not in selected.stderr
    assert (
        "kvframe check: error: --gpu-eviction: eviction policy 'broken_demo' cannot be used: "
        "kvframe-broken-demo 0.0.1 (entry point 'broken_demo') failed to import: "
        "ImportError: kvframe_broken_demo needs libfoo"
    ) in selected.stderr


def test_log_flags_are_accepted_after_the_subcommand(
    cli_registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins", "-q", "--kind", "tracer"], registry=cli_registry) == 0
    assert main(["plugins", "-vv", "--kind", "tracer"], registry=cli_registry) == 0
    assert "stats" in capsys.readouterr().out


class Undescribed(kvframe.Tracer):
    name = "undescribed"


def test_plugins_lists_paths_as_typed_and_no_base_class_docstring(
    registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvframe_jsonl_trace import JsonlTracer

    registry.register_class(JsonlTracer)
    registry.register_class(Undescribed)
    assert main(["plugins"], registry=registry) == 0
    out = capsys.readouterr().out
    assert "path: Path = 'trace.jsonl'" in out and "PosixPath" not in out
    (row,) = [line for line in out.splitlines() if " undescribed " in f"{line} "]
    assert row.split() == ["tracer", "undescribed", "-", "-"]  # not Tracer's docstring
