"""The conformance suite for routers (:class:`kvframe.Router`).

No fleet runs here. The suite drives a router with recorded *scenarios*: a
fleet's published signals (load reports, KV events with their publication
times, requests finishing) and arriving requests, generated from a seed and
served through :class:`SyntheticView`, a :class:`kvframe.FleetView` that holds
those recorded signals and nothing else. Whatever the router's rule, it

* returns a replica that exists: an ``int`` in ``range(num_replicas)``, for
  fleets of 1 to 8 replicas;
* chooses the same replicas when a fresh instance replays the same scenario
  with the same seed -- in this process, and in fresh interpreters with
  different string-hash salts (``PYTHONHASHSEED``), so no choice hangs on
  ``hash(str)``, the clock, a global, or anything but the view, the request,
  its own state and the seed;
* reads from the view only what a :class:`kvframe.FleetView` offers (``now``,
  ``num_replicas``, ``loads()``, ``take_kv_events()``, ``take_kv_event_batches()``,
  ``num_outstanding()``):
  the synthetic view holds no replica, and reading anything else from it is
  reported by name -- as is ``loads()`` from a router that declares
  ``uses_loads = False`` (the fleet keeps no reports for it), and
  ``num_outstanding()`` from one that declares ``uses_finishes = False``;
* keeps no reference to the view (or its bound methods) once ``route``
  returns: a fleet's view is valid during the call only, and a router that
  kept it could read signals it was not given at that arrival. What it keeps
  of the signals, it copies (records are immutable and may be kept);
* takes ``on_first_token`` and ``on_finished`` for every request it routed,
  in any order across requests (first token before finish for each);
* serves either pool of a disaggregated fleet (``--disagg``): attached with
  ``FleetInfo.role`` ``prefill`` or ``decode`` and the pool's size, it routes in
  range, and a deep copy of a fresh instance (the fleet copies the router for
  its decode pool) chooses as a fresh instance does.

Together, a router that reaches for a replica's internals has nothing to
reach here, is caught where it tries (the view), or chooses differently on a
replay.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import os
import random
import subprocess
import sys
import types
from collections.abc import Sequence
from typing import Any, ClassVar

from kvframe.contract.records import AllBlocksCleared, BlockRemoved, BlockStored
from kvframe.contract.routing import FleetInfo, PublishedEvent, ReplicaLoad, RoutingRequest
from kvframe.testing.common import ContractViolation, PluginSuite, PluginTarget

__all__ = ["RouterSuite", "Scenario", "SyntheticView", "make_scenario", "replay"]

BLOCK_SIZE = 16
FLEET_SIZES = (1, 2, 3, 4, 8)
_VIEW_MEMBERS = (
    "now",
    "num_replicas",
    "loads",
    "take_kv_events",
    "take_kv_event_batches",
    "num_outstanding",
)


class ViewMisuse(ContractViolation):
    """The router read something from the view that a FleetView does not offer."""


class SyntheticView:
    """A :class:`kvframe.FleetView` over recorded signals: nothing else is in it.

    The harness sets ``now``, the load reports, the pending KV events and the
    outstanding counts before each arrival. Any attribute a FleetView does not
    have is refused with a message naming it.
    """

    __slots__ = (
        "_events",
        "_finishes",
        "_kv",
        "_loads",
        "_now",
        "_num_replicas",
        "_outstanding",
        "_reports",
    )

    def __init__(
        self, num_replicas: int, *, kv_events: bool, loads: bool = True, finishes: bool = True
    ) -> None:
        self._num_replicas = num_replicas
        self._finishes = finishes
        self._kv = kv_events
        self._reports = loads
        self._now = 0.0
        self._loads: tuple[ReplicaLoad, ...] = tuple(
            ReplicaLoad(r, 0.0, 0, 0, 0.0, 0) for r in range(num_replicas)
        )
        self._events: list[PublishedEvent] = []
        self._outstanding = [0] * num_replicas

    def __getattr__(self, name: str) -> Any:
        raise ViewMisuse(
            f"the router read view.{name}, which a FleetView does not offer: a router sees "
            f"only {', '.join(_VIEW_MEMBERS)} (never a replica's internals)"
        )

    @property
    def now(self) -> float:
        return self._now

    @property
    def num_replicas(self) -> int:
        return self._num_replicas

    def loads(self) -> Sequence[ReplicaLoad]:
        if not self._reports:
            raise ViewMisuse(
                "the router read view.loads() but declares uses_loads = False: a fleet keeps "
                "no load reports for such a router (set uses_loads = True, or do not read them)"
            )
        return self._loads

    def take_kv_events(self) -> Sequence[PublishedEvent]:
        if not self._kv:
            return ()
        taken, self._events = tuple(self._events), []
        return taken

    def take_kv_event_batches(self) -> Sequence[tuple[int, float, Sequence[Any]]]:
        return [(p.replica, p.time, (p.event,)) for p in self.take_kv_events()]

    def num_outstanding(self, replica: int) -> int:
        if not self._finishes:
            raise ViewMisuse(
                "the router read view.num_outstanding() but declares uses_finishes = False: "
                "a fleet tells such a router no finishes (set uses_finishes = True, or do "
                "not read them)"
            )
        return self._outstanding[replica]


class Scenario:
    """A recorded run: the fleet's shape and seed, and its operations in order.

    Operations: ``("arrive", request fields)``, ``("loads", reports)``,
    ``("events", published)``, ``("first", u)`` and ``("finish", u)`` -- the
    outstanding request (for ``first``: of those without a first token) at
    position ``int(u * count)`` gets its first token or finishes, so the
    scenario does not depend on where the router sent anything.
    """

    def __init__(self, seed: int, num_replicas: int, ops: list[tuple[str, Any]]) -> None:
        self.seed = seed
        self.num_replicas = num_replicas
        self.ops = ops

    def describe(self) -> str:
        arrivals = sum(op == "arrive" for op, _ in self.ops)
        return f"scenario {self.seed} ({self.num_replicas} replicas, {arrivals} arrivals)"


def _doc_block(doc: int, i: int) -> bytes:
    return hashlib.blake2b(f"doc{doc}:{i}".encode(), digest_size=8).digest()


def _request_spec(rng: random.Random, index: int, now: float) -> dict[str, Any]:
    doc, shared = rng.randrange(6), rng.randrange(0, 13)
    unique = rng.randrange(0, 4)
    hashes = [_doc_block(doc, i) for i in range(shared)]
    hashes += [_doc_block(1000 + index, i) for i in range(unique)]
    job = f"job-{rng.randrange(5)}" if rng.random() < 0.4 else None
    return {
        "request_id": f"r{index}",
        "arrival_time": now,
        "num_prompt_tokens": len(hashes) * BLOCK_SIZE + rng.randrange(BLOCK_SIZE),
        "max_tokens": rng.randrange(1, 256),
        "priority": rng.randrange(3),
        "job_id": job,
        "turn": rng.randrange(4) if job else 0,
        "hashes": tuple(hashes),
    }


def _kv_events(rng: random.Random, num_replicas: int, now: float) -> tuple[PublishedEvent, ...]:
    events = []
    for _ in range(rng.randrange(4)):
        replica, doc = rng.randrange(num_replicas), rng.randrange(6)
        start, length = rng.randrange(12), rng.randrange(1, 6)
        hashes = tuple(_doc_block(doc, i) for i in range(start, start + length))
        medium = "CPU" if rng.random() < 0.15 else "GPU"
        kind = rng.random()
        if kind < 0.6:
            parent = _doc_block(doc, start - 1) if start else None
            event: Any = BlockStored(hashes, parent, BLOCK_SIZE, medium=medium)
        elif kind < 0.95:
            event = BlockRemoved(hashes, medium=medium)
        else:
            event = AllBlocksCleared(medium=medium)
        events.append(PublishedEvent(replica, now - rng.random() * 0.05, event))
    return tuple(events)


def make_scenario(seed: int, num_replicas: int | None = None, arrivals: int = 60) -> Scenario:
    """A scenario from ``seed``: shared prefixes, jobs, reports, events and finishes."""
    rng = random.Random(seed)
    n = num_replicas if num_replicas is not None else FLEET_SIZES[seed % len(FLEET_SIZES)]
    ops: list[tuple[str, Any]] = []
    now = 0.0
    for index in range(arrivals):
        now += rng.expovariate(4.0)
        if rng.random() < 0.3:
            ops.append(
                (
                    "loads",
                    tuple(
                        ReplicaLoad(
                            r,
                            now,
                            rng.randrange(8),
                            rng.randrange(8),
                            rng.random(),
                            rng.randrange(200),
                        )
                        for r in range(n)
                    ),
                )
            )
        if rng.random() < 0.6:
            ops.append(("events", _kv_events(rng, n, now)))
        while rng.random() < 0.35:
            ops.append(("first", rng.random()))
        while rng.random() < 0.35:
            ops.append(("finish", rng.random()))
        ops.append(("arrive", _request_spec(rng, index, now)))
    return Scenario(seed, n, ops)


def _routing_request(spec: dict[str, Any]) -> RoutingRequest:
    hashes = spec["hashes"]
    fields = {k: v for k, v in spec.items() if k != "hashes"}
    return RoutingRequest(**fields, hash_prompt=lambda: hashes)


def replay(
    router: Any, scenario: Scenario, *, after_each: Any = None, role: str = "aggregated"
) -> list[int]:
    """Attach ``router`` to the scenario's fleet and play it; the choices, in order.

    A choice is checked as it is made: an ``int`` (not a ``bool``) in range.
    ``after_each(view)`` runs after every ``route`` call (the reference check);
    ``role``: the pool of a disaggregated fleet the router serves (``FleetInfo.role``).
    """
    n = scenario.num_replicas
    router.attach(FleetInfo(num_replicas=n, block_size=BLOCK_SIZE, seed=scenario.seed, role=role))
    view = SyntheticView(
        n,
        kv_events=bool(getattr(router, "uses_kv_events", False)),
        loads=bool(getattr(router, "uses_loads", True)),
        finishes=bool(getattr(router, "uses_finishes", True)),
    )
    outstanding: list[tuple[str, int]] = []
    prefilling: list[tuple[str, int]] = []
    choices: list[int] = []
    for op, data in scenario.ops:
        if op == "loads":
            view._loads = data
        elif op == "events":
            view._events.extend(data)
        elif op == "first" and prefilling:
            request_id, replica = prefilling.pop(int(data * len(prefilling)))
            router.on_first_token(request_id, replica, view._now)
        elif op == "finish" and outstanding:
            request_id, replica = outstanding.pop(int(data * len(outstanding)))
            view._outstanding[replica] -= 1
            if (request_id, replica) in prefilling:
                prefilling.remove((request_id, replica))
                router.on_first_token(request_id, replica, view._now)
            router.on_finished(request_id, replica, view._now)
        elif op == "arrive":
            view._now = data["arrival_time"]
            choice = router.route(_routing_request(data), view)
            if type(choice) is not int or not 0 <= choice < n:
                raise ContractViolation(
                    f"{scenario.describe()}: route({data['request_id']!r}) returned "
                    f"{choice!r}; a router returns a replica number, an int in range({n})"
                )
            choices.append(choice)
            outstanding.append((data["request_id"], choice))
            prefilling.append((data["request_id"], choice))
            view._outstanding[choice] += 1
            if after_each is not None:
                after_each(view)
    return choices


def _kept_view(router: object, view: SyntheticView) -> str | None:
    """How ``router`` still reaches ``view`` (or a bound method of it), if it does."""
    seen = {id(router)}
    stack: list[tuple[object, str]] = [(router, "router")]
    skip = (type, types.ModuleType, types.CodeType, types.FrameType, RoutingRequest)
    while stack:
        obj, path = stack.pop()
        for ref in gc.get_referents(obj):
            if ref is view:
                return path
            if isinstance(ref, types.MethodType) and ref.__self__ is view:
                return f"{path} (a bound method of the view)"
            if id(ref) in seen or isinstance(ref, skip):
                continue
            seen.add(id(ref))
            stack.append((ref, f"{path} -> {type(ref).__name__}"))
    return None


_REPLAY_SCRIPT = """
import importlib, json, sys
from kvframe.testing.routing import make_scenario, replay
module, qualname = sys.argv[1], sys.argv[2]
options, seeds = json.loads(sys.argv[3]), json.loads(sys.argv[4])
cls = importlib.import_module(module)
for part in qualname.split("."):
    cls = getattr(cls, part)
print(json.dumps([replay(cls(**options), make_scenario(seed)) for seed in seeds]))
"""


class RouterSuite(PluginSuite):
    """Conformance checks for a :class:`kvframe.Router`.

    Subclass it and set :attr:`plugin`, or run ``pytest --kvframe-plugin routing:NAME``.
    """

    kind: ClassVar[str] = "routing"

    max_examples: ClassVar[int] = 20

    def _fresh(self, target: PluginTarget) -> Any:
        try:
            return target.create()
        except Exception as err:
            raise ContractViolation(
                f"{target.label}: construction with its options raised {type(err).__name__}: {err}"
            ) from err

    def _play(self, target: PluginTarget, scenario: Scenario, **kwargs: Any) -> list[int]:
        __tracebackhide__ = True
        try:
            return replay(self._fresh(target), scenario, **kwargs)
        except ContractViolation:
            raise
        except Exception as err:
            raise ContractViolation(
                f"{target.label} raised {type(err).__name__}: {err} while replaying "
                f"{scenario.describe()}"
            ) from err

    def test_routes_every_request_to_a_replica_that_exists(
        self, kvframe_target: PluginTarget
    ) -> None:
        """Every choice is an ``int`` in ``range(num_replicas)``, for 1 to 8 replicas."""
        for seed in range(self.examples()):
            self._play(kvframe_target, make_scenario(seed))

    def test_replays_the_same_choices_with_a_fresh_instance(
        self, kvframe_target: PluginTarget
    ) -> None:
        """Same scenario, same seed, fresh instance: same choices (nothing but the view,
        the request, its own state and the seed decides)."""
        for seed in range(self.examples()):
            scenario = make_scenario(seed)
            first = self._play(kvframe_target, scenario)
            second = self._play(kvframe_target, scenario)
            if first != second:
                at = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
                raise ContractViolation(
                    f"{kvframe_target.label} is not deterministic: replaying "
                    f"{scenario.describe()} with a fresh instance chose replica {second[at]} "
                    f"for request r{at}, where the first run chose {first[at]}. A router's "
                    "choices depend only on the request, the view, its own state and the "
                    "seed (FleetInfo.seed): no clock, no global state, no unseeded random"
                )

    def test_replays_the_same_choices_in_other_interpreters(
        self, kvframe_target: PluginTarget
    ) -> None:
        """The choices do not depend on the process: ``hash()`` of a string is salted
        per interpreter (``PYTHONHASHSEED``), so a rule built on it does not replay."""
        import pytest

        cls = kvframe_target.cls
        seeds = list(range(min(4, self.examples())))
        here = [self._play(kvframe_target, make_scenario(seed)) for seed in seeds]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        for salt in ("1", "2"):
            env["PYTHONHASHSEED"] = salt
            args = [cls.__module__, cls.__qualname__, json.dumps(dict(kvframe_target.options))]
            done = subprocess.run(
                [sys.executable, "-c", _REPLAY_SCRIPT, *args, json.dumps(seeds)],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
                check=False,
            )
            if done.returncode != 0:
                if "ModuleNotFoundError" in done.stderr or "<locals>" in cls.__qualname__:
                    pytest.skip(
                        f"{cls.__module__}:{cls.__qualname__} cannot be imported by name in a "
                        "fresh interpreter; the cross-process replay is not checked"
                    )
                tail = "\n".join(done.stderr.strip().splitlines()[-5:])
                raise ContractViolation(f"replaying in a fresh interpreter failed:\n{tail}")
            there = json.loads(done.stdout.strip().splitlines()[-1])
            if there != here:
                raise ContractViolation(
                    f"{kvframe_target.label} chooses differently in an interpreter with "
                    f"PYTHONHASHSEED={salt}: its choices hang on the process (hash() of a str "
                    "or bytes is salted per interpreter; use hashlib or the block hashes)"
                )

    def test_reads_only_the_view_and_keeps_no_reference_to_it(
        self, kvframe_target: PluginTarget
    ) -> None:
        """The view offers five members and nothing else, and is the fleet's: valid
        during ``route`` only."""

        def check(view: SyntheticView) -> None:
            path = _kept_view(router, view)
            if path is not None:
                raise ContractViolation(
                    f"{kvframe_target.label} keeps a reference to the FleetView after route() "
                    f"returned ({path}). The view is the fleet's and valid during the call "
                    "only: copy what you need (the records it returns may be kept)"
                )

        for seed in range(self.examples(0.5)):
            router = self._fresh(kvframe_target)
            try:
                replay(router, make_scenario(seed), after_each=check)
            except ContractViolation:
                raise
            except Exception as err:
                raise ContractViolation(
                    f"{kvframe_target.label} raised {type(err).__name__}: {err}"
                ) from err

    def test_serves_each_pool_of_a_disaggregated_fleet(self, kvframe_target: PluginTarget) -> None:
        """Attached as a prefill or a decode pool (``FleetInfo.role``, the pool's size), the
        router routes in range; the fleet deep-copies it for the decode pool, and the copy
        of a fresh instance chooses as a fresh instance does."""
        for seed in range(self.examples(0.5)):
            for role in ("prefill", "decode"):
                scenario = make_scenario(seed)
                fresh = self._play(kvframe_target, scenario, role=role)
                try:
                    twin = copy.deepcopy(self._fresh(kvframe_target))
                except Exception as err:
                    raise ContractViolation(
                        f"{kvframe_target.label} cannot be deep-copied ({type(err).__name__}: "
                        f"{err}); a disaggregated fleet copies the router for its decode pool: "
                        "create what cannot be copied (locks, files, generators) in attach()"
                    ) from err
                copied = replay(twin, scenario, role=role)
                if copied != fresh:
                    raise ContractViolation(
                        f"{kvframe_target.label}: a deep copy of a fresh instance chose "
                        f"differently from a fresh instance as the {role} pool of "
                        f"{scenario.describe()}; keep per-run state in attach()"
                    )
