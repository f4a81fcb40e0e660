"""``import kvframe`` stays light: no torch, no rich, no entry-point scan, no plugin host.

Each check runs in a fresh interpreter, because this one has imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HEAVY = ["torch", "numpy", "importlib_metadata", "importlib.metadata", "tomllib"]


def modules_after(code: str) -> set[str]:
    """The names in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_kvframe_loads_no_torch_no_entry_points_and_no_plugin_host() -> None:
    loaded = modules_after("import kvframe")
    assert "kvframe" in loaded
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)
    assert "kvframe.host.registry" not in loaded
    assert "kvframe.config" not in loaded
    # The CLI's tables and progress display import rich where they draw.
    assert "rich" not in loaded and "kvframe.console" not in loaded


def test_building_a_registry_does_not_scan_until_asked() -> None:
    loaded = modules_after(
        """
        import kvframe
        registry = kvframe.PluginRegistry()
        """
    )
    assert "kvframe.host.registry" in loaded
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)


def test_asking_the_registry_scans_entry_points() -> None:
    loaded = modules_after(
        """
        import kvframe
        kvframe.get_registry().names("eviction")
        """
    )
    assert "importlib_metadata" in loaded


def test_the_notebook_api_imports_pandas_only_when_it_builds_a_table() -> None:
    loaded = modules_after(
        """
        import kvframe
        kvframe.run, kvframe.sweep, kvframe.compare, kvframe.Result
        """
    )
    assert "kvframe.api" in loaded
    assert loaded.isdisjoint(["pandas", "pyarrow", *HEAVY]), loaded & {"pandas", "pyarrow"}


def test_a_run_that_logs_nothing_never_imports_structlog_or_the_agentic_generator() -> None:
    loaded = modules_after(
        """
        import tempfile
        from kvframe.cli import main
        with tempfile.TemporaryDirectory() as out:
            assert main(["run", "mooncake:conversation", "--limit", "1", "--out", out,
                         "--force"]) == 0
        """
    )
    assert "kvframe.engine" in loaded
    # structlog (with rich's tracebacks and asyncio) loads for the first line printed.
    assert "structlog" not in loaded
    assert "kvframe.workloads.agentic" not in loaded  # `gen agentic`'s choices, lazily


def test_the_deferred_cli_logging_configuration_applies_at_the_first_line_at_its_level() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys
                from kvframe.cli.main import configure_logging
                from kvframe.log import configure_when_needed, get_logger
                import logging
                configure_when_needed(logging.WARNING, lambda: configure_logging(logging.WARNING))
                log = get_logger("kvframe.test")
                log.info("dropped_below_the_level")
                assert "structlog" not in sys.modules
                log.warning("printed_at_the_level", detail=1)
                assert "structlog" in sys.modules
                log.info("still_dropped")
                """
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout == ""
    assert "printed_at_the_level" in done.stderr and "detail=1" in done.stderr
    assert "dropped_below_the_level" not in done.stderr
    assert "still_dropped" not in done.stderr


def test_a_plugin_importing_structlog_itself_finds_the_deferred_cli_configuration() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import logging
                from kvframe.cli.main import configure_logging
                from kvframe.log import configure_when_needed
                configure_when_needed(logging.WARNING, lambda: configure_logging(logging.WARNING))
                import structlog  # as a plugin does, when it logs
                structlog.get_logger("plugin").warning("plugin_warning", detail=2)
                structlog.get_logger("plugin").info("plugin_info_dropped")
                """
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout == ""  # structlog's own default would print both to stdout
    assert "plugin_warning" in done.stderr and "detail=2" in done.stderr
    assert "plugin_info_dropped" not in done.stderr
