"""One name for the scheduling policy: ``scheduler`` in the API as on the CLI and in TOML.

``--scheduler`` and the TOML key ``scheduler`` name it, so ``EngineConfig`` takes
``scheduler=``; ``scheduling`` (the plugin kind) stays accepted, so code written
against the earlier name keeps working.
"""

from __future__ import annotations

import attrs
import pytest

from kvframe.engine import EngineConfig


def test_scheduler_and_scheduling_build_the_same_config() -> None:
    by_flag_name = EngineConfig(scheduler="priority", num_gpu_blocks=100)
    by_kind_name = EngineConfig(scheduling="priority", num_gpu_blocks=100)
    assert by_flag_name == by_kind_name
    assert by_kind_name.scheduler == by_kind_name.scheduling == "priority"


def test_giving_both_names_is_refused() -> None:
    with pytest.raises(TypeError, match="give scheduler or its alias scheduling, not both"):
        EngineConfig(scheduler="fcfs", scheduling="priority")


def test_evolve_keeps_the_policy_and_can_change_it() -> None:
    config = EngineConfig(scheduler="priority")
    assert attrs.evolve(config, num_gpu_blocks=64).scheduler == "priority"
    assert attrs.evolve(config, scheduler="fcfs").scheduler == "fcfs"


def test_settings_path_accepts_the_policy_as_a_field() -> None:
    config = EngineConfig.from_settings({"num_gpu_blocks": 64}, scheduler="priority")
    assert config.scheduler == "priority" and config.describe()["scheduling"] == "priority"
