"""Build benchmarks/serving/vllm_amd.csv: vLLM serving sweeps on AMD Instinct GPUs from publishers other than
the one AMD vLLM source already in the corpus (Together AI's InferenceX runner, inferencex.csv).

Source (vendored verbatim under sources/dstackai__benchmarks/<commit>/..., read at the pinned commits):
  dstackai/benchmarks@9ece943:amd/inference/vllm/data/serving_benchmarks_vllm_{80,10000}.txt (dstack, Oct 2024;
  blog "Benchmarking Llama 3.1 405B on 8x AMD MI300X GPUs", dstack.ai/blog/amd-mi300x-inference-benchmark): the
  printed "Serving Benchmark Result" blocks of vLLM's benchmark_serving.py (dstack's copy, a "book" text dataset)
  against vLLM 0.6.3.dev116+g151ef4ef on 8 x MI300X, Llama-3.1-405B-Instruct (BF16 weights, TP8), N prompts of 80
  or 10,000 tokens sent at once (request rate inf, N = 1 ... 4096 or 1 ... 128). Server command:
  dstackai/benchmarks@2971864:amd/inference/vllm/benchmark-task.dstack.yml; environment (vLLM version, ROCm 6.1):
  dstackai/benchmarks@658b139:amd/inference/README.md.
    python3 build_vllm_amd_csv.py            # rewrites vllm_amd.csv from the vendored files
    python3 build_vllm_amd_csv.py --check    # fails when the CSV drifts from them
Every figure is a value exactly as printed in a block; nothing is converted (the printed units are the schema's).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import BENCH_LINES, csv_text, num, parse_bench_block  # noqa: E402

DSTACK_DATA = "9ece943634018a9e1b31763244868bcf453d31d2"  # 2024-10-08 "Add Benchmark Charts" (the result text)
DSTACK_TASK = "2971864824bee6971c1a943d432962db9790bb5f"  # 2024-10-11 the vLLM dstack task (server command)
SRC = HERE / "sources" / "dstackai__benchmarks"
URL = "https://github.com/dstackai/benchmarks/blob/%s/%s"
FLAGS = ("vllm serve meta-llama/Llama-3.1-405B-Instruct --tensor-parallel-size=8 --disable-log-requests "
         "--disable-frontend-multiprocessing (dstackai/benchmarks@2971864:amd/inference/vllm/benchmark-task.dstack.yml)")
RUNS = [  # (file, input tokens per prompt as the command sets them, label)
    ("serving_benchmarks_vllm_80.txt", 80, "book80"),
    ("serving_benchmarks_vllm_10000.txt", 10000, "book10000"),
]


def readme_commit() -> str:
    """The vendored README's commit (its folder name under sources/dstackai__benchmarks)."""
    for d in sorted(SRC.iterdir()):
        if (d / "amd" / "inference" / "README.md").exists():
            return d.name
    raise FileNotFoundError(f"{SRC}: no vendored amd/inference/README.md")


def blocks(text: str) -> list[str]:
    """The text of each 'Serving Benchmark Result' block, in file order."""
    parts = re.split(r"=+ Serving Benchmark Result =+", text)
    return [p.split("=" * 50)[0] for p in parts[1:]]


def rows_for(fname: str, in_len: int, label: str) -> list[dict]:
    rel = f"amd/inference/vllm/data/{fname}"
    text = (SRC / DSTACK_DATA / rel).read_text()
    command = text.strip().splitlines()[0]
    readme = (SRC / readme_commit() / "amd" / "inference" / "README.md").read_text()
    version = re.search(r"vLLM Version: (\S+)", readme).group(1)
    curve = f"vllm_amd-dstack-mi300x-vllm{version.split('+')[0]}-llama-3.1-405b-bf16-tp8-{label}"
    out = []
    for b in blocks(text):
        f = parse_bench_block(b)
        n = int(num(f["Successful requests"]))
        tin, tout = int(num(f["Total input tokens"])), int(num(f["Total generated tokens"]))
        base = {
            "curve_id": curve, "source": URL % (DSTACK_DATA, rel),
            "source_ref": f"dstackai/benchmarks@{DSTACK_DATA[:7]}:{rel} (benchmark_serving.py result blocks)",
            "publisher": "dstack (dstackai; hardware from Hot Aisle)", "engine": "vllm", "engine_version": version,
            "engine_flags": FLAGS, "device": "mi300x",
            "device_variant": "8x AMD Instinct MI300X OAM 192GB 750W (gfx942), bare metal (Hot Aisle), ROCm 6.1",
            "n_devices": "8", "tp": "8", "model": "meta-llama/Llama-3.1-405B-Instruct", "quant": "bf16",
            "kv_cache_dtype": "not stated", "client": "vllm-bench-serve", "dataset": "book",
            "input_tokens": str(in_len), "output_tokens": "", "range_ratio": "", "num_prompts": str(n),
            "warmup": "", "ramp_up": "", "ignore_eos": "not stated", "load_kind": "concurrency",
            "max_concurrency": str(n), "request_rate": "inf", "burstiness": "1.0",
        }
        note = (f"dstack's run of vLLM's benchmark_serving.py ('{command}'): the {n} prompt(s) of this block are sent "
                f"at once (request rate inf, no concurrency cap, so max_concurrency = num_prompts = {n}); one block per "
                f"N. Dataset 'book': dstack's modified script cuts prompts of --book-input-len {in_len} tokens from a "
                f"book text (the script and book.txt are not in the repo; the README's steps name vLLM's sonnet "
                f"dataset instead). Realised lengths from the block's totals: input {tin} / {n} = {tin / n:.1f}, "
                f"output {tout} / {n} = {tout / n:.1f} tokens per request; outputs end at EOS or the script's "
                f"max_tokens (neither stated), so output lengths vary per request. vLLM {version} (V0 engine, "
                f"built from source on ROCm 6.1 per the README's environment dump), BF16 weights (no quantization "
                f"flag), TP8, vLLM defaults otherwise. Single run per N; E2E latency is not printed by this client "
                f"version. The blog plots these same blocks.")
        for label_, (q, stat) in BENCH_LINES.items():
            if label_ not in f:
                continue
            r = dict(base)
            r.update({"row_id": f"{curve}-n{n}-{q}-{stat}", "quantity": q, "statistic": stat,
                      "value": f[label_], "as_printed": f"{label_}: {f[label_]}", "derivation": "", "notes": note})
            out.append(r)
    return out


def build() -> str:
    rows = []
    for fname, in_len, label in RUNS:
        rows += rows_for(fname, in_len, label)
    return csv_text(rows, "vllm_amd.csv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail when vllm_amd.csv differs from the vendored sources")
    ap.add_argument("--out", default=str(HERE / "vllm_amd.csv"))
    a = ap.parse_args()
    text = build()
    out = Path(a.out)
    if a.check:
        if not out.exists() or out.read_text() != text:
            sys.exit(f"{out}: differs from what build_vllm_amd_csv.py builds from the vendored sources; rerun it")
        return
    out.write_text(text)
    print(f"{out}: {text.count(chr(10)) - 1} rows")


if __name__ == "__main__":
    main()
