"""Refuse a config the bridge cannot run as soon as vLLM has built it, before weights load.

vLLM 0.19.1 builds the scheduler last: after the engine core started its
workers, loaded the weights and profiled KV memory (minutes on a GPU). A
refusal raised there comes too late. vLLM loads its *general plugins*
(entry-point group ``vllm.general_plugins``) in every process first, and the
front end builds its ``VllmConfig`` in ``EngineArgs.create_engine_config``;
:func:`register` -- this package's general plugin -- wraps that method so
that, when ``--scheduler-cls`` names the bridge, the finished config goes
through :func:`check` at once: the engine-wide refusals of
:mod:`kvframe_vllm.refusals` and the ``kvframe_scheduler`` policy string. A
config that names another scheduler is not looked at.

The KV-cache layout (one full-attention group) is known only after
profiling, so that one refusal stays in the scheduler's constructor, which
also repeats these checks (a config built without ``EngineArgs`` still meets
them there).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.config import VllmConfig

__all__ = ["BRIDGE_SCHEDULER", "check", "names_the_bridge", "register"]

BRIDGE_SCHEDULER = "kvframe_vllm.scheduler.KvframeScheduler"
_WRAPPED = "_kvframe_preflight"


def names_the_bridge(scheduler_cls: Any) -> bool:
    """Whether vLLM's ``scheduler_cls`` (a qualified name or a class) is the bridge."""
    if scheduler_cls is None:
        return False
    if isinstance(scheduler_cls, str):
        return scheduler_cls == BRIDGE_SCHEDULER
    from kvframe_vllm.scheduler import KvframeScheduler

    return isinstance(scheduler_cls, type) and issubclass(scheduler_cls, KvframeScheduler)


def check(vllm_config: VllmConfig) -> None:
    """Everything about the bridge a ``VllmConfig`` alone decides; raises on the first problem.

    :raises kvframe_vllm.refusals.UnsupportedByKvframe: a feature the bridge
        does not model, with the flag that turns it off.
    :raises kvframe.config.ConfigError: a bad ``kvframe_scheduler`` string.
    """
    from kvframe_vllm.refusals import refuse_config
    from kvframe_vllm.scheduler import _resolve_policy

    refuse_config(vllm_config)
    _resolve_policy(vllm_config)


def register() -> None:
    """vLLM's general-plugin hook: check the bridge's config when vLLM creates it."""
    from vllm.engine.arg_utils import EngineArgs

    create = EngineArgs.create_engine_config
    if getattr(create, _WRAPPED, False):
        return  # loaded twice in one process (vLLM loads plugins per process)

    @functools.wraps(create)
    def create_engine_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        config = create(self, *args, **kwargs)
        if names_the_bridge(config.scheduler_config.scheduler_cls):
            check(config)
        return config

    setattr(create_engine_config, _WRAPPED, True)
    EngineArgs.create_engine_config = create_engine_config  # type: ignore[method-assign]
