"""The live progress line of ``kvframe run``.

::

    [#######.............]  4,210/12,031 requests  sim 1,234.5 s  812 steps/s  kv 97%  0:00:21

The engine calls the :class:`ProgressLine` after every step. Rendering is
throttled twice: the clock is read only every :attr:`ProgressLine.check_every`
calls (a counter increment otherwise), and the line is redrawn at most every
``min_interval`` seconds, so a run of 100,000 steps/s pays almost nothing for
it. On a stream that is not a terminal it stays silent: logs and pipes should
not fill up with carriage returns.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from kvframe.engine import RunProgress

__all__ = ["ProgressLine", "format_duration"]


def format_duration(seconds: float) -> str:
    """``0:01:05`` for 65 seconds."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class ProgressLine:
    """A progress callback for :meth:`kvframe.engine.Engine.run` that draws one line.

    :param stream: where to draw (default ``sys.stderr``).
    :param enabled: draw at all; default: only when ``stream`` is a terminal.
    :param min_interval: seconds between redraws.
    :param width: characters of the bar.
    """

    check_every = 64
    """Steps between two reads of the wall clock."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool | None = None,
        min_interval: float = 0.25,
        width: int = 20,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.min_interval = min_interval
        self.width = width
        self._calls = 0
        self._started = time.perf_counter()
        self._last_draw = -float("inf")
        self._last_steps = 0
        self._last_time = self._started
        self._drawn = False
        self._last_len = 0

    def __call__(self, progress: RunProgress) -> None:
        if not self.enabled:
            return
        self._calls += 1
        if self._calls % self.check_every:
            return
        now = time.perf_counter()
        if now - self._last_draw < self.min_interval:
            return
        self.draw(progress, now)

    def draw(self, progress: RunProgress, now: float | None = None) -> None:
        """Redraw the line now (the engine's callback throttles; this does not)."""
        now = time.perf_counter() if now is None else now
        steps = progress.num_steps
        elapsed = now - self._last_time
        rate = (steps - self._last_steps) / elapsed if elapsed > 0 else 0.0
        self._last_steps, self._last_time, self._last_draw = steps, now, now
        self._write(self.render(progress, rate, now - self._started))

    def render(self, progress: RunProgress, steps_per_second: float, elapsed: float) -> str:
        """The text of the line (without the carriage return)."""
        total = progress.num_requests_total
        done = progress.num_requests_finished
        filled = int(self.width * done / total) if total else 0
        bar = "#" * filled + "." * (self.width - filled)
        return (
            f"[{bar}] {done:,}/{total:,} requests  sim {progress.now:,.1f} s  "
            f"{steps_per_second:,.0f} steps/s  running {progress.num_running}  "
            f"waiting {progress.num_waiting}  kv {progress.kv_usage:.0%}  "
            f"{format_duration(elapsed)}"
        )

    def _write(self, text: str) -> None:
        pad = " " * max(0, self._last_len - len(text))
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self._last_len = len(text)
        self._drawn = True

    def close(self) -> None:
        """Erase the line so what follows starts on a clean line."""
        if self._drawn:
            self.stream.write("\r" + " " * self._last_len + "\r")
            self.stream.flush()
            self._drawn = False
