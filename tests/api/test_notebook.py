"""The example notebook (examples/notebook/kvframe_api.ipynb) runs, as written, in the tests.

No Jupyter kernel: the ``.ipynb`` is JSON, and its code cells are executed in order
in one namespace, as a kernel would. The cell tagged ``parameters`` is followed by
the test's overrides (papermill's convention), so the fast test replays a slice of
the trace and the slow one the whole trace -- the README's main job, whose printed
figures it must reproduce line for line.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import structlog

pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebook" / "kvframe_api.ipynb"


def run_notebook(path: Path, **parameters: Any) -> tuple[dict[str, Any], str]:
    """Execute ``path``'s code cells in order; ``parameters`` override the ``parameters``
    cell's names. Returns the namespace and everything the cells printed."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    printed = io.StringIO()
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        with contextlib.redirect_stdout(printed):
            exec(compile(source, f"{path.name}, cell {i}", "exec"), namespace)
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            unknown = set(parameters) - set(namespace)
            assert not unknown, f"the parameters cell has no {sorted(unknown)}"
            namespace.update(parameters)
    structlog.reset_defaults()
    return namespace, printed.getvalue()


def readme_main_job_lines() -> list[str]:
    """The lines of the README's main-job output (its ``text`` block), ``...`` left out."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(
        # The block may carry its docs-figures marker (tests/docs/test_figure_markers.py).
        r"It prints \(`\.\.\.`: lines left out\):\n\n(?:<!-- figures: [^\n]* -->\n)?"
        r"```text\n(.*?)```",
        readme,
        re.S,
    )
    assert block, "README.md no longer shows the main job's output"
    return [line.rstrip() for line in block.group(1).splitlines() if line.strip() != "..."]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # as the README's first command: no kvframe.toml here


def test_the_notebook_runs_and_its_tables_agree_with_its_summary() -> None:
    ns, printed = run_notebook(NOTEBOOK, LIMIT=150, SWEEP_LIMIT=60)
    result = ns["result"]
    counters = result.counters
    assert counters["num_requests"] == 150
    assert f"{counters['num_steps']:,}" in printed and "vLLM target: 0.19.1" in printed
    assert len(ns["requests"]) == 150 and len(ns["steps"]) == counters["num_steps"]
    # The sweep: four cells, done, loaded again in one call without running anything.
    cells, table = ns["cells"], ns["table"]
    assert sorted(cells["cell"]) == [1, 2, 3, 4] and set(cells["status"]) == {"done"}
    assert table.shape[0] == 4 and set(table["scheduler"]) == {"fcfs", "sjf"}
    assert len(ns["every"]) == 4 * 60


@pytest.mark.slow
def test_the_notebook_reproduces_the_readme_main_job() -> None:
    """The whole trace (20-40 s): every line the README shows is in the notebook's output."""
    _, printed = run_notebook(NOTEBOOK, SWEEP_LIMIT=60)
    shown = {line.rstrip() for line in printed.splitlines()}
    missing = [line for line in readme_main_job_lines() if line not in shown]
    assert not missing, f"README lines the notebook did not print: {missing}"
