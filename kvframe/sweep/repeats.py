"""Repeats in a sweep: generated workloads by ``seed``, and arrival jitter for traces.

Why: one run per setting cannot say whether two policies differ or merely drew
different luck. A sweep gets repeats from a ``seed`` axis:

* ``workload = "gen:chat"``, ``"gen:agentic"`` or ``"gen:skewed"`` generates the workload in the
  cell (the generators of ``kvframe gen``), from the options in ``generate``
  (a table of the generator's fields) and ``seed`` -- each seed a new draw of
  the same workload;
* on a trace, ``jitter = SECONDS`` moves each arrival by a uniform amount in
  ``[-SECONDS, +SECONDS]`` (drawn from ``seed``; arrivals stay >= 0 and are
  re-sorted), so that each seed replays the same requests in a slightly
  different interleaving.

``kvframe compare`` then groups runs that differ only in ``seed`` and reports
each setting's mean with a confidence interval (:mod:`kvframe.compare.effects`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import attrs

from kvframe.config import ConfigError

__all__ = ["GENERATORS", "apply_jitter", "check_generated", "generate_workload"]

GENERATORS = ("gen:chat", "gen:agentic", "gen:skewed")
"""``workload`` values that generate the workload in the cell."""


def _generator(name: str) -> Any:
    """The :class:`~kvframe.workloads.generator.WorkloadGenerator` of ``gen:NAME``."""
    if name == "gen:chat":
        from kvframe.workloads.chat import CHAT

        return CHAT
    if name == "gen:skewed":
        from kvframe.workloads.skewed import SKEWED

        return SKEWED
    from kvframe.workloads.agentic import AGENTIC

    return AGENTIC


def _config(name: str, options: Mapping[str, Any], seed: int) -> Any:
    options = {**options, "seed": seed}
    preset = options.pop("preset", None) if name == "gen:agentic" else None
    if preset is not None:
        from kvframe.workloads.agentic import AgenticConfig

        return AgenticConfig.from_preset(preset, **options)
    return _generator(name).config(**options)


def check_generated(settings: Mapping[str, Any], where: str) -> None:
    """A generated cell's options, checked before any cell runs.

    :raises ConfigError: an unknown generator option or a bad value, naming the cell.
    """
    name = settings["workload"]
    if name not in GENERATORS:
        if "generate" in settings:
            raise ConfigError(
                f"'generate' applies to a generated workload ({', '.join(GENERATORS)}), "
                f"not to {name!r}",
                origin=where,
            )
        return
    try:
        _config(name, settings.get("generate") or {}, settings.get("seed", 0))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"generate: {err}", origin=where) from None


def generate_workload(settings: Mapping[str, Any]) -> Any:
    """The cell's generated workload (``workload`` one of :data:`GENERATORS`)."""
    from kvframe.workloads import Workload

    name = settings["workload"]
    config = _config(name, settings.get("generate") or {}, settings.get("seed", 0))
    specs = _generator(name).specs(config)
    limit = settings.get("limit")
    if limit is not None:
        specs = specs[:limit]
    return Workload(
        specs,
        name=f"{name.removeprefix('gen:')}-seed{config.seed}",
        source=name,
        metadata={"generator": name, "params": config.to_params()},
    )


def apply_jitter(workload: Any, jitter: float, seed: int) -> Any:
    """A copy of ``workload`` with each arrival moved by ``U(-jitter, +jitter)`` seconds."""

    rng = random.Random(f"kvframe.jitter:{seed}")
    moved = [
        attrs.evolve(s, arrival_time=max(0.0, s.arrival_time + rng.uniform(-jitter, jitter)))
        for s in workload
    ]
    moved.sort(key=lambda s: s.arrival_time)
    return attrs.evolve(workload, requests=moved)
