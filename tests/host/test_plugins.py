"""The plugin host: registration, entry points, selection, failures and tracing."""

from __future__ import annotations

import sys
import types
from collections import OrderedDict
from collections.abc import Callable

import attrs
import pluggy
import pytest
from structlog.testing import capture_logs

import kvframe
from kvframe.config import ConfigError
from kvframe.contract.records import RequestFinished, StepSnapshot
from kvframe.host.registry import PluginRegistry, Tracing, get_registry, tracing_manager

# ==========================================================================
# Test-only plugin classes (the real policies live in plugins/ and are not used here)
# ==========================================================================


class Recency(kvframe.EvictionPolicy):
    """Evicts the least recently touched idle block."""

    name = "recency"
    description = "Test-only recency order."

    def __init__(self, capacity: int, *, ghost: bool = False, budget: int = 0) -> None:
        super().__init__(capacity)
        self.ghost = ghost
        self.budget = budget
        self.blocks: OrderedDict[object, object] = OrderedDict()

    def get(self, key):
        return self.blocks.get(key)

    def insert(self, key, block):
        self.blocks[key] = block

    def remove(self, key):
        del self.blocks[key]

    def touch(self, keys):
        for key in reversed(list(keys)):
            if key in self.blocks:
                self.blocks.move_to_end(key)

    def evict(self, n, protected):
        idle = [(k, b) for k, b in self.blocks.items() if k not in protected and b.ref_cnt == 0]
        victims = idle[:n]
        if len(victims) < n:
            return None
        for key, _ in victims:
            del self.blocks[key]
        return victims


class Frequency(Recency):
    name = "frequency"
    description = ""  # listings fall back to the docstring's first line


class Strict(Recency):
    name = "strict"

    def __init__(self, capacity: int, *, limit: int = 1) -> None:
        super().__init__(capacity)
        if limit < 1:
            raise ValueError("limit must be at least 1")


class Oldest(kvframe.SchedulingPolicy):
    name = "oldest"

    def create_queue(self):  # pragma: no cover - not exercised here
        return []

    def select_queue(self, waiting, skipped_waiting):  # pragma: no cover
        return waiting

    def choose_victim(self, running):  # pragma: no cover
        return running[-1]


class Recorder(kvframe.Tracer):
    name = "recorder"

    def __init__(self, *, label: str = "r", log: list | None = None) -> None:
        self.label = label
        self.log: list[tuple[str, str, object]] = log if log is not None else []
        self.closed = False

    def on_step_snapshot(self, snapshot):
        self.log.append((self.label, "snapshot", snapshot))

    def on_kv_events(self, step, now, events):
        self.log.append((self.label, "kv", (step, now, tuple(events))))

    def on_request_finished(self, record):
        self.log.append((self.label, "finished", record))

    def close(self):
        self.closed = True


class FinishedOnly(kvframe.Tracer):
    name = "finished_only"

    def __init__(self) -> None:
        self.records: list[object] = []

    def on_request_finished(self, record):
        self.records.append(record)


@attrs.frozen
class Block:
    ref_cnt: int = 0


@attrs.frozen
class FakeDist:
    name: str
    version: str


@attrs.frozen
class FakeEntryPoint:
    """Quacks like ``importlib_metadata.EntryPoint`` with a distribution attached."""

    name: str
    value: str
    dist: FakeDist | None = None

    def load(self) -> object:
        import importlib_metadata

        return importlib_metadata.EntryPoint(self.name, self.value, "kvframe").load()


def ep(name: str, value: str, dist: str = "kvframe-test", version: str = "1.0") -> FakeEntryPoint:
    return FakeEntryPoint(name, value, FakeDist(dist, version))


# ==========================================================================
# Programmatic registration and selection
# ==========================================================================


def test_create_returns_the_plain_instance_whose_methods_never_touch_pluggy(
    registry: PluginRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.register_class(Recency, distribution="tests")
    policy = registry.create("eviction", "recency:ghost=yes,budget=1024", 4)
    assert type(policy) is Recency
    assert (policy.capacity, policy.ghost, policy.budget) == (4, True, 1024)

    def no_hooks(*args, **kwargs):
        raise AssertionError("a hot-path call went through pluggy")

    # Scoped tightly: pytest itself runs on pluggy and must not see the patch.
    with monkeypatch.context() as patch:
        patch.setattr(pluggy.HookCaller, "__call__", no_hooks)
        policy.insert("a", Block())
        policy.insert("b", Block())
        policy.touch(["a"])
        victims = policy.evict(1, frozenset())
    assert victims == [("b", Block())]


def test_resolve_returns_class_and_converted_options_without_building(
    registry: PluginRegistry,
) -> None:
    registry.register_class(Recency)
    resolved = registry.resolve("eviction", "recency:ghost=on")
    assert resolved.cls is Recency
    assert resolved.name == "recency"
    assert resolved.options == {"ghost": True}
    assert resolved.effective_options() == {"ghost": True, "budget": 0}
    assert resolved.spec.source == "recency:ghost=on"


def test_register_module_offers_several_classes_through_hookimpls(
    registry: PluginRegistry,
) -> None:
    module = types.ModuleType("multi_policies")

    @kvframe.hookimpl
    def kvframe_eviction_policies():
        return {"recency": Recency, "frequency": Frequency}

    @kvframe.hookimpl
    def kvframe_scheduling_policies():
        return {"oldest": Oldest}

    module.kvframe_eviction_policies = kvframe_eviction_policies
    module.kvframe_scheduling_policies = kvframe_scheduling_policies
    assert registry.register_module(module, distribution="multi") == "multi_policies"
    assert registry.names("eviction") == ["frequency", "recency"]
    assert registry.names("scheduler") == ["oldest"]
    assert isinstance(registry.create("scheduling", "oldest"), Oldest)


def test_registration_hooks_run_once_per_plugin(registry: PluginRegistry) -> None:
    calls: list[str] = []
    module = types.ModuleType("counted")

    @kvframe.hookimpl
    def kvframe_eviction_policies():
        calls.append("called")
        return {"recency": Recency}

    module.kvframe_eviction_policies = kvframe_eviction_policies
    registry.register_module(module)
    assert registry.names("eviction") == ["recency"]
    registry.register_class(Frequency)  # invalidates the index, not the offers
    assert registry.names("eviction") == ["frequency", "recency"]
    assert calls == ["called"]


def test_register_class_rejects_classes_that_are_not_plugins(registry: PluginRegistry) -> None:
    with pytest.raises(TypeError, match="is not a kvframe plugin class"):
        registry.register_class(dict)  # type: ignore[arg-type]

    class Nameless(Recency):
        name = ""

    with pytest.raises(ValueError, match="Nameless has no name"):
        registry.register_class(Nameless)


def test_register_class_under_another_name_and_twice_is_harmless(registry: PluginRegistry) -> None:
    registry.register_class(Recency, name="mru")
    registry.register_class(Recency, name="mru")
    registry.register_class(Recency)
    assert registry.names("eviction") == ["mru", "recency"]
    assert [e.status for e in registry.entries("eviction")] == ["ok", "ok"]


def test_unknown_name_suggests_the_closest_and_lists_installed(registry: PluginRegistry) -> None:
    registry.register_class(Recency)
    registry.register_class(Frequency)
    with pytest.raises(ConfigError) as info:
        registry.resolve("eviction", "recncy:ghost=1")
    err = info.value
    assert err.message == "unknown eviction policy 'recncy'; did you mean 'recency'?"
    assert str(err).splitlines()[1:4] == [
        "    recncy:ghost=1",
        "    ^^^^^^",
        "  installed eviction policies: frequency, recency",
    ]


def test_names_are_per_kind(registry: PluginRegistry) -> None:
    registry.register_class(Recency)
    with pytest.raises(ConfigError) as info:
        registry.resolve("scheduling", "recency")
    assert info.value.message == "unknown scheduling policy 'recency'"
    assert "no scheduling policies are installed" in str(info.value)


def test_syntax_errors_from_the_registry_list_what_is_installed(registry: PluginRegistry) -> None:
    registry.register_class(Recency)
    with pytest.raises(ConfigError) as info:
        registry.resolve("eviction", "recency:ghost")
    assert "expected '=' after option name 'ghost'" in info.value.message
    assert "installed eviction policies: recency" in str(info.value)


def test_option_errors_go_through_resolve(registry: PluginRegistry) -> None:
    registry.register_class(Recency)
    with pytest.raises(ConfigError) as info:
        registry.resolve("eviction", "recency:gost=1")
    assert info.value.message == (
        "unknown option 'gost' for eviction policy 'recency'; did you mean 'ghost'?"
    )
    assert "accepted options: ghost: bool = False, budget: int = 0" in str(info.value)


def test_constructor_value_errors_become_config_errors(registry: PluginRegistry) -> None:
    registry.register_class(Strict)
    with pytest.raises(ConfigError) as info:
        registry.create("eviction", "strict:limit=0", 8)
    assert info.value.message == (
        "eviction policy 'strict' rejected its options: limit must be at least 1"
    )
    assert info.value.text == "strict:limit=0"


def test_get_registry_is_one_lazily_built_registry() -> None:
    assert get_registry() is get_registry()
    assert isinstance(get_registry(), PluginRegistry)


# ==========================================================================
# Selection by class path
# ==========================================================================

POLICY_MODULE = """
    import kvframe
    from collections import OrderedDict


    class Frequency(kvframe.EvictionPolicy):
        name = "freq"

        def __init__(self, capacity: int, *, decay: float = 0.0) -> None:
            super().__init__(capacity)
            self.decay = decay

        def get(self, key): ...
        def insert(self, key, block): ...
        def remove(self, key): ...
        def touch(self, keys): ...
        def evict(self, n, protected): ...


    class Half(kvframe.EvictionPolicy):
        name = "half"


    class Trace(kvframe.Tracer):
        name = "trace"


    def helper():
        pass
"""


def test_an_uninstalled_class_is_selected_by_its_path(
    registry: PluginRegistry, write_module: Callable[..., str]
) -> None:
    write_module("lab.policies", POLICY_MODULE)
    resolved = registry.resolve("eviction", "lab.policies:Frequency:decay=0.5")
    assert resolved.cls.__module__ == "lab.policies"
    assert resolved.name == "lab.policies:Frequency"
    policy = resolved.create(16)
    assert (policy.capacity, policy.decay) == (16, 0.5)


def test_an_undotted_module_path_works_too(
    registry: PluginRegistry, write_module: Callable[..., str]
) -> None:
    write_module("labpolicies", POLICY_MODULE)
    assert registry.resolve("eviction", "labpolicies:Frequency").cls.__name__ == "Frequency"


@pytest.mark.parametrize(
    ("path", "message", "marked"),
    [
        (
            "lab.policies:Trace",
            "lab.policies:Trace is not a subclass of kvframe.EvictionPolicy "
            "(it is a tracer; select it with --tracer)",
            "Trace",
        ),
        (
            "lab.policies:helper",
            "lab.policies:helper is not a subclass of kvframe.EvictionPolicy",
            "helper",
        ),
        (
            "lab.policies:Frequncy",
            "module 'lab.policies' has no attribute 'Frequncy'; did you mean 'Frequency'?",
            "Frequncy",
        ),
        (
            "lab.policies:Half",
            "lab.policies:Half is abstract: abstract methods not implemented: "
            "evict, get, insert, remove, touch",
            "Half",
        ),
        (
            "lab.nothere:Frequency",
            "cannot import module 'lab.nothere': "
            "ModuleNotFoundError: No module named 'lab.nothere'",
            "lab.nothere",
        ),
    ],
)
def test_class_path_errors(
    registry: PluginRegistry, write_module: Callable[..., str], path, message, marked
) -> None:
    write_module("lab.policies", POLICY_MODULE)
    registry.register_class(Recency)
    with pytest.raises(ConfigError) as info:
        registry.resolve("eviction", path)
    err = info.value
    assert err.message == message
    assert err.span is not None and path[slice(*err.span)] == marked
    assert "installed eviction policies: recency" in str(err)


def test_module_that_fails_to_import_by_path(
    registry: PluginRegistry, write_module: Callable[..., str]
) -> None:
    write_module("fragile", "raise ImportError('needs libfoo')\n")
    with pytest.raises(
        ConfigError, match="cannot import module 'fragile': ImportError: needs libfoo"
    ):
        registry.resolve("eviction", "fragile:Policy")


# ==========================================================================
# Entry points, broken plugins and conflicts
# ==========================================================================

ONE_CLASS = """
    import kvframe

    class Demo(kvframe.EvictionPolicy):
        name = "demo"
        description = "A demo policy."

        def __init__(self, capacity: int, *, decay: float = 0.0) -> None:
            super().__init__(capacity)
            self.decay = decay

        def get(self, key): ...
        def insert(self, key, block): ...
        def remove(self, key): ...
        def touch(self, keys): ...
        def evict(self, n, protected): ...

    class Nameless(Demo):
        name = ""

    class NotAPlugin:
        pass
"""

HOOK_MODULE = """
    import kvframe
    from {one}  import Demo

    class Abstract(kvframe.EvictionPolicy):
        name = "abstract"

    @kvframe.hookimpl
    def kvframe_eviction_policies():
        return {{"hooked": Demo, "bad.name": Demo, "notaclass": int, "abstract": Abstract}}

    @kvframe.hookimpl
    def kvframe_tracers():
        raise RuntimeError("tracer hook exploded")

    @kvframe.hookimpl
    def kvframe_reuse_filters():
        return ["not", "a", "dict"]

    @kvframe.hookimpl
    def kvframe_eviction_policy():
        return {{}}
"""


@pytest.fixture
def installed(write_module: Callable[..., str]) -> list[FakeEntryPoint]:
    one = write_module("demo_one", ONE_CLASS)
    hooks = write_module("demo_hooks", HOOK_MODULE.format(one=one))
    write_module("demo_broken", "raise ImportError('needs libfoo')\n")
    write_module("demo_nohooks", "X = 1\n")
    return [
        ep("demo", f"{one}:Demo", dist="kvframe-demo", version="0.3"),
        ep("nameless", f"{one}:Nameless", dist="kvframe-demo", version="0.3"),
        ep("hooks", hooks, dist="kvframe-hooks"),
        ep("broken", "demo_broken:Policy", dist="kvframe-broken", version="2.0"),
        ep("notaplugin", f"{one}:NotAPlugin", dist="kvframe-odd"),
        ep("nohooks", "demo_nohooks", dist="kvframe-odd"),
    ]


def test_entry_points_are_loaded_lazily_on_first_use(installed: list[FakeEntryPoint]) -> None:
    import sys

    registry = PluginRegistry(entry_points=installed)
    assert "demo_one" not in sys.modules
    assert "demo" in registry.names("eviction")
    assert "demo_one" in sys.modules


def test_one_class_and_hook_module_entry_points_are_both_selectable(
    installed: list[FakeEntryPoint],
) -> None:
    registry = PluginRegistry(entry_points=installed)
    with capture_logs():
        assert registry.names("eviction") == ["demo", "hooked", "nameless"]
    demo = registry.create("eviction", "demo:decay=0.25", 8)
    assert (type(demo).__name__, demo.decay) == ("Demo", 0.25)
    (entry,) = [e for e in registry.entries("eviction") if e.name == "demo"]
    assert (entry.source.distribution, entry.source.version) == ("kvframe-demo", "0.3")
    assert entry.source.entry_point == "demo = demo_one:Demo"
    assert entry.description == "A demo policy."
    assert [o.describe() for o in entry.options] == ["decay: float = 0.0"]


def test_failures_are_logged_recorded_and_harmless(installed: list[FakeEntryPoint]) -> None:
    registry = PluginRegistry(entry_points=installed)
    with capture_logs() as logs:
        entries = registry.entries()
    problems = {(e.kind, e.name): e.error for e in entries if e.status == "broken"}
    assert problems == {
        (None, "broken"): "failed to import: ImportError: needs libfoo",
        (None, "notaplugin"): "demo_one:NotAPlugin is a class but not a subclass of a kvframe "
        "base (kvframe.SchedulingPolicy, kvframe.EvictionPolicy, ...)",
        (None, "nohooks"): "demo_nohooks implements no kvframe hooks",
        (None, "hooks"): "implements unknown hook 'kvframe_eviction_policy'; "
        "did you mean 'kvframe_eviction_policies'?",
        ("eviction", "bad.name"): "invalid name 'bad.name': use letters, digits, '_' and '-' "
        "(no dots or colons)",
        ("eviction", "notaclass"): "offers <class 'int'>, which is not a subclass of "
        "kvframe.EvictionPolicy",
        ("eviction", "abstract"): "demo_hooks:Abstract is abstract: abstract methods not "
        "implemented: evict, get, insert, remove, touch",
        ("reuse_filter", "hooks"): "kvframe_reuse_filters() returned list, expected a "
        "{name: class} dict",
        ("tracer", "hooks"): "kvframe_tracers() raised RuntimeError: tracer hook exploded",
    }
    load_failed = [log for log in logs if log["event"] == "plugin_load_failed"]
    assert load_failed == [
        {
            "event": "plugin_load_failed",
            "log_level": "warning",
            "distribution": "kvframe-broken",
            "entry_point": "broken = demo_broken:Policy",
            "plugin": "kvframe-broken:broken",
            "kind": None,
            "error": "failed to import: ImportError: needs libfoo",
        }
    ]
    assert {log["event"] for log in logs} == {
        "plugin_load_failed",
        "plugin_invalid",
        "plugin_hook_failed",
    }
    assert len(logs) == len(problems)
    with capture_logs() as again:
        registry.register_class(Recency)  # rebuilding the index does not warn twice
        registry.entries()
    assert again == []


def test_an_entry_point_naming_a_module_without_hooks_suggests_naming_its_class(
    write_module: Callable[..., str],
) -> None:
    one = write_module("demo_one", ONE_CLASS)
    registry = PluginRegistry(entry_points=[ep("demo", one)])
    with capture_logs():
        (entry,) = registry.entries()
    assert entry.error == (
        "demo_one implements no kvframe hooks; "
        "to offer one class, name it in the entry point: 'demo_one:Demo'"
    )


def test_selecting_a_broken_plugin_says_why_it_is_broken(installed: list[FakeEntryPoint]) -> None:
    registry = PluginRegistry(entry_points=installed)
    with capture_logs(), pytest.raises(ConfigError) as info:
        registry.resolve("eviction", "broken")
    assert info.value.message == (
        "eviction policy 'broken' cannot be used: kvframe-broken 2.0 (entry point 'broken') "
        "failed to import: ImportError: needs libfoo"
    )
    with pytest.raises(ConfigError, match="kvframe_tracers\\(\\) raised RuntimeError"):
        registry.resolve("tracer", "hooks")


def test_unknown_name_mentions_plugins_that_failed_to_load(
    installed: list[FakeEntryPoint],
) -> None:
    registry = PluginRegistry(entry_points=installed)
    with capture_logs(), pytest.raises(ConfigError) as info:
        registry.resolve("eviction", "lfu")
    assert "these plugins failed to load and might have offered it: " in str(info.value)
    assert "kvframe-broken 2.0 (entry point 'broken'): failed to import" in str(info.value)


def test_two_plugins_offering_one_name_conflict_without_breaking_others(
    write_module: Callable[..., str],
) -> None:
    one = write_module("demo_one", ONE_CLASS)
    other = write_module("demo_other", ONE_CLASS)
    registry = PluginRegistry(
        entry_points=[
            ep("demo", f"{one}:Demo", dist="kvframe-demo"),
            ep("demo", f"{other}:Demo", dist="kvframe-other"),
        ]
    )
    registry.register_class(Recency)
    with capture_logs() as logs:
        entries = registry.entries("eviction")
    assert [(e.name, e.status, e.source.distribution) for e in entries] == [
        ("demo", "conflict", "kvframe-demo"),
        ("demo", "conflict", "kvframe-other"),
        ("recency", "ok", None),
    ]
    assert entries[0].error == "name also offered by kvframe-other 1.0 (entry point 'demo')"
    assert [log["event"] for log in logs] == ["plugin_name_conflict"] * 2
    assert registry.names("eviction") == ["recency"]
    with pytest.raises(ConfigError) as info:
        registry.resolve("eviction", "demo")
    assert info.value.message == "eviction policy 'demo' is offered by more than one plugin"
    assert str(info.value).splitlines()[3:] == [
        "  kvframe-demo 1.0 (entry point 'demo'): demo_one:Demo",
        "  kvframe-other 1.0 (entry point 'demo'): demo_other:Demo",
        "  uninstall one, or select one by class path, e.g. 'demo_one:Demo'",
    ]
    assert registry.resolve("eviction", "demo_other:Demo").cls.__module__ == "demo_other"


def test_the_same_class_offered_twice_is_not_a_conflict(write_module: Callable[..., str]) -> None:
    one = write_module("demo_one", ONE_CLASS)
    hooks = write_module(
        "demo_same",
        f"""
        import kvframe
        from {one} import Demo

        @kvframe.hookimpl
        def kvframe_eviction_policies():
            return {{"demo": Demo}}
        """,
    )
    registry = PluginRegistry(entry_points=[ep("demo", f"{one}:Demo"), ep("same", hooks)])
    assert registry.names("eviction") == ["demo"]
    assert registry.entries("eviction")[0].status == "ok"


def test_entry_json_describes_the_plugin(installed: list[FakeEntryPoint]) -> None:
    registry = PluginRegistry(entry_points=installed)
    with capture_logs():
        (demo,) = [e for e in registry.entries() if e.name == "demo"]
        (broken,) = [e for e in registry.entries() if e.name == "broken"]
    assert demo.to_json() == {
        "kind": "eviction",
        "name": "demo",
        "status": "ok",
        "error": None,
        "distribution": "kvframe-demo",
        "version": "0.3",
        "entry_point": "demo = demo_one:Demo",
        "plugin": "kvframe-demo:demo",
        "class": "demo_one:Demo",
        "description": "A demo policy.",
        "options": [{"name": "decay", "type": "float", "required": False, "default": 0.0}],
    }
    assert broken.to_json()["status"] == "broken"
    assert broken.to_json()["class"] is None


# ==========================================================================
# Tracing
# ==========================================================================

SNAPSHOT = StepSnapshot(
    step=3,
    now=1.5,
    num_waiting=2,
    num_skipped_waiting=0,
    num_running=1,
    num_retained=0,
    num_free_blocks=10,
    num_cached_blocks=4,
    kv_usage=0.25,
)
FINISHED = RequestFinished(
    step=9,
    now=4.0,
    request_id="r1",
    status="FINISHED_STOPPED",
    num_prompt_tokens=16,
    num_output_tokens=4,
    num_cached_tokens=0,
    num_preemptions=0,
    arrival_time=0.0,
    first_token_time=1.0,
    finish_time=4.0,
)


def test_tracing_broadcasts_every_record_to_every_selected_tracer_in_order(
    registry: PluginRegistry,
) -> None:
    registry.register_class(Recorder)
    registry.register_class(FinishedOnly)
    tracing = registry.create_tracing(["recorder:label=a", "recorder:label=b", "finished_only"])
    assert isinstance(tracing, Tracing) and tracing.active
    first, second, finished_only = tracing.tracers
    shared: list[tuple[str, str, object]] = []
    first.log = second.log = shared

    tracing.hook.kvframe_step_snapshot(snapshot=SNAPSHOT)
    tracing.hook.kvframe_kv_events(step=3, now=1.5, events=[])
    tracing.hook.kvframe_request_finished(record=FINISHED)
    tracing.hook.kvframe_step_decision(decision=None)  # nobody listens: a no-op

    assert shared == [
        ("a", "snapshot", SNAPSHOT),
        ("b", "snapshot", SNAPSHOT),
        ("a", "kv", (3, 1.5, ())),
        ("b", "kv", (3, 1.5, ())),
        ("a", "finished", FINISHED),
        ("b", "finished", FINISHED),
    ]
    assert finished_only.records == [FINISHED]
    # Only overridden methods become hookimpls: FinishedOnly costs nothing per step.
    assert len(tracing.pm.hook.kvframe_step_snapshot.get_hookimpls()) == 2
    assert len(tracing.pm.hook.kvframe_request_finished.get_hookimpls()) == 3
    tracing.close()
    assert first.closed and second.closed


def test_no_tracer_selected_means_inactive_tracing(registry: PluginRegistry) -> None:
    tracing = registry.create_tracing([])
    assert not tracing.active
    assert tracing.hook.kvframe_step_snapshot(snapshot=SNAPSHOT) == []


def test_tracing_manager_is_separate_from_the_registry(registry: PluginRegistry) -> None:
    recorder = Recorder(label="x")
    pm = tracing_manager([recorder])
    assert pm is not registry.plugin_manager
    pm.hook.kvframe_step_snapshot(snapshot=SNAPSHOT)
    assert recorder.log == [("x", "snapshot", SNAPSHOT)]


def test_closing_tracing_closes_every_tracer_even_if_one_fails() -> None:
    class Exploding(kvframe.Tracer):
        name = "exploding"

        def close(self) -> None:
            raise OSError("disk full")

    later = Recorder()
    tracing = Tracing(tracing_manager([]), (Exploding(), later))
    with capture_logs() as logs, pytest.raises(OSError, match="disk full"):
        tracing.close()
    assert later.closed
    assert logs[0]["event"] == "tracer_close_failed"


def test_tracers_already_built_are_closed_when_a_later_one_fails() -> None:
    closed: list[str] = []

    class Recorder(kvframe.Tracer):
        name = "recorder"
        description = "remembers being closed"

        def close(self) -> None:
            closed.append(self.name)

    class Broken(kvframe.Tracer):
        name = "broken"
        description = "cannot be built"

        def __init__(self, *, fail: bool = True) -> None:
            raise ValueError("no such device")

    registry = PluginRegistry(entry_points=())
    registry.register_class(Recorder)
    registry.register_class(Broken)
    with pytest.raises(ConfigError, match="no such device"):
        registry.create_tracing(["recorder", "broken"])
    assert closed == ["recorder"]


def test_an_entry_point_naming_a_missing_class_says_so_with_a_suggestion(
    write_module: Callable[..., str],
) -> None:
    one = write_module("demo_one", ONE_CLASS)
    registry = PluginRegistry(entry_points=[ep("demo", f"{one}:Demmo", dist="kvframe-demo")])
    with capture_logs() as logs:
        (entry,) = registry.entries()
    assert entry.error == (
        "entry point names demo_one:Demmo, but demo_one (imported fine) has no attribute "
        "'Demmo'; did you mean 'Demo'?"
    )
    assert [log["error"] for log in logs if log["event"] == "plugin_load_failed"] == [entry.error]


def test_installed_plugin_problems_are_logged_once_per_process(
    write_module: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib_metadata

    import kvframe.host.registry

    one = write_module("demo_one", ONE_CLASS)
    broken = importlib_metadata.EntryPoint("demo", f"{one}:Missing", "kvframe")
    monkeypatch.setattr(importlib_metadata, "entry_points", lambda group: [broken])
    monkeypatch.setattr(kvframe.host.registry, "_WARNED_INSTALLED", set())
    with capture_logs() as logs:
        for _ in range(3):  # a run or a pytest session builds several scanning registries
            assert PluginRegistry().entries()[0].status == "broken"
    assert [log["event"] for log in logs] == ["plugin_load_failed"]
    assert "has no attribute 'Missing'" in logs[0]["error"]


def test_a_failed_entry_point_scan_fails_again_instead_of_finding_no_plugins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """importlib_metadata missing (seen in a vLLM environment): each lookup names it."""
    from kvframe.host.registry import PluginRegistry

    monkeypatch.setitem(sys.modules, "importlib_metadata", None)  # import raises
    registry = PluginRegistry()
    for _ in range(2):
        with pytest.raises(ImportError, match="importlib_metadata"):
            registry.names("scheduling")
