"""Run under the vLLM interpreter: the docs' ``vllm serve`` command up to the scheduler build.

Used by ``test_serve_command.py``. Takes the ``vllm serve ... --scheduler-cls
kvframe_vllm.scheduler.KvframeScheduler`` command from ``docs/vllm.md`` as
written, and goes the way ``vllm serve`` goes: vLLM's serve argument parser
(``make_arg_parser``), ``AsyncEngineArgs.from_cli_args``,
``create_engine_config`` (with the bridge's general plugin,
:func:`kvframe_vllm.preflight.register`, loaded as vLLM loads it), then vLLM's
own ``EngineCore`` constructor with the harness's model-less executor, which
builds the scheduler from ``scheduler_cls``. Two substitutions, because the
reference environment has no weights and no network: the model name becomes
the local config-only model folder, and ``--skip-tokenizer-init`` is added.
Prints JSON: the command, what was built, and the same for variants that must
be refused (each refusal, and where it stopped).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

HERE = Path(__file__).resolve().parent  # first on sys.path: this script runs as one

import engine_core_harness  # noqa: E402

DOCS = HERE.parents[2] / "docs" / "vllm.md"


def docs_command(*, with_flag: str = "--scheduler-cls") -> list[str]:
    """The first ``vllm serve`` command in docs/vllm.md that names the bridge scheduler
    (and ``with_flag``)."""
    for block in re.findall(r"```(?:bash|console)\n(.*?)```", DOCS.read_text(), re.S):
        command = block.replace("\\\n", " ")
        if "vllm serve" in command and "--scheduler-cls" in command and with_flag in command:
            return shlex.split(command, comments=True)  # the block opens with a comment
    raise SystemExit(
        f"docs/vllm.md has no `vllm serve ... --scheduler-cls` command with {with_flag}"
    )


def serve_parser(parser: Any, engine_args: Any) -> Any:
    """``vllm serve``'s parser; its engine part alone where the server's imports fail.

    The reference environment installs vLLM for its scheduler, not its HTTP
    server (``partial_json_parser`` and other server dependencies are missing),
    so ``make_arg_parser`` may not import; the engine flags are the same
    ``AsyncEngineArgs.add_cli_args`` either way, after a positional model tag.
    """
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    except ImportError:
        parser.add_argument("model_tag", nargs="?")
        return engine_args.add_cli_args(parser)
    return make_arg_parser(parser)


def build(argv: list[str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.engine.core import EngineCore

    assert argv[:2] == ["vllm", "serve"], argv
    args = argv[2:]
    args[0] = str(engine_core_harness.MODEL_DIR)  # the model name
    args.append("--skip-tokenizer-init")
    namespace = serve_parser(FlexibleArgumentParser(), AsyncEngineArgs).parse_args(args)
    if namespace.model_tag is not None:  # what `vllm serve` does with the positional
        namespace.model = namespace.model_tag
    engine_args = AsyncEngineArgs.from_cli_args(namespace)
    stage = "create_engine_config"
    try:
        vllm_config = engine_args.create_engine_config()
        stage = "EngineCore"
        engine = EngineCore(vllm_config, engine_core_harness.make_executor_class(), log_stats=True)
    except Exception as exc:
        return {"stopped_at": stage, "type": type(exc).__name__, "message": str(exc)}
    scheduler = engine.scheduler
    return {
        "stopped_at": None,
        "engine_args_async_scheduling": engine_args.async_scheduling,
        "async_scheduling": bool(vllm_config.scheduler_config.async_scheduling),
        "core_async_scheduling": getattr(
            getattr(scheduler, "core", None), "async_scheduling", None
        ),
        "batch_queue_size": engine.batch_queue_size,
        "scheduler": type(scheduler).__name__,
        "policy": getattr(getattr(scheduler, "policy", None), "name", None),
        "connector": type(getattr(getattr(scheduler, "tier", None), "connector", None)).__name__,
    }


def use_a_gpu_like_platform() -> None:
    """vLLM's CPU platform, except that async scheduling resolves as on a GPU.

    This vLLM wheel is not a CPU build, so vLLM finds no platform here; the
    check installs its CPU platform. That platform turns async scheduling off,
    which a GPU does not: vLLM 0.19.1 on a GPU turns it on unless
    ``--no-async-scheduling`` is given. Keeping the value the config had before
    the platform's update makes the command meet what it meets on a GPU.
    """
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    class GpuLikeCpuPlatform(CpuPlatform):
        @classmethod
        def check_and_update_config(cls, vllm_config: Any) -> None:
            wanted = vllm_config.scheduler_config.async_scheduling
            super().check_and_update_config(vllm_config)
            vllm_config.scheduler_config.async_scheduling = wanted

    vllm.platforms._current_platform = GpuLikeCpuPlatform()


def main() -> None:
    from kvframe_vllm import preflight

    use_a_gpu_like_platform()

    preflight.register()  # what vLLM's load_general_plugins does with the entry point
    command = docs_command()
    bad_policy = list(command)
    bad_policy[bad_policy.index("--additional-config") + 1] = '{"kvframe_scheduler": "fcsf"}'
    results = {
        "command": command,
        "as_written": build(list(command)),
        "with_no_async": build([*command, "--no-async-scheduling"]),
        "with_lora": build([*command, "--enable-lora"]),
        "bad_policy": build(bad_policy),
    }
    # The scheduling policy + CPU tier command (vLLM 0.19.1), as written.
    tier_command = docs_command(with_flag="--kv-transfer-config")
    results["tier_command"] = tier_command
    results["tier_as_written"] = build(list(tier_command))
    import vllm

    results["vllm_version"] = vllm.__version__
    if vllm.__version__.startswith("0.33"):
        # vLLM 0.33's own tier with a kvframe eviction plugin, as written.
        tier033_command = docs_command(with_flag="kvframe_vllm.cache_policy")
        results["tier033_command"] = tier033_command
        results["tier033_as_written"] = build(list(tier033_command))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
