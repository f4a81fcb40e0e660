"""Run workloads through the kvframe-vllm bridge's scheduler and write per-step records.

The third driver of the harness, run under the vLLM reference virtualenv with
kvframe, its plugins and ``plugins/kvframe-vllm`` importable there
(``docs/vllm.md``)::

    .vllm-reference-venv/bin/python tools/differential/bridge_driver.py \\
        WORKLOAD.json [WORKLOAD.json ...] --out-dir DIR [--blocks]

It is ``vllm_driver.py`` with one change: vLLM's ``Scheduler`` is replaced by
``kvframe_vllm.scheduler.KvframeScheduler`` (vLLM's ``scheduler_cls`` seam),
with the workload's policy as a kvframe plugin. Requests, runner outputs and
the reading of each step's ``SchedulerOutput`` are vLLM's own types, so its
records compare with vLLM's (``fcfs``, ``priority``) and with kvframe's
(``continuum``, which vLLM lacks). The clock is one second per step, as in
``kvframe_driver.py``.
"""

from __future__ import annotations

import stepping
from vllm_driver import VllmAdapter


def main(argv: list[str] | None = None) -> int:
    return stepping.driver_main(
        argv,
        "bridge_driver",
        lambda config, record_blocks: VllmAdapter(config, record_blocks=record_blocks, bridge=True),
        __doc__.split("\n\n")[0],
    )


if __name__ == "__main__":
    raise SystemExit(main())
