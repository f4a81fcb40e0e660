"""Whether a compiled module was built from the source next to it.

``setup.py`` writes each Cython source's SHA-1 beside it (``<module>.sha1``)
once the module is built, and only then. Where the source is present (a
checkout) and differs from what was built -- the checkout moved on without
``scripts/build-core`` -- the module must not be used: it could decide or hash
differently from the pure-Python reference. A wheel ships no source, and
nothing is checked.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["stale_build"]


def stale_build(stem: str) -> str | None:
    """Why ``kvframe.core.<stem>`` does not match ``kvframe/core/<stem>.pyx``, or ``None``."""
    source = Path(__file__).with_name(f"{stem}.pyx")
    if not source.exists():
        return None
    built = source.with_suffix(".sha1")
    digest = hashlib.sha1(source.read_bytes()).hexdigest()
    if built.exists() and built.read_text().strip() == digest:
        return None
    return (
        f"kvframe.core.{stem} was built from another version of "
        f"kvframe/core/{stem}.pyx (rebuild it with scripts/build-core)"
    )
