"""Run ``engine_core_harness.py`` on both sides and print what differs, with figures.

From the worktree, with this tree first on ``PYTHONPATH`` (``wtenv.sh``)::

    .venv/bin/python plugins/kvframe-vllm/tests/engine_core_compare.py \\
        --python /work/vllm033-ref-venv/bin/python --seeds=0:20 [--async-scheduling] \\
        [--only=SCENARIO] [--random-only] [--v1|--v2]

Every flag after ``--python`` goes to the harness unchanged. Prints, per
scenario, the number of records and either ``identical`` or the first
differing record of each side; then the KV events compared by kind and how
many requests finished with their first token. Exits 1 when any scenario
differs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _side(python: str, scheduler: str, out: Path, flags: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [python, str(HERE / "engine_core_harness.py"), scheduler, str(out), *flags],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    if done.returncode != 0:
        sys.exit(f"{scheduler} side failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def _figures(results: dict[str, Any]) -> tuple[Counter, int, int]:
    """KV events by kind, first-token finishes, and steps, over every scenario."""
    kinds: Counter = Counter()
    first_token = steps = 0
    for result in results.values():
        for entry in result["log"]:
            if entry[0] != "step":
                continue
            steps += 1
            kinds.update(event[0] for event in entry[4])
            for client in entry[2].values():
                first_token += sum(
                    1 for o in client["outputs"] if o[2] is not None and len(o[1]) == 1
                )
    return kinds, first_token, steps


def main(argv: list[str]) -> int:
    python = argv[argv.index("--python") + 1]
    flags = [a for a in argv if a != "--python" and a != python]
    with tempfile.TemporaryDirectory() as tmp:
        theirs = _side(python, "vllm", Path(tmp) / "vllm.json", flags)
        ours = _side(python, "bridge", Path(tmp) / "bridge.json", flags)
    differing = 0
    for name, ref in theirs.items():
        if name in ("refused", "duplicate"):
            continue  # what vLLM's scheduler does not share (test_engine_core.py)
        mine, log = ours[name]["log"], ref["log"]
        first = next(
            (i for i, (a, b) in enumerate(zip(mine, log, strict=False)) if a != b),
            None if len(mine) == len(log) else min(len(mine), len(log)),
        )
        if first is None:
            print(f"{name}: {len(log)} records identical")
            continue
        differing += 1
        print(f"{name}: record {first} of {len(log)} differs")
        print("  vllm:  ", json.dumps(log[first] if first < len(log) else None)[:1500])
        print("  bridge:", json.dumps(mine[first] if first < len(mine) else None)[:1500])
    kinds, first_token, steps = _figures(theirs)
    print(
        f"vLLM side: {steps} steps, KV events {dict(sorted(kinds.items()))}, "
        f"{first_token} requests finished with one output token in a step"
    )
    print(f"{differing} of {len(theirs)} scenarios differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
