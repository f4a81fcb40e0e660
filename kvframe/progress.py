"""The live progress line of ``kvframe run``.

::

    [#######.............]  4,210/12,031 requests  sim 1,234.5 s  812 steps/s  kv 97%
    0:00:21  ETA 0:00:40

(one line on screen).

The engine calls the :class:`ProgressLine` after every step. Rendering is
throttled twice: the clock is read only every :attr:`ProgressLine.check_every`
calls (a counter increment otherwise), and the line is redrawn at most every
``min_interval`` seconds, so a run of 100,000 steps/s pays almost nothing for
it. On a stream that is not a terminal (CI, a log file) the same text is
written as a plain line every ``log_interval`` seconds instead: carriage
returns would fill a log with garbage, but a long run should not look hung.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from kvframe.engine import RunProgress

__all__ = ["ProgressLine", "eta_text", "format_duration"]


def format_duration(seconds: float) -> str:
    """``0:01:05`` for 65 seconds."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def eta_text(done: int, total: int, elapsed: float) -> str:
    """Time left if the rest of the requests finish at the rate so far; ``?`` before any has.

    Requests finish at a fairly even rate once a replay is under way (arrivals
    are spread over the trace), so this linear estimate is rough but honest.
    """
    if done <= 0 or total <= 0 or elapsed <= 0:
        return "?"
    return format_duration(elapsed * (total - done) / done)


class ProgressLine:
    """A progress callback for :meth:`kvframe.engine.Engine.run` that draws one line.

    :param stream: where to draw (default ``sys.stderr``).
    :param enabled: ``True``: a live line; ``False``: nothing; default (``None``):
        a live line on a terminal, else a plain line every ``log_interval`` seconds.
    :param min_interval: seconds between redraws of the live line.
    :param width: characters of the bar.
    :param log_interval: seconds between two plain lines when not live.
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
        log_interval: float = 10.0,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            self.live = bool(isatty and isatty())
            enabled = True
        else:
            self.live = enabled
        self.enabled = enabled
        self.log_interval = log_interval
        self.min_interval = min_interval if self.live else log_interval
        self.width = width
        self._calls = 0
        self._started = time.perf_counter()
        # A live line appears at once; plain lines only once a run takes a while.
        self._last_draw = -float("inf") if self.live else self._started
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
            f"{format_duration(elapsed)}  ETA {eta_text(done, total, elapsed)}"
        )

    def _write(self, text: str) -> None:
        if not self.live:
            self.stream.write(text + "\n")
            self.stream.flush()
            return
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
