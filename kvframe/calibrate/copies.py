"""Fit the transfer model to a table of copy bandwidths by chunk size.

The table is the one this project measured on an H200
(``kvframe/data/gpu/h200-llama3.1-8b/scatter_copy.csv``)::

    chunk_KiB,dir,memcpy_GBps,kernel_GBps,contig_GBps

``memcpy_GBps``: 1 GiB moved as separate ``cudaMemcpyAsync`` copies of
``chunk_KiB`` each (what vLLM 0.19's ``swap_blocks`` does per block and KV
tensor); ``contig_GBps``: the same bytes in one copy (the link's limit);
``kernel_GBps``: one gather kernel (not used by the fit). A chunk of ``b``
bytes then takes ``b / memcpy`` seconds, and the model is
``per_chunk + b / bandwidth``: fitted by non-negative least squares on the
relative error of the per-chunk time, over both directions.
"""

from __future__ import annotations

import csv
from pathlib import Path

import attrs

from kvframe.calibrate.fit import nnls_relative

__all__ = ["CopyRow", "TransferFit", "fit_transfer", "read_copy_table"]

KiB = 1024


@attrs.frozen(slots=True, kw_only=True)
class CopyRow:
    chunk_bytes: int
    direction: str
    memcpy_bytes_per_s: float
    contig_bytes_per_s: float


@attrs.frozen(slots=True, kw_only=True)
class TransferFit:
    """``per_chunk_s + bytes / bytes_per_s`` for one copy of ``bytes``."""

    per_chunk_s: float
    bytes_per_s: float

    def seconds(self, num_bytes: int, num_chunks: int) -> float:
        return self.per_chunk_s * num_chunks + num_bytes / self.bytes_per_s


def read_copy_table(path: str | Path) -> list[CopyRow]:
    """The rows of a copy table (module docstring).

    :raises ValueError: naming the file and line of a missing column or bad value.
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise ValueError(f"copy table {path}: {err.strerror or err}") from None
    reader = csv.DictReader(lines)
    needed = ("chunk_KiB", "dir", "memcpy_GBps", "contig_GBps")
    missing = [c for c in needed if c not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(f"copy table {path}: missing column(s) {', '.join(missing)}")
    rows = []
    for row in reader:
        try:
            chunk = int(row["chunk_KiB"]) * KiB
            memcpy = float(row["memcpy_GBps"]) * 1e9
            contig = float(row["contig_GBps"]) * 1e9
        except (TypeError, ValueError):
            raise ValueError(f"copy table {path}, line {reader.line_num}: bad value") from None
        if chunk <= 0 or not memcpy > 0 or not contig > 0:
            raise ValueError(f"copy table {path}, line {reader.line_num}: values must be > 0")
        rows.append(CopyRow(chunk_bytes=chunk, direction=row["dir"],
                            memcpy_bytes_per_s=memcpy, contig_bytes_per_s=contig))  # fmt: skip
    if not rows:
        raise ValueError(f"copy table {path}: no rows")
    return rows


def fit_transfer(rows: list[CopyRow]) -> TransferFit:
    """The per-chunk cost and bandwidth that best reproduce the memcpy column."""
    seconds = [r.chunk_bytes / r.memcpy_bytes_per_s for r in rows]
    per_chunk, per_byte = nnls_relative([[1.0, float(r.chunk_bytes)] for r in rows], seconds)
    if per_byte <= 0:
        raise ValueError("copy table: the fit found no bandwidth term (chunks all one size?)")
    return TransferFit(per_chunk_s=per_chunk, bytes_per_s=1.0 / per_byte)
