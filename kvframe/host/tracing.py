"""The tracing broadcast: every selected tracer receives every record, in order.

Tracing is the one place the host calls plugins through pluggy while running:
a broadcast is what pluggy's hook calls are for, and the engine checks once at
start whether any tracer is selected (:attr:`Tracing.active`), so with none a
trace point costs one branch. Only the methods a tracer overrides become
hook implementations, so a tracer that only wants finished requests costs
nothing per step.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pluggy

from kvframe.contract import hookspecs
from kvframe.contract.bases import Tracer
from kvframe.log import get_logger

__all__ = ["Tracing", "tracing_manager"]

log = get_logger(__name__)

_HOOK_OF_METHOD: dict[str, str] = {
    "on_step_snapshot": "kvframe_step_snapshot",
    "on_prefix_cache": "kvframe_prefix_cache_event",
    "on_step_decision": "kvframe_step_decision",
    "on_kv_events": "kvframe_kv_events",
    "on_request_finished": "kvframe_request_finished",
}
"""Each :class:`~kvframe.contract.bases.Tracer` method and the hook spec that reaches it."""


def tracing_manager(tracers: Iterable[Tracer]) -> pluggy.PluginManager:
    """A ``PluginManager`` whose tracing hooks broadcast to ``tracers``, in order.

    The engine calls e.g. ``pm.hook.kvframe_step_snapshot(snapshot=...)``.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    # pluggy calls the most recently registered impl first; register in reverse
    # so tracers receive records in the order the user selected them.
    for index, tracer in reversed(list(enumerate(tracers))):
        pm.register(_tracer_adapter(tracer), name=f"tracer-{index}-{type(tracer).__name__}")
    return pm


def _tracer_adapter(tracer: Tracer) -> types.SimpleNamespace:
    """An object with one hookimpl per tracer method the tracer's class overrides.

    The hook's arguments are passed by the names the hook spec gives them, in
    order, to the tracer's method.
    """
    impls: dict[str, Callable[..., None]] = {}
    for method, hook in _HOOK_OF_METHOD.items():
        if getattr(type(tracer), method) is getattr(Tracer, method):
            continue
        impls[hook] = hookspecs.hookimpl(_forwarder(getattr(tracer, method), hook))
    return types.SimpleNamespace(tracer=tracer, **impls)


def _forwarder(bound: Callable[..., None], hook: str) -> Callable[..., None]:
    """``bound`` behind the hook spec's argument names: pluggy unwraps a hookimpl
    (``__wrapped__``) to read them, then passes the arguments positionally in the
    spec's order, which is the order of the tracer method's parameters."""

    def forward(*args: Any) -> None:
        bound(*args)

    forward.__wrapped__ = getattr(hookspecs, hook)  # type: ignore[attr-defined]
    forward.__name__ = hook
    return forward


@attrs.define(slots=True)
class Tracing:
    """The selected tracers and the broadcast ``PluginManager`` that reaches them."""

    pm: pluggy.PluginManager
    tracers: tuple[Tracer, ...]

    @property
    def active(self) -> bool:
        """Whether any tracer is selected; the engine checks this once, not per record."""
        return bool(self.tracers)

    @property
    def hook(self) -> Any:
        """``tracing.hook.kvframe_step_snapshot(snapshot=...)`` and the other tracing hooks."""
        return self.pm.hook

    def close(self) -> None:
        """Close every tracer, even when one of them fails (the first error is re-raised)."""
        first: BaseException | None = None
        for tracer in self.tracers:
            try:
                tracer.close()
            except Exception as err:
                log.warning("tracer_close_failed", tracer=type(tracer).__name__, error=repr(err))
                first = first or err
        if first is not None:
            raise first
