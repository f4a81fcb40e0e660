"""Shared fixtures for the host's tests. Keep this file small: helpers used by one
test module belong in that module."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvframe.host.registry import PluginRegistry
from kvframe.workloads.chat import write_chat_jsonl


@pytest.fixture
def registry() -> PluginRegistry:
    """An empty registry that ignores installed plugins, so tests see only what they register."""
    return PluginRegistry(entry_points=())


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """Write an importable module into ``tmp_path``; returns its name.

    Modules written this way are dropped from ``sys.modules`` after the test, so
    each test imports its own copy.
    """
    root = tmp_path / "modules"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    written: list[str] = []

    def write(name: str, source: str) -> str:
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            init = root / parent / "__init__.py"
            if parent != Path(".") and not init.exists():
                init.write_text("")
        path.write_text(textwrap.dedent(source))
        importlib.invalidate_caches()  # the path finder caches directory listings
        written.append(name)
        return name

    yield write
    for top in {name.split(".")[0] for name in written}:
        for module in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            sys.modules.pop(module, None)


@pytest.fixture
def chat_trace(tmp_path: Path) -> Path:
    """40 short chat requests sharing a few system prompts (a run takes well under a second)."""
    path = tmp_path / "chat.jsonl"
    write_chat_jsonl(
        path,
        num_requests=40,
        rate=20.0,
        seed=3,
        num_system_prompts=2,
        system_prompt_length="fixed:value=64",
        user_prompt_length="fixed:value=32",
        output_length="fixed:value=8",
    )
    return path
