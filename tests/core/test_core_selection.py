"""The ``core`` setting: auto / python / compiled, the environment variable, the fallbacks."""

from __future__ import annotations

import pytest

import kvframe.core.compiled as compiled
from kvframe.core.block_pool import BlockPool, PolicyOrderedBlockPool
from kvframe.core.compiled import (
    CORE_ENV_VAR,
    compiled_core_available,
    make_block_pool,
    resolve_core,
)
from kvframe.core.kv_cache_manager import KVCacheManager
from kvframe.core.scheduler_config import SchedulerConfig

needs_compiled = pytest.mark.skipif(
    not compiled_core_available(), reason="the compiled core is not built (scripts/build-core)"
)


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(CORE_ENV_VAR, raising=False)
    return monkeypatch


@pytest.fixture
def not_built(no_env: pytest.MonkeyPatch) -> None:
    """As on a machine where the compiled core was never built."""
    no_env.setattr(compiled, "_loaded", True)
    no_env.setattr(compiled, "_compiled", None)
    no_env.setattr(compiled, "_problem", "kvframe.core._block_pool_c is not built (test)")


def test_python_is_always_python(no_env: pytest.MonkeyPatch) -> None:
    assert resolve_core("python") == "python"
    built = make_block_pool("python", 8)
    assert type(built.pool) is BlockPool and built.core == "python"


def test_auto_without_the_compiled_core_is_python(not_built: None) -> None:
    assert resolve_core("auto") == "python"
    manager = KVCacheManager(8, 4, 64)
    assert manager.core == "python" and type(manager.block_pool) is BlockPool


def test_compiled_without_the_compiled_core_names_how_to_build_it(not_built: None) -> None:
    with pytest.raises(RuntimeError, match=r"scripts/build-core.*--core python"):
        resolve_core("compiled")


def test_unknown_values_are_refused_by_name(no_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unknown core 'rust'"):
        resolve_core("rust")
    with pytest.raises(ValueError, match="core: unknown core 'fast'"):
        SchedulerConfig(num_gpu_blocks=8, core="fast")
    no_env.setenv(CORE_ENV_VAR, "cython")
    with pytest.raises(ValueError, match=f"environment variable {CORE_ENV_VAR}"):
        resolve_core("auto")


def test_the_environment_decides_auto_only(no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv(CORE_ENV_VAR, "python")
    assert resolve_core("auto") == "python"
    assert KVCacheManager(8, 4, 64).core == "python"


@needs_compiled
def test_auto_picks_the_compiled_core_where_built(no_env: pytest.MonkeyPatch) -> None:
    assert resolve_core("auto") == "compiled"
    assert KVCacheManager(8, 4, 64).core == "compiled"
    no_env.setenv(CORE_ENV_VAR, "compiled")
    assert KVCacheManager(8, 4, 64, core="python").core == "python"  # the setting wins


@needs_compiled
def test_a_gpu_eviction_policy_runs_on_the_python_pool_and_says_so(
    no_env: pytest.MonkeyPatch, lru_policy_cls: type
) -> None:
    manager = KVCacheManager(8, 4, 64, eviction_policy=lru_policy_cls(8), core="compiled")
    assert type(manager.block_pool) is PolicyOrderedBlockPool
    assert manager.core == "python"
    assert "eviction policy" in manager.core_note


@pytest.mark.parametrize("stem", ["_block_pool_c", "_hashing_compiled"])
def test_a_module_built_from_another_source_is_refused(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, stem: str
) -> None:
    """setup.py records each source's SHA-1; a checkout that moved on must rebuild."""
    import hashlib

    from kvframe.core import build_digest

    source = tmp_path / f"{stem}.pyx"  # type: ignore[operator]
    source.write_text("# the source now\n")
    monkeypatch.setattr(build_digest, "__file__", str(tmp_path / "build_digest.py"))  # type: ignore[operator]
    assert "rebuild it" in (build_digest.stale_build(stem) or "")  # never built: no digest
    source.with_suffix(".sha1").write_text("0" * 40 + "\n")
    assert "another version" in (build_digest.stale_build(stem) or "")
    source.with_suffix(".sha1").write_text(hashlib.sha1(source.read_bytes()).hexdigest())
    assert build_digest.stale_build(stem) is None
