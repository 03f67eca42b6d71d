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
def all_rows() -> list[dict]:
    return vultr_cuda_rows()


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
