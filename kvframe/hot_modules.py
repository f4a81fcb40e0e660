"""The compiled hot modules: the core's own ``.py`` files compiled by mypyc, chosen at import.

Why: after the compiled block pool and hasher (:mod:`kvframe.core.compiled`), what is
left of a trace replay's CPU time is the interpreted core itself -- the scheduler's
per-request loop, the step, the decode runs, the requests and the queues. mypyc
compiles those same files, unchanged, to C extensions: one source, the pure-Python
run staying the reference and the fallback (issue 51). No decision is
written twice.

``scripts/build-core`` builds them (when mypy, which ships mypyc, is installed) into
``kvframe/_mypyc/`` -- beside the sources, not over them: an extension next to its
``.py`` would always win the import, and the Python run must stay selectable. Each
built module has its source's SHA-1 recorded; a module whose source changed since is
not used (it could decide differently), as the compiled pool's rule is.

Selection happens once per process, when a hot module is first imported (a module
cannot be swapped after its classes exist): the import finder installed by
``kvframe/__init__.py`` serves the compiled module unless the environment variable
``KVFRAME_CORE`` is ``python`` (``kvframe run --core python`` chooses the same before
the core is imported, :func:`choose`). :func:`hot_modules_state` says what a process got.

This module imports nothing of kvframe (``kvframe/__init__.py`` imports it first).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "BUILD_DIR",
    "GROUP_NAME",
    "HOT_MODULES",
    "choose",
    "hot_modules_built",
    "hot_modules_state",
    "install",
]

HOT_MODULES: tuple[str, ...] = (
    "kvframe.core.scheduler",
    "kvframe.core.step",
    "kvframe.core.decode_run",
    "kvframe.domain.request",
    "kvframe.domain.queues",
)
"""The modules mypyc compiles: the issue-51 profile's interpreted hot path. Not
``kvframe.core.kv_cache_manager``: the compiled block pool binds its C allocation
paths onto the manager instance (``KVCacheManager._use_compiled_paths``), which a
mypyc class does not allow, and those paths are C already."""

GROUP_NAME = "kvframe_hot"
"""mypyc's group: its shared library is the top-level module ``kvframe_hot__mypyc``."""

PACKAGE_DIR = Path(__file__).resolve().parent
BUILD_DIR = PACKAGE_DIR / "_mypyc"
"""Where ``scripts/build-core`` puts the compiled modules (``--build-lib``)."""

_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
_SHARED = f"{GROUP_NAME}__mypyc"


def _source(name: str) -> Path:
    return PACKAGE_DIR.parent.joinpath(*name.split(".")).with_suffix(".py")


def _built(name: str) -> Path:
    return BUILD_DIR.joinpath(*name.split(".")).with_name(name.rsplit(".", 1)[-1] + _SUFFIX)


def _fresh(name: str) -> bool:
    """Whether ``name`` is built from its current source (its recorded SHA-1 matches)."""
    import hashlib  # here, not at import: `import kvframe` start-up (issue 51)

    digest = BUILD_DIR / f"{name}.sha1"
    try:
        recorded = digest.read_text().strip()
        source = _source(name).read_bytes()
    except OSError:
        return False
    return _built(name).is_file() and hashlib.sha1(source).hexdigest() == recorded


def hot_modules_built() -> bool:
    """Whether every hot module is built and fresh (the whole group or none is used)."""
    shared = BUILD_DIR / f"{_SHARED}{_SUFFIX}"
    return shared.is_file() and all(_fresh(name) for name in HOT_MODULES)


def _selected() -> bool:
    return os.environ.get("KVFRAME_CORE", "").strip() != "python" and hot_modules_built()


class _HotFinder(importlib.abc.MetaPathFinder):
    """Serves the compiled build of a hot module (and mypyc's shared library) when
    selected; ``None`` (the ordinary ``.py``) otherwise."""

    decided: bool | None = None
    """Whether this process got the compiled modules (``None``: none imported yet)."""

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if name == _SHARED:
            location = BUILD_DIR / f"{_SHARED}{_SUFFIX}"
        elif name in HOT_MODULES:
            if self.decided is None:
                _HotFinder.decided = _selected()
            if not self.decided:
                return None
            location = _built(name)
        else:
            return None
        return importlib.util.spec_from_file_location(name, location)


def choose(core: str) -> None:
    """Decide this process's hot modules before the first is imported: ``python`` keeps
    the ``.py`` files even where the compiled ones are built (``kvframe run --core
    python``); any other value leaves the default. No effect once one is imported."""
    if core == "python" and _HotFinder.decided is None:
        _HotFinder.decided = False


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once; ``kvframe/__init__.py`` calls it)."""
    if not any(isinstance(finder, _HotFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _HotFinder())


def hot_modules_state() -> str:
    """``compiled`` or ``python``: what this process imported the hot modules as
    (``unimported`` before the first; a run's summary names it)."""
    loaded = [sys.modules.get(name) for name in HOT_MODULES]
    if not any(loaded):
        return "unimported"
    compiled = [m for m in loaded if m is not None and str(m.__file__).endswith(_SUFFIX)]
    return "compiled" if compiled else "python"
