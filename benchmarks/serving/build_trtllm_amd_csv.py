"""Build benchmarks/serving/trtllm.csv and amd_rocm.csv (corpus-b).

Sources (figures transcribed exactly as printed; derivations in the `derivation` column):
1. ROCm/rocm-blogs@BLOG_COMMIT:blogs/artificial-intelligence/LLM_Inference/README.md ("Best
   practices for competitive inference optimization on AMD Instinct MI300X GPUs", AMD, Jan
   2025), "vLLM Latency Benchmark Results": end-to-end latency of one static batch of B requests
   (B = 1..128), Llama 3.1 70B and 405B FP8, TP8, input 128 or 2048, output 2048, on
   8 x MI300X (vLLM, rocm/vllm-dev:20250112) and 8 x H100 (TensorRT-LLM 0.16.0, emulated static
   batching). The H100 columns go to trtllm.csv, the MI300X columns to amd_rocm.csv.
2. sgl-project/sglang PR #31216 (AMD, July 2026): SGLang 0.5.13.post1 on one MI300X, Gemma 4 31B
   BF16, 1000/1000, concurrency 1 to 4096 -> amd_rocm.csv.

Run: python3 benchmarks/serving/build_trtllm_amd_csv.py  (no arguments, no network).
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import fmt, num, write_csv  # noqa: E402

BLOG_COMMIT = "11235ac299a174b730d359a6b3d9eab85a520f59"
BLOG_URL = f"https://github.com/ROCm/rocm-blogs/blob/{BLOG_COMMIT}/blogs/artificial-intelligence/LLM_Inference/README.md"
BLOG_REF = (f"ROCm/rocm-blogs@{BLOG_COMMIT[:7]}:blogs/artificial-intelligence/LLM_Inference/README.md "
            "(\"Best practices for competitive inference optimization on AMD Instinct MI300X GPUs\", AMD, 2025-01-29), "
            "vLLM Latency Benchmark Results table (Endnote MI300-074)")
# model, batch, input, output, MI300X latency (ms), H100 latency (ms) -- as printed
BLOG_ROWS = """
Llama 3.1 70B|1|128|2048|19089|20923
Llama 3.1 70B|2|128|2048|19610|20352
Llama 3.1 70B|4|128|2048|19911|21134
Llama 3.1 70B|8|128|2048|21859|22102
Llama 3.1 70B|16|128|2048|23538|23961
Llama 3.1 70B|32|128|2048|25343|26543
Llama 3.1 70B|64|128|2048|32548|29599
Llama 3.1 70B|128|128|2048|45216|42398
Llama 3.1 70B|1|2048|2048|19154|21105
Llama 3.1 70B|2|2048|2048|19671|21449
Llama 3.1 70B|4|2048|2048|19976|22201
Llama 3.1 70B|8|2048|2048|22486|23453
Llama 3.1 70B|16|2048|2048|25246|26056
Llama 3.1 70B|32|2048|2048|28967|30501
Llama 3.1 70B|64|2048|2048|39920|36313
Llama 3.1 70B|128|2048|2048|59514|54202
Llama 3.1 405B|1|128|2048|51740|58916
Llama 3.1 405B|2|128|2048|52769|58130
Llama 3.1 405B|4|128|2048|54557|59730
Llama 3.1 405B|8|128|2048|56902|62833
Llama 3.1 405B|16|128|2048|60432|66537
Llama 3.1 405B|32|128|2048|67353|71742
Llama 3.1 405B|64|128|2048|81085|87298
Llama 3.1 405B|128|128|2048|116139|99911
Llama 3.1 405B|1|2048|2048|52218|59511
Llama 3.1 405B|2|2048|2048|53227|60554
Llama 3.1 405B|4|2048|2048|55512|62048
Llama 3.1 405B|8|2048|2048|59931|66082
Llama 3.1 405B|16|2048|2048|66890|72055
Llama 3.1 405B|32|2048|2048|80688|82687
Llama 3.1 405B|64|2048|2048|108503|106951
Llama 3.1 405B|128|2048|2048|168846|195622
"""
MODEL_ID = {"Llama 3.1 70B": "llama-3.1-70b", "Llama 3.1 405B": "meta-llama/Llama-3.1-405B-Instruct"}
SYSTEMS = {
    "mi300x": dict(
        engine="vllm", version="rocm/vllm-dev:20250112 (vLLM build of Jan 2025; version number not printed)",
        flags="benchmark_latency.py per ROCm/MAD standalone instructions (blog note); FP8 checkpoints amd/*-FP8-KV with --kv-cache-dtype fp8 in the blog's serving commands",
        device="mi300x",
        variant="8x AMD Instinct MI300X (192GB, 750W) in Supermicro AS-8125GS-TNMR2, 2x EPYC 9654, host driver 6.2.1 (endnote MI300-074)",
        client="vllm-benchmark-latency", publisher="AMD (AMD Performance Labs, ROCm blog)",
        kv="fp8 (FP8-KV checkpoint; not printed for this table)", col="Latency (ms), MI300X"),
    "h100": dict(
        engine="trtllm", version="0.16.0 (trtllm_v0.16.0; CUDA 12.6, NVIDIA-SMI 560.35.03)",
        flags="gptManagerBenchmark emulated static batching (TensorRT-LLM benchmarks/cpp#emulated-static-batching); engine build config not printed",
        device="h100-sxm",
        variant="8x NVIDIA H100 80GiB 700W (SXM5 per endnote MI300-05A) in Supermicro AS-8125GS-TNHR, 2x EPYC 9654, VBIOS 96.00.74.00.01 (endnote MI300-074)",
        client="trtllm-static-batch", publisher="AMD (AMD Performance Labs, ROCm blog) measuring TensorRT-LLM",
        kv="not stated", col="Latency (ms), H100"),
}


def blog_rows(system: str, prefix: str) -> list[dict]:
    s = SYSTEMS[system]
    rows = []
    for line in BLOG_ROWS.strip().splitlines():
        model, b, isl, osl, lat_mi, lat_h = line.split("|")
        lat = lat_mi if system == "mi300x" else lat_h
        mid = MODEL_ID[model]
        curve = f"{prefix}-rocmblog-{mid.split('/')[-1].lower()}-fp8-{s['device']}-tp8-{isl}-{osl}"
        base = {
            "curve_id": curve, "source": BLOG_URL, "source_ref": BLOG_REF, "publisher": s["publisher"],
            "engine": s["engine"], "engine_version": s["version"], "engine_flags": s["flags"],
            "device": s["device"], "device_variant": s["variant"], "n_devices": "8", "tp": "8",
            "model": mid, "quant": "fp8", "kv_cache_dtype": s["kv"], "client": s["client"],
            "dataset": "random token ids (fixed lengths)", "input_tokens": isl, "output_tokens": osl,
            "range_ratio": "", "num_prompts": b, "warmup": "", "ramp_up": "", "ignore_eos": "true",
            "load_kind": "concurrency", "max_concurrency": b, "request_rate": "", "burstiness": "1.0",
        }
        printed = (f"{model} | FP8 | TP Size 8 | Batch Size {b} | Input {isl} | Output {osl} | "
                   f"Latency (ms), MI300X {lat_mi} | Latency (ms), H100 {lat_h}")
        note = ("One static batch of B requests started together; latency = elapsed time to process input + output lengths "
                "(endnote), so every request ends at this time (mean = the printed figure). Throughput per the blog's own "
                "definition: requests x output length / elapsed time. The model/precision/TP cells are printed only on the "
                "table's first row and repeated here. Measured by AMD Performance Labs as of 2025-01-15. Overlap: the same "
                "figures are in benchmarks/public (serving_trtllm_h100_latency.csv for H100; the MI300X column equals the "
                "rocm-vllm dev-docker rows of serving_concurrency.csv rounded to the ms) -- do not count them twice in a fit.")
        lat_v = num(lat)
        vals = [("e2el_ms", "mean", lat_v, ""),
                ("output_tps", "value", num(b) * num(osl) / (lat_v / 1000),
                 f"B x output / (latency / 1000) = {b} x {osl} / {lat_v / 1000:g} s = {num(b) * num(osl) / (lat_v / 1000):.2f} tok/s")]
        for q, stat, v, der in vals:
            r = dict(base)
            r.update({"row_id": f"{curve}-b{b}-{q}", "quantity": q, "statistic": stat, "value": fmt(round(v, 3)),
                      "as_printed": printed + (f" ({s['col']})" if not der else ""), "derivation": der, "notes": note})
            rows.append(r)
    return rows


# sgl-project/sglang PR #31216 description, "Speed Benchmarks (ISL/OSL 1000/1000)" table.
PR31216 = "https://github.com/sgl-project/sglang/pull/31216"
GEMMA_ROWS = [  # Strategy | TP | Concurrency | TTFT (ms) | TPOT (ms) | Throughput (tok/s) | tok/s/GPU
    ("1", "130", "21.49", "46", "46"),
    ("16", "151", "31.45", "492", "492"),
    ("64", "588", "62.93", "951", "951"),
    ("256", "39,891", "192.91", "1,047", "1,047"),
    ("1024", "218,436", "681.22", "1,045", "1,045"),
    ("4096", "640,807", "1,524.16", "1,044", "1,044"),
]


def gemma_rows() -> list[dict]:
    rows = []
    curve = "amd_rocm-sglang-pr31216-gemma-4-31b-it-mi300x-tp1-1000-1000"
    for c, ttft, tpot, tput, per_gpu in GEMMA_ROWS:
        base = {
            "curve_id": curve, "source": PR31216,
            "source_ref": "sgl-project/sglang PR #31216 \"benchmark: MI300X BF16 speed + accuracy data for Gemma 4 31B\" (ChangLiu0709, 2026-07-14), description, Speed Benchmarks table",
            "publisher": "ChangLiu0709 (AMD contributor to SGLang)", "engine": "sglang", "engine_version": "0.5.13.post1",
            "engine_flags": "strategy Balanced, TP 1 (auto-selected); docker lmsysorg/sglang:v0.5.13.post1-rocm720-mi30x; other flags not printed in the PR description",
            "device": "mi300x", "device_variant": "AMD Instinct MI300X (server 8x192 GB HBM3; one GPU used)",
            "n_devices": "1", "tp": "1", "model": "google/gemma-4-31B-it", "quant": "bf16",
            "kv_cache_dtype": "not stated", "client": "sglang-bench-serving",
            "dataset": "random (not printed in this PR; ISL/OSL given)", "input_tokens": "1000", "output_tokens": "1000",
            "range_ratio": "", "num_prompts": "", "warmup": "", "ramp_up": "", "ignore_eos": "not stated",
            "load_kind": "concurrency", "max_concurrency": c, "request_rate": "inf", "burstiness": "1.0", "derivation": "",
        }
        printed = f"Balanced | 1 | {c} | {ttft} | {tpot} | {tput} | {per_gpu}"
        note = ("Table columns: Strategy | TP | Concurrency | TTFT (ms) | TPOT (ms) | Throughput (tok/s) | tok/s/GPU. The PR does not "
                "say which statistic TTFT/TPOT are (mean or median), nor the number of prompts or warm-up of this run (sibling "
                "cookbook PRs by the same author use --warmup-requests 64 and --random-range-ratio 1.0). 'Throughput' is read as "
                "output tokens/s: at concurrency 1, 1000 / TPOT 21.49 ms = 46.5 tok/s matches 46. The author notes the model saturates "
                "one GPU beyond concurrency 256 (TTFT grows to minutes: queueing).")
        for q, stat, v in (("ttft_ms", "not stated", ttft), ("tpot_ms", "not stated", tpot), ("output_tps", "value", tput)):
            r = dict(base)
            r.update({"row_id": f"{curve}-c{c}-{q}", "quantity": q, "statistic": stat, "value": fmt(num(v)),
                      "as_printed": printed, "notes": note})
            rows.append(r)
    return rows


def main() -> None:
    trt = blog_rows("h100", "trtllm")
    amd = blog_rows("mi300x", "amd_rocm") + gemma_rows()
    write_csv(HERE / "trtllm.csv", trt)
    write_csv(HERE / "amd_rocm.csv", amd)
    for name, rows in (("trtllm.csv", trt), ("amd_rocm.csv", amd)):
        print(f"{name}: {len(rows)} rows, {len({r['curve_id'] for r in rows})} curves")


if __name__ == "__main__":
    main()
