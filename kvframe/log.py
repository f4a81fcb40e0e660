"""kvframe's loggers: structlog, never on the user's stdout, imported only to print a line.

structlog's default configuration prints every level to stdout. That is right
for a script that owns its process, wrong for a library: a program importing
kvframe may be writing its own results to stdout. So kvframe's modules get
their logger from :func:`get_logger`, whose output goes

- where structlog is configured to send it, once anyone has configured it
  (the ``kvframe`` command does, to stderr, at the level ``-v``/``-q`` choose;
  an application may do so its own way);
- otherwise to stderr, warnings and errors only (debug and info are dropped).

Nothing here calls :func:`structlog.configure`: a library must not change the
logging of the program that imports it.

**Start-up.** Importing structlog costs 0.15-0.25 s (its console renderer loads
rich, its stdlib bridge asyncio): more than the rest of ``kvframe run``'s
start-up together (``benchmarks/startup.py``). So :func:`get_logger` returns a
:class:`_LazyLogger` that imports structlog only when a line would be printed:

- while nobody has imported structlog, nobody can have configured it, and the
  library default drops debug and info: those calls return at once;
- the command line hands its configuration over with :func:`configure_when_needed`
  instead of configuring structlog itself: a call below its level returns at once,
  the first one at or above it configures structlog (:func:`configure_pending`) and
  prints as before; so does anyone's import of structlog (a plugin that logs
  through structlog directly finds it configured, :class:`_ConfigureOnImport`).

Either way the lines printed, and where, are those of an eager structlog.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["configure_pending", "configure_when_needed", "discard_pending", "get_logger"]

_LEVELS = {
    "debug": 10,
    "info": 20,
    "warning": 30,
    "warn": 30,
    "error": 40,
    "exception": 40,
    "critical": 50,
    "fatal": 50,
}
"""structlog's level methods and their numbers (those of :mod:`logging`)."""

_WARNING = 30

_pending: tuple[int, Callable[[], None]] | None = None
"""The command line's structlog configuration, not applied yet: (its level, apply it)."""


def configure_when_needed(level: int, configure: Callable[[], None]) -> None:
    """Call ``configure`` (which configures structlog to drop lines below ``level``)
    when the first kvframe line at or above ``level`` is logged, or as soon as anyone
    imports structlog (a plugin logging through it directly), not now.

    Why: the ``kvframe`` command configures logging for every run, and most runs
    print no log line at all; this spares them importing structlog.
    """
    global _pending
    _pending = (level, configure)
    if _ON_IMPORT not in sys.meta_path:
        sys.meta_path.insert(0, _ON_IMPORT)


def configure_pending() -> None:
    """Apply a configuration :func:`configure_when_needed` deferred, if any."""
    global _pending
    pending, _pending = _pending, None
    _remove_import_hook()
    if pending is not None:
        pending[1]()


def discard_pending() -> None:
    """Forget a deferred configuration nobody needed (the command is over): a later
    configuration of structlog by someone else must not be overridden by it."""
    global _pending
    _pending = None
    _remove_import_hook()


def _remove_import_hook() -> None:
    with contextlib.suppress(ValueError):
        sys.meta_path.remove(_ON_IMPORT)


class _ConfigureOnImport(importlib.abc.MetaPathFinder):
    """Applies the deferred configuration right after structlog is imported, whoever
    imports it, so a plugin's ``structlog.get_logger()`` logs as configured."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "structlog" or _pending is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return None  # found elsewhere: the next finders import it, unconfigured
        exec_module = loader.exec_module

        def exec_then_configure(module: Any) -> None:
            exec_module(module)
            configure_pending()

        loader.exec_module = exec_then_configure  # type: ignore[method-assign]
        return spec


_ON_IMPORT = _ConfigureOnImport()


class _LibraryLogger:
    """The logger under kvframe's bound loggers; decides where each line goes."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _emit(self, method: str, message: str) -> None:
        import structlog

        if structlog.is_configured():
            factory = structlog.get_config()["logger_factory"]
            getattr(factory(self.name), method)(message)
            return
        if method in ("debug", "info"):
            return
        print(message, file=sys.stderr, flush=True)

    def __getattr__(self, method: str) -> Any:
        if method.startswith("__"):
            raise AttributeError(method)
        return lambda message: self._emit(method, message)


class _LazyLogger:
    """A structlog bound logger made on the first call that may print (module docstring)."""

    __slots__ = ("_bound", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._bound: Any = None

    def _real(self) -> Any:
        if self._bound is None:
            import structlog

            self._bound = structlog.wrap_logger(_LibraryLogger(self._name))
        return self._bound

    def __getattr__(self, method: str) -> Any:
        if method.startswith("__"):
            raise AttributeError(method)
        level = _LEVELS.get(method)
        if level is None:  # bind, new, ...: structlog's own
            configure_pending()
            return getattr(self._real(), method)

        def log(event: str | None = None, *args: Any, **kw: Any) -> Any:
            if _pending is not None:
                if level < _pending[0]:
                    return None
                configure_pending()
            elif level < _WARNING and "structlog" not in sys.modules:
                return None  # structlog unconfigured: the library default drops it
            return getattr(self._real(), method)(event, *args, **kw)

        return log


def get_logger(name: str) -> Any:
    """A structlog logger for module ``name`` that never writes to stdout by default."""
    return _LazyLogger(name)
