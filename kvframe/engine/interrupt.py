"""SIGTERM handled as Ctrl-C: a run or sweep ended by ``timeout``, Slurm or a cluster
scheduler keeps what it measured.

Why an exception: every place that already stops cleanly on Ctrl-C (the engine's
loop, which then returns a partial result; the sweep loop, which keeps stored
cells) catches ``KeyboardInterrupt``. :class:`Terminated` is one, so SIGTERM
takes exactly those paths; the caller then tells the two apart by
:attr:`Interrupts.received` to exit with 143 (128 + 15) instead of 130.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs

__all__ = ["EXIT_SIGINT", "EXIT_SIGTERM", "Interrupts", "Terminated", "sigterm_as_interrupt"]

EXIT_SIGINT = 130
"""The shell's status for a process ended by SIGINT (128 + 2)."""
EXIT_SIGTERM = 143
"""The shell's status for a process ended by SIGTERM (128 + 15)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised where the process was, like Ctrl-C's ``KeyboardInterrupt``."""


@attrs.define(slots=True)
class Interrupts:
    """What :func:`sigterm_as_interrupt` saw: ``received`` is ``"SIGTERM"`` once it came."""

    received: str | None = None

    @property
    def exit_status(self) -> int:
        """130 for Ctrl-C, 143 for SIGTERM."""
        return EXIT_SIGTERM if self.received == "SIGTERM" else EXIT_SIGINT


@contextmanager
def sigterm_as_interrupt() -> Iterator[Interrupts]:
    """Within the block, SIGTERM raises :class:`Terminated` (once; a second one too).

    Outside the main thread (where Python cannot install handlers) it changes nothing.
    """
    seen = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def handler(signum: int, frame: Any) -> None:
        seen.received = "SIGTERM"
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGTERM, previous)
