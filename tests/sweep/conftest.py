"""Sweep files for the sweep and compare tests (the chat trace is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_sweep(tmp_path: Path, chat_trace: Path) -> Callable[[str], Path]:
    """Write a sweep file next to the chat trace; ``workload = "chat.jsonl"`` reaches it."""

    def write(text: str, name: str = "sweep.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
