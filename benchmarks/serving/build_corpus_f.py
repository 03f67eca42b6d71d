"""Build benchmarks/serving/corpus_f.csv: trtllm-serve >= 1.0 (and vLLM 0.13) closed-loop sweeps from a publisher new
to the corpus (collection f; sources, settings, what was searched and rejected: COLLECTIONS-f.md).

Source: github.com/Azir111/trtllm-vs-vllm (GitHub user Azir111, June 2026), "consumer Blackwell cross-framework x
cross-precision LLM inference benchmark": TensorRT-LLM 1.3.0rc15 (`trtllm-serve`, PyTorch backend) against vLLM
0.13.0 (NVIDIA's nv26.01 build) on one RTX 5070 Ti (16 GB, sm_120) under Windows + WSL2 + Docker, serving
nvidia/Llama-3.1-8B-Instruct-FP8 and -NVFP4 (ModelOpt pre-quantized checkpoints) at concurrency 1 ... 64. The result
JSON files are vendored verbatim under sources/Azir111__trtllm-vs-vllm/<commit>/results/ (git blobs identical at
9d8b54b, the commit that added them, and at the cited HEAD ce394f6).

The client is the repository's scripts/bench.py (`--concurrencies 1,2,4,8,16,32,48,64 --rounds 10`, README
"Reproduce"): per concurrency C it first sends one round of C requests at once and discards it (warm-up), then runs
10 rounds, each C requests sent together and awaited together (asyncio.gather), so n_req = 10 x C. Every request is
the same fixed prompt (PROMPT below) to /v1/completions, no chat template, max_tokens 256, ignore_eos, temperature 0,
streamed. Per request: TTFT = first chunk with text; TPOT = (total - TTFT) / (chunks - 1); ITL = every gap between
text chunks (pooled over requests). Per load: qps = requests / wall, out_tok_s = chunks / wall, percentiles
`sorted(x)[int(round(p/100 x (n - 1)))]`; ttft p50/p95 and itl p95 in ms, tpot mean in ms. out_tok_s / qps = 256
at every load point here (one chunk per token, every output ran to max_tokens; checked below).

The prompt's token count is not printed by the source. It was counted by the collector with Llama 3's own tokenizer
(meta-llama/llama-models@a9c89c4 models/llama3/tokenizer.model, the tiktoken BPE with the pattern of
models/llama3/tokenizer.py, which nvidia's FP8/NVFP4 checkpoints of Llama-3.1-8B-Instruct share): 59 tokens, listed
in PROMPT_IDS (that tokenizer maps "Hello world" to [9906, 1917], Llama 3's ids). Both servers' /v1/completions
tokenize with the Hugging Face tokenizer's default add_special_tokens, which prepends <|begin_of_text|>, so the
rows carry input_tokens = 59 + 1 = 60 (the count and the BOS are the collector's, written in every row's notes).
    python3 build_corpus_f.py            # rewrites corpus_f.csv
    python3 build_corpus_f.py --check    # fails when corpus_f.csv differs from what this script builds
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import build_main, csv_text  # noqa: E402

REPO = "Azir111/trtllm-vs-vllm"
COMMIT = "ce394f6d92d83a5c26b9d2880b8beaee82b18dc5"
SRC = HERE / "sources" / "Azir111__trtllm-vs-vllm" / COMMIT
URL = "https://github.com/%s/blob/%s/%s"
PUBLISHER = "Azir111 (GitHub user; trtllm-vs-vllm study on an RTX 5070 Ti)"
PROMPT = ("You are a helpful assistant. Summarize the history of computing in detail, "
          "covering mechanical calculators, vacuum tubes, transistors, integrated circuits, "
          "the microprocessor, personal computers, the internet, mobile, and modern AI. "
          "Be thorough and structured. Begin your detailed summary now: ")
#: PROMPT in Llama 3 token ids, counted by the collector (module docstring says how); not printed by the source
PROMPT_IDS = (2675, 527, 264, 11190, 18328, 13, 8279, 5730, 553, 279, 3925, 315, 25213, 304, 7872, 11, 18702,
              22936, 5935, 3046, 11, 29302, 34083, 11, 1380, 380, 1105, 11, 18751, 46121, 11, 279, 8162, 30574, 11,
              4443, 19002, 11, 279, 7757, 11, 6505, 11, 323, 6617, 15592, 13, 2893, 17879, 323, 34030, 13, 19110,
              701, 11944, 12399, 1457, 25, 220)
INPUT_TOKENS = len(PROMPT_IDS) + 1  # + the <|begin_of_text|> both servers prepend by default
OUTPUT_TOKENS = 256
ROUNDS = 10

DEVICE_VARIANT = ("NVIDIA GeForce RTX 5070 Ti (Blackwell GB203, sm_120, 16303 MiB), driver 610.47 / CUDA 13.1, "
                  "Windows + WSL2 (Ubuntu) + Docker")
CLIENT_NOTE = (
    "Client: the repository's scripts/bench.py, --concurrencies 1,2,4,8,16,32,48,64 --rounds 10: per concurrency C "
    "one warm-up round of C requests (discarded), then 10 rounds of C requests sent together and awaited together "
    f"(asyncio.gather), so 10 x C measured requests; every request is the same fixed prompt {PROMPT.strip()!r} to "
    "/v1/completions without a chat template, max_tokens 256, ignore_eos, temperature 0, streamed. Rounds of equal "
    "fixed-length requests run in lock-step, like a closed loop of them. TTFT = first text chunk; tpot_ms = mean "
    "over requests of (total - TTFT) / (chunks - 1); itl_ms p95 over all chunk gaps; output_tps = chunks / wall "
    "time, request_tps = requests / wall time; percentiles sorted(x)[int(round(p/100 (n - 1)))].")
INPUT_NOTE = (
    f"Input length {INPUT_TOKENS} tokens: not printed by the source; the collector counted the prompt with Llama 3's "
    "tokenizer (meta-llama/llama-models@a9c89c4 models/llama3/tokenizer.model): 59 tokens, plus the "
    "<|begin_of_text|> that both servers' /v1/completions prepend by default (build_corpus_f.py PROMPT_IDS).")
TRT = ("TensorRT-LLM 1.3.0rc15 (container nvcr.io/nvidia/tensorrt-llm/release:latest pulled 2026-06-18, which was "
       "1.3.0rc15 per SETUP.md section 1), PyTorch backend with FlashInfer attention (README hardware/software "
       "table), CUDA graphs at the backend's defaults; the startup log's capture list was 128, 64, 32, 31, ..., 16 "
       "(SETUP.md 10.6), so batch sizes 33-63 ran without a graph unless padding was enabled. Low loads: TPOT at "
       "C = 1-2 (19-30 ms) is 2-3x that at C = 4 (8-11 ms) in both precisions and in the repository's first run "
       "(results_trtllm_*.json, 3 rounds); the source does not explain it.")
VLLM = ("vLLM v0.13.0+faa43dbf.nv26.01 (container nvcr.io/nvidia/vllm:26.01-py3), FLASH_ATTN attention, "
        "flashinfer-cutlass NVFP4 GEMM for the NVFP4 checkpoint (SETUP.md 9.6), torch.compile and CUDA graphs at "
        "vLLM's defaults; max model length 4096, GPU memory utilisation 0.9 (README 'Reproduce').")
TRT_FLAGS = "trtllm-serve serve ./models/llama31-8b-{q} --backend pytorch --tp_size 1 --host 0.0.0.0 --port 8000"
PAD_FLAGS = TRT_FLAGS.format(q="nvfp4") + " --extra_llm_api_options configs/pad.yaml"
VLLM_FLAGS = ("vllm serve ./models/llama31-8b-{q} --served-model-name m --max-model-len 4096 "
              "--gpu-memory-utilization 0.9 --port 8000")
#: outlier loads per results file: C = 48 of the default NVFP4 run fell in the CUDA-graph capture hole (33-63) and
#: ran eager, as the publisher diagnosed and fixed with enable_padding (README, SETUP.md 10.6)
HOLE = ("outlier: C = 48 lies in the CUDA-graph capture hole (batch sizes 33-63 not captured, so decode ran "
        "without a graph; the publisher's diagnosis, README 'debug a non-monotonic throughput curve', fixed by "
        "cuda_graph_config enable_padding: the -pad curve). The replay models graph decode only. ")

#: (results file, curve suffix, engine, version, flags, quant, checkpoint, run note, {C: outlier note})
RUNS = [
    ("results_trtllm_fp8_v2.json", "trtllm1.3.0rc15-pytorch-llama-3.1-8b-fp8", "trtllm", "1.3.0rc15",
     TRT_FLAGS.format(q="fp8"), "fp8", "nvidia/Llama-3.1-8B-Instruct-FP8",
     TRT + " The capture list is printed for the NVFP4 server only; this FP8 run's C = 48 shows no dip (output "
     "2010 -> 2621 -> 3415 tok/s at C = 32, 48, 64), so it is kept.", {}),
    ("results_trtllm_nvfp4_v2.json", "trtllm1.3.0rc15-pytorch-llama-3.1-8b-nvfp4", "trtllm", "1.3.0rc15",
     TRT_FLAGS.format(q="nvfp4"), "nvfp4", "nvidia/Llama-3.1-8B-Instruct-NVFP4", TRT, {48: HOLE}),
    ("results_trtllm_nvfp4_pad.json", "trtllm1.3.0rc15-pytorch-pad-llama-3.1-8b-nvfp4", "trtllm", "1.3.0rc15",
     PAD_FLAGS, "nvfp4", "nvidia/Llama-3.1-8B-Instruct-NVFP4",
     TRT + " This run adds configs/pad.yaml, 'cuda_graph_config: enable_padding: true' (batches padded up to the "
     "next captured size), and covers only C = 40, 48, 56 (SETUP.md 10.6 table).", {}),
    ("results_vllm_fp8_v2.json", "vllm0.13.0-llama-3.1-8b-fp8", "vllm", "0.13.0+faa43dbf.nv26.01",
     VLLM_FLAGS.format(q="fp8"), "fp8", "nvidia/Llama-3.1-8B-Instruct-FP8",
     VLLM + " The README prints the serve command for the NVFP4 checkpoint; the FP8 cell ran it with the FP8 "
     "checkpoint ('each (framework, precision) cell repeated, switching the running server').", {}),
    ("results_vllm_nvfp4_v2.json", "vllm0.13.0-llama-3.1-8b-nvfp4", "vllm", "0.13.0+faa43dbf.nv26.01",
     VLLM_FLAGS.format(q="nvfp4"), "nvfp4", "nvidia/Llama-3.1-8B-Instruct-NVFP4", VLLM, {}),
]

#: JSON field -> (quantity, statistic)
FIELDS = {
    "ttft_p50_ms": ("ttft_ms", "median"), "ttft_p95_ms": ("ttft_ms", "p95"),
    "tpot_mean_ms": ("tpot_ms", "mean"), "itl_p95_ms": ("itl_ms", "p95"),
    "out_tok_s": ("output_tps", "value"), "qps": ("request_tps", "value"),
}
_NUM = r"(-?[0-9.eE+-]+)"


def _blocks(text: str) -> dict[int, str]:
    """The file's per-concurrency row objects as printed, by concurrency."""
    out = {}
    for m in re.finditer(r'\{\s*"concurrency": (\d+),[^{}]*\}', text):
        out[int(m.group(1))] = m.group(0)
    return out


def _printed(block: str, key: str) -> str:
    m = re.search(r'"%s": %s' % (re.escape(key), _NUM), block)
    if not m:
        raise ValueError(f"{key} missing in {block[:40]!r}")
    return m.group(1)


def _merged(r_json: dict) -> str:
    """The outlier note of a load point whose requests streamed fewer text chunks than tokens, else ''.

    The client counts text chunks, not tokens: out_tok_s = chunks / wall and TPOT / ITL are per chunk. With one
    chunk per token every request makes 256 chunks, so out_tok_s / qps = 256 within the rounding of qps (printed to
    3 decimals: +-0.0005 req/s, i.e. +-256 x 0.0005 / qps chunks, plus 0.1 for out_tok_s's one decimal). Below that,
    the server merged tokens into chunks (it fell behind the stream), so the point's throughput, TPOT and ITL are
    not per-token figures. Above it is impossible with max_tokens 256, and is an error."""
    per_req = r_json["out_tok_s"] / r_json["qps"]
    tol = OUTPUT_TOKENS * 0.0005 / r_json["qps"] + 0.1
    if per_req > OUTPUT_TOKENS + tol:
        raise ValueError(f"C = {r_json['concurrency']}: out_tok_s / qps = {per_req:.2f} > {OUTPUT_TOKENS}")
    if per_req >= OUTPUT_TOKENS - tol:
        return ""
    return (f"outlier: out_tok_s / qps = {r_json['out_tok_s']} / {r_json['qps']} = {per_req:.1f} text chunks per "
            f"request, fewer than the {OUTPUT_TOKENS} tokens each request generated (ignore_eos, max_tokens "
            f"{OUTPUT_TOKENS}): tokens were merged into chunks, so this point's output_tps, tpot_ms and itl_ms are "
            "per chunk, not per token. ")


def azir_rows() -> list[dict]:
    rows = []
    for fname, suffix, engine, version, flags, quant, ckpt, note, outliers in RUNS:
        curve = f"corpus_f-azir-rtx5070ti-{suffix}-{INPUT_TOKENS}-{OUTPUT_TOKENS}"
        rel = f"results/{fname}"
        text = (SRC / rel).read_text(encoding="utf-8")
        d = json.loads(text)
        if d["osl"] != OUTPUT_TOKENS or d["rounds"] != ROUNDS:
            raise ValueError(f"{rel}: osl {d['osl']} / rounds {d['rounds']}, expected {OUTPUT_TOKENS} / {ROUNDS}")
        blocks = _blocks(text)
        if sorted(blocks) != [r["concurrency"] for r in d["rows"]] or len(blocks) < 3:
            raise ValueError(f"{rel}: row objects not parsed one per concurrency")
        for r_json in d["rows"]:
            c = int(r_json["concurrency"])
            if r_json["n_req"] != ROUNDS * c:
                raise ValueError(f"{rel}: C = {c} has {r_json['n_req']} requests, expected {ROUNDS} x C")
            block = blocks[c]
            notes = (f"{outliers.get(c, '')}{_merged(r_json)}{note} Checkpoint {ckpt} (ModelOpt pre-quantized), one GPU. This load: "
                     f"{r_json['n_req']} requests, model field {d['model']!r}, tag {d['tag']!r}. {CLIENT_NOTE} "
                     f"{INPUT_NOTE}")
            base = {
                "curve_id": curve, "source": URL % (REPO, COMMIT, rel), "source_ref": f"{REPO}@{COMMIT[:7]}:{rel}",
                "publisher": PUBLISHER, "engine": engine, "engine_version": version, "engine_flags": flags,
                "device": "rtx-5070-ti", "device_variant": DEVICE_VARIANT, "n_devices": "1", "tp": "1",
                "model": "llama-3.1-8b", "quant": quant, "kv_cache_dtype": "not stated", "client": "custom",
                "dataset": "fixed-prompt", "input_tokens": str(INPUT_TOKENS), "output_tokens": str(OUTPUT_TOKENS),
                "range_ratio": "", "num_prompts": str(r_json["n_req"]), "warmup": str(c), "ramp_up": "",
                "ignore_eos": "true", "load_kind": "concurrency", "max_concurrency": str(c), "request_rate": "inf",
                "burstiness": "1.0",
            }
            for key, (q, stat) in FIELDS.items():
                printed = _printed(block, key)
                r = dict(base)
                r.update({"row_id": f"{curve}-c{c}-{q}-{stat}", "quantity": q, "statistic": stat, "value": printed,
                          "as_printed": f'"concurrency": {c} row: "{key}": {printed}', "derivation": "",
                          "notes": notes})
                rows.append(r)
    return rows


def build() -> str:
    return csv_text(azir_rows(), "corpus_f.csv")


def main() -> None:
    build_main(build, HERE / "corpus_f.csv", "build_corpus_f.py", __doc__, "")


if __name__ == "__main__":
    main()
