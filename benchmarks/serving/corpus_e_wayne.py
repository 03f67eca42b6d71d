"""corpus_e.csv rows from waynehacking8/trtllm-triton-serving (GitHub user waynehacking8, May-June 2026): a
TensorRT-LLM (trtllm-serve 0.20, PyTorch backend with CUDA graphs and compiled engine) vs vLLM study on a 4x H100
80GB NVLink box, plus vLLM 0.18.0 on one RTX PRO 6000 Blackwell Max-Q. Used by build_corpus_e.py; the result JSON
files are vendored verbatim under sources/waynehacking8__trtllm-triton-serving/<commit>/results/.

The client is the repository's own bench/bench.py (an asyncio closed loop, `--concurrency C --total 8 x C` from
bench/sweep.sh): every request sends the same fixed prompt "Explain tensor parallelism for LLM inference in three
sentences." to /v1/completions (no chat template) with max_tokens = min_tokens = 256, ignore_eos, stream, and
temperature 0. It writes `throughput_tok_s` (streamed chunks / wall time; out_tokens_mean 256.0 shows one chunk per
token), `ttft_p50_s` / `ttft_p99_s` (seconds, converted to ms in `derivation`) and `itl_p50_ms` / `itl_p99_ms` /
`itl_mean_ms`, where a request's "itl" is (last chunk - first chunk) / (chunks - 1), i.e. its time per output
token: recorded as tpot_ms. Percentiles are `sorted(xs)[int(q x (n - 1))]` (no interpolation).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = "waynehacking8/trtllm-triton-serving"
COMMIT = "208b7ed7772e6b5af45c70f3509cf553f5625ed2"
SRC = HERE / "sources" / "waynehacking8__trtllm-triton-serving" / COMMIT
URL = "https://github.com/%s/blob/%s/%s"
PUBLISHER = "waynehacking8 (GitHub user; trtllm-triton-serving study)"
PROMPT = "Explain tensor parallelism for LLM inference in three sentences."

CLIENT_NOTE = (
    "Client: the repository's bench/bench.py via bench/sweep.sh (closed loop: an asyncio semaphore of C, 8 x C "
    f"requests, no warm-up run): every request is the same fixed prompt '{PROMPT}' sent to /v1/completions without "
    "a chat template (its token count is not recorded), max_tokens = min_tokens = 256 with ignore_eos, streamed, "
    "temperature 0. tpot_ms rows are the file's itl_* fields, each request's (last chunk - first chunk) / "
    "(chunks - 1); percentiles are sorted(x)[int(q (n - 1))] over the 8 x C requests.")
#: the prompt's token count as the repository states it for Llama-3.1-8B: README.md's waterfall table, row W2
#: "input length 128 -> 12 (this repo's real prompt)", whose trtllm-bench dataset (results/waterfall/W2_isl12.txt,
#: ds_12_256.jsonl) has 12 input / 256 output tokens; stated for no other tokenizer
LLAMA_INPUT = ("Input length 12 tokens: the repository's README states it for Llama-3.1-8B (waterfall row W2, "
               "'input length 128 -> 12 (this repo's real prompt)'; results/waterfall/W2_isl12.txt: 12 input "
               "tokens); whether the server prepends a BOS token is not stated.")
OTHER_INPUT = ("The prompt's token count for this model's tokenizer is not stated (the README gives 12 for "
               "Llama-3.1-8B only), so input_tokens is empty and the curve is not replayed.")
H100 = "NVIDIA H100 80GB (4x H100 NVLink box; GPUs pinned per run)"
PRO6000 = ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition (300 W power limit, 97887 MiB; the rtx-pro-6000 "
           "profile is the 96 GB Blackwell board), driver 580.159.03")
TRT_IMAGE = "nvcr.io/nvidia/tritonserver:25.06-trtllm-python-py3 (TensorRT-LLM 0.20)"
TRT_FLAGS = ("trtllm-serve serve <model> --backend pytorch --tp_size {tp} --max_batch_size 256 --max_num_tokens 8192 "
             "--max_seq_len 8192 --kv_cache_free_gpu_memory_fraction 0.85 --extra_llm_api_options {cfg}")
ENGINE_FLAGS = ("trtllm-serve serve <engine> --tp_size 2 --max_batch_size 256 --max_num_tokens 8192 "
                "--kv_cache_free_gpu_memory_fraction 0.85{cfg} (engine: trtllm-build --gemm_plugin auto "
                "--max_batch_size 256 --max_num_tokens 8192 --use_paged_context_fmha enable, bfloat16, TP2)")
SM120_FLAGS = ("--tensor-parallel-size 1 --gpu-memory-utilization 0.70 --max-model-len 4096 "
               "--compilation-config '{\"mode\": \"NONE\", \"cudagraph_mode\": \"FULL\"}'")

#: (results tag, curve suffix, engine, version, flags, device, variant, tp, model, quant, note)
RUNS = [
    ("trtllm_llama31_fp8", "h100x2-trtllm0.20-pytorch-cg-llama-3.1-8b-fp8-tp2", "trtllm", "0.20",
     TRT_FLAGS.format(tp=2, cfg="configs/trtllm_pytorch_cudagraph.yaml"), "h100-sxm", H100, 2, "llama-3.1-8b",
     "fp8", f"{TRT_IMAGE}, PyTorch backend, CUDA graphs on (pytorch_backend_config.use_cuda_graph, padding, max "
            "batch 256; scripts/serve_trtllm.sh is 'the command used for the measured head-to-heads'); checkpoint "
            "nvidia/Llama-3.1-8B-Instruct-FP8. report.md study 2."),
    ("trtllm_llama31", "h100x2-trtllm0.20-pytorch-cg-llama-3.1-8b-bf16-tp2", "trtllm", "0.20",
     TRT_FLAGS.format(tp=2, cfg="configs/trtllm_pytorch_cudagraph.yaml"), "h100-sxm", H100, 2, "llama-3.1-8b",
     "bf16", f"{TRT_IMAGE}, PyTorch backend, CUDA graphs on; Llama-3.1-8B-Instruct BF16. report.md study 3."),
    ("trtllm_llama31_fp8_tuned", "h100x2-trtllm0.20-pytorch-cg-tuned-llama-3.1-8b-fp8-tp2", "trtllm", "0.20",
     TRT_FLAGS.format(tp=2, cfg="configs/trtllm_pytorch_tuned.yaml"), "h100-sxm", H100, 2, "llama-3.1-8b", "fp8",
     f"{TRT_IMAGE}, PyTorch backend, CUDA graphs on, plus enable_chunked_prefill and the MAX_UTILIZATION capacity "
     "scheduler (configs/trtllm_pytorch_tuned.yaml); nvidia/Llama-3.1-8B-Instruct-FP8. report.md study 6."),
    ("trtllm_compiled_bf16", "h100x2-trtllm0.20-engine-llama-3.1-8b-bf16-tp2", "trtllm", "0.20",
     ENGINE_FLAGS.format(cfg=""), "h100-sxm", H100, 2, "llama-3.1-8b", "bf16",
     f"{TRT_IMAGE}, compiled TensorRT engine (scripts/build_engine.sh) served by trtllm-serve, no CUDA graphs. "
     "report.md study 7 ('compiled engine')."),
    ("trtllm_compiled_bf16_cg", "h100x2-trtllm0.20-engine-cg-llama-3.1-8b-bf16-tp2", "trtllm", "0.20",
     ENGINE_FLAGS.format(cfg=" --extra_llm_api_options configs/trtllm_engine_cudagraph.yaml"), "h100-sxm", H100, 2,
     "llama-3.1-8b", "bf16",
     f"{TRT_IMAGE}, compiled TensorRT engine with the executor's CUDA graphs (extended_runtime_perf_knob_config."
     "cuda_graph_mode, multi_block_mode). report.md study 7 ('compiled engine + CG')."),
    ("trtllm_qwen25_32b", "h100x4-trtllm0.20-pytorch-cg-qwen2.5-32b-bf16-tp4", "trtllm", "0.20",
     TRT_FLAGS.format(tp=4, cfg="configs/trtllm_pytorch_cudagraph.yaml"), "h100-sxm", H100, 4,
     "Qwen/Qwen2.5-32B-Instruct", "bf16",
     f"{TRT_IMAGE}, PyTorch backend, CUDA graphs on, TP4. report.md study 4. Qwen2.5-32B is not in the catalog."),
    ("vllm_llama31_fp8", "h100x2-vllm-llama-3.1-8b-fp8-tp2", "vllm", "unknown",
     "--tensor-parallel-size 2 --disable-log-requests", "h100-sxm", H100, 2, "llama-3.1-8b", "fp8",
     "vLLM (version not recorded for the H100 box) near its defaults: scripts/serve_vllm_fp8.sh reconstructs the run "
     "(nvidia/Llama-3.1-8B-Instruct-FP8, TP2, other knobs at defaults, per its header). report.md study 2."),
    ("vllm_llama31", "h100x2-vllm-llama-3.1-8b-bf16-tp2", "vllm", "unknown",
     "--tensor-parallel-size 2 --disable-log-requests", "h100-sxm", H100, 2, "llama-3.1-8b", "bf16",
     "vLLM (version not recorded) near its defaults, Llama-3.1-8B-Instruct BF16, TP2 (scripts/serve_vllm.sh is the "
     "generic launcher; its header says the runs left the other knobs at defaults). report.md study 3."),
    ("vllm_qwen25_32b", "h100x4-vllm-qwen2.5-32b-bf16-tp4", "vllm", "unknown",
     "--tensor-parallel-size 4 --disable-log-requests", "h100-sxm", H100, 4, "Qwen/Qwen2.5-32B-Instruct", "bf16",
     "vLLM (version not recorded) near its defaults, TP4. report.md study 4. Qwen2.5-32B is not in the catalog."),
    ("vllm_bf16", "h100x2-vllm-qwen3-8b-bf16-tp2", "vllm", "unknown", "--tensor-parallel-size 2", "h100-sxm", H100,
     2, "qwen3-8b", "bf16", "vLLM (version not recorded), Qwen3-8B BF16, TP2. report.md study 5 ('BF16')."),
    ("vllm_fp8", "h100x2-vllm-qwen3-8b-fp8-tp2", "vllm", "unknown", "--tensor-parallel-size 2", "h100-sxm", H100,
     2, "qwen3-8b", "fp8", "vLLM (version not recorded), Qwen3-8B FP8 (how the FP8 weights were made is not "
     "stated), TP2. report.md study 5 ('FP8')."),
    ("xm_llama31_8b", "h100-vllm-llama-3.1-8b-bf16-tp1", "vllm", "unknown", "--tensor-parallel-size 1", "h100-sxm",
     H100, 1, "llama-3.1-8b", "bf16", "vLLM (version not recorded), TP1, BF16, one H100. report.md study 1."),
    ("xm_qwen3_8b", "h100-vllm-qwen3-8b-bf16-tp1", "vllm", "unknown", "--tensor-parallel-size 1", "h100-sxm", H100,
     1, "qwen3-8b", "bf16", "vLLM (version not recorded), TP1, BF16, one H100. report.md study 1."),
    ("xm_qwen35_9b", "h100-vllm-qwen3.5-9b-bf16-tp1", "vllm", "unknown", "--tensor-parallel-size 1", "h100-sxm",
     H100, 1, "Qwen/Qwen3.5-9B", "bf16", "vLLM (version not recorded), TP1, BF16, one H100. report.md study 1."),
    ("vllm_sm120_bf16", "rtxpro6000maxq-vllm0.18.0-llama-3.1-8b-bf16-tp1", "vllm", "0.18.0", SM120_FLAGS,
     "rtx-pro-6000", PRO6000, 1, "llama-3.1-8b", "bf16",
     "vLLM 0.18.0, torch 2.10 (results/sm120_environment.txt), scripts/serve_vllm_sm120.sh: compilation mode NONE "
     "with full decode CUDA graphs (the torch.compile path crashed on this stack), gpu-memory-utilization 0.70 with "
     "an idle 11.2 GB process resident on the card. report.md study 9."),
    ("vllm_sm120_fp8", "rtxpro6000maxq-vllm0.18.0-llama-3.1-8b-fp8-tp1", "vllm", "0.18.0",
     SM120_FLAGS, "rtx-pro-6000", PRO6000, 1, "llama-3.1-8b", "fp8",
     "vLLM 0.18.0, as the BF16 run, with FP8 weights quantized on the fly (report.md study 9: 'the BF16 and FP8 "
     "(on-the-fly) baselines'; the extra serve argument that selected it is not recorded)."),
    ("vllm_sm120_nvfp4", "rtxpro6000maxq-vllm0.18.0-llama-3.1-8b-nvfp4-tp1", "vllm", "0.18.0", SM120_FLAGS,
     "rtx-pro-6000", PRO6000, 1, "llama-3.1-8b", "nvfp4",
     "vLLM 0.18.0, as the BF16 run, serving an NVFP4 W4A4 checkpoint made with TensorRT Model Optimizer "
     "(scripts/quantize_nvfp4.py). report.md study 9."),
]

#: JSON field -> (quantity, statistic, factor to ms or None)
FIELDS = {
    "throughput_tok_s": ("output_tps", "value", None),
    "ttft_p50_s": ("ttft_ms", "median", 1000), "ttft_p99_s": ("ttft_ms", "p99", 1000),
    "itl_p50_ms": ("tpot_ms", "median", None), "itl_p99_ms": ("tpot_ms", "p99", None),
    "itl_mean_ms": ("tpot_ms", "mean", None),
}


def _printed(text: str, key: str) -> str:
    m = re.search(r'"%s": (-?[0-9.eE+-]+)' % re.escape(key), text)
    if not m:
        raise ValueError(f"{key} missing")
    return m.group(1)


def _ms(printed: str) -> tuple[str, str]:
    v = round(float(printed) * 1000, 6)
    s = f"{v:g}"
    return s, f"{printed} s x 1000 = {s} ms"


def wayne_rows() -> list[dict]:
    rows = []
    for tag, suffix, engine, version, flags, device, variant, tp, model, quant, note in RUNS:
        curve = f"corpus_e-wayne-{suffix}"
        files = sorted(SRC.glob(f"results/{tag}-c*.json"), key=lambda p: int(p.stem.rsplit("-c", 1)[1]))
        if len(files) < 3:
            raise ValueError(f"{SRC}: fewer than 3 result files for {tag}")
        for path in files:
            text = path.read_text(encoding="utf-8")
            d = json.loads(text)
            c = int(d["concurrency"])
            if path.stem != f"{tag}-c{c}":
                raise ValueError(f"{path}: concurrency {c} does not match the file name")
            rel = f"results/{path.name}"
            llama = model == "llama-3.1-8b"
            notes = (f"{note} This file: {d['requests']} requests, wall {_printed(text, 'wall_s')} s, "
                     f"out_tokens_mean {_printed(text, 'out_tokens_mean')}"
                     f"{', model field ' + repr(d['model']) if d.get('model') else ''}. {CLIENT_NOTE} "
                     f"{LLAMA_INPUT if llama else OTHER_INPUT}")
            base = {
                "curve_id": curve, "source": URL % (REPO, COMMIT, rel), "source_ref": f"{REPO}@{COMMIT[:7]}:{rel}",
                "publisher": PUBLISHER, "engine": engine, "engine_version": version, "engine_flags": flags,
                "device": device, "device_variant": variant, "n_devices": str(tp), "tp": str(tp), "model": model,
                "quant": quant, "kv_cache_dtype": "not stated", "client": "custom", "dataset": "fixed-prompt",
                "input_tokens": "12" if llama else "", "output_tokens": "256", "range_ratio": "", "num_prompts": str(d["requests"]),
                "warmup": "", "ramp_up": "", "ignore_eos": "true", "load_kind": "concurrency",
                "max_concurrency": str(c), "request_rate": "inf", "burstiness": "1.0",
            }
            for key, (q, stat, factor) in FIELDS.items():
                printed = _printed(text, key)
                value, der = _ms(printed) if factor else (printed, "")
                r = dict(base)
                r.update({"row_id": f"{curve}-c{c}-{q}-{stat}", "quantity": q, "statistic": stat, "value": value,
                          "as_printed": f'"{key}": {printed}', "derivation": der, "notes": notes})
                rows.append(r)
    return rows
