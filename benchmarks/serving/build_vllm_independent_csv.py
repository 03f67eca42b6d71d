"""Build benchmarks/serving/vllm_independent.csv (corpus-b): vLLM request-rate sweeps published by
independent users with the raw `vllm bench serve --save-result` JSON files.

Source: DO-Solutions/gtc-2026-doks@DO_COMMIT:dev/vllm/benchmarks/<run>/rate-<R>.json (DigitalOcean
solutions team, Feb 2026): vLLM 0.14.1 on one H200, Llama 3.1 70B Instruct FP8 (NVIDIA ModelOpt
checkpoint, FP8 KV cache), Poisson arrivals at 0.5 to 5 req/s, 300 prompts per rate, for a
ShareGPT run, a custom multi-turn-conversation dataset at vLLM defaults and five engine settings,
and one EAGLE3 speculative-decoding run. Each JSON is read from a fetched snapshot:
    python3 build_vllm_independent_csv.py --do-git-dir <git dir of the snapshot>
Server flags are the `non-default args` line of each run's server.log; client flags are the
`Namespace(...)` line of each rate's log.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus_b_common import fmt, write_csv  # noqa: E402

DO_COMMIT = "c70febac2632e7d4b2e2ab9ebaff499d0b7df3a2"  # 2026-02-28
DO_URL = "https://github.com/DO-Solutions/gtc-2026-doks/blob/%s/%s"
BASE = "dev/vllm/benchmarks"
# run directory -> (label, dataset description, model id, quant notes)
RUNS = [
    ("phase0/20260224-185458", "phase0-sharegpt", "ShareGPT V3 unfiltered cleaned split"),
    ("phase0/20260224-214806", "phase0-custom", "custom multi-turn conversations in ShareGPT format (dev/vllm/benchmarks/datasets/conversations-sharegpt-20260224-205203.json in the same repo)"),
    ("phase1-baseline-rerun/20260225-010006", "phase1-baseline-rerun", "custom multi-turn conversations (same file)"),
    ("phase1-mem095/20260225-015952", "phase1-mem095", "custom multi-turn conversations (same file)"),
    ("phase1-batch16k/20260225-025656", "phase1-batch16k", "custom multi-turn conversations (same file)"),
    ("phase1-seqs128/20260225-035421", "phase1-seqs128", "custom multi-turn conversations (same file)"),
    ("phase1-moderate/20260225-045132", "phase1-moderate", "custom multi-turn conversations (same file)"),
    ("phase1-aggressive/20260225-054834", "phase1-aggressive", "custom multi-turn conversations (same file)"),
    ("phase3-eagle3-chat/20260225-232913", "phase3-eagle3", "custom multi-turn conversations (same file)"),
]
MODELS = {
    "/models/nvidia/Llama-3.1-70B-Instruct-FP8": "llama-3.1-70b",
    "/models/nvidia/Llama-3.3-70B-Instruct-FP8": "llama-3.3-70b",
}
# JSON key -> (quantity, statistic); every figure vllm bench serve saved that the schema has.
KEYS = [
    ("request_throughput", "request_tps", "value"), ("output_throughput", "output_tps", "value"),
    ("total_token_throughput", "total_tps", "value"),
]
for q in ("ttft", "tpot", "itl", "e2el"):
    for stat, key in (("mean", f"mean_{q}_ms"), ("median", f"median_{q}_ms"), ("p95", f"p95_{q}_ms"), ("p99", f"p99_{q}_ms")):
        KEYS.append((key, f"{q}_ms", stat))


def show(git_dir: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"{DO_COMMIT}:{path}"],
                          check=True, capture_output=True, text=True).stdout


def ls(git_dir: str, path: str) -> list[str]:
    out = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "--name-only", DO_COMMIT, path + "/"],
                         check=True, capture_output=True, text=True).stdout
    return out.split()


def rows_for_run(git_dir: str, run: str, label: str, dataset: str) -> list[dict]:
    server = show(git_dir, f"{BASE}/{run}/server.log")
    version = re.search(r"vLLM API server version (\S+)", server).group(1)
    nondefault = re.search(r"non-default args: (\{.*\})", server).group(1)
    kv = re.search(r"kv_cache_dtype=(\w+)", server).group(1)
    model_path = re.search(r"'model': '([^']+)'", nondefault).group(1)
    model = MODELS[model_path]
    flags = "vllm serve with non-default args " + nondefault
    jsons = sorted((p for p in ls(git_dir, f"{BASE}/{run}") if p.endswith(".json")),
                   key=lambda p: float(re.search(r"rate-([\d.]+)\.json", p).group(1)))
    curve = f"vllm_independent-do-gtc2026-{label}-{model}-fp8-h200-tp1"
    rows = []
    for path in jsons:
        d = json.loads(show(git_dir, path))
        rate = fmt(d["request_rate"])
        log_path = path[:-5] + ".log"
        logged = show(git_dir, log_path) if log_path in ls(git_dir, f"{BASE}/{run}") else ""
        ns = logged.splitlines()[0] if logged.startswith("Namespace(") else ""
        ignore_eos = re.search(r"ignore_eos=(\w+)", ns)
        base_url = re.search(r"base_url='([^']*)'", ns)
        n = d["completed"]
        mean_in = d["total_input_tokens"] / n
        base = {
            "curve_id": curve, "source": DO_URL % (DO_COMMIT, path),
            "source_ref": f"DO-Solutions/gtc-2026-doks@{DO_COMMIT[:7]}:{path} (vllm bench serve --save-result JSON; server flags in {BASE}/{run}/server.log)",
            "publisher": "DigitalOcean solutions team (DO-Solutions, GTC 2026 demo repo)", "engine": "vllm",
            "engine_version": version, "engine_flags": flags, "device": "h200",
            "device_variant": "1x H200 141GB (run reports: 'GPU | 1x H200 141GB')", "n_devices": "1", "tp": "1",
            "model": model, "quant": "fp8", "kv_cache_dtype": f"{kv} (vLLM engine config line in server.log)",
            "client": "vllm-bench-serve", "dataset": "sharegpt: " + dataset,
            "input_tokens": f"{mean_in:.1f}", "output_tokens": "",
            "range_ratio": "", "num_prompts": str(d["num_prompts"]), "warmup": "10",
            "ramp_up": "", "ignore_eos": (ignore_eos.group(1).lower() if ignore_eos else "not stated"),
            "load_kind": "rate", "max_concurrency": "", "request_rate": rate, "burstiness": repr(float(d["burstiness"])),
        }
        note = (f"Run {run} ({label}); model {model_path}, TP1, vLLM {version} (V1 engine), KV cache {kv}. Server non-default args "
                f"{nondefault}; vLLM 0.14.1 defaults otherwise (the repo's phase-1 report: gpu-memory-utilization 0.9, "
                "max-num-batched-tokens 8192, max-num-seqs 1024, prefix caching and chunked prefill on). Client: vllm bench serve "
                f"--backend vllm --endpoint /v1/completions --dataset-name sharegpt, seed 0, {d['num_prompts']} prompts, Poisson "
                f"arrivals at {rate} req/s, no concurrency cap. Input tokens = recorded total {d['total_input_tokens']} / {n} "
                f"completed requests (the same 300 prompts at every rate); output lengths follow the dataset (ignore_eos off), "
                f"this run {d['total_output_tokens']} / {n} = {d['total_output_tokens'] / n:.1f} tokens per request. "
                f"Peak concurrent requests recorded: {d.get('max_concurrent_requests')}. Failed: {d['failed']}. "
                "Warm-up: the run reports say 10 prompts at 0.5 req/s, discarded, before the sweep (client --num-warmups 0). "
                # Where the client sat (issue 38, TTFT): scripts/vllm-benchmark.sh at DO_COMMIT starts the server
                # (`python3 -m vllm.entrypoints.openai.api_server --port ${PORT}`) and runs `vllm bench serve
                # --base-url "http://localhost:${PORT}"` from the same script, so no gateway, ingress or load
                # balancer sits between them; the rate log's Namespace line prints the URL it used.
                + (f"Client beside the server: scripts/vllm-benchmark.sh starts the API server and runs vllm bench serve "
                   f"against it on the same host (this rate's log: base_url='{base_url.group(1)}'), so TTFT holds no "
                   "gateway, ingress or network hop. " if base_url and "localhost" in base_url.group(1) else "")
                + ("Prefix caching is on and this dataset holds multi-turn conversations, so later turns can reuse cached "
                   "prefixes; the hit rate is not in the JSON." if "custom" in dataset or "same file" in dataset else "")
                + (" EAGLE3 speculative decoding with 3 draft tokens (yuhuili/EAGLE3-LLaMA3.3-Instruct-70B): TPOT and ITL count "
                   "accepted tokens, and the run saturates at ~1 req/s." if "eagle" in label else ""))
        for key, q, stat in KEYS:
            if key not in d or d[key] is None:
                continue
            r = dict(base)
            r.update({"row_id": f"{curve}-r{rate}-{q}-{stat}", "quantity": q, "statistic": stat,
                      "value": repr(float(d[key])), "as_printed": f"\"{key}\": {d[key]}", "derivation": "",
                      "notes": note})
            rows.append(r)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--do-git-dir", required=True, help="git dir of a DO-Solutions/gtc-2026-doks snapshot")
    ap.add_argument("--out", default=str(HERE / "vllm_independent.csv"))
    a = ap.parse_args()
    rows = []
    for run, label, dataset in RUNS:
        rows += rows_for_run(a.do_git_dir, run, label, dataset)
    write_csv(Path(a.out), rows)
    print(f"{len(rows)} rows, {len({r['curve_id'] for r in rows})} curves -> {a.out}")


if __name__ == "__main__":
    main()
