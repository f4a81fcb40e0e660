"""Tiny seeded workloads and sweep files for the sweep and compare tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kvframe.workloads.chat import write_chat_jsonl


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


@pytest.fixture
def write_sweep(tmp_path: Path, chat_trace: Path) -> Callable[[str], Path]:
    """Write a sweep file next to the chat trace; ``workload = "chat.jsonl"`` reaches it."""

    def write(text: str, name: str = "sweep.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
