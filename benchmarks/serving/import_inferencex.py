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

This file reads the InferenceX result JSONs (token-position sweeps, together_runner baselines) and
writes the CSVs; import_inferencex_prs.py reads the image-bump PR tables, import_inferencex_gpustack.py
the GPUStack docs, import_inferencex_common.py holds what they share.
"""
from __future__ import annotations

import argparse
import re
import sys
from decimal import Decimal
from pathlib import Path

from import_inferencex_common import (  # noqa: E402 (this folder is on sys.path when run as a script)
    HERE, IX_REPO, SRC, base_row, dec_str, gh, load_json_raw)
from import_inferencex_gpustack import gpustack_rows  # noqa: E402
from import_inferencex_prs import ix_pr_rows  # noqa: E402
from corpus_b_common import csv_text  # noqa: E402


# --------------------------------------------------------------------------------------------
# InferenceX experimental token-position sweeps (PR #709), 8xH200, vLLM nightly
# --------------------------------------------------------------------------------------------
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
               "own minimaxm2.5_fp8 recipes name it. "
               "For the same model elsewhere in the corpus: the SGLang cookbook's MiniMax-M2.5 8xH100 TP8 curve "
               "(sglang-cookbook-minimax-m2.5-h100-sxm-tp8-1000-1000) printed a median TTFT of 80, 82 and 95 ms at "
               "C 1, 16 and 100 with 1000-token prompts, and its 8xB200 8000-token curve 127, 149 and 188 ms at C 1, "
               "16 and 64."),
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
               "client's prompts start at a random vocabulary offset each, so little is shared. Model: hybrid, "
               "45 Gated DeltaNet + 15 gated-attention layers, 512 experts (10 routed + 1 shared), 17.3B active "
               "(catalog qwen3.5-397b-a17b). For the same model elsewhere in the corpus: InferenceX's official "
               "MI355X SGLang Qwen3.5 MXFP4 TP4 sweep (ix-api-mi355x-sglang-qwen3.5-fp4-mi355x-sglang-tp4ep1-isl8192-"
               "osl1024) printed a mean TTFT of 274 ms at C 4 with 8192-token prompts."),
    ),
}
IX_TP_NAME = re.compile(r"^(?P<prefix>.+)_isl(?P<isl>\d+)_osl(?P<osl>\d+)_conc(?P<conc>\d+)\.json$")
#: What the folder's scripts show about how these runs were taken (issue 38: the vLLM curves here are the
#: family's worst held-out TTFT). Read from the same commit: bmk_*_sbatch.sh is its own Slurm job
#: (`--gres=gpu:0`) that reads the server's `http://${HOSTNAME}:8000` from logs/server_info.txt, which the
#: serve_*_sbatch.sh job writes; benchmark_serving_random.py opens `aiohttp.ClientSession` inside
#: async_request_openai_completions, i.e. one new session (and connection) per request; its warm-up sends
#: `test_input = input_requests[0]` num_warmups times; its prompts are consecutive token ids from a random
#: offset, decoded to text and re-encoded until they hold ISL tokens; the serve scripts use the unpinned
#: vllm/vllm-openai:nightly image (MiniMax TEP8: plus a vLLM wheel of commit dea63512bb9b). Prompt reuse across the
#: sweep (session 45 audit): benchmark_serving_random.py main() calls np.random.seed(args.seed), --seed default 0,
#: then sample_random_requests draws `offsets = np.random.randint(0, vocab_size, size=num_prompts)` before any
#: padding draw, so prompt i's consecutive-id body is the same in every run of one ISL; vLLM V1 turns prefix
#: caching on by default (vllm-project/vllm tests/v1/engine/test_engine_args.py test_prefix_caching_from_cli: "V1 turns
#: on prefix caching by default."), the MiniMax serve script does not turn it off and the Qwen3.5 one turns it on.
IX_TP_HARNESS_NOTE = (
    "How the runs were taken (the folder's scripts): the client is its own Slurm job (--gres=gpu:0) sending to "
    "the server's http://<hostname>:8000 from logs/server_info.txt, with a new aiohttp session (connection) per "
    "request (async_request_openai_completions), to the /v1/completions endpoint, streaming; the warm-up "
    "repeats the first benchmark prompt 2xC times. For scale on the same GPU: InferenceX's official 8xH200 "
    "SGLang DeepSeek-R1 FP8 TP8 sweep (37.5B active per the catalog's deepseek-r1; corpus curve "
    "ix-api-h200-sglang-dsr1-fp8-h200-sglang-tp8ep1-isl8192-osl1024, PR #3173) printed a mean TTFT of 373 ms at C 4 "
    "with 8192-token prompts (range ratio 0.8). Prompts repeat across the sweep: the client seeds numpy with "
    "--seed 0 (its default) in every run and builds prompt i from consecutive token ids starting at offsets[i] + i, "
    "offsets drawn first, so a run's first prompts are the same texts as those of every earlier run of the same "
    "ISL (apart from any random tokens padding a re-encoded prompt to ISL) and start like the shorter ISLs' "
    "prompts; with the server's prefix cache on (Qwen3.5: --enable-prefix-caching; MiniMax-M2.5: vLLM V1's "
    "default, no --no-enable-prefix-caching) blocks left by earlier runs can be reused, which lowers the measured "
    "TTFT of those requests; a replay draws fresh prompts."
)
#: a closed loop of fixed lengths on one server cannot get faster to its first token when its concurrency
#: rises: more clients only add queueing. Output throughput falling as C rises is also listed (past the peak it
#: can be KV-cache preemption, so it is reported, not judged). The margins are noise allowances fixed by hand
#: for the note, not fitted; nothing is excluded or weighted by them.
TTFT_DROP = 0.20  # the median TTFT at the next higher C lower by more than 20%
TPUT_DROP = 0.05  # output throughput at the next higher C lower by more than 5%


def intake_at_peak(points: dict[int, dict], isl: int) -> str:
    """Prompt tokens the server took in per second (request_throughput x ISL) at the curve's highest C, and
    the median TPOT there beside the lowest C's. vLLM V1 schedules the running requests' decode tokens and
    the waiting requests' prefill chunks in the same steps (vllm/v1/core/sched/scheduler.py: RUNNING first,
    then WAITING, within max_num_batched_tokens), so an engine whose prefill is the bottleneck shows it in
    TPOT; a long TTFT beside an unloaded TPOT means the requests waited before the engine."""
    lo, hi = min(points), max(points)
    rate = float(points[hi]["request_throughput"]) * isl
    return (f"At C {hi} the server took in {rate:,.0f} prompt tokens/s (request_throughput x ISL) with a median "
            f"TPOT of {float(points[hi]['median_tpot']) * 1000:.1f} ms ({float(points[lo]['median_tpot']) * 1000:.1f} ms "
            f"at C {lo}) and a median TTFT of {float(points[hi]['median_ttft']) * 1000:,.0f} ms.")


def closed_loop_anomalies(points: dict[int, dict]) -> list[str]:
    """The places where a fixed-length closed-loop sweep (C -> its result JSON) gets faster to the first token,
    or slower in output throughput, as C rises (TTFT_DROP, TPUT_DROP), as short readable phrases."""
    out = []
    cs = sorted(points)
    for a, b in zip(cs, cs[1:]):
        ta, tb = float(points[a]["median_ttft"]), float(points[b]["median_ttft"])
        if tb < (1 - TTFT_DROP) * ta:
            out.append(f"median TTFT {ta * 1000:.0f} ms at C {a} but {tb * 1000:.0f} ms at C {b}")
        oa, ob = float(points[a]["output_throughput"]), float(points[b]["output_throughput"])
        if ob < (1 - TPUT_DROP) * oa:
            out.append(f"output {oa:.0f} tok/s at C {a} but {ob:.0f} tok/s at C {b}")
    return out

# seconds-valued keys in the vLLM-style result JSON -> (quantity, statistic)
SEC_KEYS = [
    ("median_ttft", "ttft_ms", "median"), ("p99_ttft", "ttft_ms", "p99"),
    ("median_tpot", "tpot_ms", "median"), ("p99_tpot", "tpot_ms", "p99"),
    ("median_e2el", "e2el_ms", "median"), ("p99_e2el", "e2el_ms", "p99"),
]




def ix_token_position_rows() -> list[dict]:
    rows = []
    root = SRC / "SemiAnalysisAI__InferenceX" / IX_TP_COMMIT / IX_TP_DIR
    paths = sorted(root.glob("*/results/*.json"))
    by_curve: dict[tuple, dict[int, dict]] = {}
    for path in paths:
        m = IX_TP_NAME.match(path.name)
        if m:
            by_curve.setdefault((m["prefix"], m["isl"], m["osl"]), {})[int(m["conc"])] = load_json_raw(path)
    for path in paths:
        m = IX_TP_NAME.match(path.name)
        if not m:
            raise SystemExit(f"{path}: unexpected result file name")
        meta = IX_TP_MODELS[m["prefix"]]
        isl, osl, conc = int(m["isl"]), int(m["osl"]), int(m["conc"])
        data = load_json_raw(path)
        anomalies = closed_loop_anomalies(by_curve[(m["prefix"], m["isl"], m["osl"])])
        intake = intake_at_peak(by_curve[(m["prefix"], m["isl"], m["osl"])], isl)
        if int(data["max_concurrency"]) != conc or int(data["completed"]) != int(data["num_prompts"]):
            raise SystemExit(f"{path}: max_concurrency/completed disagree with the file name")
        n_req = int(data["num_prompts"])
        if int(data["total_input_tokens"]) != n_req * isl or int(data["total_output_tokens"]) != n_req * osl:
            raise SystemExit(f"{path}: total_input_tokens/total_output_tokens are not num_prompts x ISL/OSL "
                             "(the fixed lengths range_ratio 1 records)")
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
            output_tokens=osl, range_ratio="1", num_prompts=data["num_prompts"],
            warmup=2 * conc, ramp_up="", ignore_eos="true", load_kind="concurrency",
            max_concurrency=conc, request_rate="inf", burstiness=data["burstiness"],
        )
        notes = (f"{meta['notes']} {IX_TP_CLIENT_NOTE} Scripts: {IX_TP_DIR}/{{{scripts}}}. "
                 f"range_ratio 1 = the client's fixed lengths: it has no range option, and the result file's "
                 f"total_input_tokens {data['total_input_tokens']} and total_output_tokens "
                 f"{data['total_output_tokens']} are {data['num_prompts']} x {isl} and x {osl}; in the "
                 f"corpus's reading of client=custom, randint(int(L x r), L), fixed lengths are r = 1 "
                 f"(r = 0 would be U[0, L], half the tokens). {IX_TP_HARNESS_NOTE} {intake}")
        if anomalies:
            notes += (" Load order broken (this curve's result files): " + "; ".join(anomalies) + ". With fixed "
                      "lengths a higher C only adds queueing, so a shorter median TTFT at a higher C is not one "
                      "steady server state; a fall in output throughput past the peak can also be KV-cache "
                      "preemption.")
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
    "--num-warmups 2xC --random-range-ratio $RANDOM_RANGE_RATIO. range_ratio 0.8: the driver at the "
    "same commit, together_runner/local/recipes/sweep.py run_one, sets RANDOM_RANGE_RATIO '0.8' for "
    "every entry (the result file does not restate it); this client draws each input and output "
    "length from randint(int(0.8 L), L) = 819-1024 (mean 921.5)."
)
#: The MI350X runs' server: together_runner/local/recipes/README.md (same commit) says the MI350X sweep runs the
#: mi355x recipes unmodified (`sweep.py --recipe-runner mi355x`, "same gfx950/CDNA4 silicon"), i.e.
#: benchmarks/single_node/fixed_seq_len/gptoss_fp4_mi355x.sh, and MAX_MODEL_LEN is isl + osl + 256
#: (utils/matrix_logic/generate_sweep_configs.py). That recipe's text is read from the fork's newest readable
#: snapshot (togethercomputer/InferenceX@178b0ae, July 2026); upstream's copy is byte-identical up to its
#: move to deprecated/ in SemiAnalysisAI/InferenceX PR #2101 (only the benchmark_lib.sh path changed), and
#: upstream's amd-master.yaml gptoss-fp4-mi355x-vllm entry names the same image (vllm-openai-rocm:v0.22.0)
#: and the same TP1 4-128 / TP4 4-8 / TP8 4-16 search space as these result files.
TR_MI355X_RECIPE_FLAGS = (
    "--attention-backend ROCM_AITER_UNIFIED_ATTN -cc.pass_config.fuse_rope_kvcache=True "
    "-cc.use_inductor_graph_partition=True --tensor-parallel-size={tp} --gpu-memory-utilization 0.95 "
    "--max-model-len 2304 --block-size=64 --no-enable-prefix-caching (env VLLM_ROCM_USE_AITER=1 "
    "VLLM_ROCM_USE_AITER_TRITON_ROPE=1 VLLM_ROCM_QUICK_REDUCE_QUANTIZATION=INT4 AMDGCN_USE_BUFFER_OPS=0)"
)
TR_MI355X_RECIPE_NOTE = (
    "Server flags: the recipe benchmarks/single_node/fixed_seq_len/gptoss_fp4_mi355x.sh (the MI350X sweep "
    "runs the mi355x recipes unmodified, together_runner/local/recipes/README.md), text as of the fork's "
    "178b0ae and identical in upstream until its deprecation (PR #2101); --max-model-len 2304 = isl + osl + "
    "256 (utils/matrix_logic/generate_sweep_configs.py). No --kv-cache-dtype (vLLM's auto: the model dtype)."
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
        model="gpt-oss-120b", quant="mxfp4", kv="not stated", flags=TR_MI355X_RECIPE_FLAGS,
        client_note=TR_RECIPE_CLIENT, ignore_eos="true", range_ratio="0.8", extra=TR_MI355X_RECIPE_NOTE,
        scripts="together_runner/local/recipes/launch_local.sh", ref_extra="",
    ),
    dict(
        glob="*/together_runner/baselines/mi350x/vllm/gptoss-fp4/1k1k/untuned/tp8_conc*.json",
        curve="ix-together-mi350x-vllm-gpt-oss-120b-mxfp4-tp8-isl1024-osl1024",
        engine="vllm", device="mi350x", device_variant="MI350X node tg-ai-node4 (Together); 8 GPUs",
        model="gpt-oss-120b", quant="mxfp4", kv="not stated", flags=TR_MI355X_RECIPE_FLAGS,
        client_note=TR_RECIPE_CLIENT, ignore_eos="true", range_ratio="0.8", extra=TR_MI355X_RECIPE_NOTE,
        scripts="together_runner/local/recipes/launch_local.sh", ref_extra="",
    ),
]
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


def median_output_tokens(m: dict) -> float:
    """The output length of the median request as its own figures give it: (median E2E - median TTFT) / median
    TPOT + 1 (TPOT = (E2E - TTFT) / (output - 1) per request, benchmark_serving.py calculate_metrics; medians of
    different requests, so an estimate of the typical length, not of the mean)."""
    return (float(m["median_e2el_ms"]) - float(m["median_ttft_ms"])) / float(m["median_tpot_ms"]) + 1


def check_range_ratio(m: dict, osl: int, ratio: str, where: Path) -> str:
    """The note that the file's own figures fit `ratio`'s output lengths randint(int(ratio x OSL), OSL) of an
    --ignore-eos run; a one-line error naming the file when the median request's length falls outside them."""
    n, lo = median_output_tokens(m), int(float(ratio) * osl)
    if not lo <= n <= osl:
        raise SystemExit(f"{where}: median_e2el_ms/median_ttft_ms/median_tpot_ms give a median output of "
                         f"{n:.0f} tokens, outside range_ratio {ratio}'s {lo}-{osl}")
    return (f"Lengths check: (median_e2el_ms - median_ttft_ms) / median_tpot_ms + 1 = {n:.1f} output tokens, "
            f"inside range_ratio {ratio}'s {lo}-{osl} (range_ratio 0 would give a typical {osl // 2}).")


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
                spec["client_note"], spec["extra"],
                f"Scripts: {spec['scripts']} at the same commit.") if x)
            common = dict(
                curve_id=spec["curve"], source=gh(TR_REPO, commit, rel),
                source_ref=f"{TR_REPO}@{commit[:10]}:{rel} {spec['ref_extra']}".strip(),
                publisher="Together AI (InferenceX together_runner)", engine=spec["engine"],
                engine_version=version, engine_flags=spec["flags"].replace("{tp}", str(tp)), device=spec["device"],
                device_variant=spec["device_variant"], n_devices=tp, tp=tp, model=spec["model"],
                quant=spec["quant"], kv_cache_dtype=spec["kv"], client="custom", dataset="random",
                input_tokens=isl, output_tokens=osl, range_ratio=spec["range_ratio"],
                num_prompts=10 * conc, warmup=2 * conc, ramp_up="", ignore_eos=spec["ignore_eos"],
                load_kind="concurrency", max_concurrency=conc, request_rate="inf", burstiness="1.0",
            )
            m = d["metrics"]
            stem = f"{spec['curve']}-c{conc}"
            row_notes = notes
            if spec["range_ratio"] not in ("", "0") and spec["ignore_eos"] == "true":
                row_notes += " " + check_range_ratio(m, osl, spec["range_ratio"], path)
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


OUTPUTS = {
    "inferencex.csv": lambda: ix_token_position_rows() + together_rows(),
    "inferencex_published.csv": ix_pr_rows,
    "gpustack.csv": gpustack_rows,
}


def render(rows: list[dict], name: str) -> str:
    """The CSV text of `rows` (corpus_b_common.csv_text: schema column order, a missing column or a repeated
    row_id is an error naming `name`)."""
    return csv_text(rows, name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if a committed CSV differs from the sources")
    args = ap.parse_args(argv)
    bad = 0
    for name, make in OUTPUTS.items():
        rows = make()
        try:
            text = render(rows, name)
        except ValueError as e:
            raise SystemExit(str(e)) from None
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
