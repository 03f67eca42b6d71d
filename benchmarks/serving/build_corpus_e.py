"""Build benchmarks/serving/corpus_e.csv: vLLM V1 serving sweeps on devices the corpus lacked (issue 38 item 1,
collection e; sources, settings and what was searched and rejected: COLLECTIONS-e.md).

Source (transcribed into this script, each figure exactly as the page prints it; nothing read off a plot):
  ai.wmx.dev "Benchmarks" page (https://ai.wmx.dev/benchmarks): "Baseline serving benchmark for serving/raw-vllm:
  a concurrency sweep ... Harness: vllm bench serve (the repo's benchmarks/ Job)". Run context as printed: commit
  8e78aaa, 1x NVIDIA L4 (23 GB) on a GCP g2-standard-4, driver 580.126.20 / CUDA 13.0, Qwen/Qwen2.5-0.5B-Instruct
  BF16, vLLM v0.23.0 (V1 engine), server args --gpu-memory-utilization 0.6 --max-model-len 8192, 256-token input /
  128-token output, --ignore-eos, seed 42, closed loop (--request-rate inf) at fixed max-concurrency 1 ... 32.
The page is not a GitHub file, so nothing is vendored under sources/: the table rows are copied below as printed
(`as_printed` holds each row), as build_corpus_c.py does for the Mushfiqur Rahman page.
    python3 build_corpus_e.py            # rewrites corpus_e.csv
    python3 build_corpus_e.py --check    # fails when corpus_e.csv differs from what this script builds
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import build_main, csv_text  # noqa: E402
from corpus_e_pallavim1 import pallavim1_rows  # noqa: E402
from corpus_e_wayne import wayne_rows  # noqa: E402

WMX_URL = "https://ai.wmx.dev/benchmarks"
#: the page's "Results: concurrency sweep" table, header and rows exactly as printed (latencies in ms)
WMX_HEADER = "| concurrency | req/s | out tok/s | TTFT p50 | TTFT p95 | ITL p50 | ITL p95 | E2E p50 | E2E p95 |"
WMX_ROWS = [
    "| 1 | 1.3 | 168 | 27.0 | 115.5 | 5.1 | 6.1 | 679 | 765 |",
    "| 2 | 2.9 | 367 | 37.8 | 48.2 | 5.2 | 6.3 | 698 | 705 |",
    "| 4 | 5.4 | 698 | 50.1 | 85.4 | 5.3 | 6.4 | 722 | 760 |",
    "| 8 | 10.2 | 1312 | 60.9 | 88.4 | 5.5 | 7.4 | 772 | 816 |",
    "| 16 | 17.8 | 2277 | 103.8 | 135.7 | 6.0 | 8.9 | 880 | 947 |",
    "| 32 | 29.5 | 3773 | 135.3 | 191.8 | 7.1 | 12.0 | 1082 | 1128 |",
]
#: header cell -> (quantity, statistic); p50 is the median
WMX_COLUMNS = {
    "req/s": ("request_tps", "value"), "out tok/s": ("output_tps", "value"),
    "TTFT p50": ("ttft_ms", "median"), "TTFT p95": ("ttft_ms", "p95"),
    "ITL p50": ("itl_ms", "median"), "ITL p95": ("itl_ms", "p95"),
    "E2E p50": ("e2el_ms", "median"), "E2E p95": ("e2el_ms", "p95"),
}
WMX_NOTE = (
    "ai.wmx.dev Benchmarks page, 'Baseline serving benchmark for serving/raw-vllm' (harness: vllm bench serve, run as "
    "a Kubernetes Job from the repo's benchmarks/ folder at commit 8e78aaa; the repository itself is not linked from "
    "the page). Run context as printed: 1x NVIDIA L4 (23 GB), GCP g2-standard-4 on-demand, GKE v1.36.0-gke.2684000 "
    "(COS), driver 580.126.20 / CUDA 13.0; Qwen/Qwen2.5-0.5B-Instruct BF16; vLLM v0.23.0 (V1 engine) with server args "
    "--gpu-memory-utilization 0.6 --max-model-len 8192 (defaults otherwise: prefix caching and chunked prefill at "
    "vLLM's V1 defaults); request shape 256-token input / 128-token output, --ignore-eos, seed 42; closed loop "
    "(--request-rate inf) at fixed max-concurrency. Not stated: --num-prompts, warm-up, --random-range-ratio (vllm "
    "bench serve's default 0 = fixed lengths when the flag is not passed; recorded empty). Consistency: output tok/s "
    "/ req/s = 168 / 1.3 = 129 at C = 1 and 3773 / 29.5 = 128 at C = 32, i.e. 128 output tokens per request as set. "
    "The page's peak table (Prometheus/DCGM): GPU utilisation 100 %, KV-cache usage 1.1 %, 31 running / 0 waiting "
    "requests at C = 32. Model: Qwen2.5-0.5B-Instruct is not in sim/catalog/data/models.yaml, so the serving fit "
    "does not replay this curve until a catalog entry (with its config.json cited) exists.")


def wmx_rows() -> list[dict]:
    heads = [c.strip() for c in WMX_HEADER.strip("|").split("|")]
    curve = "corpus_e-wmx-l4-vllm0.23.0-qwen2.5-0.5b-bf16-256-128"
    out = []
    for line in WMX_ROWS:
        cells = dict(zip(heads, (c.strip() for c in line.strip("|").split("|"))))
        c = int(cells["concurrency"])
        base = {
            "curve_id": curve, "source": WMX_URL,
            "source_ref": "ai.wmx.dev/benchmarks, 'Results: concurrency sweep' (serving/raw-vllm @ 8e78aaa)",
            "publisher": "ai.wmx.dev (serving/raw-vllm benchmarks page)", "engine": "vllm",
            "engine_version": "0.23.0",
            "engine_flags": "--gpu-memory-utilization 0.6 --max-model-len 8192",
            "device": "l4", "device_variant": "NVIDIA L4 (23 GB), GCP g2-standard-4, driver 580.126.20 / CUDA 13.0",
            "n_devices": "1", "tp": "1", "model": "Qwen/Qwen2.5-0.5B-Instruct", "quant": "bf16",
            "kv_cache_dtype": "not stated", "client": "vllm-bench-serve", "dataset": "random",
            "input_tokens": "256", "output_tokens": "128", "range_ratio": "", "num_prompts": "", "warmup": "",
            "ramp_up": "", "ignore_eos": "true", "load_kind": "concurrency", "max_concurrency": str(c),
            "request_rate": "inf", "burstiness": "1.0",
        }
        for head, (q, stat) in WMX_COLUMNS.items():
            r = dict(base)
            r.update({"row_id": f"{curve}-c{c}-{q}-{stat}", "quantity": q, "statistic": stat, "value": cells[head],
                      "as_printed": f"{WMX_HEADER} row: {line} (column: {head})", "derivation": "",
                      "notes": WMX_NOTE})
            out.append(r)
    return out


def build() -> str:
    return csv_text(wmx_rows() + pallavim1_rows() + wayne_rows(), "corpus_e.csv")


def main() -> None:
    build_main(build, HERE / "corpus_e.csv", "build_corpus_e.py", __doc__, "")


if __name__ == "__main__":
    main()
