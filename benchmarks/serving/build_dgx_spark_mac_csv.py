"""Build benchmarks/serving/dgx_spark_mac.csv (corpus-b): DGX Spark and Apple-silicon Macs under
concurrency.

Sources (every figure transcribed as printed; derivations in the `derivation` column):
1. ggml-org/llama.cpp@4c7e989:benches/dgx-spark.md -- `llama-batched-bench` on one DGX Spark
   (GB10), build 2f68ce7cf (6918), five GGUF models, PP in {512, 4096, 8192}, TG 32, B (parallel
   sequences) in {1, 2, 4, 8, 16, 32}. The tables are copied into BATCHED_BENCH below.
2. ggml-org/llama.cpp issue #10473 -- llama-server with 4 slots on an M2 Ultra, 1 / 2 / 4
   concurrent requests (reported as a performance bug).
3. jundot/omlx issue #1783 -- oMLX 0.4.2's built-in continuous-batching benchmark on an M4 Max
   (pp1024 / tg128 at 1x, 2x, 4x, 8x concurrent requests).
4. youssofal/MTPLX issue #265 -- the same oMLX benchmark tool pointed at an MTPLX server on an
   M3 Max (Qwen3.8-27B 4-bit, pp1024 / tg128 at 1x, 2x, 4x, 8x).

Run: python3 benchmarks/serving/build_dgx_spark_mac_csv.py  (no arguments, no network).
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import fmt, num, slug, write_csv  # noqa: E402

LLAMA_COMMIT = "4c7e9893c4ca8eec35d032726d14b74fae76cff8"
LLAMA_URL = f"https://github.com/ggml-org/llama.cpp/blob/{LLAMA_COMMIT}/benches/dgx-spark.md"
HEADER = "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"

# model section -> (model id, quant, what the GGUF is)
GGUF = {
    "ggml-org/gpt-oss-20b-GGUF": ("gpt-oss-20b", "mxfp4", "gpt-oss 20B MXFP4 MoE, 11.27 GiB (llama-bench row of the same page)"),
    "ggml-org/gpt-oss-120b-GGUF": ("gpt-oss-120b", "mxfp4", "gpt-oss 120B MXFP4 MoE, 59.02 GiB"),
    "ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF": ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "q8_0", "qwen3moe 30B.A3B Q8_0, 30.25 GiB (same architecture as infersim's qwen3-30b-a3b; kept under its own HF id)"),
    "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF": ("Qwen/Qwen2.5-Coder-7B", "q8_0", "qwen2 7B Q8_0, 7.54 GiB (Qwen2.5-Coder-7B base)"),
    "ggml-org/gemma-3-4b-it-qat-GGUF": ("google/gemma-3-4b-it", "q4_0", "gemma3 4B Q4_0 (QAT), 2.35 GiB"),
}

BATCHED_BENCH = """
## ggml-org/gpt-oss-20b-GGUF
|   512 |     32 |    1 |    544 |    0.390 |  1311.72 |    0.395 |    81.11 |    0.785 |   693.12 |
|   512 |     32 |    2 |   1088 |    0.273 |  3754.20 |    0.674 |    95.00 |    0.946 |  1149.52 |
|   512 |     32 |    4 |   2176 |    0.517 |  3965.01 |    0.843 |   151.90 |    1.359 |  1601.00 |
|   512 |     32 |    8 |   4352 |    1.025 |  3994.63 |    1.008 |   254.09 |    2.033 |  2140.79 |
|   512 |     32 |   16 |   8704 |    2.054 |  3988.71 |    1.277 |   400.94 |    3.331 |  2613.19 |
|   512 |     32 |   32 |  17408 |    4.110 |  3986.29 |    1.666 |   614.82 |    5.776 |  3014.04 |
|  4096 |     32 |    1 |   4128 |    1.166 |  3513.60 |    0.410 |    77.97 |    1.576 |  2619.03 |
|  4096 |     32 |    2 |   8256 |    2.316 |  3537.64 |    0.734 |    87.18 |    3.050 |  2707.09 |
|  4096 |     32 |    4 |  16512 |    4.653 |  3521.53 |    0.915 |   139.90 |    5.567 |  2965.81 |
|  4096 |     32 |    8 |  33024 |    9.277 |  3532.17 |    1.181 |   216.70 |   10.458 |  3157.66 |
|  4096 |     32 |   16 |  66048 |   18.624 |  3518.87 |    1.649 |   310.48 |   20.273 |  3257.89 |
|  4096 |     32 |   32 | 132096 |   37.217 |  3521.82 |    2.424 |   422.45 |   39.641 |  3332.30 |
|  8192 |     32 |    1 |   8224 |    2.473 |  3313.11 |    0.444 |    72.07 |    2.917 |  2819.71 |
|  8192 |     32 |    2 |  16448 |    4.926 |  3326.23 |    0.771 |    82.98 |    5.697 |  2887.14 |
|  8192 |     32 |    4 |  32896 |    9.851 |  3326.52 |    1.006 |   127.28 |   10.856 |  3030.15 |
|  8192 |     32 |    8 |  65792 |   19.635 |  3337.67 |    1.338 |   191.33 |   20.973 |  3136.95 |
|  8192 |     32 |   16 | 131584 |   39.290 |  3336.01 |    1.952 |   262.36 |   41.242 |  3190.56 |
|  8192 |     32 |   32 | 263168 |   78.571 |  3336.40 |    3.002 |   341.16 |   81.572 |  3226.19 |
## ggml-org/gpt-oss-120b-GGUF
|   512 |     32 |    1 |    544 |    0.605 |   846.15 |    0.559 |    57.28 |    1.164 |   467.46 |
|   512 |     32 |    2 |   1088 |    0.585 |  1749.57 |    1.061 |    60.35 |    1.646 |   661.06 |
|   512 |     32 |    4 |   2176 |    1.026 |  1995.16 |    1.346 |    95.08 |    2.373 |   917.12 |
|   512 |     32 |    8 |   4352 |    2.051 |  1997.01 |    1.746 |   146.65 |    3.797 |  1146.26 |
|   512 |     32 |   16 |   8704 |    4.122 |  1987.35 |    2.327 |   220.02 |    6.449 |  1349.63 |
|   512 |     32 |   32 |  17408 |    8.262 |  1983.16 |    3.276 |   312.56 |   11.538 |  1508.79 |
|  4096 |     32 |    1 |   4128 |    2.245 |  1824.57 |    0.591 |    54.18 |    2.835 |  1455.83 |
|  4096 |     32 |    2 |   8256 |    4.484 |  1827.03 |    1.122 |    57.02 |    5.606 |  1472.68 |
|  4096 |     32 |    4 |  16512 |    8.967 |  1827.22 |    1.474 |    86.83 |   10.441 |  1581.50 |
|  4096 |     32 |    8 |  33024 |   17.902 |  1830.43 |    1.997 |   128.22 |   19.898 |  1659.64 |
|  4096 |     32 |   16 |  66048 |   35.801 |  1830.56 |    2.901 |   176.49 |   38.702 |  1706.58 |
|  4096 |     32 |   32 | 132096 |   71.607 |  1830.43 |    4.433 |   230.99 |   76.040 |  1737.18 |
|  8192 |     32 |    1 |   8224 |    4.688 |  1747.28 |    0.627 |    51.01 |    5.316 |  1547.11 |
|  8192 |     32 |    2 |  16448 |    9.342 |  1753.75 |    1.182 |    54.13 |   10.525 |  1562.81 |
|  8192 |     32 |    4 |  32896 |   18.697 |  1752.56 |    1.605 |    79.74 |   20.302 |  1620.30 |
|  8192 |     32 |    8 |  65792 |   37.442 |  1750.33 |    2.228 |   114.91 |   39.670 |  1658.48 |
|  8192 |     32 |   16 | 131584 |   74.863 |  1750.82 |    3.419 |   149.74 |   78.283 |  1680.89 |
|  8192 |     32 |   32 | 263168 |  149.598 |  1752.33 |    5.209 |   196.60 |  154.806 |  1699.98 |
## ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF
|   512 |     32 |    1 |    544 |    0.401 |  1275.89 |    0.555 |    57.63 |    0.957 |   568.70 |
|   512 |     32 |    2 |   1088 |    0.355 |  2884.04 |    0.998 |    64.11 |    1.353 |   803.94 |
|   512 |     32 |    4 |   2176 |    0.614 |  3333.11 |    1.255 |   102.01 |    1.869 |  1164.11 |
|   512 |     32 |    8 |   4352 |    1.215 |  3371.40 |    1.653 |   154.91 |    2.868 |  1517.67 |
|   512 |     32 |   16 |   8704 |    2.424 |  3379.01 |    2.198 |   232.98 |    4.622 |  1883.15 |
|   512 |     32 |   32 |  17408 |    4.845 |  3381.63 |    2.968 |   345.01 |    7.813 |  2228.08 |
|  4096 |     32 |    1 |   4128 |    1.319 |  3104.74 |    0.657 |    48.67 |    1.977 |  2088.30 |
|  4096 |     32 |    2 |   8256 |    2.636 |  3107.30 |    1.133 |    56.48 |    3.770 |  2190.15 |
|  4096 |     32 |    4 |  16512 |    5.290 |  3097.27 |    1.494 |    85.69 |    6.784 |  2434.13 |
|  4096 |     32 |    8 |  33024 |   10.554 |  3104.75 |    2.136 |   119.87 |   12.690 |  2602.40 |
|  4096 |     32 |   16 |  66048 |   21.162 |  3096.80 |    3.150 |   162.55 |   24.312 |  2716.66 |
|  4096 |     32 |   32 | 132096 |   42.380 |  3092.81 |    4.928 |   207.80 |   47.307 |  2792.29 |
|  8192 |     32 |    1 |   8224 |    2.838 |  2886.60 |    0.752 |    42.56 |    3.590 |  2290.94 |
|  8192 |     32 |    2 |  16448 |    5.678 |  2885.69 |    1.267 |    50.51 |    6.945 |  2368.42 |
|  8192 |     32 |    4 |  32896 |   11.342 |  2889.18 |    1.763 |    72.59 |   13.105 |  2510.17 |
|  8192 |     32 |    8 |  65792 |   22.650 |  2893.42 |    2.656 |    96.39 |   25.306 |  2599.86 |
|  8192 |     32 |   16 | 131584 |   45.366 |  2889.21 |    4.209 |   121.64 |   49.575 |  2654.23 |
|  8192 |     32 |   32 | 263168 |   90.690 |  2890.56 |    7.158 |   143.06 |   97.847 |  2689.58 |
## ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF
|   512 |     32 |    1 |    544 |    0.215 |  2379.83 |    1.095 |    29.24 |    1.310 |   415.37 |
|   512 |     32 |    2 |   1088 |    0.424 |  2416.31 |    1.175 |    54.46 |    1.599 |   680.46 |
|   512 |     32 |    4 |   2176 |    0.880 |  2328.41 |    1.227 |   104.33 |    2.106 |  1033.02 |
|   512 |     32 |    8 |   4352 |    1.738 |  2356.86 |    1.308 |   195.67 |    3.046 |  1428.66 |
|   512 |     32 |   16 |   8704 |    3.472 |  2359.65 |    1.528 |   335.01 |    5.000 |  1740.80 |
|   512 |     32 |   32 |  17408 |    6.956 |  2355.21 |    1.726 |   593.27 |    8.683 |  2004.95 |
|  4096 |     32 |    1 |   4128 |    1.813 |  2259.55 |    1.126 |    28.42 |    2.939 |  1404.78 |
|  4096 |     32 |    2 |   8256 |    3.601 |  2274.88 |    1.246 |    51.35 |    4.848 |  1703.13 |
|  4096 |     32 |    4 |  16512 |    7.203 |  2274.48 |    1.364 |    93.86 |    8.567 |  1927.37 |
|  4096 |     32 |    8 |  33024 |   14.403 |  2275.04 |    1.570 |   163.10 |   15.973 |  2067.50 |
|  4096 |     32 |   16 |  66048 |   28.797 |  2275.78 |    2.025 |   252.80 |   30.822 |  2142.85 |
|  4096 |     32 |   32 | 132096 |   57.630 |  2274.38 |    2.716 |   377.05 |   60.346 |  2188.99 |
|  8192 |     32 |    1 |   8224 |    3.746 |  2186.60 |    1.164 |    27.50 |    4.910 |  1674.94 |
|  8192 |     32 |    2 |  16448 |    7.473 |  2192.42 |    1.323 |    48.39 |    8.796 |  1870.03 |
|  8192 |     32 |    4 |  32896 |   14.905 |  2198.45 |    1.511 |    84.71 |   16.416 |  2003.89 |
|  8192 |     32 |    8 |  65792 |   29.837 |  2196.49 |    1.843 |   138.88 |   31.680 |  2076.77 |
|  8192 |     32 |   16 | 131584 |   59.700 |  2195.53 |    2.609 |   196.21 |   62.309 |  2111.80 |
|  8192 |     32 |   32 | 263168 |  119.441 |  2194.75 |    3.818 |   268.20 |  123.259 |  2135.08 |
## ggml-org/gemma-3-4b-it-qat-GGUF
|   512 |     32 |    1 |    544 |    0.098 |  5236.19 |    0.408 |    78.38 |    0.506 |  1074.95 |
|   512 |     32 |    2 |   1088 |    0.171 |  5984.52 |    0.507 |   126.21 |    0.678 |  1604.23 |
|   512 |     32 |    4 |   2176 |    0.342 |  5981.45 |    0.554 |   231.11 |    0.896 |  2427.90 |
|   512 |     32 |    8 |   4352 |    0.674 |  6077.05 |    0.692 |   369.93 |    1.366 |  3185.88 |
|   512 |     32 |   16 |   8704 |    1.340 |  6115.09 |    0.930 |   550.47 |    2.270 |  3834.78 |
|   512 |     32 |   32 |  17408 |    2.676 |  6123.63 |    1.277 |   801.81 |    3.953 |  4404.13 |
|  4096 |     32 |    1 |   4128 |    0.711 |  5756.92 |    0.454 |    70.44 |    1.166 |  3541.03 |
|  4096 |     32 |    2 |   8256 |    1.404 |  5835.14 |    0.571 |   112.12 |    1.975 |  4180.78 |
|  4096 |     32 |    4 |  16512 |    2.786 |  5880.66 |    0.668 |   191.68 |    3.454 |  4780.71 |
|  4096 |     32 |    8 |  33024 |    5.547 |  5907.20 |    0.891 |   287.46 |    6.438 |  5129.79 |
|  4096 |     32 |   16 |  66048 |   11.097 |  5905.68 |    1.315 |   389.48 |   12.412 |  5321.43 |
|  4096 |     32 |   32 | 132096 |   22.178 |  5910.07 |    2.055 |   498.18 |   24.233 |  5451.03 |
|  8192 |     32 |    1 |   8224 |    1.424 |  5752.81 |    0.467 |    68.51 |    1.891 |  4348.89 |
|  8192 |     32 |    2 |  16448 |    2.819 |  5812.28 |    0.630 |   101.53 |    3.449 |  4768.59 |
|  8192 |     32 |    4 |  32896 |    5.626 |  5824.22 |    0.791 |   161.74 |    6.418 |  5125.96 |
|  8192 |     32 |    8 |  65792 |   11.238 |  5831.66 |    1.163 |   220.10 |   12.401 |  5305.36 |
|  8192 |     32 |   16 | 131584 |   22.426 |  5844.66 |    1.857 |   275.70 |   24.283 |  5418.77 |
|  8192 |     32 |   32 | 263168 |   44.834 |  5847.04 |    3.146 |   325.48 |   47.980 |  5484.98 |
"""


def batched_bench_rows() -> list[dict]:
    rows = []
    section = None
    for line in BATCHED_BENCH.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        pp, tg, b, nkv, tpp, spp, ttg, stg, t, s = cells
        model, quant, gguf_note = GGUF[section]
        curve = f"dgx_spark_mac-dgxspark-llamacpp-batchedbench-{slug(model.split('/')[-1])}-{quant}-pp{pp}-tg{tg}"
        base = {
            "curve_id": curve, "source": LLAMA_URL,
            "source_ref": f"ggml-org/llama.cpp@{LLAMA_COMMIT[:7]}:benches/dgx-spark.md, section {section}, llama-batched-bench table",
            "publisher": "ggml-org (llama.cpp project)", "engine": "llama.cpp",
            "engine_version": "build 2f68ce7cf (6918)",
            "engine_flags": "llama-batched-bench: n_kv_max = 270336, n_batch = 2048, n_ubatch = 2048, flash_attn = 1, is_pp_shared = 0, n_gpu_layers = -1, n_threads = 20, n_threads_batch = 20 (as printed)",
            "device": "dgx-spark",
            "device_variant": "NVIDIA DGX Spark: NVIDIA GB10, driver 580.95.05, CUDA 13.0, kernel 6.11.0-1016-nvidia aarch64 (page's system info)",
            "n_devices": "1", "tp": "1", "model": model, "quant": quant, "kv_cache_dtype": "not stated",
            "client": "llama-batched-bench", "dataset": "random token prompts (llama-batched-bench)",
            "input_tokens": pp, "output_tokens": tg, "range_ratio": "", "num_prompts": b,
            "warmup": "", "ramp_up": "", "ignore_eos": "true", "load_kind": "concurrency",
            "max_concurrency": b, "request_rate": "", "burstiness": "1.0",
        }
        printed = f"{HEADER} row: {line.strip()}"
        note = (f"{gguf_note}. llama-batched-bench is not an HTTP server run: it prefills B separate prompts of PP tokens "
                f"together (prompt not shared), then decodes TG tokens for all B sequences in lock-step; every sequence "
                f"starts and ends together, so mean = median for each latency. The tool's README defines T_PP as the time "
                f"to first token, T_TG as the time to generate all batches and S as all tokens over the total time T. "
                f"Generation is forced to TG tokens (no EOS stop). One run per cell; repetitions not stated.")
        b_, tg_, pp_ = num(b), num(tg), num(pp)
        pts = [
            ("ttft_ms", "mean", num(tpp) * 1000, f"T_PP {tpp} s x 1000 = {fmt(num(tpp)*1000)} ms (README: T_PP is the time to first token)"),
            ("tpot_ms", "mean", num(ttg) * 1000 / tg_, f"T_TG {ttg} s x 1000 / TG {tg} steps = {fmt(round(num(ttg)*1000/tg_, 4))} ms per output token (each decode step emits one token per sequence)"),
            ("e2el_ms", "mean", num(t) * 1000, f"T {t} s x 1000 = {fmt(num(t)*1000)} ms (all B sequences finish together)"),
            ("total_tps", "value", num(s), ""),
            ("output_tps", "value", b_ * tg_ / num(t), f"B x TG / T = {b} x {tg} / {t} s = {fmt(round(b_*tg_/num(t), 3))} tok/s"),
        ]
        for q, stat, v, der in pts:
            r = dict(base)
            r.update({"row_id": f"{curve}-b{b}-{q}", "quantity": q, "statistic": stat,
                      "value": fmt(round(v, 4)) if der else fmt(v), "as_printed": printed,
                      "derivation": der, "notes": note})
            rows.append(r)
    return rows


def llama_server_m2ultra_rows() -> list[dict]:
    """ggml-org/llama.cpp issue #10473 (2024-11-24): llama-server -np 4 on an M2 Ultra."""
    src = "https://github.com/ggml-org/llama.cpp/issues/10473"
    curve = "dgx_spark_mac-llamacpp-server-m2ultra-qwen2.5-14b-q4_0-np4"
    data = [("1", "49", "49.00"), ("2", "20", "10.00"), ("4", "36", "9.00")]
    rows = []
    for n, total, avg in data:
        base = {
            "curve_id": curve, "source": src,
            "source_ref": "ggml-org/llama.cpp issue #10473 \"Misc. bug: poor concurrent request performance with llama-server in macOS\" (pengjiang80, 2024-11-24), issue description",
            "publisher": "pengjiang80 (GitHub user)", "engine": "llama.cpp",
            "engine_version": "version: 4154 (55ed008b), Apple clang 15.0.0, arm64-apple-darwin23.6.0",
            "engine_flags": "./llama-server -m <qwen2.5-14b Q4_0 gguf> --host 0.0.0.0 --port 8080 -ngl 999 -c 8192 -np 4",
            "device": "apple-m2-ultra", "device_variant": "Mac Studio M2 Ultra, 192GB RAM (GPU core count not printed)",
            "n_devices": "1", "tp": "1", "model": "Qwen/Qwen2.5-14B-Instruct", "quant": "q4_0",
            "kv_cache_dtype": "not stated (llama-server default f16)", "client": "custom",
            "dataset": "one fixed chat prompt (\"Say a story about China.\")", "input_tokens": "",
            "output_tokens": "500 (max_tokens; actual lengths not stated)", "range_ratio": "", "num_prompts": n,
            "warmup": "", "ramp_up": "", "ignore_eos": "not stated", "load_kind": "concurrency",
            "max_concurrency": n, "request_rate": "", "burstiness": "1.0", "derivation": "",
        }
        note = ("Concurrent curl requests to /v1/chat/completions (temperature 1, max_tokens 500) against llama-server with 4 slots "
                "(-np 4; -c 8192 shared by the slots). 'Total Throughput' is the summed generation rate of the concurrent requests "
                "and 'Average TPS' the per-request rate, as the reporter's script printed them (its method is not given). The issue "
                "reports this as a regression (concurrent requests slower than one); treat as an outlier for fitting. Model printed as "
                "'qwen2.5b-14b-Q4_0 gguf' / 'qwen2.5-14b-instruct'.")
        for q, stat, v, label in (("output_tps", "value", total, "Total Throughput"), ("tps_per_user", "mean", avg, "Average TPS")):
            r = dict(base)
            r.update({"row_id": f"{curve}-c{n}-{q}", "quantity": q, "statistic": stat, "value": fmt(num(v)),
                      "as_printed": f"{n} Request{'s' if n != '1' else ''}: {label}: {v} tokens/second", "notes": note})
            rows.append(r)
    return rows


def omlx_m4max_rows() -> list[dict]:
    """jundot/omlx issue #1783: oMLX 0.4.2 admin-panel benchmark, continuous batching, pp1024/tg128."""
    src = "https://github.com/jundot/omlx/issues/1783"
    curve = "dgx_spark_mac-omlx-0.4.2-m4max-qwen3-coder-next-6bit-pp1024-tg128"
    # Batch | pp TPS (total) | pp TPS/req | TTFT (ms) | tg TPS | E2E (s) -- as printed; the 8x row's E2E
    # is not legible in the stored copy of the issue and is left out.
    data = [("1", "914.5", "914.5", "1,119.7", "78.4", "2.753"),
            ("2", "128.9", "64.5", "15,887.6", "96.9", "18.530"),
            ("4", "1,089.5", "272.4", "3,614.3", "139.9", "7.419"),
            ("8", "1,085.2", "135.7", "7,222.0", "180.2", None)]
    rows = []
    for b, pp_tot, pp_req, ttft, tg, e2e in data:
        base = {
            "curve_id": curve, "source": src,
            "source_ref": "jundot/omlx issue #1783 \"Continuous batching: prefill throughput collapses at exactly 2 concurrent requests (recovers at 4/8) - v0.4.2, M4 Max\" (abkrim, 2026-06-10), table for mlx-community/Qwen3-Coder-Next-6bit",
            "publisher": "abkrim (GitHub user)", "engine": "mlx",
            "engine_version": "oMLX 0.4.2 (MLX-based server; DMG build)",
            "engine_flags": "max_concurrent_requests: 8, chunked_prefill: true, prefill_memory_guard: true (balanced), prefill_min_chunk_tokens: 32, burst_decode_mode: balanced, SSD cache enabled",
            "device": "apple-m4-max", "device_variant": "Mac Studio M4 Max (12P+4E), 128 GB unified memory, macOS 26.5.1",
            "n_devices": "1", "tp": "1", "model": "mlx-community/Qwen3-Coder-Next-6bit", "quant": "mlx-6bit",
            "kv_cache_dtype": "not stated", "client": "custom",
            "dataset": "oMLX benchmark prompts (pp1024)", "input_tokens": "1024", "output_tokens": "128",
            "range_ratio": "", "num_prompts": b, "warmup": "", "ramp_up": "", "ignore_eos": "not stated",
            "load_kind": "concurrency", "max_concurrency": b, "request_rate": "", "burstiness": "1.0",
        }
        note = ("oMLX's one-click benchmark (admin panel, 14 tests, default config), continuous-batching section: B requests of "
                "1024 prompt / 128 generated tokens submitted together. The reporter later traced the 2x collapse to test order "
                "(the first batch test after a 200k-token single-request test is penalised; control run without it: 2x healthy) -- "
                "the 2x point is an outlier. TTFT aggregation over the B requests not stated (mean assumed by the column name). Quant mlx-6bit has no infersim format yet. "
                f"Printed row: pp TPS (total) {pp_tot}, pp TPS/req {pp_req}, TTFT {ttft} ms, tg TPS {tg}, E2E {e2e or 'not legible'} s.")
        pts = [("ttft_ms", "mean", num(ttft), f"TTFT (ms) {ttft}", "")]
        if e2e:
            pts.append(("e2el_ms", "mean", num(e2e) * 1000, f"E2E (s) {e2e}", f"{e2e} s x 1000 = {fmt(num(e2e)*1000)} ms"))
        for q, stat, v, printed, der in pts:
            r = dict(base)
            r.update({"row_id": f"{curve}-c{b}-{q}", "quantity": q, "statistic": stat, "value": fmt(round(v, 4)),
                      "as_printed": f"Batch {b}x | {printed}", "derivation": der,
                      "notes": note + (" Outlier (test-order artefact, see above)." if b == "2" else "")})
            rows.append(r)
    return rows


def mtplx_m3max_rows() -> list[dict]:
    """youssofal/MTPLX issue #265 (2026-08-16): continuous batching, pp1024 / tg128, M3 Max."""
    src = "https://github.com/youssofal/MTPLX/issues/265"
    curve = "dgx_spark_mac-mtplx-m3max-qwen3.8-27b-4bit-pp1024-tg128"
    # Batch | tg TPS | Speedup | pp TPS | pp TPS/req | TTFT (ms) | E2E (s) -- as printed
    data = [("1", "42.8", "1.00", "192.8", "192.8", "5,292", "8.287"),
            ("2", "17.7", "0.41", "133.3", "66.7", "15,355", "29.790"),
            ("4", "32.8", "0.77", "143.2", "35.8", "28,474", "44.190"),
            ("8", "69.3", "1.62", "112.0", "14.0", "51,052", "87.769")]
    rows = []
    for b, tg, speed, pp, pp_req, ttft, e2e in data:
        base = {
            "curve_id": curve, "source": src,
            "source_ref": "youssofal/MTPLX issue #265 \"Bug: batch=2 slower than single request (0.41x) on Qwen3.8-27B continuous batching - M3 Max 128GB\" (taozhiyuai, 2026-08-16), continuous-batching table",
            "publisher": "taozhiyuai (GitHub user)", "engine": "mlx",
            "engine_version": "MTPLX (MLX-based server; version not stated)",
            "engine_flags": "not stated in the table (external OpenAI-compatible endpoint at 127.0.0.1:8001)",
            "device": "apple-m3-max", "device_variant": "Apple M3 Max, 40-core GPU, 128 GB unified memory",
            "n_devices": "1", "tp": "1", "model": "Youssofal/Qwen3.8-27B-MTPLX-Optimized-Speed",
            "quant": "mlx-4bit", "kv_cache_dtype": "not stated", "client": "custom",
            "dataset": "oMLX benchmark prompts, code (mixed) context", "input_tokens": "1024", "output_tokens": "128",
            "range_ratio": "", "num_prompts": b, "warmup": "", "ramp_up": "", "ignore_eos": "not stated",
            "load_kind": "concurrency", "max_concurrency": b, "request_rate": "", "burstiness": "1.0",
        }
        note = ("oMLX's benchmark tool run against an MTPLX server (model: 4-bit/GS32 mixed, 19 GB, no MTP head). B requests of "
                "1024 prompt / 128 generated tokens submitted together. The reporter files batch 2 (0.41x of batch 1's decode rate) "
                "as a bug; batches 4 and 8 recover. TTFT grows with B because prefills run one after another "
                f"(pp TPS {pp} total, {pp_req} per request). Printed row: tg TPS {tg}, speedup {speed}x, TTFT {ttft} ms, E2E {e2e} s. "
                "Quant mlx-4bit: group size 32 here, infersim's mlx-4bit format assumes 64.")
        pts = [("ttft_ms", "mean", num(ttft), f"TTFT (ms) {ttft}", ""),
               ("e2el_ms", "mean", num(e2e) * 1000, f"E2E (s) {e2e}", f"{e2e} s x 1000 = {fmt(num(e2e)*1000)} ms")]
        for q, stat, v, printed, der in pts:
            r = dict(base)
            r.update({"row_id": f"{curve}-c{b}-{q}", "quantity": q, "statistic": stat, "value": fmt(round(v, 4)),
                      "as_printed": f"Batch {b}x | {printed}", "derivation": der,
                      "notes": note + (" Outlier (reported as a bug)." if b == "2" else "")})
            rows.append(r)
    return rows


def main() -> None:
    rows = batched_bench_rows() + llama_server_m2ultra_rows() + omlx_m4max_rows() + mtplx_m3max_rows()
    out = HERE / "dgx_spark_mac.csv"
    write_csv(out, rows)
    print(f"{len(rows)} rows, {len({r['curve_id'] for r in rows})} curves -> {out}")


if __name__ == "__main__":
    main()
