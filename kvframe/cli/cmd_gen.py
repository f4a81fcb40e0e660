"""``kvframe gen``: write a synthetic workload as kvframe JSONL.

Each generator is one ``add_*_generator(generators)`` function in :data:`GENERATORS`,
which adds its own flags, and one handler, which names the config fields those
flags set; the flags every generator has and the path from flags to a written
file (:func:`_write_workload`) are shared.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kvframe.cli.common import EXIT_OK, Context
from kvframe.config import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from kvframe.workloads.generator import WorkloadGenerator

__all__ = ["GENERATORS", "add_gen_command", "parse_rate", "write_generated"]


def add_chat_generator(generators: Any) -> None:
    """``kvframe gen chat``: the shared-prefix chat workload of kvframe.workloads.chat."""
    parser = generators.add_parser(
        "chat",
        help="shared-prefix chat: a few system prompts, Poisson arrivals",
        description="Write a seeded shared-prefix chat workload as kvframe JSONL "
        "(see docs/workloads.md). Length distributions: N, fixed:value=N, "
        "uniform:low=A,high=B or lognormal:median=M,sigma=S[,min=A,max=B].",
    )
    _add_out_option(parser)
    _add_size_options(parser, "--requests", "num_requests", "requests", "Poisson arrivals")
    parser.add_argument("--num-system-prompts", type=int, metavar="K")
    parser.add_argument("--system-prompt-length", metavar="DIST")
    parser.add_argument("--user-prompt-length", metavar="DIST")
    parser.add_argument("--output-length", metavar="DIST")
    parser.add_argument(
        "--shared-fraction", type=float, metavar="F", help="fraction using a shared system prompt"
    )
    parser.add_argument(
        "--prefix-popularity", type=float, metavar="S", help="Zipf exponent over system prompts"
    )
    _add_start_time_option(parser)
    _add_text_option(parser)
    parser.set_defaults(handler=_gen_chat)


def _gen_chat(args: argparse.Namespace, ctx: Context) -> int:
    from kvframe.workloads.chat import CHAT

    return _write_workload(args, ctx, CHAT, CHAT.config)


class _AgenticNames:
    """The sorted names of one of :mod:`kvframe.workloads.agentic`'s tables, as argparse
    ``choices``: the module is imported when argparse checks a value or prints help,
    not when every command builds its parser (it is a tenth of ``kvframe run``'s
    start-up, ``benchmarks/startup.py``)."""

    __slots__ = ("_table",)

    def __init__(self, table: str) -> None:
        self._table = table

    def _names(self) -> list[str]:
        from kvframe.workloads import agentic

        return sorted(getattr(agentic, self._table))

    def __contains__(self, value: object) -> bool:
        return value in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


def add_agentic_generator(generators: Any) -> None:
    """``kvframe gen agentic``: multi-turn agent jobs (kvframe.workloads.agentic)."""
    parser = generators.add_parser(
        "agentic",
        help="multi-turn agent jobs with tool calls between turns",
        description="Write seeded multi-turn agent jobs as kvframe JSONL: each turn's "
        "prompt extends the previous turn's, and the next turn arrives a tool duration "
        "after the previous one finishes (closed loop, see docs/continuum.md). "
        "Length distributions as for 'gen chat'.",
    )
    _add_out_option(parser)
    preset = parser.add_argument(
        "--preset",
        help="start from a workload grounded in the Continuum paper's benchmarks "
        "(docs/continuum.md); the other flags override its fields",
    )
    _add_size_options(parser, "--jobs", "num_jobs", "jobs", "Poisson job arrivals")
    parser.add_argument("--turns", dest="num_turns", metavar="DIST", help="turns per job")
    parser.add_argument("--num-system-prompts", type=int, metavar="K")
    parser.add_argument("--system-prompt-length", metavar="DIST")
    parser.add_argument("--task-length", metavar="DIST")
    parser.add_argument("--output-length", metavar="DIST")
    tools = parser.add_argument("--tools", help="tool mix (duration distributions)")
    # Set after add_argument, which formats its choices once as a check.
    preset.choices = _AgenticNames("PRESETS")
    tools.choices = _AgenticNames("TOOL_MIXES")
    parser.add_argument(
        "--tool-time-scale", type=float, metavar="X", help="multiply every tool duration by X"
    )
    parser.add_argument("--max-context-tokens", type=int, metavar="N")
    _add_text_option(parser)
    parser.set_defaults(handler=_gen_agentic)


def _gen_agentic(args: argparse.Namespace, ctx: Context) -> int:
    from kvframe.workloads.agentic import AGENTIC, AgenticConfig

    make: Callable[..., Any] = AGENTIC.config
    if args.preset is not None:
        make = functools.partial(AgenticConfig.from_preset, args.preset)
    return _write_workload(args, ctx, AGENTIC, make)


def add_skewed_generator(generators: Any) -> None:
    """``kvframe gen skewed``: popular documents and scans (kvframe.workloads.skewed)."""
    parser = generators.add_parser(
        "skewed",
        help="Zipf-popular documents plus one-use scans: where eviction policies part",
        description="Write a seeded workload of shared documents chosen by a Zipf law, mixed "
        "with one-use scan prompts, as kvframe JSONL (see docs/workloads.md: size "
        "num-documents x document-length around the GPU cache). Length distributions as "
        "for 'gen chat'.",
    )
    _add_out_option(parser)
    _add_size_options(parser, "--requests", "num_requests", "requests", "Poisson arrivals")
    parser.add_argument("--num-documents", type=int, metavar="K")
    parser.add_argument("--document-length", metavar="DIST")
    parser.add_argument(
        "--popularity", type=float, metavar="S", help="Zipf exponent over the documents"
    )
    parser.add_argument(
        "--scan-fraction", type=float, metavar="F", help="fraction of one-use scan requests"
    )
    parser.add_argument("--scan-length", metavar="DIST")
    parser.add_argument("--user-prompt-length", metavar="DIST")
    parser.add_argument("--output-length", metavar="DIST")
    _add_start_time_option(parser)
    parser.set_defaults(handler=_gen_skewed)


def _gen_skewed(args: argparse.Namespace, ctx: Context) -> int:
    from kvframe.workloads.skewed import SKEWED

    return _write_workload(args, ctx, SKEWED, SKEWED.config)


GENERATORS: list[Any] = [add_chat_generator, add_agentic_generator, add_skewed_generator]
"""Functions that each add one ``kvframe gen`` generator; later issues append theirs."""


def add_gen_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gen",
        help="write a synthetic workload",
        description="Generate a synthetic workload as kvframe JSONL.",
    )
    generators = parser.add_subparsers(dest="generator", metavar="GENERATOR", required=True)
    for add in GENERATORS:
        add(generators)


# --------------------------------------------------------------------------
# What every generator shares: its common flags, flags to config, writing
# --------------------------------------------------------------------------


def _add_out_option(parser: Any) -> None:
    parser.add_argument("--out", required=True, metavar="FILE", help="output file ('-': stdout)")


def _add_size_options(parser: Any, flag: str, field: str, noun: str, arrivals: str) -> None:
    """The count (``--requests`` or ``--jobs``, into config ``field``), ``--seed``, ``--rate``."""
    parser.add_argument(flag, dest=field, type=int, metavar="N", help=f"number of {noun}")
    parser.add_argument("--seed", type=int, metavar="S", help="random seed")
    parser.add_argument("--rate", metavar="R", help=f"{arrivals} per second ('none': all at start)")


def _add_start_time_option(parser: Any) -> None:
    parser.add_argument("--start-time", type=float, metavar="T", help="first arrival, seconds")


def _add_text_option(parser: Any) -> None:
    parser.add_argument(
        "--text",
        metavar="MODEL",
        help="make the prompts English text tokenized with MODEL's tokenizer (smollm2 or a "
        "GGUF file), for --executor torch:model=MODEL; same lengths and sharing",
    )


def _options(args: argparse.Namespace, config_type: Any) -> dict[str, Any]:
    """The config options the user gave: every flag's dest is its config field's name.

    A flag left out is not an option, so the config's (or the preset's) default holds.
    """
    fields = [field.name for field in attrs.fields(config_type) if field.name != "rate"]
    options = {name: getattr(args, name, None) for name in fields}
    options = {k: v for k, v in options.items() if v is not None}
    if args.rate is not None:
        options["rate"] = parse_rate(args.rate)
    return options


def _write_workload(
    args: argparse.Namespace,
    ctx: Context,
    generator: WorkloadGenerator[Any],
    make: Callable[..., Any],
) -> int:
    """Build the config (``make(**options)``, errors as ConfigError) and write the workload."""
    options = _options(args, generator.config_type)
    try:
        config = make(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err), origin=f"kvframe gen {generator.name}") from None
    text = getattr(args, "text", None)
    write = generator.write_jsonl if text is None else _text_writer(text, generator)
    return write_generated(args.out, config, write, ctx)


def _text_writer(model: str, generator: WorkloadGenerator[Any]) -> Callable[[Any, Any], int]:
    """A writer whose prompts are text tokens (kvframe.workloads.text), checked before writing."""
    from kvframe.executors.torch.models import resolve_model
    from kvframe.executors.torch.tokenizer import tokenizer_from_gguf
    from kvframe.workloads.text import with_text_prompts

    try:
        path = resolve_model(model)
        if path.is_dir():
            raise ValueError(f"{path} is a checkpoint directory; --text needs a GGUF file")
        tokenizer = tokenizer_from_gguf(path)
    except ValueError as err:
        raise ConfigError(str(err), origin="--text") from None

    def write(out: Any, config: Any) -> int:
        specs = with_text_prompts(generator.generate(config), tokenizer.encode)
        description = f"prompts are English text tokenized for {model}"
        return generator.write_specs(specs, out, config, description=description)

    return write


def parse_rate(text: str) -> float | None:
    """``--rate``: arrivals per second, or ``none`` for everything at the start.

    ``inf`` means the same as ``none`` (every gap is zero) and is stored as
    ``none``: an infinite rate would make the file's JSON header non-standard
    (``Infinity``), which strict JSON readers refuse.
    """
    if text.strip().lower() == "none":
        return None
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"expected a number or 'none', got {text!r}", origin="--rate") from None
    if math.isinf(rate) and rate > 0:
        return None
    if math.isnan(rate):
        raise ConfigError(f"expected a number or 'none', got {text!r}", origin="--rate")
    return rate


def write_generated(out: str, config: Any, write: Callable[[Any, Any], int], ctx: Context) -> int:
    """Write a generated workload to ``out`` (a path, or ``-`` for stdout)."""
    if out == "-":
        write(ctx.stdout, config)
    else:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        count = write(path, config)
        print(f"wrote {count} requests to {path}", file=sys.stderr)
    return EXIT_OK
