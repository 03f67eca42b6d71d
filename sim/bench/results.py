"""Benchmark result files read back: the load each one ran and what it measured, so the simulator
can replay it (`infersim validate --measured`, `infersim calibrate --from-bench`).

Formats (detected from the content):
- `vllm bench serve --save-result` JSON (`num_prompts`, `request_rate`, `burstiness`,
  `max_concurrency`, `completed`, `output_throughput`, `mean_ttft_ms`, ...; `burstiness` and
  `max_concurrency` may be absent, as in releases before those flags; with --save-detailed
  also `input_lens` / `output_lens`, which the replay then uses request by request; without them
  every request gets the mean lengths, `total_input_tokens` / `total_output_tokens` over
  `completed`). Release times are vLLM's for the file's rate and burstiness with seed `seed` (a
  --metadata key) or vLLM's default 0.
- `python -m sglang.bench_serving --output-file` JSON lines (its key names: `total_throughput`,
  `mean_e2e_latency_ms`, no `num_prompts`: the completed requests are replayed), one load point
  per line; vLLM's definitions, SGLang's length spread.
- AIPerf `profile_export_aiperf.json` / genai-perf `profile_export_genai_perf.json`: the load from
  `input_config` (concurrency or request rate, request count, warm-up count), lengths from
  `input_sequence_length` / `output_sequence_length` (or per request from a `profile_export.jsonl`
  beside it).
- GuideLLM `benchmarks.json`: one load point per benchmark (its strategy: synchronous,
  throughput, concurrent streams, constant or poisson rate), lengths from its token counts.

A file without a field the replay needs is one line naming the file and the field (exit 2).

Every file becomes `MeasuredPoint`s with the measured figures under common names (`METRICS`); a
replay computes the same figures with the same tool's definitions (`predict`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from sim.bench.serve import Deployment, ServeClient, Workload, make_workload, release_times, run_client
from sim.errors import ConfigError

#: common names of the figures compared (ms for latencies, per second for throughputs). For AIPerf,
#: genai-perf and GuideLLM `tpot_*` is their per-request inter-token latency, (latency - TTFT) /
#: (output tokens - 1): vLLM's TPOT; `itl_*` is vLLM's pooled token gaps (vLLM files only).
METRICS = ("ttft_mean_ms", "ttft_median_ms", "ttft_p99_ms", "tpot_mean_ms", "tpot_median_ms", "tpot_p99_ms",
           "itl_mean_ms", "itl_median_ms", "itl_p99_ms", "e2el_mean_ms", "output_tps", "request_tps", "total_tps")


@dataclass
class MeasuredPoint:
    """One load point of a result file: how to replay it and what it measured."""

    tool: str  # vllm | sglang | aiperf | genai-perf | guidellm
    file: str
    label: str
    client: ServeClient
    workload: Workload
    measured: dict[str, float]
    strategy: str | None = None  # GuideLLM
    extra: dict = field(default_factory=dict)


def _get(d: dict, path: str, file: str, *, required: bool = True, default=None, prefix: str = ""):
    """d[a][b]... for path "a.b...", or a one-line error naming the file and the field (`prefix`: where
    `d` sits in the file)."""
    cur = d
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur:
            if required:
                raise ConfigError("missing (needed to replay this result)", file=file, field=prefix + path)
            return default
        cur = cur[key]
    return cur


def _num(v, file: str, path: str, *, positive: bool = False) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"not a number: {v!r}", file=file, field=path) from None
    if math.isnan(x) or (positive and not x > 0):
        raise ConfigError(f"must be {'> 0' if positive else 'a number'}, got {v!r}", file=file, field=path)
    return x


def _lengths(prompt: float, output: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    return (np.full(n, max(1, int(round(prompt))), dtype=np.int64),
            np.full(n, max(1, int(round(output))), dtype=np.int64))


def detect(data, file: str) -> str:
    if isinstance(data, dict) and isinstance(data.get("benchmarks"), list):
        return "guidellm"
    if isinstance(data, dict) and isinstance(data.get("time_to_first_token"), dict):
        cfg = data.get("input_config") or {}
        return "aiperf" if ("benchmark_duration" in data or "loadgen" in cfg) else "genai-perf"
    if isinstance(data, dict) and "random_range_ratio" in data and "dataset_name" in data and \
            ("total_throughput" in data or "mean_e2e_latency_ms" in data):
        return "sglang"  # sglang.bench_serving --output-file: its own key names, no num_prompts
    if isinstance(data, dict) and ("num_prompts" in data or "mean_ttft_ms" in data or "backend" in data):
        return "vllm"
    raise ConfigError("not a vllm bench serve, AIPerf, genai-perf or GuideLLM result (no num_prompts, "
                      "time_to_first_token or benchmarks field)", file=file)


def read_results(path: str | Path) -> list[MeasuredPoint]:
    """Every load point of a result file."""
    p = Path(path)
    file = str(p)
    if not p.is_file():
        raise ConfigError("file not found", file=file)
    if p.suffix.lower() == ".csv":
        raise ConfigError("the CSV export is not read: give the JSON beside it (profile_export_aiperf.json, "
                          "profile_export_genai_perf.json, GuideLLM's benchmarks.json)", file=file)
    try:
        text = p.read_text(encoding="utf-8")
        if "Serving Benchmark Result" in text and not text.lstrip().startswith("{"):
            return _read_vllm(vllm_console(text, file), file, "vllm")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read: {e}", file=file) from None
    except json.JSONDecodeError as e:
        # vLLM's --append-result: one JSON object per line, each a run (a sweep kept in one file)
        lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        if len(lines) < 2:
            raise ConfigError(f"not JSON: {e.msg}", file=file, line=e.lineno) from None
        points = []
        for i, ln in lines:
            try:
                data = json.loads(ln)
            except json.JSONDecodeError as e2:
                raise ConfigError(f"not JSON: {e2.msg}", file=file, line=i) from None
            tool = detect(data, file)
            if tool not in ("vllm", "sglang"):
                raise ConfigError("one JSON object per line is read as vllm bench serve --append-result or "
                                  "sglang.bench_serving --output-file output", file=file, line=i)
            points += _READERS[tool](data, file, tool)
        return points
    tool = detect(data, file)
    return _READERS[tool](data, file, tool)


# ---- vLLM ------------------------------------------------------------------------------------------------------
def vllm_measured(r: dict) -> dict[str, float]:
    """The common figures of a vLLM result dict (those it has)."""
    keys = {"ttft_mean_ms": "mean_ttft_ms", "ttft_median_ms": "median_ttft_ms", "ttft_p99_ms": "p99_ttft_ms",
            "tpot_mean_ms": "mean_tpot_ms", "tpot_median_ms": "median_tpot_ms", "tpot_p99_ms": "p99_tpot_ms",
            "itl_mean_ms": "mean_itl_ms", "itl_median_ms": "median_itl_ms", "itl_p99_ms": "p99_itl_ms",
            "e2el_mean_ms": "mean_e2el_ms", "output_tps": "output_throughput", "request_tps": "request_throughput",
            "total_tps": "total_token_throughput"}
    return {k: float(r[v]) for k, v in keys.items() if isinstance(r.get(v), (int, float))}


#: the console lines of `vllm bench serve` -> its result JSON keys (older releases print "Total Token")
_CONSOLE = {"successful requests": "completed", "failed requests": "failed",
            "maximum request concurrency": "max_concurrency", "request rate configured (rps)": "request_rate",
            "traffic request rate": "request_rate", "burstiness factor": "burstiness",
            "benchmark duration (s)": "duration", "total input tokens": "total_input_tokens",
            "total generated tokens": "total_output_tokens", "request throughput (req/s)": "request_throughput",
            "output token throughput (tok/s)": "output_throughput",
            "total token throughput (tok/s)": "total_token_throughput"}
_CONSOLE_LINE = re.compile(r"^\s*(?:#\s*)?([A-Za-z][A-Za-z0-9 ().,/_-]*?):\s+([-+0-9.eE]+|inf)\b")


def vllm_console(text: str, file: str) -> dict:
    """The block `vllm bench serve` prints (pasted into an issue or a log), as its result dict: the
    load (successful + failed requests, concurrency, rate, burstiness when printed, else 1.0), the
    mean lengths from the token totals, and every Mean / Median / P.. metric line."""
    d: dict = {}
    for line in text.splitlines():
        m = _CONSOLE_LINE.match(line)
        if not m:
            continue
        label, value = m.group(1).strip().lower(), m.group(2)
        v = float(value)
        stat = re.match(r"^(mean|median|p[0-9.]+) (ttft|tpot|itl|e2el) \(ms\)$", label)
        if stat:
            d[f"{stat.group(1)}_{stat.group(2)}_ms"] = v
        elif label in _CONSOLE:
            d[_CONSOLE[label]] = v
    for key, label in (("completed", "Successful requests"), ("total_input_tokens", "Total input tokens"),
                       ("total_output_tokens", "Total generated tokens"),
                       ("output_throughput", "Output token throughput (tok/s)")):
        if key not in d:
            raise ConfigError("missing (needed to replay this result)", file=file, field=label)
    d["num_prompts"] = int(d["completed"] + d.get("failed", 0))
    d.setdefault("request_rate", "inf")
    d.setdefault("burstiness", 1.0)
    conc = d.get("max_concurrency")
    d["max_concurrency"] = None if conc is None else int(conc)
    return d


def _read_vllm(d: dict, file: str, tool: str) -> list[MeasuredPoint]:
    n = int(_num(_get(d, "num_prompts", file), file, "num_prompts", positive=True))
    rate_raw = _get(d, "request_rate", file)
    rate = float("inf") if rate_raw in ("inf", float("inf")) else _num(rate_raw, file, "request_rate", positive=True)
    # older vLLM releases had neither --burstiness nor --max-concurrency (Poisson arrivals, no cap)
    burst = _num(d.get("burstiness", 1.0), file, "burstiness", positive=True)
    conc = d.get("max_concurrency")
    conc = None if conc is None else int(_num(conc, file, "max_concurrency", positive=True))
    _num(_get(d, "output_throughput", file), file, "output_throughput")
    seed = int(d.get("seed", 0)) if str(d.get("seed", 0)).lstrip("-").isdigit() else 0
    if "input_lens" in d or "output_lens" in d:
        ins = np.asarray(_get(d, "input_lens", file), dtype=np.int64)
        outs = np.asarray(_get(d, "output_lens", file), dtype=np.int64)
        if len(ins) != len(outs):
            raise ConfigError(f"{len(outs)} entries, input_lens has {len(ins)}", file=file, field="output_lens")
        keep = outs > 0  # failed requests (output 0) carry no length to replay
        ins, outs = np.maximum(ins[keep], 1), outs[keep]
        n_req = len(ins)
    else:
        done = _num(_get(d, "completed", file), file, "completed", positive=True)
        ins, outs = _lengths(_num(_get(d, "total_input_tokens", file), file, "total_input_tokens") / done,
                             _num(_get(d, "total_output_tokens", file), file, "total_output_tokens") / done, n)
        n_req = n
    client = ServeClient(num_prompts=n_req, request_rate=rate, burstiness=burst, max_concurrency=conc, seed=seed,
                         percentile_metrics=("ttft", "tpot", "itl", "e2el"), metric_percentiles=(99.0,))
    wl = Workload(ins, outs, release_times(client, n_req))
    label = (f"C={conc}" if conc else "") + ("" if rate == float("inf") else f" {rate:g} req/s")
    return [MeasuredPoint(tool, file, label.strip() or "all at once", client, wl, vllm_measured(d))]


def _read_sglang(d: dict, file: str, tool: str) -> list[MeasuredPoint]:
    """`python -m sglang.bench_serving --output-file`: vLLM's metric definitions (it derives from
    vLLM's benchmark_serving) under its own names; the random lengths spread as SGLang draws them
    ([I r, I], ServeClient.range_mode "sglang") when the file has no per-request lengths."""
    if d.get("request_rate") == "trace":
        raise ConfigError("a trace-timed run is not replayed (its timestamps are not in the file)", file=file,
                          field="request_rate")
    v = dict(d)
    if "num_prompts" not in v:
        v["num_prompts"] = _num(_get(d, "completed", file), file, "completed", positive=True)
    v.setdefault("total_token_throughput", d.get("total_throughput"))
    v.setdefault("mean_e2el_ms", d.get("mean_e2e_latency_ms"))
    points = _read_vllm(v, file, "sglang")
    spread = d.get("dataset_name") == "random" and "input_lens" not in d and \
        isinstance(d.get("random_input_len"), int) and isinstance(d.get("random_output_len"), int)
    for p in points:
        p.client = replace(p.client, range_mode="sglang")
        if spread:  # the lengths as SGLang drew them, not every request at the mean
            r = _num(d.get("random_range_ratio") or 0.0, file, "random_range_ratio")
            p.client = replace(p.client, random_input_len=d["random_input_len"],
                               random_output_len=d["random_output_len"], random_range_ratio=min(max(r, 0.0), 1.0))
            p.workload = make_workload(p.client)
    return points


# ---- AIPerf / genai-perf --------------------------------------------------------------------------------------
def aiperf_measured(e: dict) -> dict[str, float]:
    out = {}
    for name, key in (("ttft", "time_to_first_token"), ("tpot", "inter_token_latency"), ("e2el", "request_latency")):
        d = e.get(key) or {}
        for stat, src in (("mean", "avg"), ("median", "p50"), ("p99", "p99")):
            if isinstance(d.get(src), (int, float)) and (name != "e2el" or stat == "mean"):
                out[f"{name}_{stat}_ms"] = float(d[src])
    for name, key in (("output_tps", "output_token_throughput"), ("request_tps", "request_throughput")):
        v = (e.get(key) or {}).get("avg")
        if isinstance(v, (int, float)):
            out[name] = float(v)
    return out


def _read_aiperf(d: dict, file: str, tool: str) -> list[MeasuredPoint]:
    _get(d, "input_config", file)
    base = "input_config.loadgen" if tool == "aiperf" else "input_config"
    load = _get(d, base, file)
    conc = load.get("concurrency") if isinstance(load, dict) else None
    rate = load.get("request_rate") if isinstance(load, dict) else None
    if conc is None and rate is None:
        raise ConfigError("missing (a concurrency or request_rate is needed to replay this result)", file=file,
                          field=f"{base}.concurrency")
    conc = None if conc is None else int(_num(conc, file, f"{base}.concurrency", positive=True))
    rate_f = float("inf") if rate is None else _num(rate, file, f"{base}.request_rate", positive=True)
    warm = int(load.get("warmup_request_count") or 0) if isinstance(load, dict) else 0
    jsonl = Path(file).with_name("profile_export.jsonl")
    ins = outs = None
    if jsonl.is_file():
        ins, outs = [], []
        for i, line in enumerate(jsonl.read_text().splitlines(), 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            m = rec.get("metrics") or {}
            if rec.get("error") or (rec.get("metadata") or {}).get("benchmark_phase", "profiling") != "profiling":
                continue
            ins.append(int(_get(m, "input_sequence_length.value", f"{jsonl}:{i}")))
            outs.append(int(_get(m, "output_sequence_length.value", f"{jsonl}:{i}")))
        ins, outs = np.array(ins, dtype=np.int64), np.array(outs, dtype=np.int64)
    if ins is None or not len(ins):
        if tool == "aiperf":
            n = int(_num(_get(d, "request_count.avg", file), file, "request_count.avg", positive=True))
        else:
            n = int(_num(_get(d, "input_config.request_count", file), file, "input_config.request_count",
                         positive=True))
        ins, outs = _lengths(_num(_get(d, "input_sequence_length.avg", file), file, "input_sequence_length.avg"),
                             _num(_get(d, "output_sequence_length.avg", file), file, "output_sequence_length.avg"), n)
    _get(d, "time_to_first_token.avg", file)
    n = len(ins)
    client = ServeClient(num_prompts=n, request_rate=rate_f, burstiness=float("inf"), max_concurrency=conc,
                         num_warmups=warm)
    wl = Workload(ins, outs, release_times(client, n))
    label = f"C={conc}" if conc else f"{rate_f:g} req/s"
    return [MeasuredPoint(tool, file, label, client, wl, aiperf_measured(d), extra={"warmup": warm})]


# ---- GuideLLM -------------------------------------------------------------------------------------------------
def guidellm_measured(b: dict) -> dict[str, float]:
    m = b.get("metrics") or {}
    out = {}
    for name, key in (("ttft", "time_to_first_token_ms"), ("tpot", "inter_token_latency_ms")):
        s = (m.get(key) or {}).get("successful") or {}
        for stat, v in (("mean", s.get("mean")), ("median", s.get("median")),
                        ("p99", (s.get("percentiles") or {}).get("p99"))):
            if isinstance(v, (int, float)):
                out[f"{name}_{stat}_ms"] = float(v)
    for name, key in (("output_tps", "output_tokens_per_second"), ("request_tps", "requests_per_second"),
                      ("total_tps", "tokens_per_second")):
        v = ((m.get(key) or {}).get("successful") or {}).get("mean")
        if isinstance(v, (int, float)):
            out[name] = float(v)
    return out


def _read_guidellm(d: dict, file: str, tool: str) -> list[MeasuredPoint]:
    from sim.bench.tools import _strategy_workload

    points = []
    seed = int((d.get("args") or {}).get("random_seed") or 0)
    for i, b in enumerate(d["benchmarks"]):
        where = f"benchmarks.{i}"
        strat = _get(b, "config.strategy", file, required=False) or _get(b, "args.strategy", file, required=False) \
            or _get(b, "scheduler.strategy", file, required=False)
        if not isinstance(strat, dict):
            raise ConfigError("missing (needed to replay this result)", file=file, field=f"{where}.config.strategy")
        kind = strat.get("type_") or strat.get("type")
        if kind not in ("synchronous", "throughput", "concurrent", "constant", "poisson"):
            raise ConfigError(f"unknown strategy {kind!r}", file=file, field=f"{where}.config.strategy.type_")
        rate = strat.get("rate") if kind in ("constant", "poisson") else strat.get("streams")
        if kind in ("constant", "poisson", "concurrent"):
            field_name = "rate" if kind != "concurrent" else "streams"
            rate = _num(rate, file, f"{where}.config.strategy.{field_name}", positive=True)
        m = _get(b, "metrics", file, prefix=f"{where}.")
        mw = f"{where}.metrics."
        prompt = _num(_get(m, "prompt_token_count.successful.mean", file, prefix=mw), file,
                      f"{mw}prompt_token_count.successful.mean")
        out_tok = _num(_get(m, "output_token_count.successful.mean", file, prefix=mw), file,
                       f"{mw}output_token_count.successful.mean")
        n = int(_num(_get(m, "output_token_count.successful.count", file, prefix=mw), file,
                     f"{mw}output_token_count.successful.count", positive=True))
        _get(m, "time_to_first_token_ms.successful.mean", file, prefix=mw)
        client = ServeClient(num_prompts=n, random_input_len=max(1, round(prompt)),
                             random_output_len=max(1, round(out_tok)), seed=seed,
                             max_concurrency=strat.get("max_concurrency"))
        wl, cap = _strategy_workload(client, kind, rate)
        client = replace(client, max_concurrency=cap)
        label = kind + ("" if rate is None else f" {rate:.4g}")
        points.append(MeasuredPoint(tool, file, label, client, wl, guidellm_measured(b), strategy=kind))
    return points


_READERS = {"vllm": _read_vllm, "sglang": _read_sglang, "aiperf": _read_aiperf, "genai-perf": _read_aiperf,
            "guidellm": _read_guidellm}


# ---- the replay -----------------------------------------------------------------------------------------------
def predict(point: MeasuredPoint, deployment: Deployment) -> dict[str, float]:
    """Replay a load point on the simulated `deployment`; the same figures, by the same tool's rules."""
    if point.tool in ("vllm", "sglang"):
        return vllm_measured(run_client(point.client, deployment, workload=point.workload, date="replay",
                                        per_request=False))
    if point.tool in ("aiperf", "genai-perf"):
        from sim.bench.tools import run_aiperf

        export, _ = run_aiperf(point.client, deployment, tool=point.tool, workload=point.workload)
        return aiperf_measured(export)
    from sim.bench.serve import simulate_workload
    from sim.bench.tools import guidellm_benchmark

    t = simulate_workload(point.workload, deployment, max_concurrency=point.client.max_concurrency,
                          seed=point.client.seed)
    return guidellm_measured(guidellm_benchmark(t, {"type_": point.strategy}))


@dataclass(frozen=True)
class ComparisonRow:
    point: str
    metric: str
    measured: float
    predicted: float | None

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None or not self.measured:
            return None
        return (self.predicted / self.measured - 1.0) * 100.0


def compare(points: list[MeasuredPoint], deployment: Deployment) -> list[ComparisonRow]:
    """Measured vs predicted for every figure each point has."""
    rows = []
    for p in points:
        pred = predict(p, deployment)
        for m in METRICS:
            if m in p.measured:
                rows.append(ComparisonRow(p.label, m, p.measured[m], pred.get(m)))
    return rows
