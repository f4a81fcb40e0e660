"""Build hook for kvframe's optional compiled core (metadata lives in pyproject.toml).

The compiled modules (Cython, each next to the Python module it speeds up:
``kvframe/core/_block_pool_c.pyx`` for the block pool, ``_hashing_compiled.pyx``
for the block hasher) are built only where Cython is importable at build time,
and ``optional=True`` turns a failing compiler into a warning: without either,
kvframe installs as pure Python and runs the Python modules, which are the
reference (kvframe.core.compiled). ``scripts/build-core`` builds them in place
for an editable checkout.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCES = {
    "kvframe.core._block_pool_c": Path("kvframe/core/_block_pool_c.pyx"),
    "kvframe.core._hashing_compiled": Path("kvframe/core/_hashing_compiled.pyx"),
}


class BuildCore(build_ext):
    """Writes each source's SHA-1 next to it once its module is built, and only then.

    kvframe.core.compiled refuses a module whose recorded digest is not the
    source's (a checkout that moved on without scripts/build-core), which could
    decide differently from the Python core. A failed build (a missing compiler)
    leaves no digest, so an older module left behind is refused too.
    """

    def build_extension(self, ext: Any) -> None:
        source = SOURCES[ext.name]
        digest = source.with_suffix(".sha1")
        digest.unlink(missing_ok=True)
        super().build_extension(ext)
        digest.write_text(hashlib.sha1(source.read_bytes()).hexdigest() + "\n")


def _extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:  # no Cython: the pure-Python core only
        return []
    extensions = [
        Extension(name, [str(source)], optional=True, extra_compile_args=["-O2"])
        for name, source in SOURCES.items()
    ]
    built = cythonize(extensions, language_level=3, quiet=True)
    for ext in built:  # cythonize drops `optional`; a failed compile must not fail the install
        ext.optional = True
    return built  # type: ignore[no-any-return]


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildCore})
