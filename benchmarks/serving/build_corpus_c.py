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
import csv
import io
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import fmt, num  # noqa: E402
from schema import COLUMNS  # noqa: E402

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
        "range_ratio": "", "num_prompts": "300", "warmup": "", "ramp_up": "", "ignore_eos": "not stated",
        "load_kind": "concurrency", "request_rate": "inf", "burstiness": "1.0",
    }
    note = ("Model mistralai/Mistral-7B-Instruct-v0.3 (catalog id mistral-7b-v0.3). Workload A: 256 input tokens -> 128 "
            "output tokens; 300 prompts sent at an effectively infinite request rate, capped at each Max Concurrency; "
            "Poisson arrival model. The post does not show the client command or the vLLM version: client recorded as "
            "vllm-bench-serve (and dataset random) because the settings it names (number of prompts, request rate inf, "
            "max concurrency, Poisson arrivals) and the statistics it prints (Req/s, Output Tok/s, Mean/Median/P99 TTFT) "
            "are that tool's; lengths are the stated fixed 256/128. No TPOT/ITL printed. Median TTFT at 48 (840 ms) "
            "exceeds the mean (667 ms) as printed.")
    rows = []
    for c, rps, otps, mean, med, p99 in MUSHFIQ:
        printed = (f"| Max Concurrency {c} | Req/s {rps} | Output Tok/s {otps} | Mean TTFT (ms) {mean} | "
                   f"Median TTFT (ms) {med} | P99 TTFT (ms) {p99} |")
        for q, stat, v in (("request_tps", "value", rps), ("output_tps", "value", otps), ("ttft_ms", "mean", mean),
                           ("ttft_ms", "median", med), ("ttft_ms", "p99", p99)):
            rows.append(_row(base, row_id=f"{curve}-c{c}-{q}-{stat}", max_concurrency=c, quantity=q, statistic=stat,
                             value=fmt(num(v)), as_printed=printed, derivation="", notes=note))
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
def all_rows() -> list[dict]:
    return vultr_cuda_rows() + mushfiq_rows() + yobitel_rows()


def render(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    ids = set()
    for r in rows:
        missing = [c for c in COLUMNS if c not in r]
        if missing:
            raise ValueError(f"row {r.get('row_id')} lacks {missing}")
        if r["row_id"] in ids:
            raise ValueError(f"duplicate row_id {r['row_id']}")
        ids.add(r["row_id"])
        w.writerow(r)
    return buf.getvalue()


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
