"""`vllm bench serve`, replayed against the simulator instead of a server.

What the client does, and where this module copies it from (vllm-project/vllm,
`vllm/benchmarks/serve.py` at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 and
`vllm/benchmarks/datasets/random.py`, `sharegpt.py` at 237145ea190a901f93c570f157091fe43835bc63):

- Dataset `random` (`RandomDataset.get_sampling_params`): with r = --random-range-ratio in [0, 1),
  input lengths are integers uniform in [floor(I (1 - r)), ceil(I (1 + r))] and output lengths in
  [max(1, floor(O (1 - r))), max(1, ceil(O (1 + r)))], drawn with `numpy.random.default_rng(seed)`
  (inputs first, then outputs), so the same --seed gives vLLM's own lengths; each prompt is
  --random-prefix-len shared tokens (one prefix for all requests) plus its sampled length. vLLM
  subtracts the tokenizer's special tokens (Llama 3: the BOS) from I before sampling and the
  server adds them back; without a tokenizer this module takes 0 special tokens, so the prompt the
  server computes has the sampled length plus the prefix. For `random` vLLM forces ignore_eos
  (every request generates its sampled length), as the simulator always does.
- Dataset `sharegpt` (`ShareGPTDataset`): conversations with >= 2 turns, shuffled with Python's
  `random.seed(seed)`, the first turn the prompt and the second the output (or
  --sharegpt-output-len), kept when prompt >= 4, output >= 4, prompt <= 1024 and prompt + output
  <= 2048 tokens (`is_valid_sequence`). There is no tokenizer here: tokens are estimated as
  ceil(characters / 4) (`workloads.importers.estimate_tokens`) and the result says so.
- Arrivals (`get_request`): rate R = inf sends everything at t = 0; otherwise the gaps are
  Gamma(shape = burstiness, scale = 1 / (R x burstiness)) drawn one by one from numpy's legacy
  generator seeded with --seed (`np.random.seed(args.seed)` in `main_async`), accumulated, and
  rescaled so the last request goes out at exactly N / R (vLLM's `normalize_factor`). Ramp-up
  (linear / exponential from --ramp-up-start-rps to --ramp-up-end-rps) varies R per request and
  skips the rescaling, as vLLM does.
- --max-concurrency C (`limited_request_func`): an asyncio semaphore. Each request is released by
  the generator at its arrival time and sent when one of C slots is free, in release order;
  `start_time` (what TTFT and latency count from) is when it is sent, `client_queue_time` the wait
  for the slot. Without C every request is sent on release.
- Metrics (`calculate_metrics`, `process_one_metric`): TTFT = first token - send time (the
  server's queueing included); TPOT = (latency - TTFT) / (output tokens - 1) over requests with
  more than one token; ITL = every gap between consecutive tokens, pooled; E2EL = latency; means,
  medians, standard deviations (population) and `np.percentile` (linear) of each, in ms;
  throughputs = completed requests, output tokens and input + output tokens over the benchmark
  duration, which runs from the benchmark's start (t = 0, before the first inter-arrival gap) to
  the last response; goodput = requests meeting every --goodput SLO over the duration.

The simulated server streams one token per engine iteration: a request's tokens come out at the
ends of the iterations between its first token and its finish. A fast-forwarded run of k decode
steps (sim.engine.replica) is split into k equal steps (its step times differ by the growth of
one token of KV per step, well under a percent). A request that missed iterations (preempted and
recomputed) or produced several tokens per step (speculative decoding) gets its decode time
spread evenly over its output tokens instead.

`run_client(client, deployment)` is the entry point: one load point in, vLLM's result dict out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from sim.bench.datasets import SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL, SHAREGPT_MIN_LEN  # noqa: F401 (re-exported)
from sim.bench.datasets import Workload, make_workload, release_times, sample_random, sample_sharegpt  # noqa: F401
from sim.errors import ConfigError

INF = float("inf")
#: what `--percentile-metrics` may name (vllm/benchmarks/serve.py, add_cli_args help)
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
DATASETS = ("random", "sharegpt")


@dataclass(frozen=True)
class ServeClient:
    """The settings of one `vllm bench serve` run that change what it measures (vLLM's defaults)."""

    dataset_name: str = "random"
    dataset_path: str | None = None
    num_prompts: int = 1000
    request_rate: float = INF
    burstiness: float = 1.0
    max_concurrency: int | None = None
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    sharegpt_output_len: int | None = None
    ignore_eos: bool = False
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl")
    metric_percentiles: tuple[float, ...] = (99.0,)
    goodput: Mapping[str, float] = field(default_factory=dict)  # SLO name -> ms
    seed: int = 0
    num_warmups: int = 0
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: int | None = None
    ramp_up_end_rps: int | None = None
    backend: str = "openai"
    label: str | None = None
    #: how --random-range-ratio r spreads lengths: "vllm" (today's vLLM: [I(1-r), I(1+r)], r < 1) or
    #: "sglang" (SGLang's bench_serving and vLLM before that change: [I r, I], r <= 1, 1 = fixed)
    range_mode: str = "vllm"

    def check(self) -> "ServeClient":
        """The client's own checks (vLLM's `main_async`, `get_request`, `get_sampling_params`), as
        one-line errors naming the flag."""
        if self.dataset_name not in DATASETS:
            raise ConfigError(f"'{self.dataset_name}' is not one of {', '.join(DATASETS)}", field="--dataset-name")
        if self.dataset_name == "sharegpt" and not self.dataset_path:
            raise ConfigError("the sharegpt dataset needs --dataset-path", field="--dataset-path")
        if self.dataset_name == "random" and self.dataset_path:
            raise ConfigError("cannot use the 'random' dataset with --dataset-path", field="--dataset-path")
        if self.num_prompts < 1:
            raise ConfigError(f"must be >= 1, got {self.num_prompts}", field="--num-prompts")
        if not self.request_rate > 0:
            raise ConfigError(f"must be > 0 (inf sends everything at once), got {self.request_rate}",
                              field="--request-rate")
        if not self.burstiness > 0:
            raise ConfigError(f"a positive burstiness factor is expected, got {self.burstiness}", field="--burstiness")
        if self.max_concurrency is not None and self.max_concurrency <= 0:
            raise ConfigError(f"must be greater than 0, got {self.max_concurrency}", field="--max-concurrency")
        if self.range_mode not in ("vllm", "sglang"):
            raise ConfigError(f"'{self.range_mode}' is not vllm or sglang", field="range_mode")
        top_ok = self.random_range_ratio < 1.0 if self.range_mode == "vllm" else self.random_range_ratio <= 1.0
        if not (0.0 <= self.random_range_ratio and top_ok):
            raise ConfigError(f"must be in [0, 1{')' if self.range_mode == 'vllm' else ']'}, got "
                              f"{self.random_range_ratio}", field="--random-range-ratio")
        for v, f in ((self.random_input_len, "--random-input-len"), (self.random_output_len, "--random-output-len"),
                     (self.random_prefix_len, "--random-prefix-len")):
            if v < 0:
                raise ConfigError(f"must be >= 0, got {v}", field=f)
        shortest = math.floor(self.random_input_len * (1 - self.random_range_ratio)) if self.range_mode == "vllm" \
            else min(self.random_input_len, 1)
        if self.dataset_name == "random" and self.random_prefix_len + shortest < 1:
            raise ConfigError("too small: the shortest prompt (prefix + sampled) would have no token",
                              field="--random-input-len")
        bad = [m for m in self.percentile_metrics if m not in PERCENTILE_METRICS]
        if bad:
            raise ConfigError(f"unknown metric '{bad[0]}'; allowed: {', '.join(PERCENTILE_METRICS)}",
                              field="--percentile-metrics")
        if any(not (0 <= p <= 100) for p in self.metric_percentiles):
            raise ConfigError("percentiles must be in [0, 100]", field="--metric-percentiles")
        for name, v in self.goodput.items():
            if name not in ("ttft", "tpot", "e2el"):
                raise ConfigError(f"invalid metric name '{name}'; one of ttft, tpot, e2el", field="--goodput")
            if v < 0:
                raise ConfigError(f"invalid value for {name}: {v} (must be non-negative)", field="--goodput")
        if self.ramp_up_strategy is not None:
            if self.ramp_up_strategy not in ("linear", "exponential"):
                raise ConfigError(f"'{self.ramp_up_strategy}' is not linear or exponential", field="--ramp-up-strategy")
            if self.request_rate != INF:
                raise ConfigError("when using ramp-up, do not specify --request-rate", field="--request-rate")
            if self.ramp_up_start_rps is None or self.ramp_up_end_rps is None:
                raise ConfigError("give both --ramp-up-start-rps and --ramp-up-end-rps", field="--ramp-up-strategy")
            if self.ramp_up_start_rps < 0 or self.ramp_up_start_rps > self.ramp_up_end_rps:
                raise ConfigError("ramp-up start RPS must be >= 0 and <= the end RPS", field="--ramp-up-start-rps")
            if self.ramp_up_strategy == "exponential" and self.ramp_up_start_rps == 0:
                raise ConfigError("for exponential ramp-up, the start RPS cannot be 0", field="--ramp-up-start-rps")
        return self


@dataclass(frozen=True)
class Deployment:
    """What serves the requests: infersim's names (as `infersim run` takes them) and engine
    overrides (EngineConfig fields). `cost_params` replaces the profile-derived cost parameters
    (calibration fits use it). `efficiency_overrides` replaces fields of the profile's efficiency entry the
    engine is priced with (`sim.catalog.hardware.with_efficiency_fields`; a diagnostic's what-if, e.g.
    {"per_sequence_ms": 0.0}); None: the profile as shipped."""

    hw: str = "h100-sxm"
    model: str = "llama-3.1-8b"
    quant: str | None = None
    engine: str = "vllm"
    engine_file: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    efficiency_from: str | None = None
    cost_params: Any = None  # sim.cost.params.CostParams | None
    efficiency_overrides: Mapping[str, Any] | None = None
    #: ModelSpec fields laid over the catalog model (sim.bench.corpus: a benchmark of identical synthetic tokens
    #: routes with ModelSpec.identical_tokens_pool_fraction); None: the model as the catalog holds it
    model_overrides: Mapping[str, Any] | None = None

    def spec(self, trace: str = "<bench client>", seed: int = 0):
        """The run spec (sim.api.make_spec) these names, engine file, overrides and efficiency donor give, as
        `infersim run` would build it; `trace` only labels it. `cost_params` and `efficiency_overrides` are
        not part of a spec: `deployment_parts` applies them."""
        from sim.api import make_spec

        return make_spec(trace=trace, hw=self.hw, model=self.model, quant=self.quant, engine=self.engine,
                         engine_file=self.engine_file, overrides=dict(self.overrides),
                         efficiency_from=self.efficiency_from, seed=seed)


@dataclass
class Timings:
    """Per request, in workload order: what the client records (seconds from the benchmark's start)."""

    prompt_lens: np.ndarray
    output_lens: np.ndarray
    release_s: np.ndarray  # the generator releases the request
    start_s: np.ndarray  # the request is sent (semaphore acquired)
    first_token_s: np.ndarray
    finish_s: np.ndarray
    success: np.ndarray  # bool
    errors: list[str]
    itls: list[np.ndarray]  # per request, the gaps between consecutive tokens [s]
    config: dict = field(default_factory=dict)  # the simulation's resolved configuration
    # the simulator's own summary of the run (`infersim run --json`), or a function computing it at the first read
    # of `summary` (simulate_workload's: its ITL quantiles cost a tenth of a serving replay, which never reads them)
    summary_source: dict | Callable[[], dict] = field(default_factory=dict, repr=False)

    @property
    def summary(self) -> dict:
        if callable(self.summary_source):
            self.summary_source = self.summary_source()
        return self.summary_source

    @property
    def ttft_s(self) -> np.ndarray:
        return np.where(self.success, self.first_token_s - self.start_s, 0.0)

    @property
    def latency_s(self) -> np.ndarray:
        return np.where(self.success, self.finish_s - self.start_s, 0.0)

    def select(self, idx: np.ndarray) -> "Timings":
        """These requests only (e.g. the measured ones after a warm-up)."""
        idx = np.asarray(idx)
        return Timings(self.prompt_lens[idx], self.output_lens[idx], self.release_s[idx], self.start_s[idx],
                       self.first_token_s[idx], self.finish_s[idx], self.success[idx],
                       [self.errors[i] for i in idx], [self.itls[i] for i in idx], self.config, self.summary_source)


# ---- the simulation -----------------------------------------------------------------------------------
def _paced_source(requests, concurrency: int | None):
    """The arrival stream of the client: open loop (sent on release) without a concurrency limit,
    vLLM's semaphore with one (`PacedClients`)."""
    from workloads.arrivals import ArrivalSource, PacedClients

    return PacedClients(requests, concurrency) if concurrency else ArrivalSource(requests, None)


def _token_ends(it) -> np.ndarray:
    """The end of every engine step that produced decode tokens, in time order: a fast-forwarded
    record of k steps is split into k equal steps (the last one ends exactly at the record's end)."""
    ints = it.ints
    steps, dec = ints["steps"], ints["decode_seqs"]
    keep = dec > 0
    start = np.frombuffer(it.start_s, dtype=np.float64)[keep]
    dur = np.frombuffer(it.duration_s, dtype=np.float64)[keep]
    k = steps[keep]
    if not len(k):
        return np.zeros(0)
    first = np.cumsum(k) - k
    j = np.arange(int(k.sum())) - np.repeat(first, k) + 1  # 1..k within each record
    return np.repeat(start, k) + np.repeat(dur, k) * (j / np.repeat(k, k))


def _itls(ends: np.ndarray, first: np.ndarray, last: np.ndarray, out: np.ndarray, ok: np.ndarray) -> list[np.ndarray]:
    """Each request's gaps between consecutive tokens (module docstring), all at once: request i (`ok[i]`, out[i] > 1)
    streams at the step ends in (first[i], last[i]] when they are exactly its out[i] - 1 later tokens (gaps: their
    differences, the first from first[i]), else (last[i] - first[i]) / (out[i] - 1) each (one request's arithmetic)."""
    m = np.where(ok & (out > 1), out - 1, 0)
    sel = np.flatnonzero(m)
    res = [np.zeros(0)] * len(m)
    if not len(sel):
        return res
    ms, a, b = m[sel], first[sel], last[sel]
    lo, hi = np.searchsorted(ends, a, side="right"), np.searchsorted(ends, b, side="right")
    exact = (hi - lo == ms) & (ends[np.maximum(hi - 1, 0)] == b) if len(ends) else np.zeros(len(ms), dtype=bool)
    head = ends[np.minimum(lo, len(ends) - 1)] - a if len(ends) else np.zeros(len(ms))  # the first gap where exact
    step, spread, end = ends[1:] - ends[:-1], (b - a) / ms, np.cumsum(ms)  # (step: np.diff(ends))
    vals = np.empty(int(end[-1]))
    for i, s0, s1, x, l, h, g, f in zip(sel.tolist(), (end - ms).tolist(), end.tolist(), exact.tolist(),
                                        lo.tolist(), hi.tolist(), head.tolist(), spread.tolist()):
        v = res[i] = vals[s0:s1]
        if x:
            v[0] = g
            v[1:] = step[l:h - 1]
        else:
            v.fill(f)
    return res


@dataclass(frozen=True)
class Served:
    """One replica that has served a client's workload: the replica (its per-request log and iteration
    record), the engine it ran as resolved for the device, and the parts it was built from."""

    replica: Any
    engine: Any
    parts: Any


def deployment_parts(deployment: Deployment, seed: int = 0):
    """(hardware profile, engine, replica parts) of `deployment` as one replica of it is built: the engine
    resolved for the device (presets, overrides, hardware rules), the profile's efficiency entry with the
    deployment's `efficiency_overrides` laid over it, and the cost model and configuration of
    sim.engine.build.replica_parts. `serve_replica` builds on it; diagnostics that price single steps
    (benchmarks/prefill_split.py) read its cost model."""
    from sim.api import resolve
    from sim.catalog import cache
    from sim.engine.build import replica_parts

    spec = deployment.spec(seed=seed)
    hw, engine = resolve(spec)
    if deployment.efficiency_overrides:
        from sim.catalog.hardware import with_efficiency_fields

        hw = with_efficiency_fields(hw, engine.name, engine.efficiency_family(hw),
                                    dict(deployment.efficiency_overrides))
    model = cache.model(spec.model)
    if deployment.model_overrides:
        model = model.model_copy(update=dict(deployment.model_overrides))
    return hw, engine, replica_parts(hw, model, spec.quant, engine, deployment.cost_params)


def serve_replica(workload: Workload, deployment: Deployment, *, max_concurrency: int | None = None,
                  seed: int = 0) -> Served:
    """Build one simulated replica of `deployment`, send it `workload`'s requests at their release times
    with at most `max_concurrency` in flight, and run the clock until every request is done. A fixed
    prefix (`workload.prefix_tokens`) is one shared prefix id, so the engine's prefix cache reuses it.
    `simulate_workload` turns the result into the client's record; diagnostics
    (benchmarks/ttft_breakdown.py) read the replica's log directly."""
    from sim.engine.build import LoneClock, build_replica
    from workloads.request import Request

    _, engine, parts = deployment_parts(deployment, seed)
    pid = "random-prefix" if workload.prefix_tokens else None
    reqs = [Request(id=str(i), arrival_s=float(t), prompt_tokens=int(p), output_tokens=int(o), max_tokens=int(o),
                    prefix_id=pid, prefix_tokens=workload.prefix_tokens)
            for i, (t, p, o) in enumerate(zip(workload.release_s, workload.prompt_lens, workload.output_lens))]
    env = LoneClock()
    replica = build_replica(env, parts, _paced_source(reqs, max_concurrency), record_iterations=True)
    env.run(replica.run())
    return Served(replica, engine, parts)


def simulate_workload(workload: Workload, deployment: Deployment, *, max_concurrency: int | None = None,
                      seed: int = 0) -> Timings:
    """Serve `workload` on the simulated `deployment` (one replica, `serve_replica`) with the client's
    concurrency limit; the client-side record of every request."""
    from sim.engine.build import replica_summary
    from sim.engine.metrics import STATUS_COMPLETED

    served = serve_replica(workload, deployment, max_concurrency=max_concurrency, seed=seed)
    replica, parts = served.replica, served.parts
    config = parts.config(concurrency=max_concurrency, seed=seed, config_extra={"client": "bench"})

    log = replica.log
    n = len(workload)
    order = np.array([int(i) for i in log.ids], dtype=np.int64)  # log rows are in send order
    start = np.full(n, np.nan)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int64)
    start[order] = log.arrival_s[:log.n]
    first[order] = log.first_token_s[:log.n]
    finish[order] = log.finish_s[:log.n]
    status[order] = log.status[:log.n]
    success = status == STATUS_COMPLETED
    errors = [""] * n
    for row, i in enumerate(order):
        if not success[i]:
            errors[i] = f"rejected by the simulated server: {log.reasons[log.reason[row]] or 'not completed'}"
    ends = _token_ends(replica.iterations)
    itls = _itls(ends, first, finish, np.asarray(workload.output_lens).astype(np.int64), success)
    return Timings(workload.prompt_lens.copy(), workload.output_lens.copy(), workload.release_s.copy(), start,
                   first, finish, success, errors, itls, config=config,
                   summary_source=lambda: replica_summary(config, replica))  # (its "config" is `config` itself)


# ---- vLLM's metrics -----------------------------------------------------------------------------------
def _stat(values: list[float] | np.ndarray, percentiles) -> tuple[float, float, float, list[tuple[float, float]]]:
    """vLLM's mean, median, std and percentiles of `values or 0`, in ms."""
    from sim.engine.metrics import sorted_percentiles

    v = np.asarray(values, dtype=np.float64) if len(values) else np.zeros(1)
    x = np.sort(v)  # one sort for the median and every percentile (np.median / np.percentile partition anew)
    if x[-1] != x[-1]:  # a NaN (sorts last): numpy's own NaN rules
        return (float(np.mean(v) * 1000), float(np.median(v) * 1000), float(np.std(v) * 1000),
                [(p, float(np.percentile(v, p) * 1000)) for p in percentiles])
    h = len(x) // 2  # np.median's arithmetic: the mean of the middle one or two; np.percentile's bit for bit
    median = np.mean(x[h:h + 1]) if len(x) % 2 else np.mean(x[h - 1:h + 1])
    pcts = sorted_percentiles(x, [float(p) for p in percentiles])  # (sim.engine.metrics._percentiles)
    return (float(np.mean(v) * 1000), float(median * 1000), float(np.std(v) * 1000),
            [(p, q * 1000) for p, q in zip(percentiles, pcts)])


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def _peaks(t: Timings) -> tuple[float, int]:
    """vLLM's peak output tokens per second (per-second buckets of token times from the first send)
    and peak concurrent requests (sweep over [start, start + latency))."""
    ok = np.flatnonzero(t.success)
    if not len(ok):
        return 0.0, 0
    t0 = float(t.start_s[ok].min())
    end = float(t.finish_s[ok].max())
    size = int(np.ceil(end - t0)) + 1
    times = np.concatenate([t.first_token_s[i] + np.concatenate(([0.0], np.cumsum(t.itls[i]))) for i in ok])
    idx = (times - t0).astype(np.int64)
    buckets = np.bincount(idx[(idx >= 0) & (idx < size)], minlength=size)
    events = sorted([(float(t.start_s[i]), 1) for i in ok] + [(float(t.finish_s[i]), -1) for i in ok])
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return float(buckets.max()), peak


def vllm_metrics(t: Timings, client: ServeClient, duration_s: float,
                 per_request: bool = True) -> tuple[dict, list[tuple[str, str, str]]]:
    """`calculate_metrics` + `process_one_metric`: the result keys from "duration" on, and the
    console lines of the percentile sections (header, label, value). Without `per_request` the
    per-request lists and the peaks are left out (a fit needs only the statistics)."""
    ok = t.success
    out_lens = np.where(ok, t.output_lens, 0)
    ttfts = (t.first_token_s - t.start_s)[ok]
    lat = (t.finish_s - t.start_s)[ok]
    outs = t.output_lens[ok]
    multi = outs > 1
    tpots = ((lat - ttfts)[multi] / (outs[multi] - 1)).tolist()
    all_tpots = np.where(outs > 1, (lat - ttfts) / np.maximum(outs - 1, 1), 0.0)
    itls = np.concatenate([t.itls[i] for i in np.flatnonzero(ok)]) if ok.any() else np.zeros(0)
    completed = int(ok.sum())
    good = 0
    if client.goodput:
        slo = [(client.goodput[k] / 1000, v) for k, v in (("ttft", ttfts), ("tpot", all_tpots), ("e2el", lat))
               if k in client.goodput]
        good = int(np.all([v <= s for s, v in slo], axis=0).sum()) if slo else 0
    total_in = int(t.prompt_lens[ok].sum())
    total_out = int(out_lens.sum())
    peak_tok, peak_conc = _peaks(t) if per_request else (None, None)
    result = {
        "duration": duration_s,
        "completed": completed,
        "failed": int((~ok).sum()),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / duration_s,
        "request_goodput": good / duration_s if client.goodput else None,
        "output_throughput": total_out / duration_s,
        "total_token_throughput": (total_in + total_out) / duration_s,
    }
    if per_request:
        result.update({
            "input_lens": [int(x) for x in t.prompt_lens],
            "output_lens": [int(x) for x in out_lens],
            "ttfts": [float(x) for x in t.ttft_s],
            "itls": [x.tolist() for x in t.itls],
            "latencies": [float(x) for x in t.latency_s],
            "start_times": [float(x) if ok[i] else 0.0 for i, x in enumerate(t.start_s)],
            "queue_times": [float(s - r) if ok[i] else 0.0 for i, (s, r) in enumerate(zip(t.start_s, t.release_s))],
            "generated_texts": ["" for _ in range(len(t.success))],
            "errors": list(t.errors),
        })
    result.update({"max_output_tokens_per_s": peak_tok, "max_concurrent_requests": peak_conc, "rtfx": 0.0})
    values = {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": lat}
    headers = {"ttft": ("TTFT", "Time to First Token"), "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
               "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency"),
               "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
               "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency")}
    order = ["ttft", "tpot", "itl", "e2el"]
    if client.max_concurrency is not None:
        values["client_queue_time"] = (t.start_s - t.release_s)[ok]
        order.append("client_queue_time")
        if client.request_rate != INF:
            values["e2el_including_client_queue"] = lat + (t.start_s - t.release_s)[ok]
            order.append("e2el_including_client_queue")
    lines: list[tuple[str, str, str]] = []
    for key in order:
        if key not in client.percentile_metrics:
            continue
        name, header = headers[key]
        mean, median, std, pcts = _stat(values[key], client.metric_percentiles)
        lines += [(header, f"Mean {name} (ms):", f"{mean:<10.2f}"), (header, f"Median {name} (ms):", f"{median:<10.2f}")]
        result[f"mean_{key}_ms"] = mean
        result[f"median_{key}_ms"] = median
        result[f"std_{key}_ms"] = std
        for p, v in pcts:
            lines.append((header, f"P{_p_word(p)} {name} (ms):", f"{v:<10.2f}"))
            result[f"p{_p_word(p)}_{key}_ms"] = v
    return result, lines


def _deployment_note(t: Timings, deployment: Deployment, workload: Workload) -> dict:
    cfg = t.config
    return {"simulated": True, "hw": cfg.get("hw"), "model": cfg.get("model"), "quant": cfg.get("quant"),
            "engine": cfg.get("engine"), "engine_version": cfg.get("engine_version"),
            "kv_dtype": cfg.get("kv_dtype"), "max_num_seqs": cfg.get("max_num_seqs"),
            "max_num_batched_tokens": cfg.get("max_num_batched_tokens"),
            "overrides": dict(deployment.overrides), "efficiency_from": deployment.efficiency_from,
            **({"efficiency_overrides": dict(deployment.efficiency_overrides)} if deployment.efficiency_overrides
               else {}),
            "tokens_estimated": workload.tokens_estimated,
            "notes": "no text is generated (generated_texts are empty); times are seconds from the benchmark's "
                     "start, not perf_counter readings"}


def run_client(client: ServeClient, deployment: Deployment, *, workload: Workload | None = None,
               date: str | None = None, per_request: bool = True) -> dict:
    """One `vllm bench serve` run on the simulator: vLLM's result JSON as a dict (every key
    `--save-result --save-detailed` writes, in vLLM's order, plus `infersim` with the resolved
    deployment and the console lines under `_console`, which `result_json` drops).

    `workload` replays given requests (e.g. a result file's input/output lengths) instead of
    sampling the client's dataset. `client.num_warmups` warm-up requests run before the benchmark in
    vLLM, on an idle server and outside its clock: they do not change the simulated figures.
    `per_request=False` leaves out the per-request lists and the peaks (what a fit does not read).
    """
    client.check()
    workload = workload if workload is not None else make_workload(client)
    t = simulate_workload(workload, deployment, max_concurrency=client.max_concurrency, seed=client.seed)
    done = np.isfinite(t.finish_s)
    duration = float(t.finish_s[done].max()) if done.any() else 0.0
    duration = duration if duration > 0 else float("nan")
    metrics, lines = vllm_metrics(t, client, duration, per_request)
    head = {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": client.backend,
        "backend": client.backend,
        "label": client.label,
        "model_id": deployment.model,
        "tokenizer_id": deployment.model,
        "num_prompts": client.num_prompts,
        "request_rate": client.request_rate if client.request_rate < INF else "inf",
        "burstiness": client.burstiness,
        "max_concurrency": client.max_concurrency,
    }
    if client.ramp_up_strategy is not None:
        head.update(ramp_up_strategy=client.ramp_up_strategy, ramp_up_start_rps=client.ramp_up_start_rps,
                    ramp_up_end_rps=client.ramp_up_end_rps)
    out = {**head, **metrics, "infersim": _deployment_note(t, deployment, workload), "_console": lines}
    out["_timings"] = t
    return out


#: the per-request fields vLLM keeps only under --save-detailed
DETAILED_FIELDS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")


def result_json(result: dict, *, detailed: bool = False) -> dict:
    """What `--save-result` writes: without `detailed` the per-request arrays are dropped, as vLLM
    does without --save-detailed (it keeps `latencies` and `queue_times`)."""
    out = {k: v for k, v in result.items() if not k.startswith("_")}
    if not detailed:
        for k in DETAILED_FIELDS:
            out.pop(k, None)
    return out


def console_block(result: dict, client: ServeClient) -> str:
    """The block `vllm bench serve` prints after a run (with a tokenizer, so token counts and
    token throughputs are shown)."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    row = "{:<40} {:<10}".format
    rowf = "{:<40} {:<10.2f}".format
    lines.append(row("Successful requests:", result["completed"]))
    lines.append(row("Failed requests:", result["failed"]))
    if client.max_concurrency is not None:
        lines.append(row("Maximum request concurrency:", client.max_concurrency))
    if client.request_rate != INF:
        lines.append(rowf("Request rate configured (RPS):", client.request_rate))
    lines.append(rowf("Benchmark duration (s):", result["duration"]))
    lines.append(row("Total input tokens:", result["total_input_tokens"]))
    lines.append(row("Total generated tokens:", result["total_output_tokens"]))
    lines.append(rowf("Request throughput (req/s):", result["request_throughput"]))
    if client.goodput:
        lines.append(rowf("Request goodput (req/s):", result["request_goodput"]))
    lines.append(rowf("Output token throughput (tok/s):", result["output_throughput"]))
    lines.append(rowf("Peak output token throughput (tok/s):", result["max_output_tokens_per_s"]))
    lines.append(rowf("Peak concurrent requests:", result["max_concurrent_requests"]))
    lines.append(rowf("Total token throughput (tok/s):", result["total_token_throughput"]))
    header = None
    for h, label, value in result["_console"]:
        if h != header:
            lines.append("{s:{c}^{n}}".format(s=h, n=50, c="-"))
            header = h
        lines.append("{:<40} {}".format(label, value))
    lines.append("=" * 50)
    return "\n".join(lines)


def result_filename(client: ServeClient, model_id: str, date: str, *, result_filename: str | None = None,
                    result_dir: str | None = None) -> Path:
    """vLLM's `compute_result_filename`."""
    base_model_id = model_id.split("/")[-1]
    conc = f"-concurrency{client.max_concurrency}" if client.max_concurrency is not None else ""
    label = client.label or client.backend
    if client.ramp_up_strategy is not None:
        name = (f"{label}-ramp-up-{client.ramp_up_strategy}-{client.ramp_up_start_rps}qps-"
                f"{client.ramp_up_end_rps}qps{conc}-{base_model_id}-{date}.json")
    else:
        name = f"{label}-{client.request_rate}qps{conc}-{base_model_id}-{date}.json"
    if result_filename:
        name = result_filename
    return Path(result_dir) / name if result_dir else Path(name)


__all__ = ["Deployment", "ServeClient", "Timings", "Workload", "console_block", "make_workload", "result_json",
           "run_client", "simulate_workload", "vllm_metrics"]
