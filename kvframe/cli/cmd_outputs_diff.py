"""``kvframe outputs-diff``: compare two torch-executor runs' generated tokens.

Kept apart from ``calibrate`` (its other old neighbour): it only reads two
``outputs.jsonl`` files and never builds a model.
"""

from __future__ import annotations

import argparse
from typing import Any

from kvframe.config import ConfigError

__all__ = ["add_outputs_diff_command"]


def add_outputs_diff_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "outputs-diff",
        help="compare two torch-executor runs' generated tokens",
        description="Compare the outputs.jsonl of two runs (run directories or files) token "
        "for token. Exit 0 when every request generated the same tokens, 1 otherwise, "
        "naming the first differing request and token.",
    )
    parser.add_argument("reference", metavar="RUN_A")
    parser.add_argument("other", metavar="RUN_B")
    parser.set_defaults(handler=_outputs_diff)


def _outputs_diff(args: argparse.Namespace, ctx: Any) -> int:
    from kvframe.executors.torch.outputs import first_difference, read_outputs

    try:
        a, b = read_outputs(args.reference), read_outputs(args.other)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    difference = first_difference(a, b)
    if difference is None:
        from kvframe.console import counted

        tokens = counted(sum(map(len, a.values())), "generated token")
        print(f"identical: {counted(len(a), 'request')}, {tokens}")
        return 0
    print(f"different: {difference}")
    return 1
