"""``kvframe.toml`` and merging it with command-line flags into one :class:`UserConfig`."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any

import attrs

from kvframe.config.errors import ConfigError
from kvframe.config.grammar import OptionValue, PluginSpec, format_spec, parse_spec
from kvframe.contract.kinds import KIND_ALIASES, KINDS, get_kind

__all__ = [
    "CONFIG_FILE_NAME",
    "UserConfig",
    "config_from_mapping",
    "find_config_file",
    "load_config",
    "merge",
]

CONFIG_FILE_NAME = "kvframe.toml"


@attrs.frozen(slots=True)
class UserConfig:
    """A plugin selection plus plain engine settings, from a file, flags, or both.

    Engine settings (``block_size``, ``num_gpu_blocks``, ...) are passed through
    unvalidated: the engine validates them, and can name the file and key from
    :attr:`origins`.
    """

    scheduling: PluginSpec | None = None
    eviction: PluginSpec | None = None
    offload: PluginSpec | None = None
    reuse_filter: PluginSpec | None = None
    tracer: tuple[PluginSpec, ...] = ()
    routing: PluginSpec | None = None
    """The fleet's router (``--router``); only a fleet (``--replicas N``) uses it."""
    engine: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    origins: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    """Where each engine setting came from: ``kvframe.toml, key 'block_size'`` or a flag."""

    def selected(self, kind: str) -> PluginSpec | tuple[PluginSpec, ...] | None:
        """The spec(s) selected for ``kind`` (a tuple for tracers)."""
        return getattr(self, get_kind(kind).name)

    def specs(self) -> list[PluginSpec]:
        """Every selected spec, in kind order."""
        out: list[PluginSpec] = []
        for kind in KINDS.values():
            chosen = getattr(self, kind.name)
            if isinstance(chosen, tuple):
                out.extend(chosen)
            elif chosen is not None:
                out.append(chosen)
        return out


_PLUGIN_KEYS: Mapping[str, str] = {
    **{name: name for name in KINDS},
    **KIND_ALIASES,
}


def _key_origin(origin: str, key: str, flags: bool) -> str:
    if flags:
        return "--" + key.replace("_", "-")
    return f"{origin}, key {key!r}"


def _spec_from_value(value: Any, kind: str, where: str) -> PluginSpec:
    label = get_kind(kind).label
    if isinstance(value, str):
        return parse_spec(value, kind, origin=where)
    if isinstance(value, Mapping):
        return _spec_from_table(value, kind, where)
    raise ConfigError(
        f"expected a config string for the {label}, like 'NAME:key=value', "
        f"got {type(value).__name__} {value!r}",
        origin=where,
    )


def _spec_from_table(table: Mapping[str, Any], kind: str, where: str) -> PluginSpec:
    """``{name = "arc", variant = "paper"}``: the TOML-table spelling of a spec."""
    table = dict(table)
    target = table.pop("name", None)
    if not isinstance(target, str):
        raise ConfigError(
            "a plugin table needs a string 'name' (a plugin name or package.module:Class)",
            origin=where,
        )
    base = parse_spec(target, kind, origin=where)
    if base.options:
        raise ConfigError("put options in the table, not in 'name'", text=target, origin=where)
    options: dict[str, OptionValue] = {}
    for key, value in table.items():
        if isinstance(value, bool):
            options[key] = OptionValue("true" if value else "false")
        elif isinstance(value, int | float):
            options[key] = OptionValue(repr(value))
        elif isinstance(value, str):
            options[key] = OptionValue(value, quoted=True)
        else:
            raise ConfigError(
                f"option {key!r} must be a string, number or boolean, got {type(value).__name__}",
                origin=where,
            )
    source = format_spec(attrs.evolve(base, options=options))
    return attrs.evolve(base, options=options, source=source)


def config_from_mapping(
    values: Mapping[str, Any], *, origin: str = "config", flags: bool = False
) -> UserConfig:
    """Build a :class:`UserConfig` from parsed TOML or from command-line values.

    Plugin keys (``scheduler``/``scheduling``, ``eviction``, ``offload``,
    ``reuse_filter``, ``tracer``/``tracers``) are parsed as config strings (or
    tables with a ``name``); every other key is an engine setting, kept as is.
    ``None`` values mean "not given" and are dropped, so that :func:`merge` lets
    the other source through.

    :param origin: the file name, used in messages as ``FILE, key 'eviction'``.
    :param flags: the values come from the command line: messages name the flag
        (``--eviction``) instead.
    """
    chosen: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, value in values.items():
        if value is None:
            continue
        where = _key_origin(origin, key, flags)
        kind_name = _PLUGIN_KEYS.get(key)
        if kind_name is None:
            engine[key] = value
            origins[key] = where
            continue
        if kind_name in chosen:
            raise ConfigError(
                f"the {get_kind(kind_name).label} is selected twice (check for aliases such as "
                "'scheduler' and 'scheduling')",
                origin=where,
            )
        if get_kind(kind_name).multiple:
            items = list(value) if isinstance(value, list | tuple) else [value]
            chosen[kind_name] = tuple(
                _spec_from_value(item, kind_name, f"{where}[{i}]" if len(items) > 1 else where)
                for i, item in enumerate(items)
            )
        else:
            chosen[kind_name] = _spec_from_value(value, kind_name, where)
    return UserConfig(**chosen, engine=engine, origins=origins)


def load_config(path: str | os.PathLike[str]) -> UserConfig:
    """Read ``kvframe.toml`` (or any TOML file of the same shape) into a :class:`UserConfig`.

    :raises ConfigError: naming the file, and the key when a value is wrong.
    """
    import tomllib  # only runs need it; keep `import kvframe.config` cheap

    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"cannot read config file: {err.strerror}", origin=name) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML: {err}", origin=name) from None
    return config_from_mapping(data, origin=name)


def find_config_file(directory: str | os.PathLike[str] = ".") -> pathlib.Path | None:
    """``kvframe.toml`` in ``directory`` if there is one (no search upwards: explicit is safer)."""
    candidate = pathlib.Path(directory) / CONFIG_FILE_NAME
    return candidate if candidate.is_file() else None


def merge(file_values: UserConfig, cli_values: UserConfig) -> UserConfig:
    """Command-line values override the file's, key by key.

    Tracers are replaced as a whole: ``--tracer`` on the command line means
    "these tracers", not "these as well".
    """
    chosen: dict[str, Any] = {}
    for kind in KINDS.values():
        cli = getattr(cli_values, kind.name)
        chosen[kind.name] = cli if cli else getattr(file_values, kind.name)
    return UserConfig(
        **chosen,
        engine={**file_values.engine, **cli_values.engine},
        origins={**file_values.origins, **cli_values.origins},
    )
