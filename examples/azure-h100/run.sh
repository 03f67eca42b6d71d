#!/usr/bin/env bash
# How many H100s for 50 requests/s of the Azure conversation trace at TTFT p90 < 1 s?
#
# Workload: the first 10 minutes (2,867 requests, 4.78 req/s) of the Azure LLM inference trace 2023,
# conversation service (AzureLLMInferenceTrace_conv.csv, github.com/Azure/AzurePublicDataset,
# snapshot b469a113, CC-BY 4.0; Patel et al., "Splitwise: Efficient generative LLM inference using
# phase splitting", ISCA 2024), converted with `infersim trace convert`. The excerpt is committed;
# it is rebuilt here when the source CSV is found (TRACES=folder holding it).
# The plan replays it at scaled rates until TTFT p90 crosses 1 s, for Llama 3.1 8B under three
# engines in bf16 and FP8, and sizes the deployment for 50 req/s.
set -euo pipefail
cd "$(dirname "$0")"
INFERSIM="${INFERSIM:-../../.venv/bin/infersim}"
SRC="${TRACES:-../../../shared/traces}/AzureLLMInferenceTrace_conv.csv"
if [ -f "$SRC" ]; then
  "$INFERSIM" trace convert "$SRC" -o azure-conv-first-10min.jsonl --end-s 600
fi
ARGS=(--trace azure-conv-first-10min.jsonl --hw h100-sxm --engine vllm,sglang,trtllm --quant bf16,fp8
      --model llama-3.1-8b --ttft-p90 1s --target-rps 50)
"$INFERSIM" plan "${ARGS[@]}" --html out/plan.html 2>&1 | tee output.txt
"$INFERSIM" plan "${ARGS[@]}" --json > plan.json
