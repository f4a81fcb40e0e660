"""Tiers several engines share: one ledger and one link per name, for the engines built together.

A shared remote KV store is one store for a whole fleet: every replica writes
to it and loads from it, its capacity and eviction are the store's, and its
bandwidth is split among every replica moving bytes at once. Each replica still
has its own :class:`~kvframe.offload.tiering.LedgerTier` *front* (its jobs, its
requests' contexts); the fronts share the :class:`SharedBacking` -- the ledger
and the :class:`~kvframe.offload.tiering.Link` -- of their name.

Which engines share is scoped, not global: :func:`sharing` opens a scope (a
fleet opens one around building its replicas), and every engine built inside it
finds the same backing for the same name. An engine built outside any scope
gets a backing of its own (a store shared by one).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from kvframe.offload.jobs.manager import RequestScopedOffloadManager
    from kvframe.offload.tiering.link import Link

__all__ = ["SharedBacking", "SharedStores", "backing_for", "sharing"]


@attrs.define(slots=True, eq=False)
class SharedBacking:
    """What every front of one shared tier uses: its chunks and its link."""

    ledger: RequestScopedOffloadManager
    link: Link
    signature: tuple[object, ...]
    """The options it was built with; a second front must ask for the same."""
    fronts: int = 0


@attrs.define(slots=True, eq=False)
class SharedStores:
    """The shared tiers of one scope, by name."""

    backings: dict[str, SharedBacking] = attrs.Factory(dict)


_SCOPE: contextvars.ContextVar[SharedStores | None] = contextvars.ContextVar(
    "kvframe_shared_stores", default=None
)


@contextlib.contextmanager
def sharing() -> Iterator[SharedStores]:
    """A scope in which engines built share their ``shared`` tiers by name."""
    stores = SharedStores()
    token = _SCOPE.set(stores)
    try:
        yield stores
    finally:
        _SCOPE.reset(token)


def backing_for(
    name: str, signature: tuple[object, ...], build: Callable[[], SharedBacking]
) -> SharedBacking:
    """The scope's backing of ``name`` (built on first use); a private one outside a scope.

    :raises ValueError: when a second engine asks for ``name`` with other options:
        one store cannot have two capacities.
    """
    stores = _SCOPE.get()
    if stores is None:
        backing = build()
    else:
        backing = stores.backings.get(name) or stores.backings.setdefault(name, build())
        if backing.signature != signature:
            raise ValueError(
                f"shared tier {name!r}: one replica asks for {signature}, another for "
                f"{backing.signature}; the replicas of a fleet share one store, with one set "
                "of options"
            )
    backing.fronts += 1
    return backing
