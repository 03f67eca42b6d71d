#!/usr/bin/env bash
# Regenerates every example trace in this folder, byte for byte (seeded). Run from the repo root:
#   bash workloads/examples/make_examples.sh [TRACES_DIR]
# TRACES_DIR holds the public traces the lengths are drawn from (default ../shared/traces):
#   AzureLLMInferenceTrace_conv.csv, AzureLLMInferenceTrace_code.csv  (github.com/Azure/AzurePublicDataset, data/)
#   conversation_trace.jsonl  (github.com/kvcache-ai/Mooncake, FAST25-release/traces/)
set -euo pipefail
T="${1:-../shared/traces}"
I="${INFERSIM:-.venv/bin/infersim}"
E=workloads/examples

# chat: Poisson at 1 req/s, (prompt, output) pairs drawn jointly from the Azure 2023 conversation trace
"$I" trace gen -o $E/chat.jsonl -n 200 --rate 1 --lengths-from "$T/AzureLLMInferenceTrace_conv.csv" --seed 1
# coding: long prompts, short outputs, from the Azure 2023 code trace, Poisson at 2 req/s
"$I" trace gen -o $E/coding.jsonl -n 200 --rate 2 --lengths-from "$T/AzureLLMInferenceTrace_code.csv" --seed 2
# rag: long contexts (Mooncake/Kimi conversation lengths), prompts capped at 32,000 tokens,
# a 256-token instruction template shared by every request, Poisson at 0.2 req/s
"$I" trace gen -o $E/rag.jsonl -n 100 --rate 0.2 --lengths-from "$T/conversation_trace.jsonl" \
    --max-prompt-tokens 32000 --system-prompt-tokens 256 --seed 3
# bursty: Gamma arrivals, burstiness 0.25 (inter-arrival CV 2), 2 req/s on average, Azure chat lengths
"$I" trace gen -o $E/bursty.jsonl -n 300 --arrival gamma --burstiness 0.25 --rate 2 \
    --lengths-from "$T/AzureLLMInferenceTrace_conv.csv" --seed 4
# n-users: 128 identical requests (2,000-token prompt, 512 output tokens), all ready at t=0;
# run with a concurrency limit N to get N users sending back to back
"$I" trace gen -o $E/n-users.jsonl -n 128 --rate inf --prompt-tokens 2000 --output-tokens 512
# chat-sessions: closed-loop multi-turn chat, 8 users, 4-turn conversations, 20 s mean think time
"$I" trace gen -o $E/chat-sessions.jsonl -n 96 --arrival closed --clients 8 --turns 4 --think-s exponential:20 \
    --prompt-tokens lognormal:200,150 --output-tokens lognormal:250,150 --max-prompt-tokens 8192 --seed 5
