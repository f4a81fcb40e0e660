"""pandas and pyarrow, imported where a table is built, with one clear error when absent.

Why lazy: ``import kvframe`` is a plugin author's import and stays light; pandas
alone costs more than the rest of kvframe. Why optional: the CLI, sweeps and the
conformance suite need neither, so they are the ``frames`` extra
(``pip install 'kvframe[frames]'``), which ``scripts/bootstrap --all`` installs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FRAMES_HINT", "data_frame", "has_parquet", "pandas", "write_parquet"]

FRAMES_HINT = "pip install 'kvframe[frames]' (pandas and pyarrow)"


def pandas(what: str) -> Any:
    """The ``pandas`` module, or an :class:`ImportError` naming ``what`` needed it and
    the extra that installs it."""
    try:
        import pandas as pd
    except ImportError as err:
        raise ImportError(f"{what} returns pandas DataFrames: {FRAMES_HINT}") from err
    return pd


def data_frame(
    what: str, columns: Mapping[str, Sequence[Any]] | None = None, *, order: Sequence[str] = ()
) -> Any:
    """A DataFrame of ``columns`` (name to values), with ``order``'s columns first."""
    pd = pandas(what)
    frame = pd.DataFrame(dict(columns or {}))
    if order:
        first = [c for c in order if c in frame.columns]
        frame = frame[first + [c for c in frame.columns if c not in first]]
    return frame


def has_parquet() -> bool:
    """Whether pyarrow is installed, i.e. whether Parquet files can be written."""
    return importlib.util.find_spec("pyarrow") is not None


def write_parquet(frame: Any, path: Path) -> None:
    """``frame`` as a Parquet file (pyarrow), readable with any Parquet reader."""
    frame.to_parquet(path, engine="pyarrow", index=False)
