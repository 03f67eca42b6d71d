"""GPUStack performance-lab docs: pasted `vllm bench serve` / guidellm result blocks -> gpustack.csv
rows (run by `import_inferencex.py`)."""
from __future__ import annotations

import re
from decimal import Decimal

from import_inferencex_common import SRC, base_row, dec_str, gh


# --------------------------------------------------------------------------------------------
# GPUStack performance-lab docs: pasted result blocks
# --------------------------------------------------------------------------------------------
GS_REPO = "gpustack/gpustack"
GS_COMMIT = "47277d79f4a5bae12a2d25e9ecbed2a2177a5f2d"

# printed label -> (quantity, statistic, unit factor to the quantity's unit)
BLOCK_LABELS = {
    "Request throughput (req/s)": ("request_tps", "value", None),
    "Output token throughput (tok/s)": ("output_tps", "value", None),
    "Total Token throughput (tok/s)": ("total_tps", "value", None),
    "Mean TTFT (ms)": ("ttft_ms", "mean", None), "Median TTFT (ms)": ("ttft_ms", "median", None),
    "P95 TTFT (ms)": ("ttft_ms", "p95", None), "P99 TTFT (ms)": ("ttft_ms", "p99", None),
    "Mean TPOT (ms)": ("tpot_ms", "mean", None), "Median TPOT (ms)": ("tpot_ms", "median", None),
    "P95 TPOT (ms)": ("tpot_ms", "p95", None), "P99 TPOT (ms)": ("tpot_ms", "p99", None),
    "Mean ITL (ms)": ("itl_ms", "mean", None), "Median ITL (ms)": ("itl_ms", "median", None),
    "P95 ITL (ms)": ("itl_ms", "p95", None), "P99 ITL (ms)": ("itl_ms", "p99", None),
    "Mean E2EL (ms)": ("e2el_ms", "mean", None), "Median E2EL (ms)": ("e2el_ms", "median", None),
    "P99 E2EL (ms)": ("e2el_ms", "p99", None),
    "Mean Latency(s)": ("e2el_ms", "mean", 1000), "Median Latency(s)": ("e2el_ms", "median", 1000),
    "P95 Latency(s)": ("e2el_ms", "p95", 1000), "P99 Latency(s)": ("e2el_ms", "p99", 1000),
}
LINE = re.compile(r"^\s*(?P<label>[A-Za-z0-9 ()/.:%-]+?):\s+(?P<num>-?[0-9][0-9.]*)\s*$")


GS_SHAREGPT_NOTE = (
    "Dataset ShareGPT_V3_unfiltered_cleaned_split.json (lengths per conversation; totals printed in "
    "the block: see 'Total input tokens' / 'Total generated tokens' of the source block)."
)
GS_DOCS = [
    dict(
        path="docs/performance-lab/qwen3-8b/h100-latency.md",
        device="h100-sxm", device_variant="A single NVIDIA H100 SXM GPU", n=1, tp=1,
        client="vllm-bench-serve", load_kind="concurrency",
        client_note=("Client command as printed: vllm bench serve --model Qwen/Qwen3-8B --backend "
                     "openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt "
                     "--dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 100 "
                     "--max-concurrency C (C = the block's 'BS' / 'Maximum request concurrency'). "
                     "ignore_eos not set: outputs end at EOS or the dataset's length."),
        skip=(),
        curves=[
            dict(sel="Baseline benchmark results", curve="gpustack-h100-vllm-qwen3-8b-bf16-sharegpt",
                 engine="vllm", version="0.11.0", flags="vllm serve Qwen/Qwen3-8B",
                 model="qwen3-8b", quant="bf16", kv="not stated", note="Baseline serving script."),
            dict(sel="Optimized benchmark results",
                 curve="gpustack-h100-sglang-qwen3-8b-fp8-eagle3-sharegpt",
                 engine="sglang", version="0.5.3.post3",
                 flags=("python3 -m sglang.launch_server --model Qwen/Qwen3-8B-FP8 "
                        "--speculative-algorithm EAGLE3 --speculative-draft-model-path "
                        "Tengyunw/qwen3_8b_eagle3 --speculative-num-steps 4 --speculative-eagle-topk 4 "
                        "--speculative-num-draft-tokens 16"),
                 model="Qwen/Qwen3-8B-FP8", quant="fp8", kv="not stated",
                 note="Optimized serving script: FP8 checkpoint with EAGLE3 speculative decoding (TPOT/ITL count accepted tokens)."),
        ],
    ),
    dict(
        path="docs/performance-lab/qwen3.5-9b/h100-latency.md",
        device="h100-sxm", device_variant="NVIDIA H100 80GB HBM3 (HBM3 => SXM part)", n=1, tp=1,
        client="guidellm", load_kind="rate",
        client_note=("Client: GPUStack's benchmark-runner on guidellm, profile 'ShareGPT xRPS' "
                     "(dataset ShareGPT, request_rate R, total_requests 1000); the doc's open-source "
                     "equivalent is guidellm benchmark --profile constant --rate R --max-requests 1000 "
                     "--data ShareGPT_V3_unfiltered_cleaned_split.json. The block's 'Maximum request "
                     "concurrency' line is the observed peak, not a cap. TPOT/ITL lines of these "
                     "blocks (medians 0.00-0.15 ms) do not measure per-token decode time and are left out."),
        skip=("tpot_ms", "itl_ms"),
        curves=[
            dict(sel="Baseline benchmark result", curve="gpustack-h100-vllm-qwen3.5-9b-bf16-sharegpt-rate",
                 engine="vllm", version="0.17.1",
                 flags="--reasoning-parser=qwen3 --max-model-len=32768",
                 model="Qwen/Qwen3.5-9B", quant="bf16", kv="not stated",
                 note="Baseline backend parameters."),
            dict(sel="Optimized benchmark result",
                 curve="gpustack-h100-vllm-qwen3.5-9b-bf16-mtp-sharegpt-rate",
                 engine="vllm", version="0.17.1",
                 flags=("--reasoning-parser=qwen3 --max-model-len=32768 "
                        "--speculative-config={\"method\":\"mtp\",\"num_speculative_tokens\":1} "
                        "--language-model-only --performance-mode=interactivity"),
                 model="Qwen/Qwen3.5-9B", quant="bf16", kv="not stated",
                 note="Optimized backend parameters: MTP speculative decoding (1 token)."),
        ],
    ),
    dict(
        path="docs/performance-lab/qwen3.5-35b-a3b/h200-latency.md",
        device="h200", device_variant="NVIDIA H200", n=1, tp=1,
        client="guidellm", load_kind="rate",
        client_note=("Client: GPUStack's benchmark-runner on guidellm, profile 'ShareGPT xRPS' "
                     "(dataset ShareGPT, request_rate R, total_requests 1000); the doc's open-source "
                     "equivalent is guidellm benchmark --profile constant --rate R --max-requests 1000 "
                     "--data ShareGPT_V3_unfiltered_cleaned_split.json. The block's 'Maximum request "
                     "concurrency' line is the observed peak, not a cap. TPOT/ITL lines of these "
                     "blocks (medians near 0 ms) do not measure per-token decode time and are left out. "
                     "GPU count not stated (1 assumed from 'NVIDIA H200' and no TP flag)."),
        skip=("tpot_ms", "itl_ms"),
        curves=[
            dict(sel="Baseline benchmark result",
                 curve="gpustack-h200-vllm-qwen3.5-35b-a3b-bf16-sharegpt-rate",
                 engine="vllm", version="0.17.1",
                 flags="--reasoning-parser=qwen3 --max-model-len=32768",
                 model="Qwen/Qwen3.5-35B-A3B", quant="bf16", kv="not stated",
                 note="Baseline backend parameters."),
            dict(sel="Optimized benchmark result",
                 curve="gpustack-h200-vllm-qwen3.5-35b-a3b-bf16-mtp-sharegpt-rate",
                 engine="vllm", version="0.17.1",
                 flags=("--reasoning-parser=qwen3 "
                        "--speculative-config={\"method\":\"mtp\",\"num_speculative_tokens\":1} "
                        "--max-model-len=32768"),
                 model="Qwen/Qwen3.5-35B-A3B", quant="bf16", kv="not stated",
                 note="Optimized backend parameters: MTP speculative decoding (1 token)."),
        ],
    ),
]
RATE_HEADING = re.compile(r"^#### Rate (\d+(?:\.\d+)?)\s*$")
BS_MARK = re.compile(r"^\s*# BS=(\d+)\s*$")
INFO = re.compile(r'^\?\?\? info "(?P<title>[^"]+)"')
HEADER = re.compile(r"lines (\d+)-(\d+) and (\d+)-(\d+)")


def gpustack_rows() -> list[dict]:
    rows = []
    for doc in GS_DOCS:
        path = SRC / "gpustack__gpustack" / GS_COMMIT / doc["path"]
        lines = path.read_text().splitlines()
        # map excerpt line numbers back to the source file's line numbers
        h = HEADER.search(lines[0])
        s1, e1, s2, _ = (int(x) for x in h.groups())
        gap = lines.index(next(l for l in lines if l.startswith("<!-- ... lines")))

        def src_line(i: int) -> int:  # i: 1-based line in the excerpt
            return s1 + (i - 2) if i < gap + 1 else s2 + (i - gap - 2)

        # walk: remember the current info-title, the current Rate heading and BS marker
        title, rate, bs = None, None, None
        points = []  # (curve spec, load, block start excerpt line, fields)
        block = None
        for i, line in enumerate(lines, 1):
            if (m := INFO.match(line)):
                title = m["title"]
            if (m := RATE_HEADING.match(line)):
                rate = m[1]
            if (m := BS_MARK.match(line)):
                bs = m[1]
            if "Serving Benchmark Result" in line:
                spec = next((c for c in doc["curves"] if c["sel"] == title), None)
                block = {"spec": spec, "line": i, "fields": {},
                         "load": rate if doc["load_kind"] == "rate" else bs}
                points.append(block)
                continue
            if block is not None:
                if line.strip().startswith("=====") or line.strip() == "```":
                    block = None
                elif (m := LINE.match(line)):
                    block["fields"][m["label"].strip()] = (m["num"], line.strip())
        for p in points:
            spec = p["spec"]
            if spec is None:
                raise SystemExit(f"{path}:{p['line']}: result block under an unknown heading")
            f = p["fields"]
            load = p["load"]
            if doc["load_kind"] == "concurrency":
                printed_c = f["Maximum request concurrency"][0]
                if printed_c != load:
                    raise SystemExit(f"{path}:{p['line']}: BS={load} but block says concurrency {printed_c}")
            n_req = f["Successful requests"][0]
            src_no = src_line(p["line"])
            extra = (f" Block at source line {src_no}: {n_req} successful requests, "
                     f"total input tokens {f['Total input tokens'][0]}, total generated tokens "
                     f"{f['Total generated tokens'][0]}.")
            if doc["load_kind"] == "rate":
                extra += f" Printed peak concurrency {f['Maximum request concurrency'][0]}."
            common = dict(
                curve_id=spec["curve"], source=gh(GS_REPO, GS_COMMIT, doc["path"]) + f"#L{src_no}",
                source_ref=f"{GS_REPO}@{GS_COMMIT[:10]}:{doc['path']} (Other Benchmark Cases, line {src_no})",
                publisher="GPUStack", engine=spec["engine"], engine_version=spec["version"],
                engine_flags=spec["flags"], device=doc["device"], device_variant=doc["device_variant"],
                n_devices=doc["n"], tp=doc["tp"], model=spec["model"], quant=spec["quant"],
                kv_cache_dtype=spec["kv"], client=doc["client"], dataset="sharegpt",
                input_tokens="", output_tokens="", range_ratio="",
                num_prompts=100 if doc["load_kind"] == "concurrency" else 1000,
                warmup="", ramp_up="", ignore_eos="false" if doc["client"] == "vllm-bench-serve" else "not stated",
                load_kind=doc["load_kind"],
                max_concurrency=load if doc["load_kind"] == "concurrency" else "",
                request_rate="inf" if doc["load_kind"] == "concurrency" else load,
                # guidellm --profile constant spaces arrivals evenly: vLLM's burstiness -> inf
                burstiness="1.0" if doc["load_kind"] == "concurrency" else "inf",
            )
            notes = f"{spec['note']} {doc['client_note']} {GS_SHAREGPT_NOTE}{extra}"
            if doc["load_kind"] == "rate":
                notes += (" burstiness inf: the doc's guidellm equivalent uses --profile constant "
                          "(evenly spaced arrivals, not Poisson).")
            tag = f"c{load}" if doc["load_kind"] == "concurrency" else f"r{load}"
            for label, (qty, stat, factor) in BLOCK_LABELS.items():
                if label not in f or qty in doc["skip"]:
                    continue
                num, raw = f[label]
                if factor:
                    value = dec_str(Decimal(num) * factor)
                    deriv = f"{label.split('(')[0].strip()} printed in seconds: {num} s x {factor}"
                else:
                    value, deriv = dec_str(Decimal(num)), ""
                if Decimal(value) <= 0:
                    continue  # a printed 0.00 carries no measurement
                rows.append(base_row(**common, row_id=f"{spec['curve']}-{tag}-{qty}-{stat}",
                                     quantity=qty, statistic=stat, value=value,
                                     as_printed=re.sub(r"\s{2,}", " ", raw), derivation=deriv,
                                     notes=notes))
    return rows

