"""How the differential harness reads a run where vLLM deadlocks (no vLLM needed).

vLLM 0.19.1 hangs in the state kvframe's admission-stall breaker breaks: from
some step on it schedules nothing and nothing changes, until the harness's
step cap. ``compare.compare_runs`` must call that run identical when kvframe
matched every step before it, and a difference otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import compare

CAP = {"error": "StepCapExceeded: w: 2 requests unfinished after 6 steps", "traceback": ""}


def _step(step: int, scheduled: list[Any], free: int = 4) -> dict[str, Any]:
    return {
        "step": step,
        "scheduled": scheduled,
        "new": [],
        "resumed": [],
        "preempted": [],
        "prefix_hits": {},
        "free_blocks": free,
        "finished": [],
    }


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _compare(tmp_path: Path, vllm: list[dict[str, Any]], kvframe: list[dict[str, Any]]):
    return compare.compare_runs(
        "w-priority", _write(tmp_path / "v.jsonl", vllm), _write(tmp_path / "k.jsonl", kvframe)
    )


def test_a_vllm_deadlock_after_identical_steps_is_not_a_difference(tmp_path: Path) -> None:
    busy = [_step(0, [["a", 4]]), _step(1, [["a", 1]])]
    vllm = [*busy, *(_step(i, []) for i in range(2, 6)), CAP]
    kvframe = [*busy, _step(2, [["b", 4]], free=1), _step(3, [["b", 1]], free=1)]
    result = _compare(tmp_path, vllm, kvframe)
    assert result.vllm_hang == 2
    assert result.ok
    assert "0, vLLM hangs at 2" in compare.format_table([result])


def test_an_idle_vllm_step_that_later_changes_is_a_difference(tmp_path: Path) -> None:
    busy = [_step(0, [["a", 4]])]
    vllm = [*busy, _step(1, []), _step(2, [], free=5), _step(3, []), CAP]
    kvframe = [*busy, _step(1, [["b", 4]]), _step(2, [["b", 1]])]
    result = _compare(tmp_path, vllm, kvframe)
    assert result.vllm_hang is None
    assert not result.ok
    assert result.first_diff == 1


def test_a_difference_while_vllm_still_schedules_is_a_difference(tmp_path: Path) -> None:
    vllm = [_step(0, [["a", 4]]), _step(1, [["a", 1]]), *(_step(i, []) for i in (2, 3)), CAP]
    kvframe = [_step(0, [["a", 4]]), _step(1, [["b", 1]])]
    result = _compare(tmp_path, vllm, kvframe)
    assert result.vllm_hang is None
    assert not result.ok
