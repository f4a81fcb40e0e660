"""``kvframe check``: validate a selection by building it, without running anything.

``check`` reads the same flags as ``run`` (plugin selection and engine
settings), builds its configuration with the same function
(:func:`kvframe.cli.common.engine_config`) and then builds the engine's
plugins, scheduler and offload tier, so a selection ``check`` accepts is one
``run`` accepts. The one thing it does not do is open tracers: a tracer opens
(and truncates) its output file when built, and checking must not destroy a
trace; their options are still resolved and type-checked.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.cli.common import (
    ENGINE_FLAGS,
    EXIT_OK,
    Context,
    add_engine_arguments,
    add_selection_arguments,
    config_file,
    engine_config_from,
    load_selection,
)
from kvframe.config.options import value_text

if TYPE_CHECKING:
    from kvframe.config import UserConfig
    from kvframe.host.registry import Resolved

__all__ = ["add_check_command", "check_selection"]


def add_check_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="validate a plugin selection without running anything",
        description="Read kvframe.toml and the flags exactly as 'kvframe run' does, build "
        "the selected plugins, scheduler and offload tier, and print what would run. "
        "Accepts every selection and engine flag of 'run'.",
    )
    add_selection_arguments(parser)
    add_engine_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(handler=_run_check)


def check_selection(args: argparse.Namespace, ctx: Context) -> tuple[UserConfig, list[Resolved]]:
    """Build what ``run`` would build from ``args``; return its config and resolved plugins.

    :raises ConfigError: for whatever ``run`` would reject before replaying.
    """
    from kvframe.engine import Engine

    selection = load_selection(args, ENGINE_FLAGS)
    config = engine_config_from(selection)
    # Build everything but the tracers (see the module docstring); their options
    # are bound below like every other plugin's.
    Engine.from_config(attrs.evolve(config, tracers=()), ctx.registry)
    resolved = [(spec.kind, ctx.registry.resolve(spec.kind, spec)) for spec in selection.specs()]
    if config.gpu_eviction is not None:
        resolved.insert(
            1 if selection.scheduling is not None else 0,
            ("gpu_eviction", ctx.registry.resolve("eviction", config.gpu_eviction)),
        )
    return selection, resolved


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool | None):
        return value
    return str(value) if isinstance(value, os.PathLike) else value_text(value)


def _run_check(args: argparse.Namespace, ctx: Context) -> int:
    selection, resolved = check_selection(args, ctx)
    source = config_file(args)
    engine = {k: v for k, v in selection.engine.items() if k != "gpu_eviction"}
    if args.json:
        ctx.print(
            json.dumps(
                {
                    "config_file": source,
                    "plugins": [
                        {
                            "kind": r.kind,
                            "selected_as": role,
                            "name": r.name,
                            "class": f"{r.cls.__module__}:{r.cls.__qualname__}",
                            "options": {k: _jsonable(v) for k, v in r.effective_options().items()},
                        }
                        for role, r in resolved
                    ],
                    "engine": engine,
                },
                indent=2,
                default=repr,
            )
        )
        return EXIT_OK
    from kvframe.console import emit, new_table

    out: list[Any] = []
    if source is not None:
        out += [f"config file: {source}", ""]
    if resolved:
        plugins = new_table("role", "plugin", "class", "options", wrap_last_at=80)
        for role, r in resolved:
            options = ", ".join(f"{k}={value_text(v)}" for k, v in r.effective_options().items())
            plugins.add_row(role, r.name, f"{r.cls.__module__}:{r.cls.__qualname__}", options)
        out.append(plugins)
    else:
        out.append("no plugins selected")
    if engine:
        settings = new_table("engine setting", "value")
        for key, value in engine.items():
            settings.add_row(key, repr(value))
        out += ["", settings]
    emit(ctx.stdout, *out)
    return EXIT_OK
