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
  llm-d/llm-d@a974157:docs/accelerators/amd-mi355x-perf.md (Andy Luo, AMD; llm-d PR #1233, April 2026): the
  throughput tables of `vllm bench serve --dataset-name random` against vLLM 0.15.1 (ghcr.io/llm-d/llm-d-rocm:v0.6.0)
  on 8 x MI355X, amd/Llama-3.3-70B-Instruct-FP8-KV at TP8: 4k/4k and 16k/2k at C = 4, 16, 32 (and 1024/256 at
  C = 16 ... 256, whose printed totals contradict its stated lengths: kept, marked outlier).
Every figure is a value exactly as printed; the one conversion (a TTFT printed in seconds -> ms) is in `derivation`.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import BENCH_LINES, build_main, csv_text, num, parse_bench_block  # noqa: E402

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


LLMD_COMMIT = "a974157bb1230897f6e9e629b4419cb71f952b2c"
LLMD_PATH = "docs/accelerators/amd-mi355x-perf.md"
LLMD_URL = "https://github.com/llm-d/llm-d/blob/%s/%s" % (LLMD_COMMIT, LLMD_PATH)
LLMD_FLAGS = ("vllm serve amd/Llama-3.3-70B-Instruct-FP8-KV --tensor-parallel-size 8 --gpu-memory-utilization 0.85 "
              "--block-size 128 --max-model-len <varied> --disable-uvicorn-access-log")
#: the long-context table's workload labels -> (input, output) tokens. "4k" is 4096 as the document's reproducer
#: writes it (--random-input-len 4096 --random-output-len 4096); "16k in x 2k out" is read the same way (16384 / 2048).
#: (input, output, concurrency) of the document's reproducer command, the one cell whose prompt count it states
REPRODUCER = (4096, 4096, 32)
LLMD_WORKLOADS = {"Decode-heavy (4k in × 4k out)": (4096, 4096), "Long-both (16k in × 2k out)": (16384, 2048)}


def _ms(cell: str) -> tuple[str, str]:
    """A printed TTFT/TPOT cell ('343 ms', '1.77 s', '37.3 ms (TPOT)') -> (value in ms, derivation)."""
    num_, unit = re.match(r"([\d.]+) (ms|s)\b", cell).groups()
    if unit == "ms":
        return num_, ""
    v = float(num_) * 1000
    return f"{v:g}", f"{num_} s x 1000 = {v:g} ms"


def _table(text: str, heading: str) -> list[tuple[str, list[str]]]:
    """(the line as printed, its cells stripped) of each body row of the markdown table under `heading`."""
    block = text.split(heading, 1)[1].split("\n\n", 2)[1]
    lines = [ln for ln in block.splitlines() if ln.startswith("|")][2:]
    return [(ln, [c.strip() for c in ln.strip().strip("|").split("|")]) for ln in lines]


def llmd_rows() -> list[dict]:
    text = (HERE / "sources" / "llm-d__llm-d" / LLMD_COMMIT / LLMD_PATH).read_text(encoding="utf-8")
    version = re.search(r"\(vLLM ([\d.]+), ROCm", text).group(1)
    rows = []

    def base(curve: str, li: int, lo: int, c: int) -> dict:
        return {
            "curve_id": curve, "source": LLMD_URL,
            "source_ref": f"llm-d/llm-d@{LLMD_COMMIT[:7]}:{LLMD_PATH} (llm-d PR #1233, 'AMD MI355X perf reference', April 2026)",
            "publisher": "Andy Luo (AMD; GitHub andyluo7), llm-d docs", "engine": "vllm", "engine_version": version,
            "engine_flags": LLMD_FLAGS, "device": "mi355x",
            "device_variant": ("8x AMD Instinct MI355X (gfx950), 288 GB/GPU, Tensorwave node mia1-p01-g07; container "
                               "ghcr.io/llm-d/llm-d-rocm:v0.6.0 (vLLM 0.15.1, ROCm 7.x) run standalone"),
            "n_devices": "8", "tp": "8", "model": "llama-3.3-70b", "quant": "fp8", "kv_cache_dtype": "not stated",
            "client": "vllm-bench-serve", "dataset": "random", "input_tokens": str(li), "output_tokens": str(lo),
            "range_ratio": "", "num_prompts": "", "warmup": "", "ramp_up": "", "ignore_eos": "not stated",
            "load_kind": "concurrency", "max_concurrency": str(c), "request_rate": "inf", "burstiness": "1.0",
        }

    common = ("vllm bench serve --backend vllm --dataset-name random --seed 1, one run per config, against vLLM "
              f"{version} (ghcr.io/llm-d/llm-d-rocm:v0.6.0, the image llm-d ships) on one 8x MI355X node, "
              "amd/Llama-3.3-70B-Instruct-FP8-KV (AMD's FP8 checkpoint with FP8 KV-cache scales), TP8. Each table row "
              "is 'the best result across all swept parameters' of a 51-config sweep (gpu-memory-utilization 0.85/0.90/"
              "0.95, block-size 64/128/256, max-num-seqs 256/512, max-model-len 32k/64k/128k), which the document says "
              "move throughput by 1-3% at most; so a row's server config is one of these, not named per row. The "
              "server command sets no --kv-cache-dtype (not stated). Prompts per point, warm-up, range ratio and "
              "ignore_eos are not stated (the reproducer for 4k/4k C=32 passes --num-prompts 128 and no range ratio, "
              "request rate or --ignore-eos flag, so vllm bench serve's defaults: fixed lengths, all at once under "
              "the concurrency cap).")
    text_long = "### Long context"
    for line, cells in _table(text, text_long):
        wl, c, out_tps, tot_tps, ttft, tpot = cells
        if wl not in LLMD_WORKLOADS:
            continue  # the prefill-heavy rows: one concurrency each, no curve
        li, lo = LLMD_WORKLOADS[wl]
        c = int(c)
        curve = f"vllm_amd-llmd-mi355x-vllm{version}-llama-3.3-70b-fp8-tp8-{li}-{lo}"
        ratio = float(tot_tps) / float(out_tps)
        note = (f"Workload '{wl}' printed; {li} in / {lo} out as read here. " + common +
                f" Total/output throughput = {tot_tps} / {out_tps} = {ratio:.3f}, and (in + out) / out = "
                f"{(li + lo) / lo:.3f} for these lengths: the outputs ran to their full length. The TPOT column is "
                "headed 'TPOT/ITL (median)' (which of the two is not said; recorded as median TPOT).")
        for q, stat, cell in (("output_tps", "value", out_tps), ("total_tps", "value", tot_tps),
                              ("ttft_ms", "mean", ttft), ("tpot_ms", "median", tpot)):
            v, der = (cell, "") if q.endswith("tps") else _ms(cell)
            r = base(curve, li, lo, c)
            if (li, lo, c) == REPRODUCER:  # the document's reproducer command is this cell's
                r["num_prompts"] = "128"
            r.update({"row_id": f"{curve}-c{c}-{q}-{stat}", "quantity": q, "statistic": stat, "value": v,
                      "as_printed": f"{line} (column: {cell})", "derivation": der,
                      "notes": note + (" num_prompts 128: the document's reproducer command (--random-input-len 4096 "
                                       "--random-output-len 4096 --num-prompts 128 --max-concurrency 32 --seed 1) "
                                       "is this cell's; the other cells' prompt counts are not stated."
                                       if (li, lo, c) == REPRODUCER else "")})
            rows.append(r)
    short = "### Short context (1024 input, 256 output)"
    for line, cells in _table(text, short):
        c, out_tps, tot_tps, ttft, itl, _delta = cells
        c = int(c)
        curve = f"vllm_amd-llmd-mi355x-vllm{version}-llama-3.3-70b-fp8-tp8-1024-256"
        ratio = float(tot_tps) / float(out_tps)
        note = ("outlier: the short-context table's rows do not agree with its stated lengths. For 1024 in / 256 out, "
                f"total/output throughput is (1024 + 256) / 256 = 5.0; this row prints {tot_tps} / {out_tps} = "
                f"{ratio:.2f} (C=16: 5.00, C=64: 17.00, C=128: 9.00, C=256: 9.00, i.e. outputs of about 64 and 128 "
                "tokens at C = 64 and C = 128/256, and C = 64's TTFT above C = 128's), so the rows above C = 16 ran "
                "another workload than the heading says and the curve is not replayed. " + common +
                " The latency column is 'ITL (median)', its cells above C = 16 marked '(TPOT)'.")
        lat_q = "tpot_ms" if "(TPOT)" in itl else "itl_ms"
        for q, stat, cell in (("output_tps", "value", out_tps), ("total_tps", "value", tot_tps),
                              ("ttft_ms", "mean", ttft), (lat_q, "median", itl)):
            v, der = (cell, "") if q.endswith("tps") else _ms(cell)
            r = base(curve, 1024, 256, c)
            r.update({"row_id": f"{curve}-c{c}-{q}-{stat}", "quantity": q, "statistic": stat, "value": v,
                      "as_printed": f"{line} (column: {cell})", "derivation": der, "notes": note})
            rows.append(r)
    return rows


def build() -> str:
    rows = []
    for fname, in_len, label in RUNS:
        rows += rows_for(fname, in_len, label)
    rows += llmd_rows()
    return csv_text(rows, "vllm_amd.csv")


def main() -> None:
    build_main(build, HERE / "vllm_amd.csv", "build_vllm_amd_csv.py", __doc__, " from the vendored sources")


if __name__ == "__main__":
    main()
