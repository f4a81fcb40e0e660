"""A multi-turn agent job against a vLLM server that runs kvframe's Continuum.

Each turn sends the whole conversation so far plus a tool result, and tells the
scheduler which job and turn it is through ``vllm_xargs`` (vLLM passes them to
``SamplingParams.extra_args``; ``KvframeScheduler`` reads the ``kvframe_*``
keys). Continuum then pins the job's KV cache across the tool call.

    python examples/vllm_bridge/agent_client.py --url http://localhost:8000 --turns 4

Standard library only. The tool call is simulated by a sleep.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
import uuid


def chat(url: str, model: str, messages: list[dict[str, str]], xargs: dict[str, object]) -> str:
    body = {"model": model, "messages": messages, "max_tokens": 64, "vllm_xargs": xargs}
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://localhost:8000")
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--tool-seconds", type=float, default=2.0)
    args = parser.parse_args()
    job = f"job-{uuid.uuid4().hex[:8]}"
    messages = [{"role": "user", "content": "List the files you would inspect to fix a bug."}]
    for turn in range(args.turns):
        xargs = {
            "kvframe_job_id": job,
            "kvframe_turn": turn,
            "kvframe_last_turn": turn == args.turns - 1,
            "kvframe_tool": "shell",
        }
        answer = chat(args.url, args.model, messages, xargs)
        print(f"turn {turn}: {answer[:80]!r}")
        messages.append({"role": "assistant", "content": answer})
        time.sleep(args.tool_seconds)  # the tool call: Continuum keeps the job's KV meanwhile
        messages.append({"role": "user", "content": f"Tool output #{turn}: 3 files changed."})


if __name__ == "__main__":
    main()
