"""Config strings, plugin options and ``kvframe.toml``: everything a user types.

Users choose plugins without code, with the same grammar on the command line and
in ``kvframe.toml``::

    NAME                                   lru
    NAME:key=value,key=value               arc:variant=paper,ghost=true
    package.module:Class                   my_pkg.policies:LFU
    package.module:Class:key=value,...     my_pkg.policies:LFU:decay=0.5

A value is an int, a float, a bool (``true``/``false``/``yes``/``no``/``on``/``off``),
a size (``8GiB``, ``512MiB``, ``1.5GB``: an int of bytes) or a string. Quote a
string with ``'...'`` or ``"..."`` when it contains ``,``, ``:`` or ``=``. A
plugin's options are the keyword-only parameters of its ``__init__``; their type
hints decide how each value is converted, so ``--eviction lfu:decay=0.5`` reaches
``LFU(capacity, decay=0.5)`` as a float.

Every mistake is a :class:`ConfigError` (a :class:`ValueError`) whose message
quotes the text, points at the bad part with a caret and says what would have
been accepted.

The work is split by job; this package re-exports the public names of each, so
``from kvframe.config import parse_spec`` keeps working:

- :mod:`kvframe.config.errors`: :class:`ConfigError` and spelling suggestions;
- :mod:`kvframe.contract.kinds`: the extension points (:data:`KINDS`);
- :mod:`kvframe.config.grammar`: the config-string grammar (:func:`parse_spec`);
- :mod:`kvframe.config.options`: binding options to a class's ``__init__``
  (:func:`bind_options`);
- :mod:`kvframe.config.tomlfile`: ``kvframe.toml`` and merging it with flags.

Which plugins exist is :mod:`kvframe.host.registry`' business.
"""

from __future__ import annotations

from kvframe.config.errors import ConfigError, did_you_mean, suggest
from kvframe.config.grammar import (
    NAME_PATTERN,
    OptionValue,
    PluginSpec,
    format_spec,
    guess_value,
    parse_size,
    parse_spec,
)
from kvframe.config.options import (
    Bytes,
    OptionInfo,
    bind_options,
    context_params,
    convert_option,
    plugin_options,
    type_text,
)
from kvframe.config.tomlfile import (
    CONFIG_FILE_NAME,
    UserConfig,
    config_from_mapping,
    find_config_file,
    load_config,
    merge,
)
from kvframe.contract.kinds import KINDS, Kind, get_kind, kind_of

__all__ = [
    "CONFIG_FILE_NAME",
    "KINDS",
    "NAME_PATTERN",
    "Bytes",
    "ConfigError",
    "Kind",
    "OptionInfo",
    "OptionValue",
    "PluginSpec",
    "UserConfig",
    "bind_options",
    "config_from_mapping",
    "context_params",
    "convert_option",
    "did_you_mean",
    "find_config_file",
    "format_spec",
    "get_kind",
    "guess_value",
    "kind_of",
    "load_config",
    "merge",
    "parse_size",
    "parse_spec",
    "plugin_options",
    "suggest",
    "type_text",
]
