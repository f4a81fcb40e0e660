"""The plugin host: find plugins, pick one by config string, build it.

:class:`PluginRegistry` wraps a ``pluggy.PluginManager("kvframe")`` that carries
the hook specs of :mod:`kvframe.contract.hookspecs`. Plugins reach it three ways:

* an entry point in group ``kvframe`` naming a module (or any object) with
  ``@kvframe.hookimpl`` registration hooks;
* an entry point naming a *class* that subclasses a kvframe base ("one-class
  plugin"): the host wraps it in a small adapter that implements the matching
  registration hook as ``{cls.name: cls}``;
* :meth:`PluginRegistry.register_class` / :meth:`PluginRegistry.register_module`
  from tests and notebooks.

Entry points are scanned lazily, the first time the registry is asked anything,
so ``import kvframe`` stays cheap. A plugin that fails to import, whose hook
raises, or that offers the same name as another plugin does not break the rest:
it is logged (structlog, ``plugin_load_failed`` and friends), shown by
``kvframe plugins``, and becomes an error only when someone selects it.

Selection returns plain objects. :meth:`PluginRegistry.create` gives back the
constructed policy and the caller calls its methods directly; pluggy is used to
*find* classes, never on a hot path. The one exception is tracing, which is a
broadcast: :meth:`PluginRegistry.create_tracing` builds a separate, tiny
``PluginManager`` holding only the selected tracers.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
import pluggy

from kvframe.config import (
    KINDS,
    NAME_PATTERN,
    ConfigError,
    Kind,
    OptionInfo,
    PluginSpec,
    bind_options,
    did_you_mean,
    get_kind,
    kind_of,
    parse_spec,
    plugin_options,
)
from kvframe.contract import hookspecs
from kvframe.contract.bases import PluginBase, Tracer
from kvframe.host.tracing import Tracing, tracing_manager
from kvframe.log import get_logger

if TYPE_CHECKING:
    from importlib_metadata import EntryPoint

__all__ = [
    "PluginEntry",
    "PluginRegistry",
    "PluginSource",
    "Resolved",
    "get_registry",
]

log = get_logger(__name__)

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME

Status = Literal["ok", "broken", "conflict"]


# ==========================================================================
# What the registry knows
# ==========================================================================


@attrs.frozen(slots=True)
class PluginSource:
    """Where a registered pluggy plugin came from."""

    plugin_name: str
    """The name it is registered under in the pluggy ``PluginManager``."""
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None
    """``name = value`` of the entry point, if it came from one."""

    @property
    def label(self) -> str:
        """The entry point's name if there is one, else the pluggy name: what lists show."""
        return self.entry_point.split(" = ")[0] if self.entry_point else self.plugin_name

    def describe(self) -> str:
        """``kvframe-arc 0.1.0 (entry point 'arc')`` for messages."""
        out = self.distribution or self.plugin_name
        if self.version:
            out += f" {self.version}"
        if self.entry_point:
            out += f" (entry point {self.entry_point.split(' = ')[0]!r})"
        return out


@attrs.frozen(slots=True)
class PluginEntry:
    """One name offered for one kind, or one plugin that could not be loaded.

    ``status`` is ``"ok"`` for a selectable class, ``"conflict"`` when another
    plugin offers the same name, ``"broken"`` when the plugin failed (then
    ``cls`` is ``None`` and ``kind`` is ``None`` if it failed before saying what
    it offers). ``error`` says why it cannot be selected.
    """

    kind: str | None
    name: str
    cls: type[PluginBase] | None
    source: PluginSource
    status: Status = "ok"
    error: str | None = None

    @property
    def description(self) -> str:
        if self.cls is None:
            return ""
        if self.cls.description:
            return self.cls.description
        # The class's own docstring only: inspect.getdoc would fall back to the
        # base class's (EvictionPolicy's contract), which describes no plugin.
        own = self.cls.__dict__.get("__doc__")
        doc = inspect.cleandoc(own) if isinstance(own, str) else ""
        return doc.splitlines()[0] if doc else ""

    @property
    def options(self) -> tuple[OptionInfo, ...]:
        return plugin_options(self.cls) if self.cls is not None else ()

    @property
    def class_path(self) -> str | None:
        """``package.module:Class``; also how to select it when the name conflicts."""
        if self.cls is None:
            return None
        return f"{self.cls.__module__}:{self.cls.__qualname__}"

    def to_json(self) -> dict[str, Any]:
        """The machine-readable form printed by ``kvframe plugins --json``."""
        return {
            "kind": self.kind,
            "name": self.name,
            "status": self.status,
            "error": self.error,
            "distribution": self.source.distribution,
            "version": self.source.version,
            "entry_point": self.source.entry_point,
            "plugin": self.source.plugin_name,
            "class": self.class_path,
            "description": self.description,
            "options": [
                {
                    "name": o.name,
                    "type": o.type_text,
                    "required": o.required,
                    "default": None if o.required else _jsonable(o.default),
                }
                for o in self.options
            ],
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool | type(None)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, enum.Enum):
        return value.name
    return repr(value)


@attrs.frozen(slots=True)
class Resolved:
    """A selection that passed every check: the class and its converted options."""

    kind: str
    name: str
    """The registered name, or ``package.module:Class`` for a class given by path."""
    cls: type[PluginBase]
    options: Mapping[str, Any]
    """Only the options the user gave, converted to their annotated types."""
    spec: PluginSpec

    def effective_options(self) -> dict[str, Any]:
        """Every option with the value the object will see (defaults filled in)."""
        out = {o.name: o.default for o in plugin_options(self.cls) if not o.required}
        out.update(self.options)
        return out

    def create(self, *context: Any) -> Any:
        """Construct the plugin: ``cls(*context, **options)``.

        A ``ValueError`` from the constructor (an option value it rejects) is
        re-raised as a :class:`ConfigError` naming the config string.
        """
        try:
            return self.cls(*context, **self.options)
        except ConfigError:
            raise
        except ValueError as err:
            raise ConfigError(
                f"{get_kind(self.kind).label} {self.name!r} rejected its options: {err}",
                text=self.spec.source or None,
                origin=self.spec.origin,
            ) from err


# ==========================================================================
# Adapters
# ==========================================================================


class _OneClassPlugin:
    """Implements one registration hook for a single plugin class.

    This is what the host registers with pluggy when an entry point names a
    class instead of a module with hookimpls.
    """

    def __init__(self, cls: type[PluginBase], kind: Kind, name: str) -> None:
        self.cls = cls

        def offer() -> dict[str, type[PluginBase]]:
            return {name: cls}

        offer.__name__ = offer.__qualname__ = kind.hook
        setattr(self, kind.hook, hookspecs.hookimpl(offer))

    def __repr__(self) -> str:
        return f"<one-class kvframe plugin {self.cls.__module__}.{self.cls.__qualname__}>"


# ==========================================================================
# The registry
# ==========================================================================


class PluginRegistry:
    """Every plugin kvframe can see, and selection of one by config string.

    :param entry_points: the entry points to load instead of scanning the
        installed distributions (tests pass ``()`` for an empty registry, or
        hand-made ``importlib_metadata.EntryPoint`` objects). ``None`` scans
        group ``kvframe`` on first use.
    """

    def __init__(self, *, entry_points: Iterable[EntryPoint] | None = None) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._pending_entry_points = None if entry_points is None else list(entry_points)
        self._scanned = False
        self._sources: dict[str, PluginSource] = {}
        self._load_failures: list[PluginEntry] = []
        self._index: list[PluginEntry] | None = None
        self._warned: set[tuple[str, str | None, str | None, str]] = set()
        self._offers: dict[tuple[str, str], object] = {}

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The underlying pluggy manager (entry points loaded). For introspection only."""
        self._ensure_scanned()
        return self._pm

    # -- registration ------------------------------------------------------

    def register_class(
        self,
        cls: type[PluginBase],
        *,
        name: str | None = None,
        distribution: str | None = None,
        version: str | None = None,
    ) -> str:
        """Register a one-class plugin, as an entry point naming ``cls`` would.

        :param name: the name to select it by; defaults to ``cls.name``.
        :return: the pluggy plugin name it was registered under.
        :raises TypeError: if ``cls`` is not a subclass of a kvframe base.
        :raises ValueError: if it has no name.
        """
        kind = kind_of(cls)
        if kind is None:
            raise TypeError(
                f"{cls!r} is not a kvframe plugin class: subclass one of "
                + ", ".join(f"kvframe.{k.base.__name__}" for k in KINDS.values())
            )
        plugin_name = name or cls.name
        if not plugin_name:
            raise ValueError(f"{cls.__qualname__} has no name: set `name = '...'` on the class")
        key = f"class:{cls.__module__}.{cls.__qualname__}:{plugin_name}"
        if self._pm.has_plugin(key):
            return key
        source = PluginSource(key, distribution, version)
        self._register(_OneClassPlugin(cls, kind, plugin_name), source)
        return key

    def register_module(
        self,
        module: object,
        *,
        name: str | None = None,
        distribution: str | None = None,
        version: str | None = None,
    ) -> str:
        """Register a module (or any object) with ``@kvframe.hookimpl`` functions.

        :return: the pluggy plugin name it was registered under.
        :raises pluggy.PluginValidationError: if a hookimpl does not match its spec.
        """
        key = name or getattr(module, "__name__", None) or f"plugin-{id(module):x}"
        self._register(module, PluginSource(key, distribution, version))
        return key

    def _register(self, plugin: object, source: PluginSource) -> None:
        self._pm.register(plugin, name=source.plugin_name)
        self._sources[source.plugin_name] = source
        self._index = None

    # -- entry points ------------------------------------------------------

    def _ensure_scanned(self) -> None:
        if self._scanned:
            return
        entry_points = self._pending_entry_points
        if entry_points is None:
            import importlib_metadata  # the slow part of start-up; only when asked

            entry_points = list(importlib_metadata.entry_points(group=ENTRY_POINT_GROUP))
        # Marked only now: had listing the entry points failed (importlib_metadata
        # missing or broken), every later lookup must fail with that error again,
        # not report "no plugins installed". Marked before loading them, so a plugin
        # that asks the registry while it loads does not start a second scan.
        self._scanned = True
        entry_points.sort(key=lambda ep: (_dist_name(ep) or "", ep.name))
        for ep in entry_points:
            self._load_entry_point(ep)

    def _load_entry_point(self, ep: EntryPoint) -> None:
        name, version = _dist_header(getattr(ep, "dist", None))
        source = PluginSource(
            plugin_name=f"{name or '?'}:{ep.name}",
            distribution=name,
            version=version,
            entry_point=f"{ep.name} = {ep.value}",
        )
        try:
            obj = ep.load()
        except BaseException as err:  # a plugin's import may raise anything, even SystemExit
            if isinstance(err, KeyboardInterrupt):
                raise
            problem = _missing_attribute(ep) or f"failed to import: {_describe_error(err)}"
            self._fail(source, problem, "plugin_load_failed")
            return
        try:
            if isinstance(obj, type):
                kind = kind_of(obj)
                if kind is None:
                    self._fail(
                        source,
                        f"{ep.value} is a class but not a subclass of a kvframe base "
                        "(kvframe.SchedulingPolicy, kvframe.EvictionPolicy, ...)",
                        "plugin_invalid",
                    )
                    return
                self._register(_OneClassPlugin(obj, kind, obj.name or ep.name), source)
            else:
                self._register(obj, source)
                if not self._pm.get_hookcallers(obj):
                    self._fail(source, _no_hooks_problem(ep.value, obj), "plugin_invalid")
        except Exception as err:
            self._fail(source, f"cannot be registered: {_describe_error(err)}", "plugin_invalid")

    def _fail(self, source: PluginSource, error: str, event: str, kind: str | None = None) -> None:
        self._load_failures.append(PluginEntry(kind, source.label, None, source, "broken", error))
        self._warn(event, source, kind, error)

    def _warn(self, event: str, source: PluginSource, kind: str | None, error: str) -> None:
        key = (event, source.plugin_name, kind, error)
        # A registry that scans the installed plugins warns about each problem once per
        # process (a run, a pytest session: those build several such registries).
        warned = _WARNED_INSTALLED if self._pending_entry_points is None else self._warned
        if key in warned:
            return
        warned.add(key)
        log.warning(
            event,
            distribution=source.distribution,
            entry_point=source.entry_point,
            plugin=source.plugin_name,
            kind=kind,
            error=error,
        )

    # -- the index ---------------------------------------------------------

    def entries(self, kind: str | None = None) -> list[PluginEntry]:
        """Everything discovered, broken and conflicting entries included.

        Sorted by kind (in :data:`kvframe.config.KINDS` order), then name. Entries
        that broke before saying their kind (an import error) come last and are
        included whatever ``kind`` is asked for.
        """
        index = self._build_index()
        if kind is None:
            return list(index)
        wanted = get_kind(kind).name
        return [e for e in index if e.kind in (wanted, None)]

    def names(self, kind: str) -> list[str]:
        """The selectable names of ``kind``, sorted."""
        wanted = get_kind(kind).name
        return sorted(
            {e.name for e in self._build_index() if e.kind == wanted and e.status == "ok"}
        )

    def _build_index(self) -> list[PluginEntry]:
        if self._index is not None:
            return self._index
        self._ensure_scanned()
        offered: list[PluginEntry] = []
        failures = list(self._load_failures)
        for kind in KINDS.values():
            caller = getattr(self._pm.hook, kind.hook)
            for impl in caller.get_hookimpls():
                source = self._sources.get(impl.plugin_name) or PluginSource(impl.plugin_name)
                offered.extend(self._collect(kind, impl, source, failures))
        failures.extend(self._unknown_hooks())
        index = _mark_conflicts(offered, self._warn)
        order = {name: i for i, name in enumerate(KINDS)}
        index.sort(
            key=lambda e: (order.get(e.kind or "", len(order)), e.name, e.source.plugin_name)
        )
        failures.sort(key=lambda e: (order.get(e.kind or "", len(order)), e.name))
        self._index = index + failures
        return self._index

    def _collect(
        self, kind: Kind, impl: Any, source: PluginSource, failures: list[PluginEntry]
    ) -> list[PluginEntry]:
        def fail(name: str, error: str, event: str) -> None:
            failures.append(PluginEntry(kind.name, name, None, source, "broken", error))
            self._warn(event, source, kind.name, error)

        fallback_name = source.label
        key = (impl.plugin_name, kind.hook)
        if key not in self._offers:  # each registration hook runs once per plugin
            try:
                self._offers[key] = impl.function()
            except Exception as err:
                self._offers[key] = _HookRaised(err)
        offered = self._offers[key]
        if isinstance(offered, _HookRaised):
            error = f"{kind.hook}() raised {_describe_error(offered.error)}"
            fail(fallback_name, error, "plugin_hook_failed")
            return []
        if offered is None:
            return []
        if not isinstance(offered, Mapping):
            fail(
                fallback_name,
                f"{kind.hook}() returned {type(offered).__name__}, expected a {{name: class}} dict",
                "plugin_invalid",
            )
            return []
        out: list[PluginEntry] = []
        for name, cls in offered.items():
            problem = _check_offer(kind, name, cls)
            if problem is not None:
                fail(str(name), problem, "plugin_invalid")
            else:
                out.append(PluginEntry(kind.name, name, cls, source))
        return out

    def _unknown_hooks(self) -> list[PluginEntry]:
        """Hookimpls named like a kvframe hook that has no spec: almost always a typo."""
        failures: list[PluginEntry] = []
        callers = {
            name: caller
            for name, caller in vars(self._pm.hook).items()
            if isinstance(caller, pluggy.HookCaller)
        }
        known = [name for name, caller in callers.items() if caller.spec is not None]
        for hook_name, caller in callers.items():
            if caller.spec is not None:
                continue
            for impl in caller.get_hookimpls():
                source = self._sources.get(impl.plugin_name) or PluginSource(impl.plugin_name)
                error = f"implements unknown hook {hook_name!r}" + did_you_mean(hook_name, known)
                failures.append(PluginEntry(None, source.label, None, source, "broken", error))
                self._warn("plugin_invalid", source, None, error)
        return failures

    # -- selection ---------------------------------------------------------

    def get(self, kind: str, name: str, *, spec: PluginSpec | None = None) -> type[PluginBase]:
        """The class registered as ``name`` for ``kind``.

        :raises ConfigError: if there is none (suggesting the closest name and
            listing what is installed), if it is broken, or if two plugins offer it.
        """
        k = get_kind(kind)
        matches = [e for e in self.entries(k.name) if e.name == name]
        ok = [e for e in matches if e.status == "ok"]
        if ok:
            assert ok[0].cls is not None
            return ok[0].cls
        text = spec.source if spec is not None else name
        span = (_target_start(text), _target_start(text) + len(name))
        origin = spec.origin if spec is not None else None
        conflicts = [e for e in matches if e.status == "conflict"]
        if conflicts:
            raise ConfigError(
                f"{k.label} {name!r} is offered by more than one plugin",
                text=text,
                span=span,
                origin=origin,
                hints=[
                    *(f"{e.source.describe()}: {e.class_path}" for e in conflicts),
                    f"uninstall one, or select one by class path, e.g. {conflicts[0].class_path!r}",
                ],
            )
        broken = [e for e in matches if e.status == "broken"]
        if broken:
            raise ConfigError(
                f"{k.label} {name!r} cannot be used: "
                f"{broken[0].source.describe()} {broken[0].error}",
                text=text,
                span=span,
                origin=origin,
                hints=[self._installed_hint(k)],
            )
        hints = [self._installed_hint(k)]
        unattributed = [e for e in self.entries(k.name) if e.status == "broken"]
        if unattributed:
            hints.append(
                "these plugins failed to load and might have offered it: "
                + "; ".join(f"{e.source.describe()}: {e.error}" for e in unattributed)
            )
        raise ConfigError(
            f"unknown {k.label} {name!r}{did_you_mean(name, self.names(k.name))}",
            text=text,
            span=span,
            origin=origin,
            hints=hints,
        )

    def _installed_hint(self, kind: Kind) -> str:
        names = self.names(kind.name)
        if not names:
            return f"no {kind.plural} are installed (see `kvframe plugins`)"
        return f"installed {kind.plural}: {', '.join(names)}"

    def parse(self, kind: str, text: str, *, origin: str | None = None) -> PluginSpec:
        """:func:`kvframe.config.parse_spec`, with what is installed added to any error."""
        k = get_kind(kind)
        try:
            return parse_spec(text, k.name, origin=origin)
        except ConfigError as err:
            err.hints.append(self._installed_hint(k))
            raise

    def resolve(self, kind: str, spec: str | PluginSpec) -> Resolved:
        """Find the class a config string selects and validate its options.

        ``spec`` is a config string (``arc:variant=paper``,
        ``pkg.mod:Class:opt=1``) or a :class:`PluginSpec` already parsed.

        :raises ConfigError: for a syntax error, an unknown or broken name, a
            class path that cannot be imported or is not a subclass of the
            kind's base, an unknown option or a bad value.
        """
        k = get_kind(kind)
        if isinstance(spec, str):
            spec = self.parse(k.name, spec)
        elif get_kind(spec.kind) is not k:
            raise ValueError(f"a {spec.kind} spec cannot select a {k.label}")
        if spec.path is not None:
            cls = self._import_class(k, spec)
            name = spec.path
        else:
            assert spec.name is not None
            cls = self.get(k.name, spec.name, spec=spec)
            name = spec.name
        options = bind_options(cls, spec, what=f"{k.label} {name!r}")
        return Resolved(k.name, name, cls, options, spec)

    def create(self, kind: str, spec: str | PluginSpec, *context: Any) -> Any:
        """Resolve ``spec`` and construct it: ``cls(*context, **options)``.

        ``context`` is what the kind's base documents as host-supplied (the
        ``capacity`` of an eviction policy, nothing for the others). The result is
        the plain plugin instance: call its methods directly.
        """
        return self.resolve(kind, spec).create(*context)

    def create_tracing(self, specs: Iterable[str | PluginSpec]) -> Tracing:
        """Build the selected tracers and a broadcast ``PluginManager`` for them.

        If one tracer cannot be built, those already built are closed (they may
        hold open files) before the error propagates.
        """
        tracers: list[Tracer] = []
        try:
            for spec in specs:
                tracers.append(self.create("tracer", spec))
        except BaseException:
            for tracer in tracers:
                tracer.close()
            raise
        return Tracing(tracing_manager(tuple(tracers)), tuple(tracers))

    def _import_class(self, kind: Kind, spec: PluginSpec) -> type[PluginBase]:
        assert spec.path is not None
        module_name, _, class_name = spec.path.partition(":")
        start = spec.source.find(module_name)
        start = max(start, 0)
        module_span = (start, start + len(module_name))
        class_start = spec.source.find(class_name, module_span[1])
        class_span = (class_start, class_start + len(class_name)) if class_start >= 0 else None

        def error(message: str, span: tuple[int, int] | None, *hints: str) -> ConfigError:
            return ConfigError(
                message,
                text=spec.source,
                span=span,
                origin=spec.origin,
                hints=[*hints, self._installed_hint(kind)],
            )

        try:
            module = importlib.import_module(module_name)
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            raise error(
                f"cannot import module {module_name!r}: {_describe_error(err)}",
                module_span,
            ) from err
        obj = getattr(module, class_name, None)
        if obj is None:
            candidates = [
                n for n, v in vars(module).items() if isinstance(v, type) and kind_of(v) is kind
            ]
            found = f"{kind.plural} in {module_name}: {', '.join(sorted(candidates)) or 'none'}"
            raise error(
                f"module {module_name!r} has no attribute {class_name!r}"
                + did_you_mean(class_name, candidates),
                class_span,
                found,
            )
        if not isinstance(obj, type) or not issubclass(obj, kind.base):
            actual = kind_of(obj) if isinstance(obj, type) else None
            extra = f" (it is a {actual.label}; select it with {actual.flag})" if actual else ""
            raise error(
                f"{spec.path} is not a subclass of kvframe.{kind.base.__name__}{extra}",
                class_span,
            )
        if inspect.isabstract(obj):
            raise error(f"{spec.path} is abstract: {_abstract_problem(obj)}", class_span)
        return obj


# ==========================================================================
# Helpers
# ==========================================================================


@attrs.frozen(slots=True)
class _HookRaised:
    """A registration hook's exception, remembered so the hook is not called again."""

    error: Exception


def _dist_name(ep: Any) -> str | None:
    return _dist_header(getattr(ep, "dist", None))[0]


_DIST_HEADERS: dict[int, tuple[object, str | None, str | None]] = {}
"""``id(dist)`` -> (the distribution, kept so the id stays its own; its name; its version)."""


def _dist_header(dist: Any) -> tuple[str | None, str | None]:
    """A distribution's name and version, each read once per distribution.

    Why: ``dist.name`` and ``dist.version`` each parse the whole metadata file with
    the email parser; asked three or four times per entry point, that was a quarter
    of ``kvframe run``'s start-up (``benchmarks/startup.py``).
    """
    if dist is None:
        return None, None
    cached = _DIST_HEADERS.get(id(dist))
    if cached is None or cached[0] is not dist:
        header = _read_header(dist)
        if header is None:  # not the usual metadata file: as importlib_metadata reads it
            header = (getattr(dist, "name", None), getattr(dist, "version", None))
        cached = (dist, *header)
        _DIST_HEADERS[id(dist)] = cached
    return cached[1], cached[2]


def _read_header(dist: Any) -> tuple[str, str] | None:
    """``Name`` and ``Version`` from the head of a distribution's metadata file, or ``None``.

    Only the header lines up to the first blank line are read: the email parser that
    ``dist.metadata`` runs also parses the long description (a README), which is
    most of its cost.
    """
    read_text = getattr(dist, "read_text", None)
    if read_text is None:
        return None
    try:
        text = read_text("METADATA") or read_text("PKG-INFO")
    except Exception:  # a third-party Distribution may raise anything: ask it as before
        return None
    if not text:
        return None
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in found:
            found[key] = value.strip()
    if len(found) < 2:
        return None
    return found["Name"], found["Version"]


_WARNED_INSTALLED: set[tuple[str, str | None, str | None, str]] = set()
"""Problems with installed plugins already logged by this process (see ``_warn``)."""


def _missing_attribute(ep: EntryPoint) -> str | None:
    """The entry point's module imported but lacks what it names: that, in words.

    ``ep.load()`` reports this as a bare ``AttributeError``, which reads like an
    import failure inside the plugin; the real cause is usually a renamed class.
    ``None`` when the module did not import (then the import error is the cause).
    """
    module_name, _, attr = ep.value.partition("[")[0].partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    obj = sys.modules.get(module_name)
    if obj is None or not attr:
        return None
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [name for name in dir(obj) if not name.startswith("_")]
            close = difflib.get_close_matches(part, public, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return (
                f"entry point names {ep.value}, but {module_name} (imported fine) has no "
                f"attribute {part!r}{hint}"
            )
        obj = getattr(obj, part)
    return None


def _describe_error(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _target_start(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


def _abstract_problem(cls: type) -> str:
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    return "abstract methods not implemented: " + ", ".join(missing)


def _no_hooks_problem(target: str, obj: object) -> str:
    """An entry point named a module without hookimpls; it may have meant one of its classes."""
    problem = f"{target} implements no kvframe hooks"
    if not isinstance(obj, types.ModuleType):
        return problem
    classes = sorted(
        name
        for name, value in vars(obj).items()
        if isinstance(value, type) and kind_of(value) and value.__module__ == obj.__name__
    )
    if classes:
        problem += f"; to offer one class, name it in the entry point: '{target}:{classes[0]}'"
    return problem


def _check_offer(kind: Kind, name: object, cls: object) -> str | None:
    """Why an offered ``{name: cls}`` pair cannot be used, or None if it can."""
    import re

    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        return f"invalid name {name!r}: use letters, digits, '_' and '-' (no dots or colons)"
    if not isinstance(cls, type) or not issubclass(cls, kind.base):
        return f"offers {cls!r}, which is not a subclass of kvframe.{kind.base.__name__}"
    if inspect.isabstract(cls):
        return f"{cls.__module__}:{cls.__qualname__} is abstract: {_abstract_problem(cls)}"
    return None


def _mark_conflicts(
    offered: list[PluginEntry], warn: Callable[[str, PluginSource, str | None, str], None]
) -> list[PluginEntry]:
    """Entries where two plugins offer different classes under one name become conflicts."""
    by_key: dict[tuple[str | None, str], list[PluginEntry]] = {}
    for entry in offered:
        group = by_key.setdefault((entry.kind, entry.name), [])
        if all(other.cls is not entry.cls for other in group):  # the same class twice is fine
            group.append(entry)
    out: list[PluginEntry] = []
    for (kind, name), group in by_key.items():
        if len(group) == 1:
            out.extend(group)
            continue
        for entry in group:
            others = ", ".join(o.source.describe() for o in group if o is not entry)
            error = f"name also offered by {others}"
            warn("plugin_name_conflict", entry.source, kind, f"{name!r}: {error}")
            out.append(attrs.evolve(entry, status="conflict", error=error))
    return out


_default_registry: PluginRegistry | None = None


def get_registry() -> PluginRegistry:
    """The process-wide registry of installed plugins (entry points scanned on first use).

    Plugins that build other plugins (an offload spec choosing its eviction
    policy by name) use this one.
    """
    global _default_registry
    if _default_registry is None:
        _default_registry = PluginRegistry()
    return _default_registry
