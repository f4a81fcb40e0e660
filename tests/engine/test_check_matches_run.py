"""``kvframe check``, ``kvframe run`` and a sweep cell reject exactly the same selections,
with the same complaint, over one table: all three convert a selection with
:meth:`EngineConfig.from_selection <kvframe.engine.EngineConfig.from_selection>`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from kvframe.cli import main
from kvframe.config import ConfigError
from kvframe.engine import Engine
from kvframe.sweep.cell import build_engine_config

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


def _cell_settings(flags: list[str]) -> dict[str, object]:
    """The sweep cell that says what ``flags`` say: each ``--flag value`` as its key."""
    settings: dict[str, object] = {"workload": "mooncake:conversation"}
    words = iter(flags)
    for flag in words:
        key = flag.removeprefix("--").replace("-", "_")
        if key.startswith("no_"):
            settings[key.removeprefix("no_")] = False
        elif key == "reserve_full_sequence":
            settings[key] = True
        else:
            settings[key] = next(words)
    return settings


def _sweep_error(flags: list[str]) -> ConfigError | None:
    """What a sweep cell with these settings raises while building its engine."""
    try:
        Engine.from_config(build_engine_config(_cell_settings(flags)))
    except ConfigError as err:
        return err
    return None


@pytest.mark.parametrize(
    ("flags", "accepted"), SELECTIONS, ids=[" ".join(f) or "defaults" for f, _ in SELECTIONS]
)
def test_sweep_cells_reject_what_check_rejects(
    flags: list[str], accepted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    checked = main(["-q", "check", "--no-config", *flags])
    check_err = capsys.readouterr().err
    error = _sweep_error(flags)
    assert (checked == 0, error is None) == (accepted, accepted), (check_err, error)
    if error is not None:  # the same problem; only where it was written differs
        assert error.message in check_err, (error.message, check_err)
