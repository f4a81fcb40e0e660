#!/usr/bin/env bash
# The evidence for each bundled policy against its baseline: sweep, table, report.
#   examples/policy_evidence/run.sh
# Writes runs/policy-evidence/results.sqlite, runs/policy-evidence/evidence.md (the
# table of README.md), evidence.png (its figure) and runs/policy-evidence/report/
# (report.html, figures). The figures need the plot extra
# (pip install 'kvframe[plot]'). Running it again skips the cells already stored.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/bootstrap
.venv/bin/kvframe sweep examples/policy_evidence/sweep.toml
.venv/bin/kvframe compare runs/policy-evidence/results.sqlite --json \
  | .venv/bin/python examples/policy_evidence/summarise.py --figure runs/policy-evidence/evidence.png \
  | tee runs/policy-evidence/evidence.md
.venv/bin/kvframe compare runs/policy-evidence/results.sqlite \
  --plots runs/policy-evidence/report --title "Bundled policies against their baselines" \
  > runs/policy-evidence/compare.txt || echo "(no figures: pip install 'kvframe[plot]')" >&2
