"""kvframe as a library writes nothing to stdout; its warnings go to stderr."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_a_run_through_the_library_writes_nothing_to_stdout_and_warnings_to_stderr() -> None:
    done = run_python(
        """
        from kvframe.engine import Engine, EngineConfig
        from kvframe.log import get_logger
        from kvframe.workloads import load_workload

        workload = load_workload("mooncake:conversation", limit=3)
        result = Engine.from_config(EngineConfig(max_model_len=2048)).run(workload)
        assert result.summary.counters["num_requests"] == 3
        get_logger("kvframe.test").warning("library_warning", detail=1)
        """
    )
    assert done.stdout == ""
    assert "library_warning" in done.stderr and "detail=1" in done.stderr
    assert "run_started" not in done.stderr  # info is dropped unless logging is configured


def test_an_application_that_configures_structlog_gets_kvframe_logs_its_way() -> None:
    done = run_python(
        """
        import sys
        import structlog
        from kvframe.log import get_logger

        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stdout))
        get_logger("kvframe.test").info("routed_by_the_application")
        """
    )
    assert "routed_by_the_application" in done.stdout
