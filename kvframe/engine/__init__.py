"""The engine: a workload replayed through the scheduler and the sim executor.

* :mod:`kvframe.engine.config` -- :class:`EngineConfig`, validated settings;
* :mod:`kvframe.engine.arrivals` -- open-loop and closed-loop (agentic) arrivals;
* :mod:`kvframe.engine.engine` -- :class:`Engine`, the synchronous loop, and its results;
* :mod:`kvframe.engine.step` -- one engine step as public phases (``decide``,
  ``execute``, ``apply``) that the synchronous loop and the batch queue
  (:mod:`kvframe.engine.batch_queue`, asynchronous scheduling) both compose;
* :mod:`kvframe.engine.build` -- the plugins, scheduler, executor and offload
  tier (:mod:`kvframe.engine.tier`) a config selects.

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
