"""Optional compiled extensions: pure Python is the reference and the fallback.

``pip install -e .`` (or ``python setup.py build_ext --inplace``) compiles the
modules below when Cython and a C compiler are present; without either, the
build skips them (``optional=True``, and no Cython means no extensions at all)
and kvframe runs on its pure-Python modules with identical results.
"""

from __future__ import annotations

from setuptools import Extension, setup

# Each compiled module lives next to the Python module it speeds up.
EXTENSIONS = [
    Extension(
        "kvframe.core._hashing_compiled",
        ["kvframe/core/_hashing_compiled.pyx"],
        optional=True,
    ),
]

try:
    from Cython.Build import cythonize
except ImportError:  # no Cython: the pure-Python modules only
    ext_modules = []
else:
    ext_modules = cythonize(EXTENSIONS, language_level=3, quiet=True)
    for ext in ext_modules:  # cythonize drops `optional`; a failed compile must not fail
        ext.optional = True

setup(ext_modules=ext_modules)
