"""Which core runs the block pool: the pure-Python reference or the optional compiled one.

The compiled core (:mod:`kvframe.core._block_pool_c`, Cython) re-implements the
default :class:`~kvframe.core.block_pool.BlockPool` -- vLLM's free queue, the
hash index, taking, caching and freeing blocks -- with the free queue's links
in C int arrays. It is optional: built by ``scripts/build-core`` (or by ``pip
install -e .`` where Cython is installed), absent on a machine without Cython
or a C compiler. The Python pool stays the reference and the fallback; both
decide and record identically (``tests/core/test_compiled_pool.py``).

The setting (``core`` in :class:`~kvframe.core.scheduler_config.SchedulerConfig`,
``kvframe run --core``, the ``KVFRAME_CORE`` environment variable):

* ``auto`` (default) -- ``KVFRAME_CORE`` if set, else the compiled core where it
  is built, else Python;
* ``python`` -- always the Python pool;
* ``compiled`` -- the compiled pool; a clear error where it is not built.

A GPU eviction policy (``--gpu-eviction``, any plugin other than vLLM's free
queue) is ordered by :class:`~kvframe.core.block_pool.PolicyOrderedBlockPool`,
which is Python whichever core is chosen: the policy is Python and is called
per block, so its contract stays exactly as it is. :func:`make_block_pool`
says so in the core name it returns.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.core.block_pool import BlockPool
from kvframe.core.build_digest import stale_build

if TYPE_CHECKING:
    from kvframe.contract.bases import EvictionPolicy

__all__ = [
    "CORES",
    "CORE_ENV_VAR",
    "BuiltPool",
    "compiled_core_available",
    "compiled_core_problem",
    "make_block_pool",
    "resolve_core",
]

CORES: tuple[str, ...] = ("auto", "python", "compiled")
"""The values of the ``core`` setting."""

CORE_ENV_VAR = "KVFRAME_CORE"
"""Environment variable read when the setting is ``auto`` (e.g. to force a core in
tools that build their own configuration, such as ``tools/differential``)."""

BUILD_HINT = (
    "build it with scripts/build-core (needs Cython, `pip install 'Cython>=3.0'`, "
    "and a C compiler), or choose --core python"
)

_compiled: Any = None
_problem: str | None = None
_loaded = False


def _load() -> None:
    global _compiled, _problem, _loaded
    if _loaded:
        return
    _loaded = True
    try:
        from kvframe.core import _block_pool_c  # type: ignore[attr-defined]
    except ImportError as error:  # not built here: the Python core
        _problem = f"kvframe.core._block_pool_c is not built ({error})"
        return
    _problem = stale_build("_block_pool_c")
    if _problem is None:
        _compiled = _block_pool_c


def compiled_core_available() -> bool:
    """Whether the compiled core is built and importable."""
    _load()
    return _compiled is not None


def compiled_core_problem() -> str | None:
    """Why the compiled core cannot be used, or ``None`` when it can."""
    _load()
    return _problem


def check_core(core: str, where: str | None = None) -> str:
    """``core`` if it is one of :data:`CORES`; else a ``ValueError`` naming ``where``."""
    if core not in CORES:
        prefix = f"{where}: " if where else ""
        raise ValueError(f"{prefix}unknown core {core!r}; choose one of {', '.join(CORES)}")
    return core


def resolve_core(core: str = "auto") -> str:
    """``"python"`` or ``"compiled"``: the core the setting ``core`` selects here.

    :raises ValueError: for an unknown value (in the setting or in ``KVFRAME_CORE``).
    :raises RuntimeError: when ``compiled`` is asked for and the core is not built.
    """
    check_core(core, "core")
    if core == "auto":
        forced = os.environ.get(CORE_ENV_VAR, "").strip()
        if forced:
            core = check_core(forced, f"environment variable {CORE_ENV_VAR}")
    if core == "python":
        return "python"
    if compiled_core_available():
        return "compiled"
    if core == "compiled":
        raise RuntimeError(f"the compiled core was asked for but {_problem}: {BUILD_HINT}")
    return "python"


@attrs.define(slots=True, frozen=True)
class BuiltPool:
    """A block pool and the core it runs on, as a run reports it."""

    pool: Any
    """The pool (:class:`~kvframe.core.block_pool.BlockPool` or the compiled one)."""
    core: str
    """``"python"`` or ``"compiled"``."""
    note: str = ""
    """Why the core differs from the setting's choice (a GPU eviction policy), or ``""``."""
    allocator: Any = None
    """The compiled core's allocation paths for the manager (``CompiledAllocator``,
    built with the manager and its Python ``allocate_slots``), or ``None``."""


def make_block_pool(
    core: str,
    num_gpu_blocks: int,
    *,
    enable_caching: bool = True,
    enable_kv_cache_events: bool = False,
    eviction_policy: EvictionPolicy | None = None,
    uncached_freed_first: bool = False,
) -> BuiltPool:
    """The block pool the setting ``core`` selects, with the same arguments as ``BlockPool``.

    A GPU eviction policy always gets the Python
    :class:`~kvframe.core.block_pool.PolicyOrderedBlockPool` (its note says so);
    resolving the setting still fails for ``compiled`` where it is not built, so
    a forced core never silently means something else.
    """
    chosen = resolve_core(core)
    if eviction_policy is not None:
        pool = BlockPool(
            num_gpu_blocks,
            enable_caching,
            enable_kv_cache_events,
            eviction_policy,
            uncached_freed_first=uncached_freed_first,
        )
        note = (
            "a GPU eviction policy orders the cached blocks in Python (the compiled core "
            "covers vLLM's free queue)"
            if chosen == "compiled"
            else ""
        )
        return BuiltPool(pool, "python", note)
    if chosen == "compiled":
        # Switch D is a class in both cores, chosen here once (BlockPool does the same).
        pool_class = (
            _compiled.CompiledUncachedFirstBlockPool
            if uncached_freed_first
            else _compiled.CompiledBlockPool
        )
        pool = pool_class(num_gpu_blocks, enable_caching, enable_kv_cache_events)
        return BuiltPool(pool, "compiled", allocator=_compiled.CompiledAllocator)
    pool = BlockPool(
        num_gpu_blocks,
        enable_caching,
        enable_kv_cache_events,
        uncached_freed_first=uncached_freed_first,
    )
    return BuiltPool(pool, "python")
