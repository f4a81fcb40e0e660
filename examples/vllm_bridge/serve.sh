#!/usr/bin/env bash
# Serve a model with vLLM 0.19.1 making its scheduling decisions with kvframe's
# Continuum policy, and its CPU offload tier evicting with kvframe's ARC.
# Needs a GPU and a vLLM environment with kvframe and the plugins installed
# (docs/vllm.md, "Installing into a vLLM environment"). --no-async-scheduling:
# vLLM turns async scheduling on by default on a GPU; the bridge refuses it.
#   examples/vllm_bridge/serve.sh [MODEL]
set -euo pipefail
MODEL=${1:-Qwen/Qwen2.5-0.5B-Instruct}
exec vllm serve "$MODEL" \
  --scheduler-cls kvframe_vllm.scheduler.KvframeScheduler \
  --no-async-scheduling \
  --additional-config '{"kvframe_scheduler": "continuum:max_ttl=10"}'
