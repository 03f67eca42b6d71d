"""corpus_e.csv rows from pallavim1/ai-infra-projects (GitHub user pallavim1; GKE serving benchmarks of vLLM,
Aug 2026): `sglang.bench_serving --backend vllm` result JSON files of google/gemma-4-26B-A4B served by vLLM with
FP8 weights (`--quantization fp8`) and FP8 KV cache, random fixed-length prompts of ~10K tokens, 500 output tokens,
concurrency sweeps with 2 x C prompts (8 at C = 1). Used by build_corpus_e.py; the JSON files are vendored verbatim
under sources/pallavim1__ai-infra-projects/<commit>/<path> (read with the search tool's stored copies: the commits
are no longer on the repository's default branch, whose newest snapshot no longer holds these folders).

Every figure is a JSON number's text exactly as written (`as_printed` holds `"key": number`); nothing is converted.
Each sweep's figures were checked against the repository's own printed summary tables (README of the H100 folder,
the G4 folder's 3-way comparison report): they agree to the printed rounding.
"""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = "pallavim1/ai-infra-projects"
SRC = HERE / "sources" / "pallavim1__ai-infra-projects"
URL = "https://github.com/%s/blob/%s/%s"
PUBLISHER = "pallavim1 (GitHub user; GKE vLLM serving benchmarks, ai-infra-projects)"

#: JSON key -> (quantity, statistic); every key sglang.bench_serving writes for these metrics
KEYS = {
    "request_throughput": ("request_tps", "value"), "output_throughput": ("output_tps", "value"),
    "total_throughput": ("total_tps", "value"),
    "mean_ttft_ms": ("ttft_ms", "mean"), "median_ttft_ms": ("ttft_ms", "median"), "p99_ttft_ms": ("ttft_ms", "p99"),
    "mean_tpot_ms": ("tpot_ms", "mean"), "median_tpot_ms": ("tpot_ms", "median"), "p99_tpot_ms": ("tpot_ms", "p99"),
    "mean_itl_ms": ("itl_ms", "mean"), "median_itl_ms": ("itl_ms", "median"), "p95_itl_ms": ("itl_ms", "p95"),
    "p99_itl_ms": ("itl_ms", "p99"),
    "mean_e2e_latency_ms": ("e2el_ms", "mean"), "median_e2e_latency_ms": ("e2el_ms", "median"),
    "p90_e2e_latency_ms": ("e2el_ms", "p90"), "p99_e2e_latency_ms": ("e2el_ms", "p99"),
}

CLIENT_NOTE = (
    "Client: sglang.bench_serving from lmsysorg/sglang:v0.5.10.post1 with --backend vllm (OpenAI completions against "
    "the vLLM server), --dataset-name random --random-range-ratio 1.0 (SGLang's reading: fixed lengths), "
    "--request-rate inf, --max-concurrency C, --num-prompts 2 x C (8 at C = 1), a separate warm-up run of 4 prompts "
    "(C = 2, 64 output tokens) before the sweep; ignore_eos is the client's default for random prompts (its "
    "--disable-ignore-eos is not passed), and the totals confirm full-length outputs. One run per C.")
H100_DEVICE = "2x NVIDIA H100 80GB HBM3 (SXM, NVLink) of a GCE a3-highgpu-8g node on GKE"
G4_DEVICE = "NVIDIA RTX PRO 6000 Blackwell Server Edition 96GB on a GCE G4 node (g4-standard-48 / -384), GKE"

#: (curve suffix, commit, results folder, concurrencies, device, variant, n_devices, engine_version, flags, input
#:  length as requested, source of the server command, curve-specific note, outlier reason or "")
SWEEPS = [
    ("h100x2-vllm-gemma-4-26b-a4b-fp8-tp2-eager-10240-500", "7d22eb7554d0efd12a3a353b8599a0cf81f1a78a",
     "Inference/vllm/H100/Gemma4/Gemma4-26B/results", (1, 8, 16, 32, 64, 128, 256, 512), "h100-sxm", H100_DEVICE,
     2, "unknown",
     "--tensor-parallel-size 2 --quantization fp8 --max-model-len 16384 --max-num-seqs 1024 "
     "--max-num-batched-tokens 16384 --kv-cache-dtype fp8 --gpu-memory-utilization 0.90 "
     "--attention-config '{\"backend\": \"TRITON_ATTN\"}' --enable-prefix-caching --enable-chunked-prefill "
     "--disable-custom-all-reduce --trust-remote-code --enforce-eager",
     10240, "Inference/vllm/H100/Gemma4/Gemma4-26B/vllm_gemma4_26b_h100_2GPU.yaml",
     "Server image vllm/vllm-openai:latest (version not recorded), NCCL_NET=Socket with the host's TCPXO NCCL "
     "plugins removed, custom all-reduce disabled, Triton attention, and --enforce-eager (no CUDA graphs).",
     "outlier: the server ran --enforce-eager (no CUDA graphs, every decode step launched kernel by kernel) with "
     "custom all-reduce disabled; the serving replay models CUDA-graph decode only, and the same model, device "
     "pair and client with CUDA graphs (the -O3 curve beside this one) decodes at 5.4 ms per token at C = 1 "
     "against this run's 52.4 ms, so this curve measures the eager launch path, which no preset expresses. "
     "Judged before any replay."),
    ("h100x2-vllm0.29.0-gemma-4-26b-a4b-fp8-tp2ep-10000-500", "5a20f3904d9c2890df4f64a57d921b6e6e217851",
     "Inference/vllm/H100/Gemma4/Gemma4-26B/results/optimized", (1, 8, 10, 16, 32), "h100-sxm", H100_DEVICE, 2,
     "0.29.0",
     "--tensor-parallel-size 2 --enable-expert-parallel --language-model-only --quantization fp8 "
     "--kv-cache-dtype fp8_e4m3 --gpu-memory-utilization 0.92 --max-model-len 16384 --max-num-seqs 32 "
     "--max-num-batched-tokens 32768 --no-enable-prefix-caching --enable-chunked-prefill "
     "--attention-config '{\"backend\": \"TRITON_ATTN\"}' --compilation-config '{\"mode\": 3, \"cudagraph_mode\": "
     "\"FULL_AND_PIECEWISE\", \"cudagraph_capture_sizes\": [1, 2, 4, 8, 12, 16, 24, 32]}' --trust-remote-code",
     10000, "Inference/vllm/H100/Gemma4/Gemma4-26B/vllm_gemma4_26b_h100_2GPU_optimized.yaml",
     "Engine version 0.29.0 as the G4 folder's 3-way comparison report (results/sglang_benchmark_g4_2gpu_optimized_"
     "report.md at 7398d19, which prints these same figures in its '2x H100 GPUs (TP=2, EP=2)' column) states it "
     "('Serving Engine: vLLM v0.29.0'); the manifest pulls vllm/vllm-openai:nightly. Expert parallel over the two "
     "GPUs, CUDA graphs FULL_AND_PIECEWISE at batch sizes up to 32, Triton attention.", ""),
    ("rtxpro6000x2-vllm0.29.0-gemma-4-26b-a4b-fp8-tp2ep-10000-500", "7398d192731f76c6cf872581cbc222716edb218a",
     "Inference/vllm/G4/Gemma4/Gemma4-26B/results/g4_2gpu_optimized", (1, 8, 10, 16, 32), "rtx-pro-6000",
     "2x " + G4_DEVICE + ", PCIe Gen5 P2P (no NVLink)", 2, "0.29.0",
     "--tensor-parallel-size 2 --enable-expert-parallel --disable-custom-all-reduce --max-model-len 16384 "
     "--max-num-seqs 32 --enable-chunked-prefill --max-num-batched-tokens 32768 --no-enable-prefix-caching "
     "--quantization fp8 --kv-cache-dtype fp8 --gpu-memory-utilization 0.92 --compilation-config '{\"mode\":3,"
     "\"cudagraph_mode\":\"FULL_AND_PIECEWISE\",\"cudagraph_capture_sizes\":[1,2,4,8,12,16,24,32]}' "
     "--async-scheduling --block-size 16 --trust-remote-code",
     10000, "Inference/vllm/G4/Gemma4/Gemma4-26B/vllm_gemma4_26b_g4_2GPU_optimized.yaml",
     "Engine version 0.29.0 as the 3-way comparison report at the same commit states it ('Serving Engine: vLLM "
     "v0.29.0 (--tensor-parallel-size 2 --enable-expert-parallel -O3)'); the manifest pulls vllm/vllm-openai:latest. "
     "The two GPUs talk over PCIe Gen5 (custom all-reduce disabled, NCCL P2P).", ""),
    ("rtxpro6000-vllm-gemma-4-26b-a4b-fp8-tp1-10000-500", "7398d192731f76c6cf872581cbc222716edb218a",
     "Inference/vllm/G4/Gemma4/Gemma4-26B/results/g4_1gpu_nocache", (1, 8, 10, 16, 32), "rtx-pro-6000",
     "1x " + G4_DEVICE, 1, "unknown", "",
     10000, "",
     "Server: one GPU (TP1), vLLM with FP8 weights and FP8 KV cache per the report ('FP8 Weights + FP8 KV Cache', "
     "'1x G4 GPU (TP=1)' column, whose figures these files are); the exact server command of this folder "
     "('g4_1gpu_nocache': no prefix cache) is not in the repository at this commit (the 1-GPU manifests at nearby "
     "commits differ: vllm_gemma4_26b_g4_1GPU_optimized_10k_300.yaml sets --max-num-batched-tokens 4096 and prefix "
     "caching on), so engine_flags stay empty and the version unknown (the manifests pull vllm/vllm-openai:latest; "
     "the report's 'vLLM v0.29.0' heading describes its 2-GPU runs).", ""),
]

_NUM = r"(-?[0-9.eE+-]+|Infinity)"


def _field(text: str, key: str) -> str:
    m = re.search(r'"%s": %s' % (re.escape(key), _NUM), text)
    if not m:
        raise ValueError(f"{key} missing")
    return m.group(1)


def pallavim1_rows() -> list[dict]:
    rows = []
    for (suffix, commit, folder, concs, device, variant, n_dev, version, flags, in_len, server_src, note,
         outlier) in SWEEPS:
        curve = f"corpus_e-pallavim1-{suffix}"
        for c in concs:
            rel = f"{folder}/result_c{c}.json"
            path = SRC / commit / rel
            text = path.read_text(encoding="utf-8")
            if int(_field(text, "max_concurrency")) != c:
                raise ValueError(f"{path}: max_concurrency is not {c}")
            n, tin, tout = (int(_field(text, k)) for k in ("completed", "total_input_tokens", "total_output_tokens"))
            server = (f" Server command: {REPO}@{commit[:7]}:{server_src}." if server_src else "")
            notes = (f"{outlier + ' ' if outlier else ''}{n} successful requests, total input tokens {tin}, total "
                     f"generated tokens {tout} (this file; {tin / n:.1f} input and {tout / n:.1f} output tokens per "
                     f"request, requested {in_len} / 500). google/gemma-4-26B-A4B (BF16 checkpoint) quantized online "
                     f"to FP8 by vLLM (--quantization fp8), FP8 KV cache. {note}{server} {CLIENT_NOTE}")
            base = {
                "curve_id": curve, "source": URL % (REPO, commit, rel),
                "source_ref": f"{REPO}@{commit[:7]}:{rel} (sglang.bench_serving --output-file JSON)",
                "publisher": PUBLISHER, "engine": "vllm", "engine_version": version, "engine_flags": flags,
                "device": device, "device_variant": variant, "n_devices": str(n_dev), "tp": str(n_dev),
                "model": "google/gemma-4-26B-A4B", "quant": "fp8", "kv_cache_dtype": "fp8",
                "client": "sglang-bench-serving", "dataset": "random", "input_tokens": str(in_len),
                "output_tokens": "500", "range_ratio": "1.0", "num_prompts": str(n), "warmup": "", "ramp_up": "",
                "ignore_eos": "true", "load_kind": "concurrency", "max_concurrency": str(c), "request_rate": "inf",
                "burstiness": "1.0",
            }
            for key, (q, stat) in KEYS.items():
                v = _field(text, key)
                r = dict(base)
                r.update({"row_id": f"{curve}-c{c}-{q}-{stat}", "quantity": q, "statistic": stat, "value": v,
                          "as_printed": f'"{key}": {v}', "derivation": "", "notes": notes})
                rows.append(r)
    return rows
