"""Build hook for kvframe's optional compiled core (metadata lives in pyproject.toml).

The core (kvframe/core/_block_pool_c.pyx, Cython) is built only where Cython is
importable at build time, and ``optional=True`` turns a failing compiler into a
warning: without either, kvframe installs as pure Python and runs the Python core,
which is the reference (kvframe.core.compiled). ``scripts/build-core`` builds it in
place for an editable checkout.
"""

from __future__ import annotations

from setuptools import Extension, setup


def _extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:  # no Cython: the pure-Python core only
        return []
    extension = Extension(
        "kvframe.core._block_pool_c",
        ["kvframe/core/_block_pool_c.pyx"],
        optional=True,
        extra_compile_args=["-O2"],
    )
    return cythonize([extension], language_level=3, quiet=True)  # type: ignore[no-any-return]


setup(ext_modules=_extensions())
