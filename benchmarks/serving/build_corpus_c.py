"""Build benchmarks/serving/corpus_c.csv (corpus-c: held-out serving evidence for vLLM V1,
TensorRT-LLM and SGLang from publishers not yet in the corpus, issue 38).

Every figure is transcribed into this script exactly as its source prints it (a table cell, a
`vllm bench serve` / `sglang.bench_serving` result line); arithmetic (s -> ms, per-GPU x GPUs) is
written out in the `derivation` column. The sources and what was left out are listed in
COLLECTIONS-c.md.

Run: python3 benchmarks/serving/build_corpus_c.py          (rewrites corpus_c.csv)
     python3 benchmarks/serving/build_corpus_c.py --check  (fails if the CSV differs)
No arguments beyond --check, no network, standard library only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import csv_text, fmt, num  # noqa: E402

OUT = HERE / "corpus_c.csv"
PREFIX = "corpus_c"


def _row(base: dict, **kw) -> dict:
    r = dict(base)
    r.update(kw)
    return r


# ---------------------------------------------------------------------------------------------
# 1. Vultr Docs, "Inference Cookbook" for NVIDIA HGX B200 (vLLM), page "Concurrency Tuning"
#    (updated 2026-03-11), section "Throughput Results (NVIDIA HGX B200 Verified)"; settings from
#    the cookbook's "Benchmark Methodology" page (same date).
VULTR_CUDA_URL = "https://docs.vultr.com/inference-cookbook/cuda/optimization/concurrency-tuning"
VULTR_CUDA_METHOD = "https://docs.vultr.com/inference-cookbook/cuda/benchmarks/methodology"
VULTR_NANO = [  # Concurrent | Output tok/s | TTFT (ms) | TPOT (ms) | ITL p99 (ms)  -- as printed
    ("1", "277", "362", "2.91", "3.14"),
    ("8", "1,881", "152", "3.96", "4.28"),
    ("16", "3,455", "160", "4.32", "5.19"),
    ("32", "3,798", "206", "7.86", "40.72"),
    ("64", "8,120", "324", "6.74", "43.82"),
    ("128", "11,556", "520", "8.91", "45.19"),
    ("256", "15,552", "1,254", "11.77", "48.20"),
    ("512", "18,746", "2,610", "15.46", "47.88"),
    ("1024", "18,829", "2,563", "15.46", "47.75"),
]


def vultr_cuda_rows() -> list[dict]:
    curve = f"{PREFIX}-vultr-b200-vllm0.16.0-nemotron-nano-30b-fp8-tp2-2048-512"
    base = {
        "curve_id": curve, "source": VULTR_CUDA_URL,
        "source_ref": ("Vultr Docs, Inference Cookbook (CUDA), \"Concurrency Tuning\" (updated 2026-03-11), "
                       "Throughput Results (NVIDIA HGX B200 Verified), table \"Nemotron Nano 30B (FP8, TP=2, 2 GPUs)\"; "
                       f"settings from \"Benchmark Methodology\" {VULTR_CUDA_METHOD}"),
        "publisher": "Vultr (Inference Cookbook)", "engine": "vllm", "engine_version": "0.16.0",
        "engine_flags": "--tensor-parallel-size 2 --gpu-memory-utilization 0.90 --trust-remote-code (cookbook defaults; other flags not printed for this table)",
        "device": "b200", "device_variant": "NVIDIA HGX B200 (Vultr bare metal, 8 GPUs; 2 used by this server)",
        "n_devices": "2", "tp": "2", "model": "Nemotron Nano 30B (NVIDIA Nemotron Nano 30B-A3B FP8; exact HF repo id not printed in this table)",
        "quant": "fp8", "kv_cache_dtype": "not stated", "client": "vllm-bench-serve", "dataset": "random",
        "input_tokens": "2048", "output_tokens": "512", "range_ratio": "",
        "warmup": "", "ramp_up": "", "ignore_eos": "not stated", "load_kind": "concurrency",
        "request_rate": "inf", "burstiness": "1.0", "derivation": "",
    }
    note = ("Methodology page: vllm bench serve, random dataset, input 2,048 / output 512 tokens, 50 prompts at c=1 and 400 at "
            "c>1 for Nemotron Nano (bench_all.sh), gpu-memory-utilization 0.90, vLLM 0.16.0 for this model. The table does not "
            "say whether TTFT/TPOT are means or medians (statistic 'not stated'); ITL is its p99. Throughput dips at c=32 "
            "(3,798 tok/s, TPOT 7.86 ms) between c=16 and c=64 as printed. b200 has an infersim profile. The model is not in "
            "the infersim catalog, so the serving fit does not replay this curve (exclusion: model not in the catalog).")
    rows = []
    for c, out_tps, ttft, tpot, itl99 in VULTR_NANO:
        printed = f"Nemotron Nano 30B (FP8, TP=2, 2 GPUs) | Concurrent {c} | Output tok/s {out_tps} | TTFT (ms) {ttft} | TPOT (ms) {tpot} | ITL p99 (ms) {itl99}"
        n = "50" if c == "1" else "400"
        for q, stat, v in (("output_tps", "value", out_tps), ("ttft_ms", "not stated", ttft),
                           ("tpot_ms", "not stated", tpot), ("itl_ms", "p99", itl99)):
            rows.append(_row(base, row_id=f"{curve}-c{c}-{q}-{stat.replace(' ', '_')}", max_concurrency=c, num_prompts=n,
                             quantity=q, statistic=stat, value=fmt(num(v)), as_printed=printed, notes=note))
    return rows


# ---------------------------------------------------------------------------------------------
# 2. Mushfiqur Rahman, "Benchmarking Mistral-7B on RTX 4090: vLLM Concurrency, Latency, and Capacity
#    Planning" (mushfiqrahman.dev), Part 1 "Full Concurrency Sweep", Results table.
MUSHFIQ_URL = ("https://mushfiqrahman.dev/benchmarking-mistral-7b-on-rtx-4090-vllm-concurrency-latency-"
               "and-capacity-planning/")
MUSHFIQ = [  # Max Concurrency | Req/s | Output Tok/s | Mean TTFT (ms) | Median TTFT (ms) | P99 TTFT (ms)
    ("4", "2.09", "210", "63", "53", "157"),
    ("8", "3.78", "377", "79", "55", "268"),
    ("16", "6.44", "644", "155", "97", "503"),
    ("32", "9.73", "975", "362", "277", "938"),
    ("48", "11.87", "1190", "667", "840", "1483"),
]


def mushfiq_rows() -> list[dict]:
    curve = f"{PREFIX}-mushfiqrahman-rtx4090-vllm-mistral-7b-v0.3-256-128"
    base = {
        "curve_id": curve, "source": MUSHFIQ_URL,
        "source_ref": ("mushfiqrahman.dev, \"Benchmarking Mistral-7B on RTX 4090: vLLM Concurrency, Latency, and "
                       "Capacity Planning\", Part 1 - Full Concurrency Sweep, Results table"),
        "publisher": "Mushfiqur Rahman (mushfiqrahman.dev)", "engine": "vllm", "engine_version": "unknown",
        "engine_flags": "--tokenizer-mode mistral (\"vLLM (tokenizer-mode mistral)\", OpenAI-compatible mode; other flags not printed)",
        "device": "rtx-4090", "device_variant": "single RTX 4090 (24GB)", "n_devices": "1", "tp": "1",
        "model": "mistral-7b-v0.3", "quant": "not stated", "kv_cache_dtype": "not stated",
        "client": "vllm-bench-serve", "dataset": "random", "input_tokens": "256", "output_tokens": "128",
        "range_ratio": "", "num_prompts": "300", "warmup": "", "ramp_up": "", "ignore_eos": "false",
        "load_kind": "concurrency", "request_rate": "inf", "burstiness": "1.0",
    }
    note = ("Model mistralai/Mistral-7B-Instruct-v0.3 (catalog id mistral-7b-v0.3). Workload A: 256 input tokens -> 128 "
            "output tokens; 300 prompts sent at an effectively infinite request rate, capped at each Max Concurrency; "
            "Poisson arrival model. The post does not show the client command or the vLLM version: client recorded as "
            "vllm-bench-serve (and dataset random) because the settings it names (number of prompts, request rate inf, "
            "max concurrency, Poisson arrivals) and the statistics it prints (Req/s, Output Tok/s, Mean/Median/P99 TTFT) "
            "are that tool's; lengths are the stated fixed 256/128. No TPOT/ITL printed. Median TTFT at 48 (840 ms) "
            "exceeds the mean (667 ms) as printed.")
    # What the client did with the output length (issue 38 follow-up). vllm bench serve's Output Tok/s is
    # total_output_tokens / duration and its Req/s completed / duration (vllm/benchmarks/serve.py,
    # calculate_metrics), so their ratio is the realised mean output per request: about 100 tokens at
    # every C, not the 128 requested. With --ignore-eos every request of the random dataset generates
    # exactly its output length (ignore_eos: generate until max_tokens), so the ratio would be
    # 128: the run did not pass --ignore-eos, requests stopped at EOS, and the output lengths varied
    # (up to 128, mean ~100). That spread is what keeps a real closed loop out of lock-step
    # (docs/simulating.md "A closed loop of fixed lengths"); the per-request lengths are not printed.
    rows = []
    for c, rps, otps, mean, med, p99 in MUSHFIQ:
        printed = (f"| Max Concurrency {c} | Req/s {rps} | Output Tok/s {otps} | Mean TTFT (ms) {mean} | "
                   f"Median TTFT (ms) {med} | P99 TTFT (ms) {p99} |")
        out_mean = float(otps) / float(rps)
        note_c = (f"{note} Output length: Output Tok/s / Req/s is the client's realised mean output per request; "
                  f"realised means per request = 256 input, and {otps} / {rps} = {out_mean:.1f} output tokens at "
                  f"C {c} (not the 128 requested, at every C): requests stopped at EOS, so the client did not pass "
                  f"--ignore-eos (with it every random-dataset request generates exactly 128) and output lengths "
                  f"varied, up to 128; the per-request lengths are not printed.")
        for q, stat, v in (("request_tps", "value", rps), ("output_tps", "value", otps), ("ttft_ms", "mean", mean),
                           ("ttft_ms", "median", med), ("ttft_ms", "p99", p99)):
            rows.append(_row(base, row_id=f"{curve}-c{c}-{q}-{stat}", max_concurrency=c, quantity=q, statistic=stat,
                             value=fmt(num(v)), as_printed=printed, derivation="", notes=note_c))
    return rows


# ---------------------------------------------------------------------------------------------
# 3. Yobitel InferenceBench (yobitelcomm/bench), docs/recipes/concurrency-sweep.md: the "Sweep results
#    (concurrency)" summary table of llm.inference.chatbot-short on one H100, vLLM 0.21.0.
YOBITEL_COMMIT = "1a865f62a7e51f3d8f133b46452a5b18a2f2bd7e"
YOBITEL_URL = f"https://github.com/yobitelcomm/bench/blob/{YOBITEL_COMMIT}/docs/recipes/concurrency-sweep.md"
YOBITEL = [  # conc | throughput_tok_per_s | ttft_p50_ms | ttft_p99_ms | tpot_p50_ms | ok_rate | J/tok
    ("1", "122.2", "13.98", "14.95", "6.48", "1.000", "7.239"),
    ("4", "580.3", "22.75", "32.18", "6.59", "1.000", "1.631"),
    ("16", "1,384.2", "41.69", "64.71", "10.94", "1.000", "0.700"),
    ("64", "1,312.3", "86.92", "464.7", "46.91", "1.000", "0.691"),
]


def yobitel_rows() -> list[dict]:
    curve = f"{PREFIX}-yobitel-inferencebench-h100-vllm0.21.0-llama-3.1-8b-chatbot-short"
    base = {
        "curve_id": curve, "source": YOBITEL_URL,
        "source_ref": f"yobitelcomm/bench@{YOBITEL_COMMIT[:7]}:docs/recipes/concurrency-sweep.md, \"Sweep results (concurrency)\" table",
        "publisher": "Yobitel (InferenceBench)", "engine": "vllm", "engine_version": "0.21.0",
        "engine_flags": "server started separately (bench run --base-url http://localhost:8000/v1); server flags not printed",
        "device": "h100-sxm", "device_variant": "single H100-80GB-HBM3", "n_devices": "1", "tp": "1",
        "model": "llama-3.1-8b", "quant": "fp16", "kv_cache_dtype": "not stated", "client": "custom",
        "dataset": "InferenceBench builtin chatbot-short prompts (10 short questions)", "input_tokens": "",
        "output_tokens": "", "range_ratio": "", "num_prompts": "", "warmup": "", "ramp_up": "",
        "ignore_eos": "not stated", "load_kind": "concurrency", "request_rate": "", "burstiness": "1.0",
    }
    note = ("Model meta-llama/Llama-3.1-8B-Instruct, `bench run llm.inference.chatbot-short --engine vllm --quant fp16 "
            "--sweep 1,4,16,64`, captured 2026-05-16. The suite (plugins/llm-inference/.../benchmarks/chatbot-short.yaml) "
            "is a closed loop over a 120 s measurement window on the plugin's ten built-in short prompts (datasets.py "
            "_BUILTIN_PROMPTS, one sentence each) with max_tokens=128 per request (plugin.py); input token counts and "
            "realised output lengths are not printed, so the serving fit cannot replay it (closed loop on a non-random "
            "dataset). throughput_tok_per_s is output tokens / measurement window (plugin.py). ok_rate 1.000 at every point.")
    rows = []
    for c, tput, t50, t99, tpot50, ok, jtok in YOBITEL:
        printed = f" {c}     {tput}  {t50}  {t99}  {tpot50}  {ok}  {jtok}  (conc throughput_tok_per_s ttft_p50_ms ttft_p99_ms tpot_p50_ms ok_rate J/tok)"
        for q, stat, v in (("output_tps", "value", tput), ("ttft_ms", "median", t50), ("ttft_ms", "p99", t99),
                           ("tpot_ms", "median", tpot50)):
            rows.append(_row(base, row_id=f"{curve}-c{c}-{q}-{stat}", max_concurrency=c, quantity=q, statistic=stat,
                             value=fmt(num(v)), as_printed=printed, derivation="", notes=note))
    return rows


# ---------------------------------------------------------------------------------------------
# 4. Faradawn Yang (NVIDIA), github.com/faradawn/bench3: `--save-result` JSON files of
#    `python -m tensorrt_llm.serve.scripts.benchmark_serving` (TensorRT-LLM's copy of vLLM's
#    benchmark_serving.py: same metric definitions and JSON keys) against vLLM 0.11.2 and trtllm-serve,
#    Meta-Llama-3-8B-Instruct, random token ids, --ignore-eos. Figures transcribed from the JSON text.
FARA_COMMIT = "2d98d588434bfb5d69e117905d4f7566140f9f4d"
FARA_BASE = f"https://github.com/faradawn/bench3/blob/{FARA_COMMIT}/"
FARA_KEYS = ("num_prompts", "max_concurrency", "completed", "duration", "total_input_tokens", "total_output_tokens",
             "request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
             "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
             "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
FARA = [  # file, then FARA_KEYS' values exactly as written in the JSON
    ('1_vllm/concurrency_1.json', '5', '1', '5', '15.76236102799885', '640', '2560', '0.3172113613638494', '162.4122170182909', '203.01527127286363', '30.507872998714447', '29.413916054181755', '34.08020741306245', '6.106767810538498', '6.091706645665891', '6.17927199627825', '6.106770443848522', '6.034648977220058', '6.913517785724253', '3151.0662241838872', '3144.189849961549', '3186.804321319796'),
    ('1_vllm/concurrency_4.json', '20', '4', '20', '16.193600167986006', '2560', '10240', '1.2350558117112875', '632.3485755961792', '790.4357194952241', '56.66168885072693', '56.86787550803274', '67.00791523209773', '6.2234744795351125', '6.235442961768453', '6.293069089928263', '6.223475865059698', '6.196763541083783', '7.673392042052', '3236.85714789317', '3247.430090501439', '3282.427283807192'),
    ('1_vllm/concurrency_8.json', '40', '8', '40', '16.863491432974115', '5120', '20480', '2.3719880404947338', '1214.4578767333037', '1518.0723459166295', '75.6126690946985', '74.65157454134896', '111.3520378351677', '6.439846692021997', '6.434424854122437', '6.50143424374117', '6.441739023780191', '6.426999520044774', '8.148543783463532', '3366.3743287179386', '3366.0209809895605', '3394.534891335061'),
    ('3_trtllm_pytorch/concurrency_1.json', '5', '1', '5', '13.667271472048014', '640', '2560', '0.36583746874611245', '187.30878399800957', '234.13597999751198', '56.23698318377137', '44.9023200199008', '82.05777773633599', '5.236654373071723', '5.236153266212216', '5.2488607404764505', '5.2366569295613035', '5.221781088039279', '6.253788559697569', '2732.167367823422', '2727.1382310427725', '2762.1750939358026'),
    ('3_trtllm_pytorch/concurrency_4.json', '5', '4', '5', '5.561779693001881', '640', '2560', '0.8989928181246118', '460.28432287980127', '575.3554035997516', '93.15396482124925', '106.60002403892577', '110.0015523750335', '5.339595264483631', '5.364546203282306', '5.3674784650453855', '5.339598163612434', '5.32526196911931', '6.4012671681121', '2821.687144972384', '2847.449876833707', '2852.783048013225'),
    ('3_trtllm_pytorch/concurrency_8.json', '5', '8', '5', '2.8315532540436834', '640', '2560', '1.7658152792498611', '904.0974229759289', '1130.1217787199112', '72.48533922247589', '72.2829659935087', '73.9299751445651', '5.3881064726225665', '5.388715273906603', '5.392010829442429', '5.388109042690138', '5.375338951125741', '7.043276601471007', '2825.8077467326075', '2826.3963640201837', '2827.5234333518893'),
    ('4_trtllm_engine/concurrency_1.json', '5', '1', '5', '15.279218459036201', '640', '2560', '0.32724186864695143', '167.54783674723913', '209.4347959340489', '27.074331557378173', '26.841009967029095', '32.33714558184147', '5.924816708920665', '5.935184888581794', '5.941108894514361', '5.924819201256518', '5.915697896853089', '9.036047928966582', '3054.6556698158383', '3058.445612899959', '3064.1590893175453'),
    ('4_trtllm_engine/concurrency_4.json', '20', '4', '20', '15.80637103994377', '2560', '10240', '1.2653125723455843', '647.8400370409391', '809.800046301174', '38.13015683554113', '34.946386935189366', '60.90601350646466', '6.107083251658798', '6.102759084425532', '6.128345974288159', '6.107085030853981', '6.119366968050599', '9.098867769353092', '3158.849698433187', '3157.166729099117', '3176.588971540332'),
    ('4_trtllm_engine/concurrency_8.json', '40', '8', '40', '18.449882185086608', '5120', '20480', '2.1680355244941762', '1110.0341885410182', '1387.5427356762727', '138.7468216184061', '62.94018204789609', '704.0466305660084', '6.829590791856429', '6.3527903053453905', '8.8378596882365', '6.829592291791531', '6.292850011959672', '11.042814969550838', '3628.6677162570413', '3312.4140985310078', '4568.705038125627'),
    ('old_results/pytorch_hf/concurrency_16.json', '80', '16', '80', '4.152682126034051', '40960', '10240', '19.264657773457525', '2465.8761950025632', '12329.380975012815', '163.2326803606702', '161.9032594608143', '253.87574527529065', '5.192575869851701', '5.165382252188444', '6.08103144907495', '5.192581158189569', '0.5433845217339694', '60.983421766431995', '822.6898158318363', '828.5831204848364', '874.6712294069584'),
    ('old_results/pytorch_hf/concurrency_64.json', '320', '64', '320', '9.512616983964108', '163840', '40960', '33.63953374128696', '4305.860318884731', '21529.301594423654', '628.30115134675', '602.1259154658765', '954.4823741319124', '9.809448193748644', '9.705363559228639', '13.345531412908134', '9.80945321732186', '0.03430142533034086', '259.44170179427647', '1874.1010719528276', '1876.0541109368205', '2270.0883421418257'),
    ('old_results/pytorch_hf/concurrency_128.json', '640', '128', '640', '20.18868691602256', '327680', '81920', '31.700922534593868', '4057.718084428015', '20288.590422140074', '1348.8818357684067', '1109.009251522366', '3660.708155272296', '16.322056975390815', '16.4216199727531', '42.851478864272', '16.322061359510478', '0.05404703551903367', '213.91459351638335', '3421.78307164304', '3198.5986244981177', '6343.497480292572'),
    ('old_results/trt_engine/concurrency_16.json', '80', '16', '80', '7.178653200971894', '40960', '10240', '11.144151661925815', '1426.4514127265043', '7132.257063632521', '694.4183033527224', '720.2053149812855', '963.9847210689912', '5.272509036681938', '5.26803083888321', '5.488610889003648', '5.272515155705', '4.946442029904574', '21.624037910951273', '1364.0269510113285', '1387.6743739820085', '1638.9580962643956'),
    ('old_results/trt_engine/concurrency_64.json', '320', '64', '320', '32.704676960012875', '163840', '40960', '9.784533276119967', '1252.4202593433558', '6262.101296716779', '5178.436074297861', '4914.724318485241', '8621.657514132094', '6.164093685744208', '5.273989771628445', '34.58145269468669', '6.1640988185627785', '4.979494493454695', '23.88958792551423', '5961.275972387375', '5588.241999968886', '9324.757279377664'),
    ('old_results/trt_engine/concurrency_128.json', '640', '128', '640', '58.624574071960524', '327680', '81920', '10.91692366437345', '1397.3662290398015', '6986.831145199008', '10063.90881428033', '10440.769718494266', '13045.753102328163', '5.261903914253894', '5.277253276261494', '23.293398716890323', '5.261908969414506', '4.925783956423402', '19.841985169332528', '10732.170611390575', '11113.568225468043', '13716.034442244563'),
]
FARA_METRICS = (("request_throughput", "request_tps", "value"), ("output_throughput", "output_tps", "value"),
                ("total_token_throughput", "total_tps", "value"), ("mean_ttft_ms", "ttft_ms", "mean"),
                ("median_ttft_ms", "ttft_ms", "median"), ("p99_ttft_ms", "ttft_ms", "p99"),
                ("mean_tpot_ms", "tpot_ms", "mean"), ("median_tpot_ms", "tpot_ms", "median"),
                ("p99_tpot_ms", "tpot_ms", "p99"), ("mean_itl_ms", "itl_ms", "mean"),
                ("median_itl_ms", "itl_ms", "median"), ("p99_itl_ms", "itl_ms", "p99"),
                ("mean_e2el_ms", "e2el_ms", "mean"), ("median_e2el_ms", "e2el_ms", "median"),
                ("p99_e2el_ms", "e2el_ms", "p99"))
_FARA_CLIENT = ("`python -m tensorrt_llm.serve.scripts.benchmark_serving --backend openai --dataset-name random "
                "--random-input-len {isl} --random-output-len {osl} --num-prompts {np} --max-concurrency {c} --ignore-eos "
                "--random-ids --percentile-metrics ttft,tpot,itl,e2el --save-result` (TensorRT-LLM's copy of vLLM's "
                "benchmark_serving.py: same request loop, metric definitions and JSON keys, so client = vllm-bench-serve); "
                "the printed totals show fixed lengths ({n} successful requests, total input tokens {ti}, total generated "
                "tokens {to}).")
FARA_CURVES = {
    "1_vllm": dict(
        curve="vllm0.11.2-h200-llama-3-8b-tp1-128-512", engine="vllm", version="0.11.2",
        flags="--dtype bfloat16 --max-model-len 1024 (non-default args logged in logs/vllm_server.log; TP 1)",
        n="1", isl="128", osl="512", script="launch_benchmark.sh (concurrency 1 4 8, num_prompts = 5 x concurrency)",
        note="vLLM V1 engine 0.11.2 (logs/vllm_server.log: FLASH_ATTN backend, KV cache 105.97 GiB = 868,080 tokens)."),
    "3_trtllm_pytorch": dict(
        curve="trtllm1.2.0rc4-pytorch-h200-llama-3-8b-tp1-128-512", engine="trtllm", version="1.2.0rc4",
        flags=("trtllm-serve, PyTorch backend (result folder 3_trtllm_pytorch); the serve command is not in the repo. "
               "logs/trtllm-serve-egine.log records a TensorRT LLM 1.2.0rc4 PyTorch-backend server started 2025-12-07 00:20 "
               "(tensor_parallel_size=1, max_batch_size=32, max_num_tokens=1024, kv_cache_dtype auto) before these results "
               "(00:52-00:53); the log file name says engine, its content says PyTorch backend"),
        n="1", isl="128", osl="512", script="an earlier launch_benchmark.sh: num_prompts 5 at every concurrency (as the JSON records)",
        note=("num_prompts is 5 at concurrency 4 and 8 (JSON num_prompts), so at C=8 only 5 requests ever run; a replay keeps "
              "the 5 prompts (its cap is min(N, ...)), so the point is comparable as measured, but it is not an 8-client load.")),
    "4_trtllm_engine": dict(
        curve="trtllm-engine-h200-llama-3-8b-tp1-128-512", engine="trtllm", version="unknown",
        flags=("trtllm-serve, TensorRT engine backend per the result folder name (4_trtllm_engine); serve command, engine "
               "build settings and TP are not recorded in the repo (client container nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc4)"),
        n="1", isl="128", osl="512", script="launch_benchmark.sh (concurrency 1 4 8, num_prompts = 5 x concurrency)",
        note="outlier: the engine's build settings (max batch, TP) are not recorded, so a replay cannot know its capacity."),
    "old_results/pytorch_hf": dict(
        curve="trtllm-pytorch-h200x2-llama-3-8b-tp2-512-128", engine="trtllm", version="unknown",
        flags=("trtllm-serve meta-llama/Meta-Llama-3-8B-Instruct --backend pytorch --tp_size 2 --max_batch_size 256 "
               "--max_num_tokens 2048 --max_seq_len 4096 --kv_cache_free_gpu_memory_fraction 0.9 (run_comparison_benchmark.sh)"),
        n="2", isl="512", osl="128", script="run_comparison_benchmark.sh (concurrency 16 64 128, num_prompts = 5 x concurrency)",
        note=("README/benchmark_summary.txt: 2x H200, TP=2, FP16 (the checkpoint is bf16; dtype not set), ISL 512 / OSL 128; "
              "the TensorRT-LLM version of this run (2025-11-28, container 'trtllm') is not recorded. Median ITL ~0.03-0.5 ms "
              "with mean ITL = mean TPOT shows tokens streamed in bursts: use TPOT, not ITL, from this curve.")),
    "old_results/trt_engine": dict(
        curve="trtllm-engine-h200x2-llama-3-8b-tp2-512-128", engine="trtllm", version="unknown",
        flags=("trtllm-serve <engine_path: engine_fp16_2gpu> --tokenizer <...> --backend tensorrt --tp_size 2 --max_batch_size 256 "
               "--max_num_tokens 2048 --max_seq_len 4096 --kv_cache_free_gpu_memory_fraction 0.9 (run_comparison_benchmark.sh); "
               "engine build settings not recorded"),
        n="2", isl="512", osl="128", script="run_comparison_benchmark.sh (concurrency 16 64 128, num_prompts = 5 x concurrency)",
        note=("outlier: throughput stays at ~1.3-1.4k tok/s from C=16 to 128 while TTFT grows 0.7 -> 10 s, i.e. the prebuilt "
              "engine admits few requests (its build-time max batch is not recorded), so its capacity cannot be replayed.")),
}


def faradawn_rows() -> list[dict]:
    rows = []
    for rec in FARA:
        f = rec[0]
        v = dict(zip(FARA_KEYS, rec[1:]))
        folder = f.rsplit("/", 1)[0]
        cfg = FARA_CURVES[folder]
        curve = f"{PREFIX}-faradawn-bench3-{cfg['curve']}"
        tp = cfg["n"]
        device_variant = ("2x H200 (README and old_results/benchmark_summary.txt: Hardware 2x H200 GPUs), TP 2" if tp == "2" else
                          "one H200 of the README's 2x H200 machine (server logs: total GPU memory 139.8 GiB, world size 1)")
        client = _FARA_CLIENT.format(isl=cfg["isl"], osl=cfg["osl"], np=v["num_prompts"], c=v["max_concurrency"],
                                     n=v["completed"], ti=v["total_input_tokens"], to=v["total_output_tokens"])
        base = {
            "curve_id": curve, "source": FARA_BASE + f, "source_ref": f"faradawn/bench3@{FARA_COMMIT[:7]}:{f}",
            "publisher": "Faradawn Yang (NVIDIA; github.com/faradawn)", "engine": cfg["engine"],
            "engine_version": cfg["version"], "engine_flags": cfg["flags"], "device": "h200",
            "device_variant": device_variant, "n_devices": tp, "tp": tp,
            "model": "meta-llama/Meta-Llama-3-8B-Instruct", "quant": "bf16", "kv_cache_dtype": "auto",
            "client": "vllm-bench-serve", "dataset": "random", "input_tokens": cfg["isl"], "output_tokens": cfg["osl"],
            "range_ratio": "", "num_prompts": v["num_prompts"], "warmup": "", "ramp_up": "", "ignore_eos": "true",
            "load_kind": "concurrency", "max_concurrency": v["max_concurrency"], "request_rate": "inf",
            "burstiness": "1.0", "derivation": "",
        }
        for key, q, stat in FARA_METRICS:
            rows.append(_row(base, row_id=f"{curve}-c{v['max_concurrency']}-{q}-{stat}", quantity=q, statistic=stat,
                             value=fmt(float(v[key])), as_printed=f"\"{key}\": {v[key]}",
                             notes=f"{cfg['note']} Client: {client} Script: {cfg['script']}."))
    return rows


# ---------------------------------------------------------------------------------------------
# 5. Robert Shaw (Red Hat; vLLM maintainer), robertgshaw2-redhat/llm-benchmark-helm-charts@f189633, folder
#    llama-3.3-70b-fp8: vLLM's benchmarks/benchmark_serving.py `--save-result --append-result` JSON lines
#    of concurrency sweeps (sweep.sh: random 1000 in / 100 out, 20 x C prompts; sweep-decode-heavy.sh:
#    random 512 in / 2048 out, 10 x C prompts; both --ignore-eos, request rate inf) against vLLM 0.9.2,
#    Red Hat builds of vLLM and SGLang 0.4.9.post6 serving RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic on
#    H200s (analyze.ipynb titles: "4xH200" / "1xH200"). Figures: corpus_c_redhat_data.py.
from corpus_c_redhat_data import RH, RH_KEYS  # noqa: E402

RH_COMMIT = "f189633979de51c353a4c6d7e21c72a1b5dc4cee"
RH_BASE = f"https://github.com/robertgshaw2-redhat/llm-benchmark-helm-charts/blob/{RH_COMMIT}/"
_VLLM_CMD = "vllm serve RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic --tensor-parallel-size {tp} --max-model-len 32000 --disable-log-requests"
_SGL_CMD = ("python -m sglang.launch_server --model-path RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic --tp 4 "
            "--context-length 32000{kv}")
# Which upstream vLLM the Red Hat images ship (the benchmark repo prints no version; see the notes):
_RHAIIS_320 = ("vLLM version from Red Hat's table, not from the benchmark repo: Red Hat AI 3 'Supported product and "
               "hardware configurations' (docs.redhat.com; PDF Red_Hat_AI-3-Supported_product_and_hardware_configurations-en-US.pdf, "
               "editions last updated 2026-03-23 and 2026-08-25), Chapter 2, Table 2.1 'AI Inference product and version "
               "compatibility' prints '3.2.0 | v0.9.2 | Not included in this release' (vLLM core version column; 3.2.1 is v0.10.0, "
               "3.2.2 v0.10.1.1). The 3.2.1 release notes agree: 'Red Hat AI Inference Server 3.2 packages the upstream vLLM "
               "v0.10.0 release' for 3.2.1, its model list going back through 'Added in vLLM v0.9.2')")
_RHOAI_223 = ("vLLM version from the image's build repository, not from the benchmark repo: "
              "github.com/red-hat-data-services/vllm .tekton/vllm-cuda-v2-23-push.yaml builds output-image "
              "quay.io/modh/vllm:{{target_branch}}-cuda on pushes to target_branch 'rhoai-2.23'; that branch's head before the "
              "2025-08-01 runs, e979e5fe3 (2025-07-22, \"Merge 'nm/v0.9.2-ibm-cherry-picks'\"), descends from \"Sync v0.9.2 (#249)\" "
              "(02d57ae44, 2025-07-11; via \"Merge branch 'v0.9.2-upstream' into sync-v0.9.2\", upstream head a5dd03c1e) and from the annotated tag v0.9.2.1 "
              "(on 0565c690a, 2025-07-15), the midstream patch release recorded here. The same pipeline passes the build-arg "
              "VLLM_VERSION=0.9.0.1 as SETUPTOOLS_SCM_PRETEND_VERSION (Dockerfile.ubi), so the image may report 0.9.0.1; both "
              "are 0.9.x, the vllm@0.10 preset release)")
_RHAIIS_310 = ("its vLLM version not printed: Red Hat's version table (Red Hat AI 3 'Supported product and hardware "
               "configurations', Table 2.1) starts at 3.2.0 (v0.9.2) and the 3.0 edition lists vLLM core 0.8.4; no public "
               "page found names 3.1.0's vLLM)")
RH_FILES = {  # results file -> (curve suffix, engine, version, serving manifest, flags, tp, kv dtype)
    "llama-3.3-70b-fp8/results/vllm.json": ("vllm0.9.2-tp4-1000-100", "vllm", "0.9.2", "vllm.yaml (image docker.io/vllm/vllm-openai:v0.9.2)", _VLLM_CMD.format(tp=4), 4, "auto"),
    "llama-3.3-70b-fp8/results/vllm-decode-heavy.json": ("vllm0.9.2-tp4-512-2048", "vllm", "0.9.2", "vllm.yaml (image docker.io/vllm/vllm-openai:v0.9.2)", _VLLM_CMD.format(tp=4), 4, "auto"),
    "llama-3.3-70b-fp8/results/vllm-midstream.json": ("vllm-midstream0.9.2.2-tp4-1000-100", "vllm", "0.9.2.2", "vllm-midstream.yaml (image quay.io/vllm/vllm-cuda:0.9.2.2, Red Hat midstream build)", _VLLM_CMD.format(tp=4), 4, "auto"),
    "llama-3.3-70b-fp8/results/rhaiis.json": ("rhaiis3.2.0-tp4-1000-100", "vllm", "v0.9.2", "rhaiis.yaml (image registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.0, Red Hat AI Inference Server 3.2.0; " + _RHAIIS_320, _VLLM_CMD.format(tp=4), 4, "auto"),
    "llama-3.3-70b-fp8/results/rhoai.json": ("rhoai2.23-tp4-1000-100", "vllm", "0.9.2.1", "rhoai.yaml (image quay.io/modh/vllm:rhoai-2.23-cuda, Red Hat OpenShift AI build; " + _RHOAI_223, _VLLM_CMD.format(tp=4), 4, "auto"),
    "llama-3.3-70b-fp8/results/sgl.json": ("sglang0.4.9.post6-tp4-1000-100", "sglang", "v0.4.9.post6", "sgl.yaml (image docker.io/lmsysorg/sglang:v0.4.9.post6-cu126)", _SGL_CMD.format(kv=""), 4, "auto"),
    "llama-3.3-70b-fp8/results/sgl-fp8.json": ("sglang0.4.9.post6-fp8kv-tp4-1000-100", "sglang", "v0.4.9.post6", "sgl-fp8-kv.yaml (image docker.io/lmsysorg/sglang:v0.4.9.post6-cu126)", _SGL_CMD.format(kv=" --kv-cache-dtype fp8_e4m3"), 4, "fp8_e4m3"),
    "llama-3.3-70b-fp8/results/sgl-decode-heavy.json": ("sglang0.4.9.post6-tp4-512-2048", "sglang", "v0.4.9.post6", "sgl.yaml (image docker.io/lmsysorg/sglang:v0.4.9.post6-cu126)", _SGL_CMD.format(kv=""), 4, "auto"),
    "llama-3.3-70b-fp8/results-take-2/rhaiis-3.1.json": ("take2-rhaiis3.1.0-tp4-1000-100", "vllm", "unknown", "rhaiis-3.1.yaml (image registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.1.0; " + _RHAIIS_310, _VLLM_CMD.format(tp=4), 4, "auto"),
    "llama-3.3-70b-fp8/results-take-2/rhaiis-tp1.json": ("take2-rhaiis3.2.0-tp1-1000-100", "vllm", "v0.9.2", "rhaiis-tp1.yaml (image registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.0; " + _RHAIIS_320, _VLLM_CMD.format(tp=1), 1, "auto"),
    "llama-3.3-70b-fp8/results-take-2/rhaiis-tp4.json": ("take2-rhaiis3.2.0-tp4-1000-100", "vllm", "v0.9.2", "rhaiis.yaml (image registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.0; " + _RHAIIS_320, _VLLM_CMD.format(tp=4), 4, "auto"),
    "llama-3.3-70b-fp8/results-take-2/vllm-tp1.json": ("take2-vllm0.9.2-tp1-1000-100", "vllm", "0.9.2", "vllm-tp1.yaml (image docker.io/vllm/vllm-openai:v0.9.2)", _VLLM_CMD.format(tp=1), 1, "auto"),
    "llama-3.3-70b-fp8/results-take-2/vllm-tp4.json": ("take2-vllm0.9.2-tp4-1000-100", "vllm", "0.9.2", "vllm.yaml (image docker.io/vllm/vllm-openai:v0.9.2)", _VLLM_CMD.format(tp=4), 4, "auto"),
}
RH_METRICS = (("request_throughput", "request_tps", "value"), ("output_throughput", "output_tps", "value"),
              ("total_token_throughput", "total_tps", "value"), ("mean_ttft_ms", "ttft_ms", "mean"),
              ("median_ttft_ms", "ttft_ms", "median"), ("p90_ttft_ms", "ttft_ms", "p90"), ("p99_ttft_ms", "ttft_ms", "p99"),
              ("mean_tpot_ms", "tpot_ms", "mean"), ("median_tpot_ms", "tpot_ms", "median"), ("p90_tpot_ms", "tpot_ms", "p90"),
              ("p99_tpot_ms", "tpot_ms", "p99"), ("mean_itl_ms", "itl_ms", "mean"), ("median_itl_ms", "itl_ms", "median"),
              ("p99_itl_ms", "itl_ms", "p99"), ("mean_e2el_ms", "e2el_ms", "mean"), ("median_e2el_ms", "e2el_ms", "median"),
              ("p99_e2el_ms", "e2el_ms", "p99"))


def redhat_rows() -> list[dict]:
    rows = []
    for rec in RH:
        f, line = rec[0], rec[1]
        v = dict(zip(RH_KEYS, rec[2:]))
        suffix, engine, version, manifest, flags, tp, kv = RH_FILES[f]
        decode_heavy = "decode-heavy" in f
        isl, osl, mult, script = (("512", "2048", "10", "sweep-decode-heavy.sh") if decode_heavy else
                                  ("1000", "100", "20", "sweep.sh"))
        curve = f"{PREFIX}-redhat-h200-llama-3.3-70b-fp8-{suffix}"
        note = (f"Server: {manifest} in llama-3.3-70b-fp8/ (Kubernetes manifest, {tp} GPU(s)); client: {script}, "
                f"`python3 vllm/benchmarks/benchmark_serving.py --dataset-name random --random-input-len {isl} "
                f"--random-output-len {osl} --max-concurrency C --num-prompts {mult} x C --seed $(date +%s) --percentile-metrics "
                f"ttft,tpot,itl,e2el --metric-percentiles 90,95,99 --ignore-eos --save-result --append-result` "
                f"(result backend 'vllm': the OpenAI completions endpoint of whichever server ran). Line {line} of the results "
                f"file: {v['completed']} successful requests, total input tokens {v['total_input_tokens']}, total generated "
                f"tokens {v['total_output_tokens']}. Hardware from the repo's analyze.ipynb plot titles "
                f"(\"Llama-70B-FP8-Dynamic | {'1xH200' if tp == 1 else '4xH200'} | ...\"); the pairing of results file and "
                f"manifest is by file name. KV cache: {'fp8_e4m3 (--kv-cache-dtype)' if kv != 'auto' else 'the engine default (no kv scales in the FP8-dynamic checkpoint, so bf16)'}.")
        base = {
            "curve_id": curve, "source": RH_BASE + f, "source_ref": f"robertgshaw2-redhat/llm-benchmark-helm-charts@{RH_COMMIT[:7]}:{f} (line {line})",
            "publisher": "Robert Shaw (Red Hat; github.com/robertgshaw2-redhat)", "engine": engine, "engine_version": version,
            "engine_flags": flags, "device": "h200", "device_variant": ("one H200" if tp == 1 else "4x H200 (one Kubernetes pod, TP 4)"),
            "n_devices": str(tp), "tp": str(tp), "model": "llama-3.3-70b", "quant": "fp8", "kv_cache_dtype": kv,
            "client": "vllm-bench-serve", "dataset": "random", "input_tokens": isl, "output_tokens": osl, "range_ratio": "",
            "num_prompts": v["num_prompts"], "warmup": "", "ramp_up": "", "ignore_eos": "true", "load_kind": "concurrency",
            "max_concurrency": v["max_concurrency"], "request_rate": "inf", "burstiness": "1.0", "derivation": "",
        }
        for key, q, stat in RH_METRICS:
            rows.append(_row(base, row_id=f"{curve}-c{v['max_concurrency']}-{q}-{stat}", quantity=q, statistic=stat,
                             value=fmt(float(v[key])), as_printed=f"\"{key}\": {v[key]}",
                             notes=f"Model RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic (catalog llama-3.3-70b, FP8 dynamic). {note}"))
    return rows


# ---------------------------------------------------------------------------------------------
def all_rows() -> list[dict]:
    return vultr_cuda_rows() + mushfiq_rows() + yobitel_rows() + faradawn_rows() + redhat_rows()


def render(rows: list[dict]) -> str:
    return csv_text(rows, "corpus_c.csv")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if corpus_c.csv differs from what this script writes")
    args = ap.parse_args(argv)
    rows = all_rows()
    text = render(rows)
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.name}: differs from build_corpus_c.py's output; rerun without --check", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"{OUT.name}: {len(rows)} rows, {len({r['curve_id'] for r in rows})} curves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
