#!/usr/bin/env bash
# Serve a model with vLLM (0.19.1 or 0.33.0) making its scheduling decisions with
# kvframe's Continuum policy (serve_with_tier.sh adds a CPU offload tier).
# Needs a GPU and a vLLM environment with kvframe and the plugins installed
# (docs/vllm.md, "Installing into a vLLM environment"). Async scheduling, vLLM's
# default on a GPU, is on: the bridge makes vLLM's AsyncScheduler decisions
# (add --no-async-scheduling for its synchronous Scheduler's).
#   examples/vllm_bridge/serve.sh [MODEL]
set -euo pipefail
MODEL=${1:-Qwen/Qwen2.5-0.5B-Instruct}
exec vllm serve "$MODEL" \
  --scheduler-cls kvframe_vllm.scheduler.KvframeScheduler \
  --additional-config '{"kvframe_scheduler": "continuum:max_ttl=10"}'
