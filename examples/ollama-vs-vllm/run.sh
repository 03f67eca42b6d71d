#!/usr/bin/env bash
# Regenerates output.txt and results.csv; the full report is out/report.html.
set -euo pipefail
cd "$(dirname "$0")"
INFERSIM="${INFERSIM:-../../.venv/bin/infersim}"
"$INFERSIM" sweep sweep.yaml -o out | tee output.txt
cp out/results.csv results.csv
