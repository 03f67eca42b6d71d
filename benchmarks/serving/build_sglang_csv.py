"""Build benchmarks/serving/sglang.csv (corpus-b): SGLang's own published serving runs.

Two sources:
1. The SGLang cookbook (sgl-project/sgl-cookbook@COOKBOOK_COMMIT, docs/autoregressive/*.md):
   full `sglang.bench_serving` result blocks at three concurrencies per scenario.
   Parsed from a fetched snapshot:  python build_sglang_csv.py --cookbook-git-dir DIR
   (DIR = the snapshot's git directory). Every figure is copied from the printed block.
2. sgl-project/sglang@SGL060_COMMIT:benchmark/benchmark_vllm_060/README.md (SGLang v0.3.0
   vs vLLM v0.6.0, LMSYS): transcribed below, figures exactly as printed.
3. datacrunch-research/h200-benchmarks@DC_COMMIT:sglang/outputs/*.jsonl -- the result lines
   `sglang.bench_serving --output-file` wrote for request-rate sweeps on H200 (DataCrunch,
   Dec 2024), read from a fetched snapshot:  --datacrunch-git-dir DIR.

Selection (which cookbook pages, which device each maps to) is listed in PAGES; pages whose
result blocks cannot be tied to one device, or whose blocks repeat another page's figures,
are left out (see COLLECTIONS-b.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import BENCH_LINES, fmt, num, slug, write_csv  # noqa: E402
import sglang_cookbook as sc  # noqa: E402

COOKBOOK_COMMIT = "7b5bd9c05e3d86da5161ac2be9b91c19a34bf49d"  # 2026-05-01
COOKBOOK_URL = "https://github.com/sgl-project/sgl-cookbook/blob/%s/%s#L%d"

# page -> model catalog id (HF id when infersim has none) and quant of the checkpoint.
# Quant is the checkpoint's own format (no --quantization flag is given on these pages).
MODELS = {
    "Meta-Llama/Llama-3.1-70B": ("llama-3.1-70b", "bf16", "BF16 checkpoint (the base model, not Instruct; infersim's llama-3.1-70b has the same architecture)"),
    "deepseek-ai/DeepSeek-R1-0528": ("deepseek-ai/DeepSeek-R1-0528", "fp8", "native FP8 (block-scaled) checkpoint"),
    "deepseek-ai/DeepSeek-V3.1": ("deepseek-ai/DeepSeek-V3.1", "fp8", "native FP8 (block-scaled) checkpoint"),
    "baidu/ERNIE-4.5-21B-A3B-PT": ("baidu/ERNIE-4.5-21B-A3B-PT", "bf16", "BF16 checkpoint"),
    "zai-org/GLM-4.7-Flash": ("zai-org/GLM-4.7-Flash", "bf16", "BF16 checkpoint"),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": ("Qwen/Qwen3-235B-A22B-Instruct-2507", "bf16", "BF16 checkpoint"),
    "Qwen/Qwen3-Coder-Next": ("Qwen/Qwen3-Coder-Next", "bf16", "BF16 checkpoint"),
    "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8": ("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "fp8", "FP8 checkpoint"),
    "stepfun-ai/Step-3.5-Flash": ("stepfun-ai/Step-3.5-Flash", "bf16", "BF16 checkpoint"),
    "moonshotai/Kimi-Linear-48B-A3B-Instruct": ("moonshotai/Kimi-Linear-48B-A3B-Instruct", "bf16", "BF16 checkpoint"),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "bf16", "BF16 checkpoint"),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "bf16", "BF16 checkpoint"),
    "MiniMaxAI/MiniMax-M2.5": ("MiniMaxAI/MiniMax-M2.5", "fp8", "native FP8 checkpoint"),
    "MiniMaxAI/MiniMax-M2": ("MiniMaxAI/MiniMax-M2", "fp8", "native FP8 checkpoint"),
}

PAGES = [
    "docs/autoregressive/Llama/Llama3.1.md",
    "docs/autoregressive/DeepSeek/DeepSeek-R1.md",
    "docs/autoregressive/DeepSeek/DeepSeek-V3_1.md",
    "docs/autoregressive/Ernie/Ernie4.5.md",
    "docs/autoregressive/GLM/GLM-4.7-Flash.md",
    "docs/autoregressive/Qwen/Qwen3.md",
    "docs/autoregressive/Qwen/Qwen3-Coder-Next.md",
    "docs/autoregressive/Qwen/Qwen3-Coder.md",
    "docs/autoregressive/StepFun/Step3.5.md",
    "docs/autoregressive/Moonshotai/Kimi-Linear.md",
    "docs/autoregressive/Llama/Llama4.md",
    "docs/autoregressive/MiniMax/MiniMax-M2.5.md",
    "docs/autoregressive/MiniMax/MiniMax-M2.md",
]


def device_of(hw: str) -> tuple[str, str]:
    """infersim profile id for the page's 'Hardware:' line, and what the page says."""
    h = hw.upper()
    if "B200" in h:
        return "b200", hw
    if "H100" in h:
        return "h100-sxm", f"{hw} (80GB HBM3 = the SXM part)"
    if "H200" in h:
        return "h200", hw
    if "MI300" in h:
        return "mi300x", hw
    if "A100" in h:
        return "a100-80g", f"{hw} (memory size not printed; mapped to a100-80g)"
    raise ValueError(f"no device mapping for {hw!r}")


def cookbook_rows(git_dir: str) -> list[dict]:
    rows: list[dict] = []
    for path in PAGES:
        text = sc.git_show(git_dir, COOKBOOK_COMMIT, path)
        curves: dict[tuple, list[dict]] = {}
        for p in sc.parse_page(text):
            hw = p["env"].get("hardware", "")
            if not hw or not p["launch"]:
                continue
            curves.setdefault((hw, p["launch"], sc.bench_flags(p).get("random-input-len"),
                               sc.bench_flags(p).get("random-output-len")), []).append(p)
        for (hw, launch, isl, osl), pts in curves.items():
            concs = [sc.bench_flags(p).get("max-concurrency") for p in pts]
            if len(set(concs)) != len(concs) or len(pts) < 3:
                raise ValueError(f"{path}: curve {hw}/{isl}/{osl} has concurrencies {concs}")
            rows += curve_rows(path, hw, launch, isl, osl, pts)
    return rows


def curve_rows(path, hw, launch, isl, osl, pts) -> list[dict]:
    lf = sc._flags(launch)
    model_path = lf.get("model-path") or lf.get("model")
    model, quant, ckpt_note = MODELS[model_path]
    tp = int(lf.get("tp") or lf.get("tp-size") or 1)
    device, variant = device_of(hw)
    env_vars = " ".join(t for t in launch.replace("\\\n", " ").split() if "=" in t and t.isupper() is False and t.split("=")[0].isupper())
    flags = " ".join(f"--{k} {v}" if v != "true" else f"--{k}" for k, v in lf.items()
                     if k not in ("model", "model-path", "tokenizer-path", "host", "port"))
    if env_vars:
        flags = (env_vars + " " + flags).strip()
    version = pts[0]["env"].get("sglang version", "unknown")
    curve = f"sglang-cookbook-{slug(model.split('/')[-1])}-{device}-tp{tp}-{isl}-{osl}"
    out = []
    for p in pts:
        bf = sc.bench_flags(p)
        m = p["metrics"]
        conc = bf["max-concurrency"]
        assert m.get("Max request concurrency") == conc, (path, p["line"])
        nreq = num(m["Successful requests"])
        mean_in = num(m["Total input tokens"]) / nreq
        mean_out = num(m["Total generated tokens"]) / nreq
        bench_cmd = " ".join(p["bench"].replace("\\\n", " ").split())
        common = {
            "curve_id": curve,
            "source": COOKBOOK_URL % (COOKBOOK_COMMIT, path, p["line"]),
            "source_ref": f"sgl-project/sgl-cookbook@{COOKBOOK_COMMIT[:7]}:{path} ({p['heads'][4] or p['heads'][3]}; result block at line {p['line']})",
            "publisher": "LMSYS/SGLang (SGLang cookbook)",
            "engine": "sglang",
            "engine_version": version,
            "engine_flags": flags,
            "device": device,
            "device_variant": variant,
            "n_devices": str(tp),
            "tp": str(tp),
            "model": model,
            "quant": quant,
            "kv_cache_dtype": lf.get("kv-cache-dtype", "not stated"),
            "client": "sglang-bench-serving",
            "dataset": bf.get("dataset-name", "not stated"),
            "input_tokens": isl or "",
            "output_tokens": osl or "",
            "range_ratio": bf.get("random-range-ratio", ""),
            "num_prompts": bf.get("num-prompts", ""),
            "warmup": bf.get("warmup-requests", ""),
            "ramp_up": "",
            "ignore_eos": "true",
            "load_kind": "concurrency",
            "max_concurrency": conc,
            "request_rate": bf.get("request-rate", "inf"),
            "burstiness": "1.0",
        }
        note = (f"Cookbook page's test environment: {hw}, SGLang {version}, launch `{' '.join(launch.replace(chr(92)+chr(10), ' ').split())}`; "
                f"client command as printed: `{bench_cmd}`. {ckpt_note}. "
                f"No --random-range-ratio on the command (client default); the printed totals give mean lengths "
                f"{m['Total input tokens']}/{m['Successful requests']} = {mean_in:.1f} input and "
                f"{m['Total generated tokens']}/{m['Successful requests']} = {mean_out:.1f} output tokens per request "
                f"(sglang.bench_serving draws random lengths between ratio x L and L, so with its default ratio the means sit "
                f"near L/2 -- not vLLM's L x (1 +/- ratio)); replay with these means, not with fixed L. "
                f"ignore_eos true: sglang.bench_serving ignores EOS unless --disable-ignore-eos, which the command lacks. "
                f"Warm-up not stated (the client's own default). Realised mean concurrency printed: {m.get('Concurrency', 'n/a')}. "
                f"request_rate inf: {'as printed' if 'request-rate' in bf else 'client default (printed Traffic request rate: ' + m.get('Traffic request rate', '?') + ')'}.")
        for label, (q, stat) in BENCH_LINES.items():
            if label not in m:
                continue
            r = dict(common)
            r.update({
                "row_id": f"{curve}-c{conc}-{q}-{stat}",
                "quantity": q, "statistic": stat,
                "value": fmt(num(m[label])),
                "as_printed": f"{label}: {m[label]}",
                "derivation": "",
                "notes": note,
            })
            out.append(r)
    return out


# --- sgl-project/sglang benchmark/benchmark_vllm_060/README.md (transcribed) ---------------
SGL060_COMMIT = "120affb9613cc3f5bcd055ec09c7621d3ced0ebc"
SGL060_URL = f"https://github.com/sgl-project/sglang/blob/{SGL060_COMMIT}/benchmark/benchmark_vllm_060/README.md"
SGL060_REF = (f"sgl-project/sglang@{SGL060_COMMIT[:7]}:benchmark/benchmark_vllm_060/README.md "
              "(\"How to reproduce the benchmark results for SGLang v0.3.0 compared to vLLM v0.6.0\", LMSYS, Sept 2024)")
# (setup, engine, rps, num_prompts, table columns as printed)
SGL060_ONLINE_COLS = ["Median E2E Latency", "Median TTFT", "Median TPOT", "Median ITL"]
SGL060_ONLINE = [
    ("8b-a100", "SGLang", "4", "1200", ["1564.17", "31.98", "13.17", "11.93"]),
    ("8b-a100", "vLLM", "4", "1200", ["1691.97", "100.48", "14.14", "129.32"]),
    ("8b-a100", "SGLang", "8", "2400", ["2175.02", "35.68", "17.85", "14.41"]),
    ("8b-a100", "vLLM", "8", "2400", ["2137.16", "120.39", "17.09", "158.63"]),
    ("70b-h100x4", "SGLang", "4", "1200", ["3005.24", "53.94", "25.03", "21.67"]),
    ("70b-h100x4", "vLLM", "4", "1200", ["2915.60", "179.15", "23.58", "231.23"]),
    ("70b-h100x4", "SGLang", "8", "2400", ["4064.98", "58.11", "33.07", "24.45"]),
    ("70b-h100x4", "vLLM", "8", "2400", ["3752.38", "207.12", "29.15", "275.32"]),
]
SGL060_OFFLINE = [  # RPS inf, 5000 prompts: Request throughput, Output token throughput
    ("8b-a100", "SGLang", ["22.03", "4281.51"]),
    ("8b-a100", "vLLM", ["21.27", "4132.37"]),
    ("70b-h100x4", "SGLang", ["19.84", "3856.01"]),
    ("70b-h100x4", "vLLM", ["19.04", "3700.64"]),
]
SGL060_SETUP = {
    "8b-a100": dict(device="a100-80g", variant="1 x A100 80G (form factor not printed)", n="1", model="llama-3.1-8b",
                    title="Llama 3.1 8B Instruct 1 x A100 80G"),
    "70b-h100x4": dict(device="h100-sxm", variant="4 x H100 80G (form factor not printed; mapped to h100-sxm like the corpus's other unstated-H100 rows)",
                       n="4", model="llama-3.1-70b", title="Llama 3.1 70B Instruct 4 x H100 80G"),
}
SGL060_FLAGS = {
    ("8b-a100", "SGLang", "online"): "--enable-torch-compile --disable-radix-cache",
    ("8b-a100", "SGLang", "offline"): "--enable-torch-compile --disable-radix-cache",
    ("8b-a100", "vLLM", "online"): "--disable-log-requests --num-scheduler-steps 10 --max_model_len 4096",
    ("8b-a100", "vLLM", "offline"): "--disable-log-requests --num-scheduler-steps 10 --max_model_len 4096",
    ("70b-h100x4", "SGLang", "online"): "--disable-radix-cache --tp 4",
    ("70b-h100x4", "SGLang", "offline"): "--disable-radix-cache --tp 4 --mem-frac 0.88",
    ("70b-h100x4", "vLLM", "online"): "--disable-log-requests --num-scheduler-steps 10 --tensor 4 --max_model_len 4096",
    ("70b-h100x4", "vLLM", "offline"): "--disable-log-requests --num-scheduler-steps 10 --tensor 4 --max_model_len 4096",
}


def sgl060_rows() -> list[dict]:
    rows = []
    qmap = {"Median E2E Latency": ("e2el_ms", "median"), "Median TTFT": ("ttft_ms", "median"),
            "Median TPOT": ("tpot_ms", "median"), "Median ITL": ("itl_ms", "median")}

    def base(setup, engine, mode):
        s = SGL060_SETUP[setup]
        eng = "sglang" if engine == "SGLang" else "vllm"
        flags = SGL060_FLAGS[(setup, engine, mode)]
        # The SGLang 70B server ran with --mem-frac 0.88 offline only, so its offline point is
        # a separate curve; every other setup used one launch command for both modes.
        split = setup == "70b-h100x4" and engine == "SGLang" and mode == "offline"
        curve = f"sglang-vllm060-{eng}-{setup}-sharegpt" + ("-memfrac088" if split else "")
        return {
            "curve_id": curve, "source": SGL060_URL, "source_ref": SGL060_REF,
            "publisher": "LMSYS/SGLang", "engine": eng,
            "engine_version": "0.3.0" if eng == "sglang" else "0.6.0",
            "engine_flags": flags, "device": s["device"], "device_variant": s["variant"],
            "n_devices": s["n"], "tp": s["n"], "model": s["model"], "quant": "bf16",
            "kv_cache_dtype": "not stated", "client": "sglang-bench-serving", "dataset": "sharegpt",
            "input_tokens": "", "output_tokens": "", "range_ratio": "", "warmup": "", "ramp_up": "",
            "ignore_eos": "not stated", "burstiness": "1.0", "derivation": "",
        }, s

    common_note = ("LMSYS's SGLang v0.3.0 vs vLLM v0.6.0 comparison; client python3 -m sglang.bench_serving "
                   "--backend {b} --dataset-name sharegpt (ShareGPT lengths, not stated further; Poisson arrivals at the "
                   "request rate). Model meta-llama/Llama-3.1-{sz}B-Instruct, dtype not stated (BF16 checkpoint, no quantization flag). "
                   "vLLM ran with multi-step scheduling (--num-scheduler-steps 10), which the README says raises ITL; SGLang's "
                   "mem_frac default 0.88 at TP1, 0.85 at TP4 (README notes).")
    for setup, engine, rps, nprompts, vals in SGL060_ONLINE:
        b, s = base(setup, engine, "online")
        for col, v in zip(SGL060_ONLINE_COLS, vals):
            q, stat = qmap[col]
            r = dict(b)
            r.update({"row_id": f"{b['curve_id']}-r{rps}-{q}-{stat}", "num_prompts": nprompts,
                      "load_kind": "rate", "max_concurrency": "", "request_rate": rps,
                      "quantity": q, "statistic": stat, "value": fmt(num(v)),
                      "as_printed": f"{s['title']} | RPS {rps} | Num prompts {nprompts} | Engine {engine} | {col} {v}",
                      "notes": common_note.format(b=b['engine'], sz="8" if setup.startswith("8b") else "70")
                      + " Table unit not printed; milliseconds (bench_serving prints these in ms)."})
            rows.append(r)
    for setup, engine, vals in SGL060_OFFLINE:
        b, s = base(setup, engine, "offline")
        for (q, col), v in zip([("request_tps", "Request throughput"), ("output_tps", "Output token throughput")], vals):
            r = dict(b)
            r.update({"row_id": f"{b['curve_id']}-rinf-{q}-value", "num_prompts": "5000",
                      "load_kind": "rate", "max_concurrency": "", "request_rate": "inf",
                      "quantity": q, "statistic": "value", "value": fmt(num(v)),
                      "as_printed": f"{s['title']} (Offline) | RPS inf | Num Prompts 5000 | Engine {engine} | {col} {v}",
                      "notes": common_note.format(b=b['engine'], sz="8" if setup.startswith("8b") else "70")
                      + (" Offline run launched with --mem-frac 0.88 (README), unlike the online runs: its own curve (one point)."
                         if b["curve_id"].endswith("memfrac088") else "")})
            rows.append(r)
    return rows


# --- datacrunch-research/h200-benchmarks (sglang.bench_serving JSONL result lines) ----------
DC_COMMIT = "c091ef530a525d2e788bc41c39a4450b09c9f2ad"  # 2024-12-14
DC_URL = "https://github.com/datacrunch-research/h200-benchmarks/blob/%s/%s#L%d"
DC_RUNS = [
    # (jsonl path, line numbers to use, model id, n GPUs, launch command as printed in the script, script path)
    ("sglang/outputs/llama_3_3_70b_online_output.jsonl", [1, 2, 3, 4, 5], "llama-3.3-70b", 4,
     "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.3-70B-Instruct --tp-size 4 --host 0.0.0.0 --port 30000 --disable-radix-cache --enable-torch-compile",
     "sglang/experiments/llama_3_3_70b_sglang.sh"),
    ("sglang/outputs/llama_3_3_70b_offline_output.jsonl", [1], "llama-3.3-70b", 4,
     "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.3-70B-Instruct --tp-size 4 --host 0.0.0.0 --port 30000 --disable-radix-cache --enable-torch-compile",
     "sglang/experiments/llama_3_3_70b_sglang.sh"),
    ("sglang/outputs/llama_405b_online_output.jsonl", [1, 2, 3, 4], "meta-llama/Llama-3.1-405B-Instruct", 8,
     "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-405B-Instruct --tp-size 8 --host 0.0.0.0 --port 30000 --disable-radix-cache --enable-torch-compile",
     "sglang/experiments/llama_405b_sglang.sh"),
]


def datacrunch_rows(git_dir: str) -> list[dict]:
    import json
    rows = []
    for path, lines, model, n, launch, script in DC_RUNS:
        text = sc.git_show(git_dir, DC_COMMIT, path).splitlines()
        for ln in lines:
            raw = text[ln - 1]
            d = json.loads(raw)
            assert d["dataset_name"] == "random" and d["random_input_len"] == 1024 and d["random_output_len"] == 1024
            rate = "inf" if d["request_rate"] == float("inf") else fmt(d["request_rate"])
            curve = f"sglang-datacrunch-{slug(model.split('/')[-1])}-h200-tp{n}-random-1024-1024"
            nreq = d["completed"]
            base = {
                "curve_id": curve, "source": DC_URL % (DC_COMMIT, path, ln),
                "source_ref": f"datacrunch-research/h200-benchmarks@{DC_COMMIT[:7]}:{path} line {ln} (bench_serving --output-file result line; commands in {script})",
                "publisher": "DataCrunch (datacrunch-research)", "engine": "sglang",
                "engine_version": "unknown (SGLang of Dec 2024; the result line and scripts print no version)",
                "engine_flags": " ".join(t for t in launch.split() if t not in ("python3", "-m", "sglang.launch_server")).replace("--host 0.0.0.0 --port 30000 ", ""),
                "device": "h200", "device_variant": "H200 141GB (README: '4 x H200 141GB' / '8 x H200 141GB')",
                "n_devices": str(n), "tp": str(n), "model": model, "quant": "bf16",
                "kv_cache_dtype": "not stated", "client": "sglang-bench-serving", "dataset": "random",
                "input_tokens": "1024", "output_tokens": "1024", "range_ratio": fmt(d["random_range_ratio"]),
                "num_prompts": str(nreq), "warmup": "", "ramp_up": "", "ignore_eos": "true",
                "load_kind": "rate", "max_concurrency": "", "request_rate": rate, "burstiness": "1.0",
            }
            mean_in = d["total_input_tokens"] / nreq
            mean_out = d["total_output_tokens"] / nreq
            note = (f"Launch (as commented in {script}): `{launch}` (Llama 3.3 70B / 3.1 405B in bf16 per the script). Client: "
                    f"`python3 -m sglang.bench_serving --backend sglang --dataset-name random --num-prompt {nreq} "
                    f"{'--request-rate ' + rate + ' ' if rate != 'inf' else ''}--random-input 1024 --random-output 1024` "
                    f"(range ratio {d['random_range_ratio']} as recorded: input/output lengths uniform up to 1024; realised means "
                    f"{d['total_input_tokens']}/{nreq} = {mean_in:.1f} input, {d['total_output_tokens']}/{nreq} = {mean_out:.1f} output tokens). "
                    "Poisson arrivals at the request rate (rate inf: all requests at once, the script's 'offline' run). "
                    "ignore_eos true: sglang.bench_serving's default. The repo README's median E2E figures for its 70B table repeat "
                    "LMSYS's H100 numbers and are not used; these rows come from the raw result lines.")
            vals = [
                ("output_tps", "value", d["output_throughput"], f"\"output_throughput\": {d['output_throughput']}", ""),
                ("ttft_ms", "median", d["median_ttft_ms"], f"\"median_ttft_ms\": {d['median_ttft_ms']}", ""),
                ("itl_ms", "median", d["median_itl_ms"], f"\"median_itl_ms\": {d['median_itl_ms']}", ""),
                ("e2el_ms", "median", d["median_e2e_latency_ms"], f"\"median_e2e_latency_ms\": {d['median_e2e_latency_ms']}", ""),
                ("e2el_ms", "mean", d["mean_e2e_latency_ms"], f"\"mean_e2e_latency_ms\": {d['mean_e2e_latency_ms']}", ""),
                ("request_tps", "value", nreq / d["duration"], f"\"completed\": {nreq}, \"duration\": {d['duration']}",
                 f"completed / duration = {nreq} / {d['duration']} s = {nreq / d['duration']:.4f} req/s"),
                ("total_tps", "value", (d["total_input_tokens"] + d["total_output_tokens"]) / d["duration"],
                 f"\"total_input_tokens\": {d['total_input_tokens']}, \"total_output_tokens\": {d['total_output_tokens']}, \"duration\": {d['duration']}",
                 f"(total_input_tokens + total_output_tokens) / duration = ({d['total_input_tokens']} + {d['total_output_tokens']}) / {d['duration']} s = {(d['total_input_tokens'] + d['total_output_tokens']) / d['duration']:.2f} tok/s"),
            ]
            for q, stat, v, printed, der in vals:
                r = dict(base)
                # A recorded figure keeps every digit the result line has; a derived one is rounded.
                r.update({"row_id": f"{curve}-r{rate}-{q}-{stat}", "quantity": q, "statistic": stat,
                          "value": repr(float(v)) if not der else fmt(round(v, 4)), "as_printed": printed,
                          "derivation": der, "notes": note})
                rows.append(r)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cookbook-git-dir", required=True, help="git dir of a sgl-project/sgl-cookbook snapshot")
    ap.add_argument("--datacrunch-git-dir", required=True, help="git dir of a datacrunch-research/h200-benchmarks snapshot")
    ap.add_argument("--out", default=str(HERE / "sglang.csv"))
    a = ap.parse_args()
    rows = cookbook_rows(a.cookbook_git_dir) + sgl060_rows() + datacrunch_rows(a.datacrunch_git_dir)
    write_csv(Path(a.out), rows)
    curves = {r["curve_id"] for r in rows}
    print(f"{len(rows)} rows, {len(curves)} curves -> {a.out}")


if __name__ == "__main__":
    main()
