"""The refusal rule: a policy that declares ``may_refuse`` is turned away by the GPU tier.

``kvframe.EvictionPolicy.may_refuse`` (see ``kvframe/bases.py``): offload tiers
accept a policy whose ``evict`` may refuse although enough blocks are idle; the
GPU prefix cache rejects it when it is selected, with an error naming the
policy, not in the middle of a run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from kvframe_arc import ARCPolicy

from kvframe.cli import main
from kvframe.core.kv_cache_manager import KVCacheManager


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    yield
    structlog.reset_defaults()


def test_vllm_arc_declares_it_may_refuse_and_the_paper_variant_does_not() -> None:
    assert ARCPolicy(8).may_refuse is True
    assert ARCPolicy(8, variant="paper").may_refuse is False


def test_the_gpu_tier_rejects_a_policy_that_may_refuse() -> None:
    with pytest.raises(ValueError, match=r"declares may_refuse = True.*--gpu-eviction"):
        KVCacheManager(9, 2, 64, eviction_policy=ARCPolicy(9))
    KVCacheManager(9, 2, 64, eviction_policy=ARCPolicy(9, variant="paper"))


def test_selecting_it_for_the_gpu_tier_is_an_error_not_a_traceback(
    conversation_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["-q", "run", str(conversation_trace), "--limit", "4", "--num-gpu-blocks", "3000"]
    assert main([*argv, "--gpu-eviction", "arc"]) == 2
    err = capsys.readouterr().err
    assert "--gpu-eviction arc" in err and "may_refuse" in err and "Traceback" not in err
    assert main([*argv, "--out", "p", "--gpu-eviction", "arc:variant=paper"]) == 0


def test_an_offload_tier_accepts_it(conversation_trace: Path) -> None:
    argv = ["-q", "run", str(conversation_trace), "--limit", "4", "--num-gpu-blocks", "3000"]
    assert main([*argv, "--out", "o", "--offload", "cpu:capacity=64MiB,eviction=arc"]) == 0
