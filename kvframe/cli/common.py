"""What every ``kvframe`` subcommand shares: the handler context, exit codes and
the plugin-selection and engine flags (read the same way by ``run`` and ``check``).

A subcommand is one module ``kvframe/cli/cmd_NAME.py`` with an
``add_NAME_command(subparsers)`` function that builds its parser and sets
``handler`` (``(args, ctx) -> exit code``); :data:`kvframe.cli.main.SUBCOMMANDS`
lists them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from kvframe.config import (
    KINDS,
    UserConfig,
    config_from_mapping,
    find_config_file,
    load_config,
    merge,
)

if TYPE_CHECKING:
    from kvframe.engine import EngineConfig
    from kvframe.host.registry import PluginRegistry

__all__ = [
    "ENGINE_FLAGS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_STALLED",
    "EXIT_USAGE",
    "Context",
    "Handler",
    "add_engine_arguments",
    "add_selection_arguments",
    "config_file",
    "engine_config",
    "engine_config_from",
    "load_selection",
]

EXIT_OK = 0
EXIT_FAILED = 1
"""The run produced no usable result: stalled, nothing could run, results not written."""
EXIT_STALLED = EXIT_FAILED
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class Context:
    """What a subcommand handler gets besides its arguments.

    The plugin registry is built on first access, so subcommands that do not
    need plugins never scan entry points.
    """

    def __init__(
        self, registry: PluginRegistry | None = None, stdout: TextIO | None = None
    ) -> None:
        self._registry = registry
        self.stdout = stdout if stdout is not None else sys.stdout

    @property
    def registry(self) -> PluginRegistry:
        if self._registry is None:
            from kvframe.host.registry import get_registry

            self._registry = get_registry()
        return self._registry

    def print(self, *parts: object) -> None:
        print(*parts, file=self.stdout)


Handler = Callable[[argparse.Namespace, Context], int]


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per plugin kind (``--scheduler``, ``--eviction``, ...)."""
    group = parser.add_argument_group(
        "plugin selection",
        "config strings: NAME, NAME:key=value,... or package.module:Class[:key=value,...]; "
        "flags override kvframe.toml",
    )
    group.add_argument(
        "--config",
        metavar="PATH",
        help="TOML file with plugin selection and engine settings "
        "(default: ./kvframe.toml if it exists)",
    )
    group.add_argument("--no-config", action="store_true", help="ignore ./kvframe.toml")
    for kind in KINDS.values():
        group.add_argument(
            kind.flag,
            dest=kind.flag[2:].replace("-", "_"),
            metavar="SPEC",
            action="append" if kind.multiple else "store",
            help=f"the {kind.label}" + (" (repeat for several)" if kind.multiple else ""),
        )


def config_file(args: argparse.Namespace) -> str | None:
    """The TOML file a command reads: ``--config``, else ``./kvframe.toml`` if present.

    Summaries and ``metrics.json`` name it, because a forgotten ``kvframe.toml``
    in the working directory silently changes a run.
    """
    path = getattr(args, "config", None)
    if path is None and not getattr(args, "no_config", False):
        found = find_config_file()
        path = None if found is None else str(found)
    return path


def load_selection(args: argparse.Namespace, engine_keys: Sequence[str] = ()) -> UserConfig:
    """The plugin selection and engine settings: ``kvframe.toml`` overridden by flags.

    :param engine_keys: argument ``dest`` names that are engine settings
        (``block_size``, ...); given ones override the file's keys of the same name.
    :raises ConfigError: naming the file and key, or the flag, that is wrong.
    """
    path = config_file(args)
    file_values = load_config(path) if path is not None else UserConfig()
    values: dict[str, Any] = {kind.flag[2:].replace("-", "_"): None for kind in KINDS.values()}
    for key in [*values, *engine_keys]:
        values[key] = getattr(args, key, None)
    return merge(file_values, config_from_mapping(values, flags=True))


# Engine settings that have a flag; their ``dest`` is the engine key.
ENGINE_FLAGS = (
    "preset",
    "model",
    "replicas",
    "kv_event_delay",
    "load_report_interval",
    "disagg",
    "disagg_link",
    "disagg_bandwidth",
    "disagg_latency",
    "disagg_pipeline",
    "kv_load_failure_policy",
    "num_gpu_blocks",
    "kv_memory",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "long_prefill_token_threshold",
    "enable_prefix_caching",
    "reserve_full_sequence",
    "rollback_uncomputed_blocks",
    "gpu_eviction",
    "seed",
    "offload_bandwidth",
    "executor",
    "cost_model",
    "step_by_step",
    "vllm",
    "async_scheduling",
    "core",
)


def _config_json_path(text: str) -> str:
    """``--model-config``: an existing file (its fields are checked when the engine is built)."""
    from pathlib import Path

    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine flags (``--num-gpu-blocks``, ``--gpu-eviction``, ...): :data:`ENGINE_FLAGS`."""
    engine = parser.add_argument_group(
        "engine", "override kvframe.toml's engine settings of the same name"
    )
    engine.add_argument("--preset", metavar="NAME", help="cost-model preset (model + GPU)")
    model = engine.add_mutually_exclusive_group()
    model.add_argument(
        "--model",
        metavar="NAME",
        help="model shape (gpt-oss-20b, gpt-oss-120b, gemma-3-27b, llama-4-scout, "
        "qwen3-next-80b-a3b, llama-3.1-8b) on --preset's hardware, or its own",
    )
    model.add_argument(
        "--model-config",
        dest="model",
        metavar="PATH",
        type=_config_json_path,
        help="a Hugging Face config.json to read the model shape from",
    )
    pool = engine.add_mutually_exclusive_group()
    pool.add_argument(
        "--num-gpu-blocks", type=int, metavar="N", help="GPU KV blocks (including the null block)"
    )
    pool.add_argument(
        "--kv-memory",
        metavar="SIZE",
        help="GPU memory for KV cache, e.g. 40GiB (blocks from the preset's model shape)",
    )
    engine.add_argument("--block-size", type=int, metavar="N", help="tokens per KV block")
    engine.add_argument("--max-num-seqs", type=int, metavar="N", help="max running requests")
    engine.add_argument(
        "--max-num-batched-tokens", type=int, metavar="N", help="token budget per step"
    )
    engine.add_argument("--max-model-len", type=int, metavar="N", help="context length limit")
    engine.add_argument(
        "--long-prefill-token-threshold",
        type=int,
        metavar="N",
        help="cap on tokens one request gets per step (0: none)",
    )
    _add_cache_arguments(engine)
    engine.add_argument(
        "--gpu-eviction",
        metavar="SPEC",
        help="eviction policy ordering the GPU prefix cache (default: vLLM's LRU free queue)",
    )
    engine.add_argument("--seed", type=int, metavar="N", help="block-hash seed")
    _add_executor_arguments(engine)
    _add_fleet_arguments(parser)


def _add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """A fleet of replicas behind --router (docs/fleet.md)."""
    fleet = parser.add_argument_group(
        "fleet", "N replicas of the engine behind a router on one clock (docs/fleet.md)"
    )
    fleet.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        help="run N replicas of the engine behind --router (required with N > 1)",
    )
    fleet.add_argument(
        "--kv-event-delay",
        type=float,
        metavar="S",
        help="seconds before a replica's KV events reach the router (default 0)",
    )
    fleet.add_argument(
        "--load-report-interval",
        type=float,
        metavar="S",
        help="seconds between a replica's load reports (default 0: after every step)",
    )
    _add_disagg_arguments(fleet)


def _add_disagg_arguments(fleet: Any) -> None:
    """Prefill/decode disaggregation (docs/disaggregation.md)."""
    fleet.add_argument(
        "--disagg",
        metavar="P:D",
        help="replicas 0..P-1 prefill, the next D decode, the rest aggregated; each "
        "request's KV moves from its prefill to its decode replica",
    )
    fleet.add_argument(
        "--disagg-link",
        choices=("rdma", "nvlink"),
        help="the link KV moves over (default rdma: 400 Gb/s; nvlink: 450 GB/s)",
    )
    fleet.add_argument(
        "--disagg-bandwidth", metavar="SIZE", help="bytes per second of each link, e.g. 25GB"
    )
    fleet.add_argument(
        "--disagg-latency", type=float, metavar="S", help="seconds a transfer's last byte takes"
    )
    fleet.add_argument(
        "--disagg-pipeline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="per-layer pipelining: only the last layer's KV moves after the prefill",
    )
    fleet.add_argument(
        "--kv-load-failure-policy",
        choices=("fail", "recompute"),
        help="a decode replica's failed load: finish with error (default, as vLLM) or recompute",
    )


def _add_cache_arguments(engine: Any) -> None:
    """The KV cache's switches: prefix caching, full-sequence admission, the rollback."""
    engine.add_argument(
        "--no-prefix-caching",
        dest="enable_prefix_caching",
        action="store_const",
        const=False,
        default=None,
        help="turn the GPU prefix cache off",
    )
    engine.add_argument(
        "--reserve-full-sequence",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="admit a request only if its whole prompt fits the free blocks "
        "(vLLM's scheduler_reserve_full_isl; default: on)",
    )
    engine.add_argument(
        "--rollback-uncomputed-blocks",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="drop the prefix-cache registration of blocks a request preempted in the "
        "step that scheduled it never computed (vLLM PR #43569; default: off, as vLLM 0.19.1)",
    )


def _add_executor_arguments(engine: Any) -> None:
    """What runs a step and on which rules: executor, cost model, transfers, vLLM release."""
    engine.add_argument(
        "--executor",
        metavar="SPEC",
        help="sim (default: cost model, no tensors) or torch[:preset=tiny,dtype=float32,"
        "device=cpu,...]: a real Llama decoder on paged KV, random weights or a real model "
        "(model=smollm2, model=FILE.gguf); writes outputs.jsonl",
    )
    engine.add_argument(
        "--cost-model",
        metavar="FILE",
        help="cost-model file (from kvframe calibrate) replacing the preset's step times",
    )
    engine.add_argument(
        "--offload-bandwidth",
        metavar="SIZE",
        help="device <-> host bytes per second for offload transfers, e.g. 25GB "
        "(default: the preset's PCIe figure)",
    )
    engine.add_argument(
        "--vllm",
        metavar="VERSION",
        help="the vLLM release whose scheduling rules to follow: 0.19.1 (default) or 0.33 "
        "(docs/fidelity.md lists what differs)",
    )
    engine.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="schedule step N+1 before step N's tokens are back, as vLLM's AsyncScheduler "
        "and batch queue do (vLLM's default; kvframe's default: off; sim executor; with or "
        "without an offload tier, under --vllm 0.19.1 and 0.33)",
    )
    engine.add_argument(
        "--core",
        choices=("auto", "python", "compiled"),
        help="which block pool runs: auto (default: the compiled core where scripts/build-core "
        "built it, else Python; KVFRAME_CORE decides when set), python or compiled "
        "(same decisions; kvframe run says which ran)",
    )
    engine.add_argument(
        "--step-by-step",
        action="store_const",
        const=True,
        default=None,
        help="never take runs of plain decode steps in one go (same results, slower: "
        "the reference the fast path is checked against)",
    )


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """Merge kvframe.toml and the flags into an EngineConfig, checking the plugin kinds.

    ``run`` and ``check`` both build their configuration here, so ``check``
    rejects exactly what ``run`` rejects.
    """
    return engine_config_from(load_selection(args, ENGINE_FLAGS))


def engine_config_from(selection: UserConfig) -> EngineConfig:
    """:meth:`EngineConfig.from_selection <kvframe.engine.EngineConfig.from_selection>`,
    imported only when a command needs an engine."""
    from kvframe.engine import EngineConfig

    return EngineConfig.from_selection(selection)
