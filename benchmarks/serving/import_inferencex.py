#!/usr/bin/env python3
"""Turn the vendored source files under benchmarks/serving/sources/ into serving-corpus rows.

Writes (in benchmarks/serving/):
  inferencex.csv  SemiAnalysis InferenceX result files: the experimental token-position sweeps on
                  8xH200 (vLLM, GLM-5 FP8 / MiniMax-M2.5 / Qwen3.5-397B) and the together_runner
                  baselines (B200 vLLM gpt-oss-120b, B200 SGLang DeepSeek-R1 FP4, MI350X vLLM
                  gpt-oss-120b) kept in the togethercomputer/InferenceX fork.
  gpustack.csv    GPUStack performance-lab docs that paste `vllm bench serve` / guidellm result
                  blocks for concurrency (1-8) and request-rate (1-16 req/s) sweeps.

Every source file is a verbatim copy of a file at a commit (see sources/README.md); this script only
reads them, so `python benchmarks/serving/import_inferencex.py` regenerates the CSVs byte for byte
offline, and `--check` fails (exit 1) when a committed CSV differs from what the sources give.

Rules kept here (benchmarks/serving/README.md): `as_printed` is the source's figure exactly as
written (the JSON number text or the printed line); `value` is that figure in the unit the quantity
names; a conversion (s -> ms) is spelled out in `derivation`; nothing is estimated.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "sources"

from schema import COLUMNS  # noqa: E402 (this folder is on sys.path when run as a script)


def dec_str(d: Decimal) -> str:
    """A Decimal as plain text without exponent or trailing zeros (exact, no rounding)."""
    s = format(d.normalize(), "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def load_json_raw(path: Path) -> dict:
    """Parse JSON keeping every number's original text (no float round-trip)."""
    return json.loads(path.read_text(), parse_float=str, parse_int=str)


def gh(owner_repo: str, commit: str, path: str) -> str:
    return f"https://github.com/{owner_repo}/blob/{commit}/{path}"


# --------------------------------------------------------------------------------------------
# InferenceX experimental token-position sweeps (PR #709), 8xH200, vLLM nightly
# --------------------------------------------------------------------------------------------
IX_REPO = "SemiAnalysisAI/InferenceX"
IX_TP_COMMIT = "5969d0ad2ddbf32b69e31340643e465705868b8e"
IX_TP_DIR = "experimental/token_position_decode_slo"
IX_TP_CLIENT_NOTE = (
    "Client: the folder's benchmark_serving_random.py (a copy of vLLM's benchmark_serving.py whose "
    "random dataset uses fixed lengths: every prompt ISL tokens, every output OSL tokens), run by the "
    "bmk_*_sbatch.sh script with --num-warmups 2xC --num-prompts 10xC --max-concurrency C "
    "--request-rate inf --ignore-eos; a result with failed requests was deleted and re-run. "
    "Hardware from the folder's plot_sla_frontier.py title ('8xH200 ... vLLM'). Folder README: "
    "'experimental WIP code ... not ... part of the official InferenceMAX results'."
)
IX_TP_MODELS = {
    # file prefix -> metadata
    "glm5_fp8_vllm_tp8": dict(
        folder="glm-5", tag="glm5-fp8", model="zai-org/GLM-5-FP8", quant="fp8", tp=8, n=8,
        engine_version="nightly",
        flags=("--tensor-parallel-size 8 --speculative-config.method mtp "
               "--speculative-config.num_speculative_tokens 1 --tool-call-parser glm47 "
               "--reasoning-parser glm45 --enable-auto-tool-choice"),
        serve="glm-5/serve_glm5_sbatch.sh", bmk="glm-5/bmk_glm5_sbatch.sh",
        notes=("Image vllm/vllm-openai:nightly (Feb 2026, unpinned) plus transformers from main. "
               "MTP speculative decoding with 1 draft token: TPOT counts accepted tokens."),
    ),
    "minimax_m25_vllm_tep8": dict(
        folder="minimax-m2.5", tag="minimax-m2.5-tep8", model="MiniMaxAI/MiniMax-M2.5",
        quant="fp8", tp=8, n=8, engine_version="nightly wheel dea63512bb9b",
        flags=("--tensor-parallel-size 8 --enable-expert-parallel --tool-call-parser minimax_m2 "
               "--reasoning-parser minimax_m2_append_think --enable-auto-tool-choice "
               "--trust-remote-code"),
        serve="minimax-m2.5/serve_minimax_tep8_sbatch.sh", bmk="minimax-m2.5/bmk_minimax_sbatch.sh",
        notes=("Serve script installs vLLM commit dea63512bb9bdf7521d591546c52138d9d79e8ce "
               "(wheels.vllm.ai) into vllm/vllm-openai:nightly; it also sets a torch profiler "
               "dir (--profiler-config, profiling not started by the client). TEP8 = TP8 with "
               "expert parallelism. Quant 'fp8': the checkpoint's native weights, as InferenceX's "
               "own minimaxm2.5_fp8 recipes name it."),
    ),
    "minimax_m25_vllm_dep8": dict(
        folder="minimax-m2.5", tag="minimax-m2.5-dep8", model="MiniMaxAI/MiniMax-M2.5",
        quant="fp8", tp=1, n=8, engine_version="nightly",
        flags="",
        serve=None, bmk="minimax-m2.5/bmk_minimax_sbatch.sh",
        notes=("DEP8 per the file tag (data parallel 8 with expert parallelism, one server on 8 "
               "GPUs); the serve script for this variant is not in the repository, so flags and "
               "the vLLM build are not stated. Quant 'fp8' as for the TEP8 curve."),
    ),
    "qwen35_vllm_tp8": dict(
        folder="qwen3.5", tag="qwen3.5-397b-a17b", model="Qwen/Qwen3.5-397B-A17B", quant="bf16",
        tp=8, n=8, engine_version="nightly",
        flags=("--tensor-parallel-size 8 --language-model-only --reasoning-parser qwen3 "
               "--enable-prefix-caching"),
        serve="qwen3.5/serve_qwen35_tp8_sbatch.sh", bmk="qwen3.5/bmk_qwen35_sbatch.sh",
        notes=("Image vllm/vllm-openai:nightly (Feb 2026, unpinned). Prefix caching on; the "
               "client's prompts start at a random vocabulary offset each, so little is shared."),
    ),
}
IX_TP_NAME = re.compile(r"^(?P<prefix>.+)_isl(?P<isl>\d+)_osl(?P<osl>\d+)_conc(?P<conc>\d+)\.json$")

# seconds-valued keys in the vLLM-style result JSON -> (quantity, statistic)
SEC_KEYS = [
    ("median_ttft", "ttft_ms", "median"), ("p99_ttft", "ttft_ms", "p99"),
    ("median_tpot", "tpot_ms", "median"), ("p99_tpot", "tpot_ms", "p99"),
    ("median_e2el", "e2el_ms", "median"), ("p99_e2el", "e2el_ms", "p99"),
]


def base_row(**kw) -> dict:
    row = {c: "" for c in COLUMNS}
    row.update({k: ("" if v is None else str(v)) for k, v in kw.items()})
    return row


def ix_token_position_rows() -> list[dict]:
    rows = []
    root = SRC / "SemiAnalysisAI__InferenceX" / IX_TP_COMMIT / IX_TP_DIR
    for path in sorted(root.glob("*/results/*.json")):
        m = IX_TP_NAME.match(path.name)
        if not m:
            raise SystemExit(f"{path}: unexpected result file name")
        meta = IX_TP_MODELS[m["prefix"]]
        isl, osl, conc = int(m["isl"]), int(m["osl"]), int(m["conc"])
        data = load_json_raw(path)
        if int(data["max_concurrency"]) != conc or int(data["completed"]) != int(data["num_prompts"]):
            raise SystemExit(f"{path}: max_concurrency/completed disagree with the file name")
        rel = path.relative_to(SRC / "SemiAnalysisAI__InferenceX" / IX_TP_COMMIT).as_posix()
        curve = f"ix-h200-vllm-{meta['tag']}-isl{isl}-osl{osl}"
        src_ref = f"{IX_REPO}@{IX_TP_COMMIT[:10]}:{rel} (PR #709)"
        scripts = ", ".join(s for s in (meta["serve"], meta["bmk"]) if s)
        common = dict(
            curve_id=curve, source=gh(IX_REPO, IX_TP_COMMIT, rel), source_ref=src_ref,
            publisher="SemiAnalysis", engine="vllm", engine_version=meta["engine_version"],
            engine_flags=meta["flags"], device="h200",
            device_variant="8xH200 (plot title '8xH200'; Slurm partition h200)",
            n_devices=meta["n"], tp=meta["tp"], model=meta["model"], quant=meta["quant"],
            kv_cache_dtype="not stated", client="custom", dataset="random", input_tokens=isl,
            output_tokens=osl, range_ratio="0", num_prompts=data["num_prompts"],
            warmup=2 * conc, ramp_up="", ignore_eos="true", load_kind="concurrency",
            max_concurrency=conc, request_rate="inf", burstiness=data["burstiness"],
        )
        notes = (f"{meta['notes']} {IX_TP_CLIENT_NOTE} Scripts: {IX_TP_DIR}/{{{scripts}}}. "
                 f"range_ratio 0 = the client's fixed lengths.")
        stem = f"{curve}-c{conc}"
        for key, qty, stat in SEC_KEYS:
            raw = data[key]
            rows.append(base_row(**common, row_id=f"{stem}-{qty}-{stat}", quantity=qty,
                                 statistic=stat, value=dec_str(Decimal(raw) * 1000),
                                 as_printed=f'"{key}": {raw}',
                                 derivation=f"{key} is in seconds: {raw} s x 1000", notes=notes))
        for key, qty in (("output_throughput", "output_tps"), ("request_throughput", "request_tps")):
            raw = data[key]
            rows.append(base_row(**common, row_id=f"{stem}-{qty}-value", quantity=qty,
                                 statistic="value", value=dec_str(Decimal(raw)),
                                 as_printed=f'"{key}": {raw}', derivation="", notes=notes))
        inp, out = data["input_throughput"], data["output_throughput"]
        rows.append(base_row(**common, row_id=f"{stem}-total_tps-value", quantity="total_tps",
                             statistic="value", value=dec_str(Decimal(inp) + Decimal(out)),
                             as_printed=f'"input_throughput": {inp}, "output_throughput": {out}',
                             derivation=f"input_throughput + output_throughput = {inp} + {out}",
                             notes=notes))
    return rows


# --------------------------------------------------------------------------------------------
# together_runner baselines (togethercomputer/InferenceX fork; also PR #1713 upstream)
# --------------------------------------------------------------------------------------------
TR_REPO = "togethercomputer/InferenceX"
TR_UNIFIED_CLIENT = (
    "Client: InferenceX utils/bench_serving/benchmark_serving.py (vLLM-derived) as "
    "together_runner/run_3_test_client.sh runs it: --dataset-name random --random-input-len ISL "
    "--random-output-len OSL --random-range-ratio 0 --max-concurrency C --num-prompts 10xC "
    "--num-warmups 2xC --percentile-metrics ttft,tpot,itl,e2el; --ignore-eos is NOT passed. "
    "This client draws lengths uniformly from [int(L x range_ratio), L], so range_ratio 0 means "
    "U[0, L] per request (mean about L/2), not fixed lengths."
)
TR_NO_EOS = (
    "Output lengths are not printed and the run stops at EOS (median E2E far below OSL x TPOT at "
    "high C): treat as outlier for fitting; the workload cannot be replayed exactly."
)
TR_RECIPE_CLIENT = (
    "Run through together_runner/local/recipes/launch_local.sh (result field source='recipe'): the "
    "official InferenceX single-node recipe in the pinned image, whose run_benchmark_serving "
    "(benchmarks/benchmark_lib.sh) calls utils/bench_serving/benchmark_serving.py with "
    "--dataset-name random --num-prompts 10xC --max-concurrency C --request-rate inf --ignore-eos "
    "--num-warmups 2xC; RANDOM_RANGE_RATIO comes from the sweep config and is not recorded in the "
    "result file. Recipe server flags are not restated in the result."
)
TR_CURVES = [
    dict(
        glob="2a6a04c041af9fd8bac36de567b45ca50cf005b6/together_runner/baselines/b200/vllm/gptoss-fp4/1k1k/untuned/conc*.json",
        curve="ix-together-b200-vllm-gpt-oss-120b-mxfp4-tp4-isl1024-osl1024",
        engine="vllm", device="b200", device_variant="8xB200 node gpu-dp-96sjj-gkwph (Together); server on 4 GPUs",
        model="gpt-oss-120b", quant="mxfp4", kv="fp8",
        flags=("--config vllm_config.yaml {kv-cache-dtype: fp8, compilation-config: "
               "'{\"pass_config\":{\"fuse_allreduce_rms\":true,\"eliminate_noops\":true}}', "
               "no-enable-prefix-caching: true, max-cudagraph-capture-size: 2048, "
               "max-num-batched-tokens: 8192, max-model-len: 2068} --gpu-memory-utilization 0.9 "
               "--tensor-parallel-size 4 --max-num-seqs 512 --trust-remote-code "
               "(env VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1)"),
        client_note=TR_UNIFIED_CLIENT, ignore_eos="false", range_ratio="0", extra=TR_NO_EOS,
        scripts="together_runner/run_2_launch_server.sh, together_runner/run_3_test_client.sh",
        ref_extra="(upstream SemiAnalysisAI/InferenceX PR #1713)",
    ),
    dict(
        glob="2a6a04c041af9fd8bac36de567b45ca50cf005b6/together_runner/baselines/b200/sglang/dsr1-fp4/1k1k/tuned/conc*.json",
        curve="ix-together-b200-sglang-deepseek-r1-nvfp4-tp8-isl1024-osl1024",
        engine="sglang", device="b200", device_variant="8xB200 node gpu-dp-96sjj-gkwph (Together)",
        model="nvidia/DeepSeek-R1-0528-FP4", quant="nvfp4", kv="fp8_e4m3",
        flags=("--tensor-parallel-size=8 --data-parallel-size=1 --cuda-graph-max-bs 256 "
               "--max-running-requests 256 --mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 "
               "--chunked-prefill-size 16384 --ep-size 8 --quantization modelopt_fp4 "
               "--enable-flashinfer-allreduce-fusion --scheduler-recv-interval 30 --enable-symm-mem "
               "--disable-radix-cache --attention-backend trtllm_mla --moe-runner-backend "
               "flashinfer_trtllm --stream-interval 10"),
        client_note=TR_UNIFIED_CLIENT, ignore_eos="false", range_ratio="0", extra=TR_NO_EOS + (
            " --stream-interval 10 makes the server stream every 10 tokens, so ITL is per chunk."),
        scripts="together_runner/run_2_launch_server.sh, together_runner/run_3_test_client.sh",
        ref_extra="(upstream SemiAnalysisAI/InferenceX PR #1713)",
    ),
    dict(
        glob="*/together_runner/baselines/mi350x/vllm/gptoss-fp4/1k1k/untuned/tp1_conc*.json",
        curve="ix-together-mi350x-vllm-gpt-oss-120b-mxfp4-tp1-isl1024-osl1024",
        engine="vllm", device="mi350x", device_variant="MI350X node tg-ai-node4 (Together); 1 GPU",
        model="gpt-oss-120b", quant="mxfp4", kv="not stated", flags="",
        client_note=TR_RECIPE_CLIENT, ignore_eos="true", range_ratio="", extra="",
        scripts="together_runner/local/recipes/launch_local.sh", ref_extra="",
    ),
    dict(
        glob="*/together_runner/baselines/mi350x/vllm/gptoss-fp4/1k1k/untuned/tp8_conc*.json",
        curve="ix-together-mi350x-vllm-gpt-oss-120b-mxfp4-tp8-isl1024-osl1024",
        engine="vllm", device="mi350x", device_variant="MI350X node tg-ai-node4 (Together); 8 GPUs",
        model="gpt-oss-120b", quant="mxfp4", kv="not stated", flags="",
        client_note=TR_RECIPE_CLIENT, ignore_eos="true", range_ratio="", extra="",
        scripts="together_runner/local/recipes/launch_local.sh", ref_extra="",
    ),
]
NEW_DEVICE_NOTE = {
    "b200": "Device id b200: no shipped infersim profile yet (another helper adds it).",
    "mi350x": "Device id mi350x: no shipped infersim profile yet.",
}
TR_MS_KEYS = [
    ("median_ttft_ms", "ttft_ms", "median"), ("p99_ttft_ms", "ttft_ms", "p99"),
    ("median_tpot_ms", "tpot_ms", "median"), ("p99_tpot_ms", "tpot_ms", "p99"),
    ("median_itl_ms", "itl_ms", "median"),
    ("median_e2el_ms", "e2el_ms", "median"), ("p99_e2el_ms", "e2el_ms", "p99"),
]
TR_TPUT_KEYS = [
    ("output_token_throughput", "output_tps"), ("total_token_throughput", "total_tps"),
    ("request_throughput", "request_tps"),
]


def together_rows() -> list[dict]:
    rows = []
    root = SRC / "togethercomputer__InferenceX"
    for spec in TR_CURVES:
        files = sorted(root.glob(spec["glob"]), key=lambda p: int(re.search(r"conc(\d+)", p.name)[1]))
        if len(files) < 3:
            raise SystemExit(f"{spec['curve']}: fewer than 3 load points under {root}")
        for path in files:
            commit, rel = path.relative_to(root).parts[0], "/".join(path.relative_to(root).parts[1:])
            d = load_json_raw(path)
            conc, tp, isl, osl = int(d["conc"]), int(d["tp"]), int(d["isl"]), int(d["osl"])
            image = d["image"]
            version = image.rsplit(":", 1)[1].lstrip("v") if re.search(r":v\d", image) else image.rsplit(":", 1)[1]
            notes = " ".join(x for x in (
                f"Image {image}; host {d.get('host', '')}; recorded {d.get('ts', '')}; "
                f"tuning={d.get('tuning', '')} (autotune flag of the harness).",
                spec["client_note"], spec["extra"], NEW_DEVICE_NOTE.get(spec["device"], ""),
                f"Scripts: {spec['scripts']} at the same commit.") if x)
            common = dict(
                curve_id=spec["curve"], source=gh(TR_REPO, commit, rel),
                source_ref=f"{TR_REPO}@{commit[:10]}:{rel} {spec['ref_extra']}".strip(),
                publisher="Together AI (InferenceX together_runner)", engine=spec["engine"],
                engine_version=version, engine_flags=spec["flags"], device=spec["device"],
                device_variant=spec["device_variant"], n_devices=tp, tp=tp, model=spec["model"],
                quant=spec["quant"], kv_cache_dtype=spec["kv"], client="custom", dataset="random",
                input_tokens=isl, output_tokens=osl, range_ratio=spec["range_ratio"],
                num_prompts=10 * conc, warmup=2 * conc, ramp_up="", ignore_eos=spec["ignore_eos"],
                load_kind="concurrency", max_concurrency=conc, request_rate="inf", burstiness="1.0",
            )
            m = d["metrics"]
            stem = f"{spec['curve']}-c{conc}"
            row_notes = notes
            if "successful_requests" in m:
                row_notes += f" successful_requests={m['successful_requests']} of {10 * conc} sent."
            for key, qty, stat in TR_MS_KEYS:
                if key in m:
                    rows.append(base_row(**common, row_id=f"{stem}-{qty}-{stat}", quantity=qty,
                                         statistic=stat, value=dec_str(Decimal(m[key])),
                                         as_printed=f'"{key}": {m[key]}', notes=row_notes))
            for key, qty in TR_TPUT_KEYS:
                if key in m:
                    rows.append(base_row(**common, row_id=f"{stem}-{qty}-value", quantity=qty,
                                         statistic="value", value=dec_str(Decimal(m[key])),
                                         as_printed=f'"{key}": {m[key]}', notes=row_notes))
    return rows


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


# --------------------------------------------------------------------------------------------
# InferenceX published sweeps, as quoted in the baseline tables of InferenceX image-bump PRs
# --------------------------------------------------------------------------------------------
# Each "[Klaud Cold] Update ... image" PR description freezes the family's published points from
# the InferenceX API (inferencex.semianalysis.com, "Mean latency") in a table: total and output
# tokens/s per GPU, mean TTFT, mean TPOT. The sources/ files are verbatim excerpts of those PR
# descriptions. Per-GPU throughputs are InferenceX's own normalisation (utils/process_result.py:
# total_token_throughput / (tp x pp x pcp) for a single-node run; pp = pcp = 1 here), so the
# server's throughput is the printed figure x TP.
IX_PR_HARNESS = (
    "Harness: InferenceX's official single-node sweep (benchmarks/benchmark_lib.sh "
    "run_benchmark_serving -> utils/bench_serving/benchmark_serving.py): --dataset-name random, "
    "--random-range-ratio 0.8 (RANDOM_RANGE_RATIO default of .github/workflows/benchmark-tmpl.yml "
    "since Jan 2026; this client draws lengths from [int(0.8 L), L]), --request-rate inf "
    "--max-concurrency C --ignore-eos --num-warmups 2xC; the recipes pass --num-prompts 10xC "
    "(not restated in the table, so num_prompts is left empty). Server flags: the family's recipe "
    "script under benchmarks/single_node/ at the baseline date (not restated). Latencies are means "
    "(the table is labelled 'Mean latency')."
)
IX_PRS = {
    3173: dict(family="dsr1-fp8-h200-sglang", engine="sglang", version="0.5.12",
               image="lmsysorg/sglang:v0.5.12-cu130", date="2026-05-17", device="h200",
               model="deepseek-ai/DeepSeek-R1-0528", quant="fp8", extra=""),
    3183: dict(family="dsr1-fp4-b300-sglang", engine="sglang", version="0.5.12",
               image="lmsysorg/sglang:v0.5.12-cu130", date="2026-05-22", device="b300",
               model="nvidia/DeepSeek-R1-0528-FP4-V2", quant="nvfp4",
               extra="The PR description shows 12 of the 29 published points (c1-c32)."),
    3175: dict(family="dsr1-fp8-b300-sglang", engine="sglang", version="0.5.12",
               image="lmsysorg/sglang:v0.5.12-cu130", date="2026-05-22", device="b300",
               model="deepseek-ai/DeepSeek-R1-0528", quant="fp8",
               extra="The PR description shows 12 of the 16 published points."),
    3311: dict(family="qwen3.5-fp4-mi355x-sglang", engine="sglang", version="0.5.19",
               image="lmsysorg/sglang-rocm:v0.5.19-rocm720-mi35x-20260913", date="2026-09-14",
               device="mi355x", model="amd/Qwen3.5-397B-A17B-MXFP4", quant="mxfp4",
               extra="The excerpt kept here ends after the c128 TP2 row."),
    3285: dict(family="qwen3.5-fp4-mi355x-sglang-mtp", engine="sglang", version="0.5.19",
               image="lmsysorg/sglang-rocm:v0.5.19-rocm720-mi35x-20260913", date="2026-09-14",
               device="mi355x", model="amd/Qwen3.5-397B-A17B-MXFP4", quant="mxfp4",
               extra="MTP speculative decoding (family '-mtp'): TPOT counts accepted tokens. The "
                     "excerpt kept here ends inside the c128 TP2 row, which is left out."),
    3107: dict(family="qwen3.5-fp8-mi355x-sglang-mtp", engine="sglang", version="0.5.18",
               image="lmsysorg/sglang-rocm:v0.5.18-rocm720-mi35x-20260828", date="2026-08-31",
               device="mi355x", model="Qwen/Qwen3.5-397B-A17B-FP8", quant="fp8",
               extra="MTP speculative decoding (family '-mtp'): TPOT counts accepted tokens."),
    3318: dict(family="dsr1-fp8-mi325x-sglang", engine="sglang", version="0.5.19",
               image="lmsysorg/sglang:v0.5.19-rocm700-mi30x", date="2026-09-10", device="mi325x",
               model="deepseek-ai/DeepSeek-R1-0528", quant="fp8", extra=""),
    3317: dict(family="dsr1-fp8-b200-trt", engine="trtllm", version="1.3.0rc14",
               image="nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc14", date="2026-05-18",
               device="b200", model="deepseek-ai/DeepSeek-R1-0528", quant="fp8",
               extra="The family's config has two TP8 EP1 search-space entries (conc 4-8 and "
                     "64-128), both listed here as one curve; the excerpt kept here ends inside "
                     "the 8k/1k rows. Client backend: InferenceX's client against trtllm-serve."),
}
NEW_DEVICE_NOTE.update({
    "b300": "Device id b300: no shipped infersim profile yet.",
    "mi325x": "Device id mi325x: no shipped infersim profile yet (another helper adds it).",
    "mi355x": "Device id mi355x: no shipped infersim profile yet (another helper adds it).",
})
SEQ = {"1k": 1024, "8k": 8192}
POINT_ROW = re.compile(r"^\| (?P<isl>\d+k)/(?P<osl>\d+k) c(?P<c>\d+) TP(?P<tp>\d+) EP(?P<ep>\d+) "
                       r"(?P<hash>[0-9a-f]{6}) \| (?P<cells>.*) \|$")
CONC_ROW = re.compile(r"^\| (?P<c>\d+) \| (?P<cells>.*) \|$")
CONC_HEADER = re.compile(r"^(?P<isl>\d+k)/(?P<osl>\d+k) · TP(?P<tp>\d+)/EP(?P<ep>\d+) · Mean latency")


def ix_pr_rows() -> list[dict]:
    rows = []
    for pr, meta in sorted(IX_PRS.items()):
        path = SRC / "SemiAnalysisAI__InferenceX" / "pulls" / f"{pr}.md"
        lines = path.read_text().splitlines()
        header = next((CONC_HEADER.match(l) for l in lines if CONC_HEADER.match(l)), None)
        points = []  # (isl, osl, tp, ep, c, hash, cells, raw line)
        for line in lines:
            if (m := POINT_ROW.match(line)):
                points.append((m["isl"], m["osl"], int(m["tp"]), int(m["ep"]), int(m["c"]),
                               m["hash"], m["cells"], line))
            elif header and (m := CONC_ROW.match(line)):
                points.append((header["isl"], header["osl"], int(header["tp"]), int(header["ep"]),
                               int(m["c"]), "", m["cells"], line))
        curves = {}
        for p in points:
            cells = [c.strip() for c in p[6].split("|")]
            if len(cells) != 4 or "N/A" in cells:
                continue  # unavailable point (printed N/A)
            curves.setdefault(p[:4], []).append((p, cells))
        for (isl_s, osl_s, tp, ep), pts in curves.items():
            if len({p[4] for p, _ in pts}) < 3:
                continue
            isl, osl = SEQ[isl_s], SEQ[osl_s]
            curve = (f"ix-api-{meta['device']}-{meta['engine']}-{meta['family']}-tp{tp}ep{ep}-"
                     f"isl{isl}-osl{osl}")
            notes_base = " ".join(x for x in (
                f"InferenceX published sweep of family {meta['family']} on {meta['date']} "
                f"(image {meta['image']}), quoted as the frozen baseline of PR #{pr}; EP{ep}.",
                meta["extra"], IX_PR_HARNESS, NEW_DEVICE_NOTE.get(meta["device"], "")) if x)
            for p, cells in pts:
                c, point_hash, raw_line = p[4], p[5], p[7]
                common = dict(
                    curve_id=curve, source=f"https://github.com/{IX_REPO}/pull/{pr}",
                    source_ref=f"{IX_REPO} PR #{pr} description, baseline table"
                               + (f" (point {point_hash})" if point_hash else f" (row c={c})"),
                    publisher="SemiAnalysis", engine=meta["engine"],
                    engine_version=meta["version"], engine_flags="", device=meta["device"],
                    device_variant=f"InferenceX runner '{meta['device']}' ({meta['family']})",
                    n_devices=tp, tp=tp, model=meta["model"], quant=meta["quant"],
                    kv_cache_dtype="not stated", client="custom", dataset="random",
                    input_tokens=isl, output_tokens=osl, range_ratio="0.8", num_prompts="",
                    warmup=2 * c, ramp_up="", ignore_eos="true", load_kind="concurrency",
                    max_concurrency=c, request_rate="inf", burstiness="1.0",
                )
                notes = f"{notes_base} Table row: {raw_line}"
                stem = f"{curve}-c{c}"
                total, out, ttft, tpot = (x.replace(",", "") for x in cells)
                for qty, raw, label in (("total_tps", total, "Total tok/s/GPU"),
                                        ("output_tps", out, "Output tok/s/GPU")):
                    rows.append(base_row(**common, row_id=f"{stem}-{qty}-value", quantity=qty,
                                         statistic="value", value=dec_str(Decimal(raw) * tp),
                                         as_printed=f"{label} {cells[0 if qty == 'total_tps' else 1]}",
                                         derivation=f"{raw} tok/s/GPU x TP {tp} GPUs", notes=notes))
                for qty, raw, label, cell in (("ttft_ms", ttft, "TTFT ms", cells[2]),
                                              ("tpot_ms", tpot, "TPOT ms", cells[3])):
                    rows.append(base_row(**common, row_id=f"{stem}-{qty}-mean", quantity=qty,
                                         statistic="mean", value=dec_str(Decimal(raw)),
                                         as_printed=f"{label} {cell}",
                                         derivation="thousands separator dropped" if "," in cell else "",
                                         notes=notes))
    return rows


OUTPUTS = {
    "inferencex.csv": lambda: ix_token_position_rows() + together_rows(),
    "inferencex_published.csv": ix_pr_rows,
    "gpustack.csv": gpustack_rows,
}


def render(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if a committed CSV differs from the sources")
    args = ap.parse_args(argv)
    bad = 0
    for name, make in OUTPUTS.items():
        rows = make()
        ids = [r["row_id"] for r in rows]
        if len(ids) != len(set(ids)):
            dup = sorted({i for i in ids if ids.count(i) > 1})[:3]
            raise SystemExit(f"{name}: duplicate row_id {dup}")
        text = render(rows)
        out = HERE / name
        if args.check:
            if not out.exists() or out.read_text() != text:
                print(f"{out}: out of date (run {Path(__file__).name})", file=sys.stderr)
                bad = 1
        else:
            out.write_text(text)
            print(f"{out.relative_to(HERE.parent.parent)}: {len(rows)} rows, "
                  f"{len({r['curve_id'] for r in rows})} curves")
    return bad


if __name__ == "__main__":
    sys.exit(main())
