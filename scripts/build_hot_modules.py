"""Compile kvframe's hot modules with mypyc into kvframe/_mypyc (run by scripts/build-core).

The modules are :data:`kvframe.hot_modules.HOT_MODULES`, compiled from their own
``.py`` files; the build goes beside the sources (``kvframe/_mypyc/``), never over
them, so the pure-Python core stays importable and selectable. Each module's
source SHA-1 is written once it is built, and only then: a module whose source
has changed since is not used (:func:`kvframe.hot_modules.hot_modules_built`).

Exit status 1 (with the reason) when mypy/mypyc is not installed or the build fails;
kvframe then runs the Python modules.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    """Build the group, then record each source's digest."""
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    from kvframe.hot_modules import BUILD_DIR, GROUP_NAME, HOT_MODULES

    try:
        from mypyc.build import mypycify
    except ImportError:
        print("build-core: mypy (which ships mypyc) is not installed; the hot modules stay Python")
        return 1
    from setuptools import setup

    shutil.rmtree(BUILD_DIR, ignore_errors=True)  # no stale module or digest survives
    sources = [str(Path(*name.split(".")).with_suffix(".py")) for name in HOT_MODULES]
    extensions = mypycify(sources, opt_level="3", group_name=GROUP_NAME)
    setup(
        name="kvframe-hot-modules",
        ext_modules=extensions,
        script_args=[
            "-q",
            "build_ext",
            "--build-lib",
            str(BUILD_DIR),
            "--build-temp",
            "build/mypyc",
        ],
    )
    for name, source in zip(HOT_MODULES, sources, strict=True):
        digest = hashlib.sha1(Path(source).read_bytes()).hexdigest()
        (BUILD_DIR / f"{name}.sha1").write_text(digest + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
