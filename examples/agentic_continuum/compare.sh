#!/usr/bin/env bash
# Continuum vs FCFS on a generated agentic workload: job completion time side by side.
#   examples/agentic_continuum/compare.sh [OUT_DIR]      (about a minute)
# Short tool calls (tool durations x0.3) and a GPU cache of 3000 blocks of 16
# tokens, so pinned turns compete with new work for memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/agentic-continuum}
mkdir -p "$out"
kvframe=.venv/bin/kvframe
"$kvframe" gen agentic --out "$out/agentic.jsonl" --jobs 100 --rate 1.0 --tool-time-scale 0.3 --seed 0
printf '%-34s %10s %10s %10s %12s %12s\n' scheduler "JCT mean" "JCT p50" "JCT p90" "job wait" "re-prefill"
for tier in none cpu:capacity=32GiB; do
for scheduler in fcfs continuum continuum:ttl=fixed; do
  dir="$out/$(echo "$scheduler-$tier" | tr ':=' '__')"
  offload=()
  [ "$tier" = none ] || offload=(--offload "$tier")
  "$kvframe" run "$out/agentic.jsonl" --no-config --scheduler "$scheduler" "${offload[@]}" \
    --num-gpu-blocks 3000 --out "$dir" --json --no-progress > "$dir.json"
  label="$scheduler"
  [ "$tier" = none ] || label="$scheduler + $tier"
  .venv/bin/python - "$label" "$dir/metrics.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
m = json.load(open(path))
jct = m["distributions"]["job_completion_time_seconds"]
wait = m["distributions"]["job_waiting_time_seconds"]
c = m["counters"]
print(f"{name:<34} {jct['mean']:>10.2f} {jct['p50']:>10.2f} {jct['p90']:>10.2f} "
      f"{wait['mean']:>12.2f} {c['reprefilled_tokens_total']:>12,}")
PY
done
done
