"""The tools that check CONTRIBUTING.md's rules see the whole repository.

The import contracts in pyproject.toml name every bundled plugin. Why:
import-linter checks only the packages it is told about. A plugin added
under ``plugins/`` but left out of ``root_packages`` and of the plugin
contracts would be free to import kvframe's floors, and ``lint-imports`` would
still say every contract is kept. These tests read the plugins' own
``pyproject.toml`` files and the contracts, and fail naming what is missing.
(``.ci/run`` runs ``lint-imports`` itself; this only keeps its lists complete.)

``tools/long_functions.py`` counts function lengths as CONTRIBUTING.md's rule
does: ``def`` line to last line, docstring included, and a ``#`` comment
naming a file under ``benchmarks/`` as the only way past 60 lines.
"""

from __future__ import annotations

import importlib.util
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BRIDGE = "kvframe_vllm"
"""The one plugin distribution that is no policy: vLLM loads it and it drives the core."""


def _plugin_packages() -> set[str]:
    packages: set[str] = set()
    for pyproject in sorted(REPO.glob("plugins/*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        packages.update(data["tool"]["setuptools"]["packages"])
    return packages


def _linter() -> dict[str, Any]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return data["tool"]["importlinter"]


def _contract(name_start: str) -> dict[str, Any]:
    found = [c for c in _linter()["contracts"] if c["name"].startswith(name_start)]
    assert len(found) == 1, f"expected one contract named {name_start!r}..., found {found}"
    return found[0]


def test_every_bundled_plugin_is_a_root_package_of_the_import_contracts() -> None:
    plugins = _plugin_packages()
    assert BRIDGE in plugins and len(plugins) > 10
    assert set(_linter()["root_packages"]) == {"kvframe", *plugins}


def test_every_plugin_but_the_bridge_may_import_only_the_package_root() -> None:
    contract = _contract("Policy plugins import")
    assert set(contract["source_modules"]) == _plugin_packages() - {BRIDGE}
    assert contract["forbidden_modules"] == ["kvframe.*"]


def test_kvframe_is_forbidden_to_import_every_plugin_the_bridge_included() -> None:
    contract = _contract("kvframe never imports a plugin")
    assert contract["source_modules"] == ["kvframe"]
    assert set(contract["forbidden_modules"]) == _plugin_packages()


def _long_functions_tool() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "long_functions", REPO / "tools" / "long_functions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function(name: str, lines: int, comment: str = "") -> str:
    """A function of exactly ``lines`` lines, its docstring and ``comment`` included."""
    body = [f"def {name}() -> None:", '    """Docstring."""']
    if comment:
        body.append(f"    # {comment}")
    body += ["    x = 1"] * (lines - len(body))
    return "\n".join(body) + "\n"


def test_the_line_rule_counts_from_def_to_last_line_and_reads_the_benchmark_comment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _long_functions_tool()
    source = tmp_path / "mod.py"
    source.write_text(
        _function("sixty", 60)
        + _function("long", 61)
        + "class C:\n"
        + "\n".join("    " + line for line in _function("hot", 70, "benchmarks/x.py").splitlines())
        + "\n"
    )
    found = tool.long_functions(source)
    assert [(f.name, f.length, f.justified) for f in found] == [
        ("long", 61, False),
        ("C.hot", 70, True),
    ]
    assert tool.main([str(source)]) == 1
    assert "NOT JUSTIFIED" in capsys.readouterr().out
    assert tool.main([str(source), "--limit", "61"]) == 0
