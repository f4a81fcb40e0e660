#!/usr/bin/env bash
# Serve with vLLM's own scheduler and a CPU offload tier whose eviction policy
# is a kvframe plugin (here the third-party S3-FIFO example) behind kvframe's
# reuse filter (vLLM 0.19.1). Both halves of the bridge together, the kvframe
# scheduler driving vLLM's OffloadingConnector, is docs/vllm.md's "A scheduling
# policy and a CPU tier together" (add --scheduler-cls and --no-async-scheduling).
#   examples/vllm_bridge/serve_with_tier.sh [MODEL]
set -euo pipefail
MODEL=${1:-Qwen/Qwen2.5-0.5B-Instruct}
exec vllm serve "$MODEL" --kv-transfer-config '{
  "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
  "kv_connector_extra_config": {
    "spec_name": "KvframeOffloadingSpec", "spec_module_path": "kvframe_vllm.offload",
    "cpu_bytes_to_use": 8589934592,
    "kvframe_eviction": "s3fifo",
    "kvframe_reuse_filter": "threshold:store_threshold=2"}}'
