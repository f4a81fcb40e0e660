"""The engine: a workload replayed through the scheduler and the sim executor.

* :mod:`kvframe.engine.config` -- :class:`EngineConfig`, validated settings;
* :mod:`kvframe.engine.arrivals` -- open-loop and closed-loop (agentic) arrivals;
* :mod:`kvframe.engine.engine` -- :class:`Engine`, the step loop, and its results.

::

    from kvframe.engine import Engine, EngineConfig
    from kvframe.workloads import load_workload

    engine = Engine.from_config(EngineConfig(num_gpu_blocks=4096))
    result = engine.run(load_workload("trace.jsonl", limit=500))
    print(result.summary.render_table())
"""

from __future__ import annotations

from kvframe.engine.config import DEFAULT_PRESET, ENGINE_KEYS, EngineConfig
from kvframe.engine.engine import Engine, EngineStalled, RunProgress, RunResult

__all__ = [
    "DEFAULT_PRESET",
    "ENGINE_KEYS",
    "Engine",
    "EngineConfig",
    "EngineStalled",
    "RunProgress",
    "RunResult",
]
