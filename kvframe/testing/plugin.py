"""The pytest plugin behind ``pytest --kvframe-plugin KIND:SPEC``.

Registered under the entry point group ``pytest11`` (name ``kvframe.testing``),
so it is active in every pytest run once kvframe is installed; ``-p
kvframe.testing`` loads it explicitly (e.g. from a source checkout). Without the
option it does nothing at all: it imports only pytest and the standard library,
and collects nothing.

With the option, it resolves each selection against the installed plugins (a
typo is a usage error listing what is installed), points collection at
:mod:`kvframe.testing.test_conformance` (one test class per kind, each a plain
subclass of that kind's suite), drops the classes of kinds nobody selected, and
parametrizes the rest with the selected plugins. When the command line names
no test paths, only the suite runs, whatever directory pytest was started in;
with paths, the suite runs beside those tests.
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kvframe.testing.common import PluginTarget

__all__ = [
    "pytest_addoption",
    "pytest_collect_file",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_pycollect_makeitem",
    "pytest_report_header",
    "pytest_runtest_makereport",
]

SUITE_MODULE = pathlib.Path(__file__).with_name("test_conformance.py")
"""The module collected when ``--kvframe-plugin`` is given."""

SUITE_DIR = SUITE_MODULE.parent
"""What is put on the command line: the directory, so node ids read
``test_conformance.py::TestEvictionPolicy::...`` wherever kvframe is installed.
The module is the only file in it that pytest's default ``python_files``
patterns match; :func:`pytest_collect_file` collects it under any others."""

_SELECTIONS = pytest.StashKey[list["Selection"]]()

CLI_KIND_ATTRIBUTE = "_kvframe_cli_kind"
"""Set (in the class body, not inherited) on the test classes of :data:`SUITE_MODULE`."""


class Selection:
    """One ``--kvframe-plugin`` value: a kind and the plugin it selects."""

    def __init__(self, text: str, kind: str, spec: str, target: PluginTarget) -> None:
        self.text = text
        self.kind = kind
        self.spec = spec
        self.target = target

    @property
    def id(self) -> str:
        return self.spec


def parse_selection(text: str) -> Selection:
    """``eviction:arc:variant=paper``, ``scheduling:pkg.mod:Class`` or ``pkg.mod:Class[:opts]``.

    :raises pytest.UsageError: naming the text, for an unknown kind, plugin or option.
    """
    from kvframe.config import ConfigError, get_kind, kind_of
    from kvframe.testing.common import SuiteConfigError, resolve_target

    head, sep, rest = text.partition(":")
    try:
        kind = get_kind(head.strip()).name if sep else None
    except ValueError:
        kind = None
    spec = rest if kind is not None else text
    if kind is None:
        kind = _kind_of_class_path(text)
    if not spec.strip():
        raise pytest.UsageError(f"--kvframe-plugin {text!r}: name a plugin after '{head}:'")
    try:
        target = resolve_target(kind, spec.strip())
    except (SuiteConfigError, ConfigError) as err:
        raise pytest.UsageError(f"--kvframe-plugin {text}:\n{err}") from None
    assert kind_of(target.cls) is not None
    return Selection(text, kind, spec.strip(), target)


def _kind_of_class_path(text: str) -> str:
    """The kind of the class a kind-less ``package.module:Class[:opts]`` names."""
    import importlib

    from kvframe.config import KINDS, kind_of

    module_name, _, rest = text.partition(":")
    class_name = rest.partition(":")[0]
    usage = (
        f"--kvframe-plugin {text!r}: expected KIND:SPEC with KIND one of "
        f"{', '.join(KINDS)} (e.g. eviction:lru, eviction:arc:variant=paper), "
        "or package.module:Class"
    )
    if not module_name or not class_name:
        raise pytest.UsageError(usage)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except Exception as err:
        raise pytest.UsageError(
            f"{usage}\ncannot import {module_name}:{class_name}: {err}"
        ) from None
    kind = kind_of(cls) if isinstance(cls, type) else None
    if kind is None:
        raise pytest.UsageError(
            f"{usage}\n{module_name}:{class_name} is not a kvframe plugin class"
        )
    return kind.name


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvframe", "kvframe plugin conformance suite")
    group.addoption(
        "--kvframe-plugin",
        action="append",
        default=[],
        dest="kvframe_plugins",
        metavar="KIND:SPEC",
        help=(
            "run kvframe's conformance suite for a plugin: KIND is scheduling, eviction, "
            "offload, reuse_filter, tracer or routing, SPEC a config string (lru, "
            "arc:variant=paper, my_pkg.mod:Class:opt=1). Repeat to test several."
        ),
    )
    group.addoption(
        "--kvframe-max-examples",
        type=int,
        default=None,
        dest="kvframe_max_examples",
        metavar="N",
        help="generated cases per property of the conformance suites (default: each suite's own)",
    )


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    texts = config.getoption("kvframe_plugins", default=None)
    if not texts:
        return
    import importlib.util

    if importlib.util.find_spec("hypothesis") is None:
        raise pytest.UsageError(
            "kvframe's conformance suite generates its cases with hypothesis, which is not "
            "installed: pip install hypothesis"
        )
    config.stash[_SELECTIONS] = [parse_selection(text) for text in texts]
    suite = str(SUITE_DIR)
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        if suite not in config.args:
            config.args.append(suite)
    else:
        # No paths on the command line: run the suite only, not whatever the
        # current directory or `testpaths` would have collected.
        config.args[:] = [suite]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Show a contract violation as its message, not as a traceback through the suite.

    The message already says what the plugin did and which calls led there; the
    suite's own frames would only bury it. ``--tb=long`` (or any style other than
    the default) shows the traceback as usual.
    """
    report = yield
    excinfo = call.excinfo
    if (
        report.failed
        and excinfo is not None
        and type(excinfo.value).__name__ == "ContractViolation"
        and type(excinfo.value).__module__ == "kvframe.testing.common"
        and item.config.getoption("tbstyle", "auto") == "auto"
    ):
        notes = getattr(excinfo.value, "__notes__", None) or []
        report.longrepr = "\n".join([f"{type(excinfo.value).__name__}: {excinfo.value}", *notes])
    return report


def pytest_report_header(config: pytest.Config) -> str | None:
    selections = config.stash.get(_SELECTIONS, None)
    if not selections:
        return None
    described = ", ".join(f"{s.kind}:{s.spec} ({s.target.class_path})" for s in selections)
    return f"kvframe conformance suite for: {described}"


def pytest_collect_file(file_path: pathlib.Path, parent: pytest.Collector) -> Any:
    """Collect the suite module even where ``python_files`` would not match its name."""
    if file_path != SUITE_MODULE or _SELECTIONS not in parent.config.stash:
        return None
    import fnmatch

    patterns = parent.config.getini("python_files")
    if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in patterns):
        return None  # pytest's own collector takes it
    return pytest.Module.from_parent(parent, path=file_path)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: Any, name: str, obj: object) -> Any:
    """The suite classes: nothing for kinds no ``--kvframe-plugin`` selected; the
    others are collected whatever ``python_classes`` says."""
    if not isinstance(obj, type):
        return None
    kind = vars(obj).get(CLI_KIND_ATTRIBUTE)
    if kind is None:
        return None
    selections = collector.config.stash.get(_SELECTIONS, None) or []
    if any(s.kind == kind for s in selections):
        return pytest.Class.from_parent(collector, name=name, obj=obj)
    return []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the suite classes of :data:`SUITE_MODULE` with the selected plugins."""
    cls = metafunc.cls
    kind = vars(cls).get(CLI_KIND_ATTRIBUTE) if cls is not None else None
    if kind is None or "kvframe_target" not in metafunc.fixturenames:
        return
    selections = [s for s in metafunc.config.stash.get(_SELECTIONS, None) or [] if s.kind == kind]
    metafunc.parametrize(
        "kvframe_target",
        [s.target for s in selections],
        ids=[s.id for s in selections],
        indirect=True,
    )
