"""kvframe's loggers: structlog, never on the user's stdout.

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
"""

from __future__ import annotations

import sys
from typing import Any

import structlog

__all__ = ["get_logger"]


class _LibraryLogger:
    """The logger under kvframe's bound loggers; decides where each line goes."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _emit(self, method: str, message: str) -> None:
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


def get_logger(name: str) -> Any:
    """A structlog logger for module ``name`` that never writes to stdout by default."""
    return structlog.wrap_logger(_LibraryLogger(name))
