"""What every kind's suite shares: the plugin under test, messages, and the checks of every kind.

A suite class never builds its plugin directly. It asks the ``kvframe_target``
fixture for a :class:`PluginTarget` (the class plus the options the user
chose), so the same test code runs whether the plugin was named on the command
line (``pytest --kvframe-plugin eviction:lru``) or set as a class attribute by an
author who subclasses the suite (``plugin = MyLFU``).

Failures are :class:`ContractViolation` errors (an ``AssertionError``) whose
message says what the plugin did, what the contract says, and the calls that led
there, so that a failing run can be read without opening the suite's source.
"""

from __future__ import annotations

import gc
import inspect
import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal

import attrs
import pytest

from kvframe.config import (
    NAME_PATTERN,
    ConfigError,
    context_params,
    get_kind,
    kind_of,
    plugin_options,
)
from kvframe.contract.bases import PluginBase

__all__ = [
    "ContractViolation",
    "OpLog",
    "PluginSuite",
    "PluginTarget",
    "footprint",
    "resolve_target",
    "suite_settings",
]

HEAVY_MODULES: tuple[str, ...] = ("torch", "tensorflow", "jax", "transformers", "vllm", "triton")
"""Modules a plugin must not import at module level: ``kvframe plugins`` imports every
installed plugin, so one heavy import makes every listing (and every engine start) slow."""

_CONTEXT: Mapping[str, tuple[str, ...]] = {
    "scheduling": (),
    "eviction": ("capacity",),
    "offload": (),
    "reuse_filter": (),
    "tracer": (),
    "routing": (),
}
"""The positional ``__init__`` parameters the host passes per kind (see the plugin bases)."""


class ContractViolation(AssertionError):
    """The plugin under test broke its kind's contract; the message says how."""


class SuiteConfigError(Exception):
    """The suite itself is set up wrong (no plugin named, a bad config string)."""


def suite_settings(max_examples: int) -> Any:
    """Hypothesis settings every suite uses: reproducible and bounded.

    ``derandomize`` makes a run depend only on the plugin, so a failure in CI is
    the same failure on the author's laptop; ``database=None`` keeps the suite
    from writing a ``.hypothesis`` directory into the author's project.
    """
    from hypothesis import HealthCheck, Phase, settings

    return settings(
        max_examples=max_examples,
        # No "explain" phase: the suite's own message already names the calls.
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        # One failure, shrunk: the message names one rule and one call sequence.
        report_multiple_bugs=False,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


# ==========================================================================
# The plugin under test
# ==========================================================================


@attrs.frozen(slots=True)
class PluginTarget:
    """A plugin class and the options to build it with: what a suite tests.

    ``options`` are Python values (already converted from a config string's
    text), passed as keyword arguments after the kind's context.
    """

    kind: str
    cls: type[PluginBase]
    options: Mapping[str, Any] = attrs.field(factory=dict)
    spec: str | None = None
    """The config string it was selected by, if any (``arc:variant=paper``)."""

    @property
    def label(self) -> str:
        """How messages name it: ``eviction policy 'arc:variant=paper'``."""
        what = self.spec or self.cls.name or f"{self.cls.__module__}:{self.cls.__qualname__}"
        return f"{get_kind(self.kind).label} {what!r}"

    @property
    def class_path(self) -> str:
        return f"{self.cls.__module__}:{self.cls.__qualname__}"

    def create(self, *context: Any, **overrides: Any) -> Any:
        """``cls(*context, **options)``, with ``overrides`` replacing chosen options."""
        return self.cls(*context, **{**self.options, **overrides})

    def option_names(self) -> set[str]:
        return {option.name for option in plugin_options(self.cls)}


def resolve_target(
    kind: str, plugin: object, options: Mapping[str, Any] | None = None
) -> PluginTarget:
    """Turn what a suite was given into a :class:`PluginTarget`.

    :param plugin: a :class:`PluginTarget`; a plugin class; or a config string
        (``lru``, ``arc:variant=paper``, ``pkg.module:Class:opt=1``) resolved
        against the installed plugins exactly as ``kvframe run`` would.
    :param options: Python values for options, on top of the config string's.
    :raises SuiteConfigError: when nothing usable was given.
    """
    kind = get_kind(kind).name
    options = dict(options or {})
    if isinstance(plugin, PluginTarget):
        return attrs.evolve(plugin, options={**plugin.options, **options})
    if isinstance(plugin, str):
        from kvframe.host.registry import get_registry

        try:
            resolved = get_registry().resolve(kind, plugin)
        except ConfigError as err:
            raise SuiteConfigError(str(err)) from None
        return PluginTarget(kind, resolved.cls, {**resolved.options, **options}, plugin)
    if isinstance(plugin, type):
        found = kind_of(plugin)
        if found is None or found.name != kind:
            base = get_kind(kind).base.__name__
            raise SuiteConfigError(f"{plugin!r} is not a subclass of kvframe.{base}")
        unknown = set(options) - {o.name for o in plugin_options(plugin)}
        if unknown:
            raise SuiteConfigError(
                f"{plugin.__qualname__} has no option(s) {', '.join(sorted(unknown))}"
            )
        return PluginTarget(kind, plugin, options)
    raise SuiteConfigError(
        f"no {get_kind(kind).label} to test: set `plugin = MyClass` (or a config string "
        "such as 'lru' or 'my_pkg.mod:MyClass:opt=1') on the test class, or run "
        f"`pytest --kvframe-plugin {kind}:NAME`"
    )


def isolated_registry(target: PluginTarget) -> tuple[Any, str]:
    """A registry that holds only ``target``'s class (no entry points), and its name there."""
    from kvframe.host.registry import PluginRegistry

    registry = PluginRegistry(entry_points=())
    name = target.cls.name or "plugin-under-test"
    registry.register_class(target.cls, name=name)
    return registry, name


# ==========================================================================
# Messages
# ==========================================================================


def fmt(value: object) -> str:
    """Short, stable text for keys, sets and lists in messages (sets sorted)."""
    if isinstance(value, set | frozenset):
        return "{" + ", ".join(sorted((fmt(v) for v in value), key=_natural)) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(fmt(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, bytes):
        return value.decode("ascii", "backslashreplace") if value.isascii() else value.hex()
    return repr(value) if isinstance(value, str) else str(value)


def _natural(text: str) -> tuple[int, int | str]:
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)


class OpLog:
    """The calls made on a plugin so far, for messages: ``insert(3), touch([3])``.

    Long histories keep their last ``limit`` calls (hypothesis shrinks a failing
    sequence first, so the printed one is normally short anyway).
    """

    def __init__(self, limit: int = 60) -> None:
        self.calls: list[str] = []
        self.limit = limit

    def add(self, call: str) -> None:
        self.calls.append(call)

    def text(self) -> str:
        if not self.calls:
            return "(no calls yet)"
        shown = self.calls[-self.limit :]
        prefix = (
            f"... {len(self.calls) - len(shown)} earlier calls, "
            if len(shown) < len(self.calls)
            else ""
        )
        return prefix + ", ".join(shown)

    def violation(self, what: str, detail: str) -> ContractViolation:
        """``after <calls> <what>``: the standard shape of an eviction-style failure."""
        return ContractViolation(f"after {self.text()}\n{what}\n{detail}".rstrip())


# ==========================================================================
# Memory
# ==========================================================================

_NOT_OWNED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
)


CHURN_SHORT = 40
CHURN_LONG = 400
"""Keys per block of capacity after which a churn check samples a policy's footprint."""


def footprints_over_churn(
    policy: object, capacity: int, step: Callable[[int], None]
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Make ``step(i)`` for ``CHURN_LONG * capacity`` keys; the policy's :func:`footprint`
    after ``CHURN_SHORT`` and ``CHURN_LONG`` times its capacity of keys went through it."""
    short, long = CHURN_SHORT * capacity, CHURN_LONG * capacity
    samples: dict[int, tuple[int, int]] = {}
    for i in range(long):
        step(i)
        if i + 1 in (short, long):
            samples[i + 1] = footprint(policy)
    return samples[short], samples[long]


def grows_with_keys(short: tuple[int, int], long: tuple[int, int], capacity: int) -> bool:
    """Whether the footprint grew past a multiple of the capacity between the samples."""
    return long[0] > short[0] + 4 * capacity + 64


def footprint(root: object) -> tuple[int, int]:
    """``(objects, bytes)`` reachable from ``root``, classes, modules and functions excluded.

    Deterministic (it walks references, it does not ask the allocator), so two
    footprints of the same policy after different amounts of work can be
    compared exactly: a policy with bounded memory stops growing.
    """
    seen = {id(root)}
    stack = [root]
    count = size = 0
    while stack:
        obj = stack.pop()
        count += 1
        size += sys.getsizeof(obj, 0)
        for ref in gc.get_referents(obj):
            if id(ref) in seen or isinstance(ref, _NOT_OWNED):
                continue
            seen.add(id(ref))
            stack.append(ref)
    return count, size


# ==========================================================================
# Option types
# ==========================================================================

_NoneType = type(None)


def _supported(annotation: Any) -> bool:
    """Whether :func:`kvframe.config.convert_option` converts text to this type on purpose."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:  # kvframe.config.Bytes, or any hint with metadata
        return _supported(typing.get_args(annotation)[0])
    if origin is Literal:
        return all(isinstance(arg, str | int | bool) for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return all(a is _NoneType or _supported(a) for a in typing.get_args(annotation))
    if annotation in (int, float, bool, str):
        return True
    if isinstance(annotation, type):
        import enum

        return issubclass(annotation, pathlib.PurePath | enum.Enum)
    return False


def _fits(value: Any, annotation: Any) -> bool:
    """Whether a default value has the option's declared type."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _fits(value, typing.get_args(annotation)[0])
    if origin is Literal:
        return value in typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(
            value is None if a is _NoneType else _fits(value, a)
            for a in typing.get_args(annotation)
        )
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not (isinstance(value, float) and math.isnan(value))
        )
    if isinstance(annotation, type) and issubclass(annotation, pathlib.PurePath):
        return isinstance(value, pathlib.PurePath | str)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


# ==========================================================================
# Import weight
# ==========================================================================

_IMPORT_PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    try:
        importlib.import_module(sys.argv[1])
    except ModuleNotFoundError as err:
        print(json.dumps({"missing": err.name, "error": repr(err)}))
        raise SystemExit(0)
    heavy = json.loads(sys.argv[2])
    print(json.dumps({"heavy": sorted(m for m in heavy if m in sys.modules)}))
    """
)


def heavy_imports(module: str, heavy: Iterable[str]) -> dict[str, Any]:
    """Import ``module`` in a fresh interpreter; report which ``heavy`` modules came with it.

    A fresh interpreter because this one has imported everything already. It
    sees the same ``sys.path`` as this one, so modules that tests put on the
    path are found.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE, module, json.dumps(list(heavy))],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return {"error": "\n".join(tail)}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ==========================================================================
# The base of every suite
# ==========================================================================


class PluginSuite:
    """Checks every plugin kind must pass; each kind's suite subclasses this.

    Two ways to use a suite:

    * ``pytest --kvframe-plugin eviction:NAME`` runs it for an installed plugin
      with no test code at all;
    * subclass it in your own test file, name your plugin, and pytest collects
      the subclass like any test class::

          from kvframe.testing import EvictionPolicySuite

          class TestMyLFU(EvictionPolicySuite):
              plugin = MyLFU                    # or a config string: "lfu:decay=0.5"
              options = {"decay": 0.5}          # Python values, optional

      Override a ``test_*`` method with ``pytest.mark.skip(reason=...)`` to skip
      one check, set a documented capability flag (e.g.
      :attr:`EvictionPolicySuite.gpu_prefix_cache`) to ``False``, or override the
      ``kvframe_target`` fixture to build the plugin with fixtures of your own.
    """

    kind: ClassVar[str] = ""
    """The extension point this suite checks; set by each kind's suite."""

    plugin: ClassVar[object] = None
    """The plugin to test: a class, or a config string resolved against the installed plugins."""

    options: ClassVar[Mapping[str, Any]] = {}
    """Options (Python values) to build the plugin with, on top of the config string's."""

    heavy_modules: ClassVar[tuple[str, ...]] = HEAVY_MODULES
    """Modules a plugin must not import at import time (see the import-weight check)."""

    @pytest.fixture
    def kvframe_target(self, request: pytest.FixtureRequest) -> PluginTarget:
        """The plugin under test: ``--kvframe-plugin`` parametrizes it, else :attr:`plugin`."""
        given = getattr(request, "param", None)
        try:
            return resolve_target(
                self.kind, given if given is not None else self.plugin, self.options
            )
        except SuiteConfigError as err:
            pytest.fail(f"{type(self).__name__}: {err}", pytrace=False)

    max_examples: ClassVar[int] = 50
    """Generated cases per property (hypothesis, derandomized); ``--kvframe-max-examples N``
    overrides it for every suite of the run."""

    @pytest.fixture(autouse=True)
    def _kvframe_suite_setup(
        self,
        request: pytest.FixtureRequest,
        tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Run each check in a scratch directory (a plugin that writes files by default,
        like a tracer's ``trace.jsonl``, must not litter the author's project), and
        apply ``--kvframe-max-examples``."""
        monkeypatch.chdir(tmp_path)
        override = request.config.getoption("kvframe_max_examples", default=None)
        if override:
            self.max_examples = override  # type: ignore[misc]  # this instance only

    def examples(self, share: float = 1.0) -> int:
        """``max_examples`` scaled for a cheaper property (at least one)."""
        return max(1, int(self.max_examples * share))

    # -- identity -----------------------------------------------------------

    def test_has_a_valid_name(self, kvframe_target: PluginTarget) -> None:
        """``name`` is what users type after ``--eviction``: it must parse as a config string."""
        import re

        cls = kvframe_target.cls
        name = cls.name
        if not isinstance(name, str) or not name:
            raise ContractViolation(
                f"{cls.__qualname__} has no name: set `name = '...'` on the class "
                "(the string users select it by)"
            )
        if not re.fullmatch(NAME_PATTERN, name) or name != name.lower():
            raise ContractViolation(
                f"{cls.__qualname__}.name = {name!r} is not a valid plugin name: use lower-case "
                "letters, digits, '_' and '-' (no dots, colons, commas or spaces)"
            )

    def test_has_a_one_line_description(self, kvframe_target: PluginTarget) -> None:
        """``kvframe plugins`` shows one line per plugin: the class's ``description``."""
        cls = kvframe_target.cls
        text = cls.description or (inspect.getdoc(cls) or "").split("\n", 1)[0]
        if not isinstance(text, str) or not text.strip():
            raise ContractViolation(
                f"{cls.__qualname__} has no description: set `description = '...'` (one line, "
                "shown by `kvframe plugins`)"
            )
        if "\n" in text:
            raise ContractViolation(
                f"{cls.__qualname__}.description spans several lines; `kvframe plugins` "
                "shows one line per plugin"
            )

    def test_is_a_concrete_subclass_of_its_base(self, kvframe_target: PluginTarget) -> None:
        cls = kvframe_target.cls
        base = get_kind(self.kind).base
        if not issubclass(cls, base):
            raise ContractViolation(f"{cls.__qualname__} does not subclass kvframe.{base.__name__}")
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
            raise ContractViolation(f"{cls.__qualname__} is abstract: implement {missing}")

    # -- options ------------------------------------------------------------

    def test_options_are_typed_keyword_only_parameters(self, kvframe_target: PluginTarget) -> None:
        """Options come from config strings as text; their type hints say how to convert it."""
        cls = kvframe_target.cls
        init = cls.__init__
        problems: list[str] = []
        if init is not object.__init__:
            params = list(inspect.signature(init).parameters.values())[1:]
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
                problems.append(
                    "__init__ takes **kwargs, so a misspelt option is accepted silently; "
                    "declare each option as a keyword-only parameter instead"
                )
            if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
                problems.append("__init__ takes *args; the host passes only the kind's context")
        context = context_params(cls)
        expected = _CONTEXT[get_kind(self.kind).name]
        if len(context) != len(expected):
            want = ", ".join(expected) if expected else "nothing"
            problems.append(
                f"__init__ has positional parameter(s) ({', '.join(context) or 'none'}) but the "
                f"host passes {want}; options must be keyword-only (after `*`)"
            )
        for option in plugin_options(cls):
            if not _supported(option.annotation):
                problems.append(
                    f"option {option.name!r} has type {option.type_text!r}; use int, float, "
                    "bool, str, pathlib.Path, an Enum, a Literal[...] or a union of those with "
                    "None, so a config string's text can be converted"
                )
            elif not option.required and not _fits(option.default, option.annotation):
                problems.append(
                    f"option {option.name!r} defaults to {option.default!r}, which is not a "
                    f"{option.type_text}"
                )
        if problems:
            raise ContractViolation(
                f"{kvframe_target.label} ({kvframe_target.class_path}): " + "; ".join(problems)
            )

    def test_unknown_options_are_rejected(self, kvframe_target: PluginTarget) -> None:
        """A typo in a config string must be an error naming it, never silently ignored."""
        registry, name = isolated_registry(kvframe_target)
        bogus = "kvframe_suite_no_such_option"
        try:
            registry.resolve(self.kind, f"{name}:{bogus}=1")
        except ConfigError as err:
            if bogus not in str(err):
                raise ContractViolation(
                    f"the error for an unknown option does not name it: {err}"
                ) from None
            return
        raise ContractViolation(
            f"{kvframe_target.label} accepted the unknown option {bogus!r}: a misspelt option "
            "would be ignored silently (does __init__ take **kwargs?)"
        )

    def test_is_selectable_when_it_is_the_only_plugin(self, kvframe_target: PluginTarget) -> None:
        """Registered alone (nothing else installed), it is found by name and listed as usable."""
        registry, name = isolated_registry(kvframe_target)
        entries = [e for e in registry.entries() if e.name == name]
        broken = [e for e in entries if e.status != "ok"]
        if broken or not entries:
            detail = broken[0].error if broken else "it is not listed"
            raise ContractViolation(f"{kvframe_target.label} cannot be registered: {detail}")
        if registry.get(self.kind, name) is not kvframe_target.cls:
            raise ContractViolation(f"selecting {name!r} did not give {kvframe_target.class_path}")

    # -- import weight ------------------------------------------------------

    def test_import_pulls_no_heavy_dependencies(self, kvframe_target: PluginTarget) -> None:
        """``kvframe plugins`` imports every installed plugin: importing one must stay cheap."""
        module = kvframe_target.cls.__module__
        report = heavy_imports(module, self.heavy_modules)
        if "missing" in report:
            missing = report["missing"] or ""
            if module == missing or module.startswith(missing + "."):
                pytest.skip(
                    f"module {module!r} cannot be imported by name in a fresh interpreter "
                    "(a class defined in a test file?); import weight not checked"
                )
            raise ContractViolation(f"importing {module!r} failed: {report['error']}")
        if "error" in report:
            raise ContractViolation(f"importing {module!r} failed:\n{report['error']}")
        if report["heavy"]:
            heavy = ", ".join(report["heavy"])
            raise ContractViolation(
                f"importing {module!r} imports {heavy}: every `kvframe plugins` listing and "
                "engine start would pay for it; import it inside the method that needs it"
            )


def describe_call(name: str, *args: object, **kwargs: object) -> str:
    """``evict(2, protected={5})`` for messages."""
    parts = [fmt(a) for a in args] + [f"{k}={fmt(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def call_plugin(log: OpLog, call: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a plugin method; an exception it raises becomes a violation naming the call history."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kwargs)
    except ContractViolation:
        raise
    except Exception as err:
        raise log.violation(f"then {call} raised {type(err).__name__}: {err}", "") from err
