"""What a run's summary says besides its tables: what ran, on which rules and clock.

``kvframe run`` prints these lines under its tables, and :func:`kvframe.run`'s result
repeats them (:meth:`kvframe.api.Result.table`), so a summary read in a terminal and
one read in a notebook say the same thing. They read only ``metrics.json``'s
``metadata``, so a summary can be described again from a saved run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["describe_clock", "describe_configuration", "describe_core", "describe_rules"]


def describe_configuration(
    engine: Mapping[str, Any], config_source: str | None, clock: str | None = None
) -> list[str]:
    """Lines saying what ran: scheduler, GPU pool and its eviction, tier, the vLLM release
    whose rules ran and the scheduling mode, config file, and (given ``clock``, the
    summary's ``metadata.clock``) which clock the times are on.

    Why the release and mode: the same trace gives different figures under 0.19.1 and
    0.33.0, synchronous and asynchronous, and a summary pasted into a note must say
    which it is without ``metrics.json`` beside it.
    """
    blocks = engine.get("num_gpu_blocks")
    pool = (
        f"{blocks:,} GPU blocks x {engine.get('block_size')} tokens"
        if isinstance(blocks, int)
        else "GPU pool ?"
    )
    tier = engine.get("offload") or "none"
    if engine.get("offload") and engine.get("eviction"):
        tier += f" (eviction {engine['eviction']})"
    if engine.get("reuse_filter"):
        tier += f", reuse filter {engine['reuse_filter']}"
    lines = [
        f"configuration: preset {engine.get('preset')}, scheduler {engine.get('scheduling')}, "
        f"{pool}, GPU eviction {engine.get('gpu_eviction') or 'vLLM LRU free queue'}, "
        f"offload tier {tier}",
        describe_rules(engine),
        "config file: "
        + (config_source if config_source is not None else "none (flags and defaults only)"),
    ]
    if engine.get("tracers"):
        lines.append("tracers: " + ", ".join(engine["tracers"]))
    if clock is not None:
        lines.append(describe_clock(clock, engine))
    return lines


def describe_rules(engine: Mapping[str, Any]) -> str:
    """``vLLM target: 0.19.1, synchronous scheduling``: whose decisions the run makes."""
    mode = "asynchronous" if engine.get("async_scheduling") else "synchronous"
    return f"vLLM target: {engine.get('vllm', '?')}, {mode} scheduling"


def describe_core(metadata: Mapping[str, Any]) -> str:
    """Which core ran the block pool (the summary's ``metadata.core``), and why when it
    is not the one the setting asked for."""
    core = metadata.get("core", "?")
    setting = metadata.get("engine", {}).get("core", "auto")
    line = f"core: {core} block pool (setting {setting}"
    if core == "python" and setting == "auto":
        line += "; scripts/build-core builds the compiled one"
    line += ")"
    hasher = metadata.get("hasher")
    if hasher:
        line += f", {hasher} block hasher"
    hot = metadata.get("hot_modules")
    if hot:
        line += f", {hot} scheduler modules"
    note = metadata.get("core_note")
    if note:
        line += f": {note}"
    return line


def describe_clock(clock: str, engine: Mapping[str, Any]) -> str:
    """Which clock the run's times are on: the cost model's (virtual) or measured.

    Why say it: a torch-executor run on a laptop CPU printed "TTFT 0.015 s" next
    to "preset llama3.1-8b-h100", and read as a measurement of that CPU.
    """
    if clock == "virtual":
        return (
            f"clock: virtual -- every time above is the cost model's (preset "
            f"{engine.get('preset')}), not measured on this machine"
        )
    what = "wall time" if clock == "wall" else "CPU time of the engine's thread"
    return f"clock: measured -- each step advances by the forward pass's {what}"
