"""The serve commands docs/vllm.md gives get vLLM 0.19.1 and 0.33.0 past building
the scheduler.

``serve_command_check.py`` (under the vLLM interpreter) takes the docs'
``vllm serve ... --scheduler-cls kvframe_vllm.scheduler.KvframeScheduler``
command as written and goes the way ``vllm serve`` goes: vLLM's argument
parser, ``AsyncEngineArgs.create_engine_config`` (with the bridge's general
plugin loaded), vLLM's ``EngineCore`` constructor building the scheduler --
with async scheduling resolving as on a GPU. The model name becomes the local
config-only model folder (no weights, no network here); async scheduling is
on, vLLM's default, and ``--no-async-scheduling`` added still builds. The docs'
scheduling policy + CPU tier command (``--kv-transfer-config``) builds as
written too, asynchronously, with vLLM's OffloadingConnector; on vLLM 0.33.0
the 0.33 tier command (vLLM's ``CPUOffloadingSpec`` with a kvframe eviction
plugin through its cache-policy factory) does, and the 0.19.1 one is refused
naming the change. Variants check that what the bridge refuses stops vLLM
while it builds its config, before any engine (and so before weights would
load), naming the flag. Each release skips without its reference interpreter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from vllm_reference import reference_python, run_script

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module", params=["0.19.1", "0.33.0"])
def checked(request: pytest.FixtureRequest) -> dict[str, Any]:
    python = reference_python(request.param, probe="import vllm.v1.engine.core, kvframe_vllm")
    return run_script(python, HERE / "serve_command_check.py")


def test_the_docs_command_builds_the_bridge_scheduler(checked: dict[str, Any]) -> None:
    assert checked["command"][:2] == ["vllm", "serve"]
    built = checked["as_written"]
    assert built["stopped_at"] is None, built
    assert built["scheduler"] == "KvframeScheduler"
    assert built["policy"] == "continuum"
    # vLLM's default, resolved as on a GPU: the bridge schedules
    # asynchronously and the engine steps with its batch queue.
    assert "--no-async-scheduling" not in checked["command"]
    assert built["engine_args_async_scheduling"] is None
    assert built["async_scheduling"] is True
    assert built["core_async_scheduling"] is True
    assert built["batch_queue_size"] == 2


def test_no_async_scheduling_keeps_working(checked: dict[str, Any]) -> None:
    built = checked["with_no_async"]
    assert built["stopped_at"] is None, built
    assert built["scheduler"] == "KvframeScheduler"
    assert built["async_scheduling"] is False
    assert built["core_async_scheduling"] is False
    assert built["batch_queue_size"] == 1


def test_refusals_stop_vllm_while_it_builds_its_config(checked: dict[str, Any]) -> None:
    """Before the engine core (and its weights): each names the flag that fixes it."""
    lora = checked["with_lora"]
    assert lora["stopped_at"] == "create_engine_config"
    assert "--enable-lora" in lora["message"]
    bad = checked["bad_policy"]
    assert bad["stopped_at"] == "create_engine_config"
    assert bad["type"] == "ConfigError"
    assert "did you mean 'fcfs'?" in bad["message"]


def test_the_docs_tier_command_builds_with_async_scheduling(checked: dict[str, Any]) -> None:
    """A scheduling policy + CPU tier, as written: no --no-async-scheduling needed
    (on 0.33.0 the 0.33 command; the 0.19.1 one is refused there, naming the change)."""
    assert "--kv-transfer-config" in checked["tier_command"]
    assert "--no-async-scheduling" not in checked["tier_command"]
    built = checked["tier_as_written"]
    if checked["vllm_version"].startswith("0.33"):
        assert built["stopped_at"] == "create_engine_config", built
        assert "'KvframeOffloadingSpec' on vLLM 0.33" in built["message"]
        assert "kvframe_vllm.cache_policy" in built["message"]
        assert "--no-async-scheduling" not in checked["tier033_command"]
        built = checked["tier033_as_written"]
    assert built["stopped_at"] is None, built
    assert built["scheduler"] == "KvframeScheduler"
    assert built["connector"] == "OffloadingConnector"
    assert built["async_scheduling"] is True
    assert built["core_async_scheduling"] is True
    assert built["batch_queue_size"] == 2
