"""The conformance suite for offload specs (:class:`kvframe.OffloadSpec`).

Deliberately thin: it checks what :mod:`kvframe.contract.offload` states and
nothing a particular tier adds. The spec builds its scheduler-side manager for
the suite's :attr:`OffloadSpecSuite.context` (64-byte GPU blocks, so a
``capacity`` of 512 bytes is an 8-slot tier), which hypothesis then drives with
random stores, loads, lookups and touches against a reference model of the
ref-count lifecycle::

    prepare_store -> -1 (being written) -> complete_store -> 0 (ready) <-> n > 0 (loading)

* ``lookup`` counts the leading run of ready blocks;
* ``prepare_store`` never stores a hash twice, hands out slots no live block
  has, evicts only ready, unpinned blocks that are not in its own batch, and
  when it returns ``None`` changes nothing;
* ``prepare_load`` returns the slots the blocks were stored in;
* ``complete_store`` makes blocks ready (or frees them on failure), and
  ignores hashes that are not being written;
* KV events report exactly the blocks made ready and the blocks evicted.

The worker side is checked by a byte-exact round trip: the suite gives the
handler its own small KV tensors (:class:`SuiteKVCache`, through
``register_kv_caches``), stores two blocks of known bytes, loads them back into
other GPU blocks and compares (see :meth:`OffloadSpecSuite.kv_cache_access`).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, ClassVar, Protocol

import pytest

from kvframe.contract.offload import OffloadContext
from kvframe.contract.records import AllBlocksCleared, BlockRemoved, BlockStored
from kvframe.testing.common import (
    ContractViolation,
    OpLog,
    PluginSuite,
    PluginTarget,
    call_plugin,
    fmt,
    suite_settings,
)

__all__ = ["KVCacheAccess", "OffloadSpecSuite", "SuiteKVCache"]

HASHES: tuple[bytes, ...] = tuple(b"h%02d" % i for i in range(12))
"""The block hashes the model test uses (short, so messages stay readable)."""


class KVCacheAccess(Protocol):
    """Access to the device KV cache a transfer handler copies from and to (for the round trip)."""

    def write(self, gpu_block_id: int, data: bytes) -> None: ...

    def read(self, gpu_block_id: int) -> bytes: ...

    @property
    def block_bytes(self) -> int:
        """Bytes of one GPU block."""
        ...


class SuiteKVCache:
    """The suite's own device KV cache for the round trip: two layers (CPU torch tensors).

    Each layer holds half of a GPU block's bytes as ``float16``, indexed by GPU
    block id along dimension 0, as the contract's ``register_kv_caches`` says.
    ``write`` and ``read`` see a block as its bytes, layer after layer. torch is
    imported here, when a round trip runs, never with the suite.
    """

    def __init__(self, context: OffloadContext) -> None:
        import torch

        half = context.gpu_block_bytes // 2
        self.block_bytes = context.gpu_block_bytes
        self.caches = [
            torch.zeros((context.num_gpu_blocks, 2, half // 4), dtype=torch.float16)
            for _ in range(2)
        ]
        self._flat = [c.view(context.num_gpu_blocks, -1).view(torch.uint8) for c in self.caches]

    def write(self, gpu_block_id: int, data: bytes) -> None:
        import torch

        half = self.block_bytes // 2
        for i, flat in enumerate(self._flat):
            chunk = bytearray(data[i * half : (i + 1) * half])
            flat[gpu_block_id] = torch.frombuffer(chunk, dtype=torch.uint8)

    def read(self, gpu_block_id: int) -> bytes:
        return b"".join(bytes(flat[gpu_block_id].tolist()) for flat in self._flat)


class _Model:
    """The reference ledger: ``hash -> [slot, ref_cnt]`` with ref_cnt -1 / 0 / n > 0."""

    def __init__(self, manager: Any, log: OpLog) -> None:
        self.manager = manager
        self.log = log
        self.state: dict[bytes, list[int]] = {}
        self.medium = manager.medium

    def ready(self) -> list[bytes]:
        return [h for h, (_, ref) in self.state.items() if ref >= 0]

    def pinned(self) -> list[bytes]:
        return [h for h, (_, ref) in self.state.items() if ref > 0]

    def writing(self) -> list[bytes]:
        return [h for h, (_, ref) in self.state.items() if ref < 0]

    def violation(self, what: str) -> ContractViolation:
        return self.log.violation(what, _LIFECYCLE)

    def events(self, call: str) -> tuple[list[bytes], list[bytes]]:
        """Take the manager's events: (hashes stored, hashes removed), checking their shape."""
        __tracebackhide__ = True
        events = list(call_plugin(self.log, "take_events()", self.manager.take_events) or ())
        stored: list[bytes] = []
        removed: list[bytes] = []
        for event in events:
            if isinstance(event, BlockStored):
                stored.extend(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                removed.extend(event.block_hashes)
            elif not isinstance(event, AllBlocksCleared):
                raise self.violation(f"then {call} produced {event!r}, which is not a KV event")
            if event.medium != self.medium:
                raise self.violation(
                    f"then {call} produced {event!r} with medium {event.medium!r}; the manager's "
                    f"medium is {self.medium!r}"
                )
        return stored, removed

    # -- calls --------------------------------------------------------------

    def lookup(self, hashes: Sequence[bytes]) -> None:
        __tracebackhide__ = True
        call = f"lookup({fmt(list(hashes))})"
        got = call_plugin(self.log, call, self.manager.lookup, list(hashes))
        expected = 0
        for h in hashes:
            if h not in self.state or self.state[h][1] < 0:
                break
            expected += 1
        if got is not None and got != expected:
            raise self.violation(
                f"then {call} returned {got}; the leading run of ready blocks is {expected} "
                f"(ready: {fmt(set(self.ready()))}, being written: {fmt(set(self.writing()))})"
            )
        self._no_events(call)
        self.log.add(f"{call} -> {got}")

    def store(self, batch: Sequence[bytes]) -> Any:
        __tracebackhide__ = True
        call = f"prepare_store({fmt(list(batch))})"
        result = call_plugin(self.log, call, self.manager.prepare_store, list(batch))
        if result is None:
            stored, removed = self.events(call)
            if stored or removed:
                raise self.violation(
                    f"then {call} returned None but reported events (stored {fmt(stored)}, "
                    f"removed {fmt(removed)}): a refused store must change nothing"
                )
            self.log.add(f"{call} -> None")
            return None
        to_store = tuple(result.block_hashes_to_store)
        slots = tuple(result.slot_ids)
        evicted = tuple(result.evicted_block_hashes)
        position = 0
        for h in to_store:
            try:
                position = list(batch).index(h, position) + 1
            except ValueError:
                raise self.violation(
                    f"then {call} chose to store {fmt(list(to_store))}, which is not a "
                    "subsequence of the hashes asked for (in their order)"
                ) from None
            if h in self.state:
                state = "being written" if self.state[h][1] < 0 else "ready"
                raise self.violation(
                    f"then {call} chose to store {fmt(h)} again, although it is already in the "
                    f"tier ({state}): stored hashes must be skipped"
                )
        if len(slots) != len(to_store) or len(set(slots)) != len(slots):
            raise self.violation(
                f"then {call} gave slots {fmt(list(slots))} for {len(to_store)} block(s): "
                "one distinct slot per block"
            )
        for h in evicted:
            if h in batch:
                raise self.violation(
                    f"then {call} evicted {fmt(h)}, which is in its own batch (the batch's "
                    "hashes are protected)"
                )
            if h not in self.state:
                raise self.violation(f"then {call} evicted {fmt(h)}, which is not in the tier")
            ref = self.state[h][1]
            if ref != 0:
                state = "being written" if ref < 0 else f"pinned by {ref} load(s)"
                raise self.violation(f"then {call} evicted {fmt(h)}, which is {state}")
        if len(set(evicted)) != len(evicted):
            raise self.violation(f"then {call} reported evicting {fmt(list(evicted))}: duplicates")
        for h in evicted:
            del self.state[h]
        live = {slot: h for h, (slot, _) in self.state.items()}
        for h, slot in zip(to_store, slots, strict=True):
            if slot in live:
                raise self.violation(
                    f"then {call} put {fmt(h)} in slot {slot}, which {fmt(live[slot])} still "
                    "occupies: two live blocks would share bytes"
                )
            live[slot] = h
            self.state[h] = [slot, -1]
        stored, removed = self.events(call)
        if stored or sorted(removed) != sorted(evicted):
            raise self.violation(
                f"then {call}'s events reported stored {fmt(stored)} and removed {fmt(removed)}; "
                f"expected removed {fmt(list(evicted))} and nothing stored yet"
            )
        self.log.add(
            f"{call} -> store {fmt(list(to_store))} in slots {fmt(list(slots))}"
            + (f", evicted {fmt(list(evicted))}" if evicted else "")
        )
        return result

    def complete_store(self, hashes: Sequence[bytes], success: bool) -> None:
        __tracebackhide__ = True
        call = f"complete_store({fmt(list(hashes))}, success={success})"
        call_plugin(self.log, call, self.manager.complete_store, list(hashes), success)
        became_ready = []
        for h in hashes:
            if h in self.state and self.state[h][1] < 0:
                if success:
                    self.state[h][1] = 0
                    became_ready.append(h)
                else:
                    del self.state[h]
        stored, _removed = self.events(call)
        if sorted(stored) != sorted(became_ready):
            raise self.violation(
                f"then {call} reported {fmt(stored)} stored; the blocks it made ready are "
                f"{fmt(became_ready)}"
            )
        self.log.add(call)

    def load(self, hashes: Sequence[bytes]) -> None:
        __tracebackhide__ = True
        call = f"prepare_load({fmt(list(hashes))})"
        slots = call_plugin(self.log, call, self.manager.prepare_load, list(hashes))
        expected = [self.state[h][0] for h in hashes]
        if list(slots) != expected:
            raise self.violation(
                f"then {call} returned slots {fmt(list(slots))}; the blocks were stored in "
                f"{fmt(expected)}"
            )
        for h in hashes:
            self.state[h][1] += 1
        self._no_events(call)
        self.log.add(f"{call} -> slots {fmt(list(slots))}")

    def complete_load(self, hashes: Sequence[bytes]) -> None:
        __tracebackhide__ = True
        call = f"complete_load({fmt(list(hashes))})"
        call_plugin(self.log, call, self.manager.complete_load, list(hashes))
        for h in hashes:
            self.state[h][1] -= 1
        self._no_events(call)
        self.log.add(call)

    def touch(self, hashes: Sequence[bytes]) -> None:
        __tracebackhide__ = True
        call = f"touch({fmt(list(hashes))})"
        call_plugin(self.log, call, self.manager.touch, list(hashes))
        self._no_events(call)
        self.log.add(call)

    def _no_events(self, call: str) -> None:
        __tracebackhide__ = True
        stored, removed = self.events(call)
        if stored or removed:
            raise self.violation(
                f"then {call} produced events (stored {fmt(stored)}, removed {fmt(removed)}); "
                "only stores and evictions do"
            )


_LIFECYCLE = (
    "The lifecycle (kvframe/offload/contract.py): prepare_store -> -1 being written -> "
    "complete_store -> 0 ready -> prepare_load pins (> 0) -> complete_load unpins; only ready, "
    "unpinned blocks outside the store's own batch may be evicted."
)


def _picks(values: Iterable[int], pool: Sequence[bytes]) -> list[bytes]:
    return list(dict.fromkeys(pool[v % len(pool)] for v in values)) if pool else []


class OffloadSpecSuite(PluginSuite):
    """Conformance checks for a :class:`kvframe.OffloadSpec` (its manager and handler).

    Give the options that size the tier small, e.g.
    ``pytest --kvframe-plugin offload:cpu:capacity=512`` (8 slots of the
    suite's 64-byte blocks); with a large tier the eviction checks are skipped.
    """

    kind: ClassVar[str] = "offload"

    max_examples: ClassVar[int] = 80

    context: ClassVar[OffloadContext] = OffloadContext(
        gpu_block_size=4, kv_bytes_per_token=16, num_gpu_blocks=64
    )
    """What the host would know when building the tier: 64-byte GPU blocks."""

    def create_manager(self, target: PluginTarget) -> Any:
        spec = target.create()
        return spec.create_manager(self.context)

    def kv_cache_access(self, handler: Any, context: OffloadContext) -> KVCacheAccess | None:
        """Access to the device KV cache ``handler`` copies, for the round trip; None skips it.

        By default the suite brings its own: a handler that takes device tensors
        (``register_kv_caches``, as the contract in :mod:`kvframe.contract.offload`
        says) is given :class:`SuiteKVCache`, two small CPU torch tensors, so
        ``pytest --kvframe-plugin offload:SPEC`` checks the bytes with no test
        code. A handler built around something else can be checked by
        subclassing this suite and returning an object with
        ``write(gpu_block_id, data)``, ``read(gpu_block_id)`` and ``block_bytes``.
        """
        if not callable(getattr(handler, "register_kv_caches", None)):
            return None
        access = SuiteKVCache(context)
        handler.register_kv_caches(access.caches)
        return access

    # -- the manager ----------------------------------------------------------

    def test_manager_describes_its_tier(self, kvframe_target: PluginTarget) -> None:
        manager = self.create_manager(kvframe_target)
        medium = manager.medium
        if not isinstance(medium, str) or not medium:
            raise ContractViolation(f"manager.medium is {medium!r}; it names the tier in KV events")
        size = manager.block_size
        gpu = self.context.gpu_block_size
        if not isinstance(size, int) or size <= 0 or size % gpu:
            raise ContractViolation(
                f"manager.block_size is {size!r}; an offloaded block is a whole number of GPU "
                f"blocks of {gpu} tokens"
            )

    def test_store_load_lifecycle(self, kvframe_target: PluginTarget) -> None:
        """One block through every state: written, ready, loaded, stored again, completed twice."""
        manager = self.create_manager(kvframe_target)
        log = OpLog()
        model = _Model(manager, log)
        batch = list(HASHES[:2])
        for _ in range(4):  # sightings, for a tier that filters by reuse
            model.lookup(batch)
        if model.store(batch) is None or not model.writing():
            pytest.skip(
                "the tier stored nothing of a fresh 2-block batch (too small, or a reuse "
                "filter that wants more sightings); lifecycle not checked"
            )
        stored = model.writing()
        model.lookup(stored)
        model.complete_store(stored, True)
        model.lookup(stored)
        result = model.store(stored)
        if result is None or result.block_hashes_to_store:
            raise log.violation(
                f"then storing blocks that are all stored already gave {result!r}",
                "Everything already stored is not a failure: an empty PrepareStoreResult.",
            )
        model.load(stored)
        model.lookup(stored)
        model.complete_load(stored)
        model.complete_store(stored, True)  # not being written: ignored
        model.lookup(stored)

    def test_a_failed_store_frees_its_slots(self, kvframe_target: PluginTarget) -> None:
        """Many failed stores in a row must not use the tier up."""
        manager = self.create_manager(kvframe_target)
        log = OpLog(limit=12)
        model = _Model(manager, log)
        for round_ in range(64):
            batch = [b"fail-%d-%d" % (round_, i) for i in range(2)]
            for _ in range(4):
                model.lookup(batch)
            if model.store(batch) is None:
                raise log.violation(
                    f"then a store into a tier holding only failed stores was refused (round "
                    f"{round_})",
                    "complete_store(success=False) must free the blocks' slots.",
                )
            model.complete_store(model.writing(), False)
            model.lookup(batch)

    def test_random_calls_agree_with_a_reference_model(self, kvframe_target: PluginTarget) -> None:
        from hypothesis import given
        from hypothesis import strategies as st

        picks = st.lists(st.integers(0, 11), min_size=1, max_size=4)
        steps = st.lists(
            st.one_of(
                st.tuples(st.just("lookup"), picks),
                st.tuples(st.just("store"), picks),
                st.tuples(st.just("store"), picks),
                st.tuples(st.just("complete_store"), picks, st.sampled_from((True, True, False))),
                st.tuples(st.just("load"), picks),
                st.tuples(st.just("complete_load"), picks),
                st.tuples(st.just("touch"), picks),
            ),
            max_size=40,
        )

        @suite_settings(self.examples())
        @given(steps=steps)
        def run(steps: list[tuple[Any, ...]]) -> None:
            __tracebackhide__ = True
            model = _Model(self.create_manager(kvframe_target), OpLog())
            for step in steps:
                kind = step[0]
                if kind == "lookup":
                    model.lookup(_picks(step[1], HASHES))
                elif kind == "store":
                    model.store(_picks(step[1], HASHES))
                elif kind == "complete_store":
                    # Mostly blocks being written, sometimes others (to be ignored).
                    pool = model.writing() or list(HASHES)
                    model.complete_store(_picks(step[1], pool), step[2])
                elif kind == "load" and model.ready():
                    model.load(_picks(step[1], model.ready()))
                elif kind == "complete_load" and model.pinned():
                    model.complete_load(_picks(step[1], model.pinned()))
                elif kind == "touch":
                    model.touch(_picks(step[1], HASHES))

        run()

    def test_pinned_and_unwritten_blocks_are_never_evicted(
        self, kvframe_target: PluginTarget
    ) -> None:
        """Fill the tier; a store needing room evicts no pinned block, and none when all are.

        First every ready block but the most recently stored one is pinned, so
        a policy that ignores ``ref_cnt`` meets pinned blocks before the idle
        one; the store may take only that one (or be refused). Then every
        block is pinned: the store must be refused, whether or not the tier
        asks its policy (the host's ledger does not, as there is no room).
        """
        manager = self.create_manager(kvframe_target)
        log = OpLog(limit=16)
        model = _Model(manager, log)
        limit = 512
        for i in range(limit):
            h = b"fill-%d" % i
            for _ in range(4):
                model.lookup([h])
            result = model.store([h])
            if result is None:
                raise log.violation(
                    "then a one-block store into a tier of idle, ready blocks was refused",
                    "The tier evicts through its policy to make room.",
                )
            model.complete_store([h], True)
            if result.evicted_block_hashes:
                break
        else:
            pytest.skip(
                f"the tier held {limit} blocks of {self.context.gpu_block_bytes} bytes without "
                "evicting; give options that make it smaller (e.g. capacity=512) to check "
                "eviction"
            )
        ready = model.ready()
        model.load(ready[:-1])
        first = [b"first-newcomer"]
        for _ in range(4):
            model.lookup(first)
        if model.store(first) is not None and model.writing():
            model.complete_store(first, True)
            ready = [h for h in ready if h in model.state] + first
        model.load([h for h in ready if model.state[h][1] == 0])
        newcomer = [b"newcomer"]
        for _ in range(4):
            model.lookup(newcomer)
        if model.store(newcomer) is not None and model.writing():
            raise log.violation(
                f"then a store into a full tier whose {len(ready)} blocks are all pinned succeeded",
                "Pinned blocks (being loaded) cannot be evicted, so there is no room.",
            )
        model.complete_load(ready)
        if model.store(newcomer) is None:
            raise log.violation(
                "then, with every block unpinned again, the same store was refused",
                "Ready, unpinned blocks are evictable.",
            )

    # -- the worker side ------------------------------------------------------

    def test_transfer_handler_round_trip(self, kvframe_target: PluginTarget) -> None:
        """Bytes stored to the tier and loaded back into other GPU blocks come back unchanged."""
        spec = kvframe_target.create()
        try:
            handler = spec.create_transfer_handler(self.context)
        except NotImplementedError as err:
            pytest.skip(f"the spec provides no transfer handler: {err}")
        if callable(getattr(handler, "register_kv_caches", None)):
            import importlib.util

            if importlib.util.find_spec("torch") is None:
                pytest.skip(
                    "torch is not installed: the suite's own KV tensors (SuiteKVCache) are "
                    "torch tensors; pip install torch to check the round trip"
                )
        access = self.kv_cache_access(handler, self.context)
        if access is None:
            pytest.skip(
                "the handler has no register_kv_caches (kvframe/offload/contract.py), so the "
                "suite cannot give it KV tensors to copy; override "
                "OffloadSpecSuite.kv_cache_access to check the round trip"
            )
        manager = spec.create_manager(self.context)
        batch = list(HASHES[:2])
        for _ in range(4):
            manager.lookup(batch)
        result = manager.prepare_store(batch)
        if result is None or len(result.block_hashes_to_store) != 2:
            pytest.skip("the tier did not accept a fresh 2-block store; round trip not checked")
        slots = list(result.slot_ids)
        size = access.block_bytes
        payloads = [bytes((i * 37 + j * 11 + 5) % 256 for j in range(size)) for i in range(2)]
        for gpu_block, data in zip((1, 2), payloads, strict=True):
            access.write(gpu_block, data)
        _wait(handler, handler.start_transfers([], list(zip((1, 2), slots, strict=True))))
        manager.complete_store(result.block_hashes_to_store)
        for gpu_block in (1, 2, 3, 4):
            access.write(gpu_block, bytes(size))
        load_slots = list(manager.prepare_load(result.block_hashes_to_store))
        _wait(handler, handler.start_transfers(list(zip((3, 4), load_slots, strict=True)), []))
        manager.complete_load(result.block_hashes_to_store)
        for gpu_block, data in zip((3, 4), payloads, strict=True):
            back = access.read(gpu_block)
            if back != data:
                first = next(i for i, (a, b) in enumerate(zip(back, data, strict=False)) if a != b)
                raise ContractViolation(
                    f"GPU block {gpu_block} after the round trip differs from what was stored, "
                    f"first at byte {first} of {size}"
                )


def _wait(handler: Any, transfer_id: Hashable, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if transfer_id in set(handler.finished_transfers()):
            return
        time.sleep(0.001)
    raise ContractViolation(f"transfer {transfer_id!r} did not finish within {timeout}s")
