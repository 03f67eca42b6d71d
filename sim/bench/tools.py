"""AIPerf, genai-perf and GuideLLM: their load patterns on the simulator and their result files.

Load patterns:
- AIPerf / genai-perf concurrency runs: a closed loop of C clients (`--concurrency C`), each
  sending its next request when its last one completes; `--warmup-request-count W` requests first,
  in their own phase: AIPerf waits for every warm-up response before profiling starts
  (ai-dynamo/aiperf docs/tutorials/warmup.md: "By default, AIPerf waits indefinitely for all
  warmup responses before starting profiling"; genai-perf's perf_analyzer likewise sends its
  warm-up requests before measuring). The warm-up requests are simulated (the prefix cache keeps
  what they left) and dropped from every statistic; the profiling phase starts when the last
  warm-up response is in. A request-rate run (`--request-rate R`) sends evenly spaced requests
  (AIPerf's constant arrival pattern); C, when given, caps the requests in flight.
- GuideLLM profiles (vllm-project/guidellm `benchmark/profiles/`): synchronous = one request at a
  time; throughput = every request at once (capped at --max-concurrency when given); concurrent =
  C closed-loop streams; constant = sends evenly spaced at R/s; poisson = exponential gaps at R/s
  (seeded); sweep (profiles/sweep.py) = synchronous, then throughput, then sweep_size - 2 constant
  rates `np.linspace(sync_rate, throughput_rate, sweep_size - 1)[1:]`, each rate the measured
  request throughput of those two. Each benchmark is its own simulation from an idle server.

Metric definitions (each tool's own):
- AIPerf / genai-perf: time_to_first_token = first token - request start; request_latency = last
  response - start; inter_token_latency = (request_latency - TTFT) / (output tokens - 1) per
  request (vLLM's TPOT); output_token_throughput_per_user = 1000 / ITL; request_throughput and
  output_token_throughput = request count and total output tokens over benchmark_duration (first
  profiling request sent to last profiling response). Statistics: avg, min, max, population std
  and numpy percentiles over requests (AIPerf: p1 p5 p10 p25 p50 p75 p90 p95 p99; genai-perf: p25
  p50 p75 p90 p95 p99).
- GuideLLM (schemas/request_stats.py): time_to_first_token_ms as above; time_per_output_token_ms
  = (last token - request start) / output tokens (the first token included);
  inter_token_latency_ms = (last token - first token) / (output tokens - 1); requests_per_second
  and output_tokens_per_second over the benchmark (first request start to last response).
"""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import numpy as np

from sim.bench.serve import Deployment, ServeClient, Timings, Workload, make_workload, simulate_workload
from sim.errors import ConfigError

AIPERF_PCTS = (1, 5, 10, 25, 50, 75, 90, 95, 99)
GENAI_PERF_PCTS = (25, 50, 75, 90, 95, 99)
GUIDELLM_PCTS = {"p001": 0.1, "p01": 1, "p05": 5, "p10": 10, "p25": 25, "p50": 50, "p75": 75, "p90": 90,
                 "p95": 95, "p99": 99, "p999": 99.9}
TOOLS = ("aiperf", "genai-perf", "guidellm")


# ---- shared ---------------------------------------------------------------------------------------------
def _window(t: Timings) -> tuple[float, float]:
    """First request sent to last response (the tools' benchmark duration)."""
    ok = t.success
    if not ok.any():
        return 0.0, float("nan")
    return float(t.start_s[ok].min()), float(t.finish_s[ok].max())


def _per_request(t: Timings) -> dict[str, np.ndarray]:
    """The per-request figures the three tools derive (seconds), over completed requests."""
    ok = t.success
    ttft = (t.first_token_s - t.start_s)[ok]
    lat = (t.finish_s - t.start_s)[ok]
    out = t.output_lens[ok].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        itl = np.where(out > 1, (lat - ttft) / np.maximum(out - 1, 1), np.nan)
    return {"ttft": ttft, "latency": lat, "itl": itl, "out": out, "in": t.prompt_lens[ok].astype(float)}


def run_phases(workload: Workload, deployment: Deployment, *, concurrency: int | None, warmup: Workload | None,
               seed: int = 0) -> Timings:
    """Warm-up phase, then the profiling phase once every warm-up response is in (one simulation,
    so the server keeps what the warm-up left in its prefix cache); the profiling requests' timings."""
    if warmup is None or not len(warmup):
        return simulate_workload(workload, deployment, max_concurrency=concurrency, seed=seed)
    alone = simulate_workload(warmup, deployment, max_concurrency=concurrency, seed=seed)
    drained = float(np.nanmax(alone.finish_s))
    both = Workload(np.concatenate([warmup.prompt_lens, workload.prompt_lens]),
                    np.concatenate([warmup.output_lens, workload.output_lens]),
                    np.concatenate([warmup.release_s, workload.release_s + drained]),
                    workload.prefix_tokens, workload.tokens_estimated)
    t = simulate_workload(both, deployment, max_concurrency=concurrency, seed=seed)
    return t.select(np.arange(len(warmup), len(both)))


# ---- AIPerf / genai-perf -------------------------------------------------------------------------------------
def _dist(values: np.ndarray, unit: str, pcts) -> dict:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return {"unit": unit, "avg": None}
    d = {"unit": unit, "avg": float(v.mean())}
    d.update({f"p{p}": float(np.percentile(v, p)) for p in pcts})
    d.update({"min": float(v.min()), "max": float(v.max()), "std": float(v.std())})
    return d


def aiperf_export(t: Timings, *, tool: str = "aiperf", concurrency: int | None, request_rate: float | None,
                  warmup: int, request_count: int, model: str, seed: int = 0) -> dict:
    """`profile_export_aiperf.json` (AIPerf) or `profile_export_genai_perf.json` (genai-perf)."""
    pcts = AIPERF_PCTS if tool == "aiperf" else GENAI_PERF_PCTS
    r = _per_request(t)
    t0, t1 = _window(t)
    dur = t1 - t0
    n = int(t.success.sum())
    out = {
        "request_throughput": {"unit": "requests/sec", "avg": n / dur},
        "request_latency": _dist(r["latency"] * 1e3, "ms", pcts),
        "time_to_first_token": _dist(r["ttft"] * 1e3, "ms", pcts),
        "inter_token_latency": _dist(r["itl"] * 1e3, "ms", pcts),
        "output_token_throughput": {"unit": "tokens/sec", "avg": float(r["out"].sum()) / dur},
        "output_token_throughput_per_user": _dist(1e3 / (r["itl"] * 1e3), "tokens/sec/user", pcts),
        "output_sequence_length": _dist(r["out"], "tokens", pcts),
        "input_sequence_length": _dist(r["in"], "tokens", pcts),
    }
    if tool == "aiperf":
        out.update({
            "benchmark_duration": {"unit": "sec", "avg": dur},
            "request_count": {"unit": "requests", "avg": float(n)},
            "total_isl": {"unit": "tokens", "avg": float(r["in"].sum())},
            "total_osl": {"unit": "tokens", "avg": float(r["out"].sum())},
            "error_request_count": None if n == len(t.success) else {"unit": "requests",
                                                                     "avg": float(len(t.success) - n)},
            "input_config": {
                "endpoint": {"model_names": [model], "type": "chat", "streaming": True},
                "input": {"random_seed": seed},
                "loadgen": {"concurrency": concurrency, "request_rate": request_rate, "request_count": request_count,
                            "warmup_request_count": warmup},
            },
        })
    else:
        out["input_config"] = {"model": [model], "concurrency": concurrency, "request_rate": request_rate,
                               "request_count": request_count, "warmup_request_count": warmup,
                               "random_seed": seed, "streaming": True}
    return out


_AIPERF_CSV_ROWS = (("request_latency", "Request Latency (ms)"), ("time_to_first_token", "Time to First Token (ms)"),
                    ("inter_token_latency", "Inter Token Latency (ms)"),
                    ("output_token_throughput_per_user", "Output Token Throughput Per User (tokens/sec/user)"),
                    ("output_sequence_length", "Output Sequence Length (tokens)"),
                    ("input_sequence_length", "Input Sequence Length (tokens)"))


def aiperf_csv(export: dict, tool: str = "aiperf") -> str:
    """The CSV export: the distributions, a blank line, then the single values."""
    pcts = AIPERF_PCTS if tool == "aiperf" else GENAI_PERF_PCTS
    cols = ["avg", "min", "max", *(f"p{p}" for p in pcts), "std"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Metric", *cols])
    for key, label in _AIPERF_CSV_ROWS:
        d = export[key]
        w.writerow([label, *(("" if d.get(c) is None else f"{d[c]:.2f}") for c in cols)])
    w.writerow([])
    w.writerow(["Metric", "Value"])
    w.writerow(["Request Throughput (requests/sec)", f"{export['request_throughput']['avg']:.2f}"])
    w.writerow(["Output Token Throughput (tokens/sec)", f"{export['output_token_throughput']['avg']:.2f}"])
    if "benchmark_duration" in export:
        w.writerow(["Benchmark Duration (sec)", f"{export['benchmark_duration']['avg']:.2f}"])
        w.writerow(["Request Count (requests)", f"{export['request_count']['avg']:.0f}"])
    return buf.getvalue()


def aiperf_records(t: Timings) -> list[dict]:
    """`profile_export.jsonl`: one record per profiling request (times in ns from the start)."""
    out = []
    for i in range(len(t.success)):
        meta = {"session_num": i, "turn_index": 0, "benchmark_phase": "profiling",
                "request_start_ns": int(round(t.start_s[i] * 1e9)),
                "request_end_ns": int(round(t.finish_s[i] * 1e9)) if np.isfinite(t.finish_s[i]) else None}
        if not t.success[i]:
            out.append({"metadata": meta, "metrics": {"error_isl": {"value": int(t.prompt_lens[i]), "unit": "tokens"}},
                        "error": {"code": 500, "type": "Rejected", "message": t.errors[i]}})
            continue
        ttft = (t.first_token_s[i] - t.start_s[i]) * 1e3
        lat = (t.finish_s[i] - t.start_s[i]) * 1e3
        osl = int(t.output_lens[i])
        m = {"input_sequence_length": {"value": int(t.prompt_lens[i]), "unit": "tokens"},
             "time_to_first_token": {"value": ttft, "unit": "ms"},
             "request_latency": {"value": lat, "unit": "ms"},
             "output_sequence_length": {"value": osl, "unit": "tokens"},
             "inter_chunk_latency": {"value": [g * 1e3 for g in t.itls[i]], "unit": "ms"}}
        if osl > 1:
            itl = (lat - ttft) / (osl - 1)
            m["inter_token_latency"] = {"value": itl, "unit": "ms"}
            m["output_token_throughput_per_user"] = {"value": 1e3 / itl if itl > 0 else None, "unit": "tokens/sec/user"}
        out.append({"metadata": meta, "metrics": m, "error": None})
    return out


def run_aiperf(client: ServeClient, deployment: Deployment, *, tool: str = "aiperf",
               workload: Workload | None = None) -> tuple[dict, Timings]:
    """An AIPerf / genai-perf run: `client.max_concurrency` closed-loop clients (or sends at
    `client.request_rate`), `client.num_warmups` warm-up requests dropped. The export and the
    profiling requests' timings."""
    if tool not in ("aiperf", "genai-perf"):
        raise ConfigError(f"'{tool}' is not aiperf or genai-perf", field="--client")
    rate = None if client.request_rate == float("inf") else client.request_rate
    if workload is None:
        # AIPerf's request-rate mode sends at a constant rate by default (burstiness inf in vLLM's terms)
        workload = make_workload(replace(client, burstiness=float("inf")) if rate else client)
    warm = None
    if client.num_warmups:  # the warm-up requests are drawn like the profiling ones (its first ones, cycled)
        k = np.arange(client.num_warmups) % len(workload)
        warm = Workload(workload.prompt_lens[k], workload.output_lens[k],
                        np.sort(workload.release_s[k]) if rate else np.zeros(len(k)), workload.prefix_tokens)
    t = run_phases(workload, deployment, concurrency=client.max_concurrency, warmup=warm, seed=client.seed)
    export = aiperf_export(t, tool=tool, concurrency=client.max_concurrency, request_rate=rate,
                           warmup=client.num_warmups, request_count=len(workload), model=deployment.model,
                           seed=client.seed)
    return export, t


# ---- GuideLLM ---------------------------------------------------------------------------------------------------
def _gdist(values: np.ndarray) -> dict:
    """GuideLLM's DistributionSummary."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return {"mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "std_dev": 0.0, "min": 0.0, "max": 0.0,
                "count": 0, "total_sum": 0.0, "percentiles": {k: 0.0 for k in GUIDELLM_PCTS}}
    vals, counts = np.unique(v, return_counts=True)
    return {"mean": float(v.mean()), "median": float(np.median(v)), "mode": float(vals[counts.argmax()]),
            "variance": float(v.var()), "std_dev": float(v.std()), "min": float(v.min()), "max": float(v.max()),
            "count": int(len(v)), "total_sum": float(v.sum()),
            "percentiles": {k: float(np.percentile(v, p)) for k, p in GUIDELLM_PCTS.items()}}


def _status(values: np.ndarray) -> dict:
    """StatusDistributionSummary: the simulated requests all succeed or are rejected (errored)."""
    d = _gdist(values)
    return {"successful": d, "incomplete": _gdist(np.zeros(0)), "errored": _gdist(np.zeros(0)), "total": d}


def guidellm_benchmark(t: Timings, strategy: dict) -> dict:
    """One entry of GuideLLM's `benchmarks` list (metrics in its units)."""
    ok = t.success
    r = _per_request(t)
    t0, t1 = _window(t)
    dur = t1 - t0
    first, last = t.first_token_s[ok], t.finish_s[ok]
    start = t.start_s[ok]
    out = r["out"]
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = 1e3 * (last - start) / out
        itl = np.where(out > 1, 1e3 * (last - first) / np.maximum(out - 1, 1), np.nan)
    n = int(ok.sum())
    rps = _status(np.zeros(0))
    rps["successful"]["mean"] = rps["total"]["mean"] = n / dur  # completed requests over the benchmark
    ops = _status(np.zeros(0))
    ops["successful"]["mean"] = ops["total"]["mean"] = float(out.sum()) / dur
    tps = _status(np.zeros(0))
    tps["successful"]["mean"] = tps["total"]["mean"] = float(out.sum() + r["in"].sum()) / dur
    return {
        "type_": "generative_benchmark",
        "config": {"strategy": strategy},
        "run_stats": {"start_time": t0, "end_time": t1, "requests_made": {"successful": n, "errored": int((~ok).sum()),
                                                                         "incomplete": 0, "total": len(ok)}},
        "metrics": {
            "requests_per_second": rps,
            "request_concurrency": _status(np.zeros(0)),
            "request_latency": _status(r["latency"]),
            "prompt_token_count": _status(r["in"]),
            "output_token_count": _status(out),
            "time_to_first_token_ms": _status(r["ttft"] * 1e3),
            "time_per_output_token_ms": _status(tpot),
            "inter_token_latency_ms": _status(itl),
            "output_tokens_per_second": ops,
            "tokens_per_second": tps,
        },
    }


def _strategy_workload(client: ServeClient, kind: str, rate: float | None) -> tuple[Workload, int | None]:
    """The requests of one GuideLLM strategy and the in-flight cap that shapes it."""
    base = make_workload(replace(client, request_rate=float("inf"), burstiness=1.0, ramp_up_strategy=None))
    n = len(base)
    if kind == "synchronous":
        return base, 1
    if kind == "throughput":
        return base, client.max_concurrency
    if kind == "concurrent":
        return base, int(rate)
    if kind == "constant":
        rel = np.arange(n) / rate
    else:  # poisson
        rel = np.cumsum(np.random.default_rng(client.seed).exponential(1.0 / rate, size=n))
    return replace(base, release_s=rel), client.max_concurrency


def run_guidellm(client: ServeClient, deployment: Deployment, *, profile: str = "sweep",
                 rates: tuple[float, ...] | None = None) -> dict:
    """A GuideLLM run: `{"benchmarks": [...]}` with one entry per strategy (see the module docstring)."""
    runs: list[tuple[str, float | None]] = []
    if profile == "sweep":
        size = int(rates[0]) if rates else 10
        if size < 2:
            raise ConfigError(f"a sweep needs at least 2 benchmarks, got {size}", field="--guidellm-rate")
        runs = [("synchronous", None), ("throughput", None)]
    elif profile in ("synchronous", "throughput"):
        runs = [(profile, None)]
    else:
        if not rates:
            raise ConfigError(f"profile {profile} needs --guidellm-rate", field="--guidellm-rate")
        if any(r <= 0 for r in rates):
            raise ConfigError("rates must be > 0", field="--guidellm-rate")
        if profile == "concurrent" and any(r != int(r) for r in rates):
            raise ConfigError("concurrent streams are whole numbers", field="--guidellm-rate")
        runs = [(profile, r) for r in rates]
    benchmarks = []

    def one(kind: str, rate: float | None) -> dict:
        wl, cap = _strategy_workload(client, kind, rate)
        t = simulate_workload(wl, deployment, max_concurrency=cap, seed=client.seed)
        strategy = {"type_": kind, **({"rate": rate} if kind in ("constant", "poisson") else {}),
                    **({"streams": int(rate)} if kind == "concurrent" else {}),
                    **({"max_concurrency": cap} if cap and kind == "throughput" else {})}
        return guidellm_benchmark(t, strategy)

    for kind, rate in runs:
        benchmarks.append(one(kind, rate))
    if profile == "sweep":
        sync = benchmarks[0]["metrics"]["requests_per_second"]["successful"]["mean"]
        thr = benchmarks[1]["metrics"]["requests_per_second"]["successful"]["mean"]
        for rate in list(np.linspace(sync, thr, size - 1))[1:]:
            benchmarks.append(one("constant", float(rate)))
    return {"benchmarks": benchmarks, "args": {"profile": profile, "max_requests": client.num_prompts,
                                              "random_seed": client.seed},
            "infersim": {"simulated": True, "hw": deployment.hw, "model": deployment.model,
                         "engine": deployment.engine, "quant": deployment.quant}}
