"""``kvframe check`` rejects exactly what ``kvframe run`` rejects, over one table of selections."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from kvframe.cli import main

SELECTIONS: list[tuple[list[str], bool]] = [
    # (flags, accepted)
    ([], True),
    (["--gpu-eviction", "lru"], True),
    (["--gpu-eviction", "arx"], False),
    (["--scheduler", "priorty"], False),
    (["--eviction", "lru"], False),  # a tier's eviction policy without a tier
    (["--reuse-filter", "threshold"], False),  # a reuse filter without a tier
    (["--offload", "cpu:capacity=1GiB,eviction=lru", "--eviction", "arc"], False),  # conflict
    (["--offload", "cpu:capacity=1GiB", "--eviction", "arc"], True),
    (["--offload", "cpu:capacity=1000"], False),  # smaller than one block
    (["--offload", "cpu:capacity=1GiB,block_size_factor=0"], False),  # constructor refuses
    (["--offload", "cpu:capacity=1GiB", "--reuse-filter", "threshold:store_threshold=2"], True),
    (["--num-gpu-blocks", "0"], False),
    (["--num-gpu-blocks", "4000", "--block-size", "32", "--max-num-seqs", "8"], True),
    (["--no-prefix-caching", "--reserve-full-sequence"], True),
    (["--kv-memory", "lots"], False),
]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    yield
    structlog.reset_defaults()


@pytest.mark.parametrize(
    ("flags", "accepted"), SELECTIONS, ids=[" ".join(f) or "defaults" for f, _ in SELECTIONS]
)
def test_check_and_run_agree(
    flags: list[str], accepted: bool, conversation_trace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    checked = main(["-q", "check", "--no-config", *flags])
    check_err = capsys.readouterr().err
    ran = main(["-q", "run", conversation_trace, "--no-config", "--limit", "2", "--json", *flags])
    run_err = capsys.readouterr().err
    assert "Traceback" not in check_err + run_err
    assert (checked, ran) == ((0, 0) if accepted else (2, 2)), (check_err, run_err)
    if not accepted:  # the same complaint, worded by the same code
        assert check_err.replace("kvframe check", "kvframe run") == run_err
