"""One writer per results database: a lock file beside it, held while a sweep writes.

Why: two ``kvframe sweep`` processes on the same database each read the list of
stored cells at start, found the same cells missing and ran every one of them
(all the work done twice, silently). The second writer is now refused at once,
with a message naming the process that holds the database.

The lock is ``flock`` on ``DB.lock`` (the file stays; the lock goes with the
process, also when it is killed, so a crashed sweep never leaves a stale
lock). Platforms without ``fcntl`` get no lock.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import IO

from kvframe.config import ConfigError

__all__ = ["DatabaseLock", "lock_path"]


def lock_path(db: Path) -> Path:
    """The lock file of a results database: ``results.sqlite.lock``."""
    return db.with_name(db.name + ".lock")


class DatabaseLock:
    """An exclusive, non-blocking lock on a results database for one writer."""

    def __init__(self, db: Path) -> None:
        self.path = lock_path(db)
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock, or raise naming the process that has it.

        :raises ConfigError: another process writes to the database.
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ConfigError(
                f"another kvframe sweep is writing to this results database ({holder})",
                origin=str(self.path.with_suffix("")),
                hints=[
                    "wait for it to finish and run this sweep again (it then skips the cells "
                    "that one stored)",
                    "or give this sweep another 'db' (or --db)",
                ],
            ) from None
        handle.seek(0)
        handle.truncate()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        handle.write(f"pid {os.getpid()} on {os.uname().nodename}, since {stamp}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.truncate(0)
            self._handle.close()
            self._handle = None
