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

from kvframe.config import ConfigError, did_you_mean

__all__ = [
    "GENERATORS",
    "apply_jitter",
    "check_generated",
    "generate_workload",
    "generator_options",
]

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
    options = settings.get("generate") or {}
    _check_option_names(name, options, where)
    try:
        _config(name, options, settings.get("seed", 0))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"generate: {err}", origin=where) from None


def generator_options(name: str) -> tuple[str, ...]:
    """The options ``generate`` may set for ``name``: its config's fields (``seed`` aside,
    which is the cell's own key), and ``preset`` for ``gen:agentic``."""
    fields = attrs.fields(_generator(name).config_type)
    names = [f.alias for f in fields if f.init and f.alias != "seed"]
    return (*names, "preset") if name == "gen:agentic" else tuple(names)


def _check_option_names(name: str, options: Mapping[str, Any], where: str) -> None:
    """An unknown ``generate`` key gets a did-you-mean and the list, not a ``TypeError``
    from the config's constructor."""
    known = generator_options(name)
    for key in options:
        if key == "seed":
            raise ConfigError(
                "generate: 'seed' is the cell's own key (seed = N, or a grid of seeds), "
                "not a generator option",
                origin=where,
            )
        if key not in known:
            raise ConfigError(
                f"generate: unknown option {key!r} of {name}{did_you_mean(key, known)}",
                origin=where,
                hints=[f"{name} options: " + ", ".join(known)],
            )


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
