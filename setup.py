"""Build hook for kvframe's optional compiled core (metadata lives in pyproject.toml).

The core (kvframe/core/_block_pool_c.pyx, Cython) is built only where Cython is
importable at build time, and ``optional=True`` turns a failing compiler into a
warning: without either, kvframe installs as pure Python and runs the Python core,
which is the reference (kvframe.core.compiled). ``scripts/build-core`` builds it in
place for an editable checkout.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = Path("kvframe/core/_block_pool_c.pyx")
DIGEST = SOURCE.with_suffix(".sha1")


class BuildCore(build_ext):
    """Writes the source's SHA-1 next to it once the module is built, and only then.

    kvframe.core.compiled refuses a module whose recorded digest is not the
    source's (a checkout that moved on without scripts/build-core), which could
    decide differently from the Python core. A failed build (a missing compiler)
    leaves no digest, so an older module left behind is refused too.
    """

    def build_extension(self, ext: Any) -> None:
        DIGEST.unlink(missing_ok=True)
        super().build_extension(ext)
        DIGEST.write_text(hashlib.sha1(SOURCE.read_bytes()).hexdigest() + "\n")


def _extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:  # no Cython: the pure-Python core only
        return []
    extension = Extension(
        "kvframe.core._block_pool_c",
        [str(SOURCE)],
        optional=True,
        extra_compile_args=["-O2"],
    )
    return cythonize([extension], language_level=3, quiet=True)  # type: ignore[no-any-return]


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildCore})
