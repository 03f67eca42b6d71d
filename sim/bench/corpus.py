"""One row of the serving corpus (benchmarks/serving/*.csv, schema in benchmarks/serving/README.md)
replayed: the client it names, at its load point, against the deployment it names.

    from sim.bench.corpus import predict_row
    predicted = predict_row(row)              # row: a mapping of the corpus columns (csv.DictReader)
    predicted[("ttft_ms", "median")]          # the same quantity and statistic the row printed

`point_from_row(row)` gives the pieces (`tool`, `ServeClient`, `Deployment`) for callers that
want to batch rows of one curve or change the deployment.

Mapping (each column as the schema defines it):
- client: `vllm-bench-serve` and `sglang-bench-serving` (SGLang's bench_serving derives from
  vLLM's benchmark_serving: same arrivals and metric definitions), `trtllm-bench` and `custom`
  (InferenceX's vLLM-derived benchmark_serving.py; no better definition known) replay as
  `vllm bench serve`; `aiperf`, `genai-perf` as AIPerf / genai-perf (closed loop, warm-up dropped);
  `guidellm` as one GuideLLM strategy (concurrent streams for load_kind concurrency, constant rate
  for rate); a static-batch tool (`STATIC_BATCH`: llama-batched-bench, vLLM's benchmark_latency, TensorRT-LLM's
  emulated static batching) as `vllm bench serve` sending one batch of B = `max_concurrency` requests at once at
  the row's fixed `input_tokens` / `output_tokens` (`static_batch`), as the serving fit replays it, reporting
  the figures the tool itself prints for that batch (sim.bench.corpus_static: llama-batched-bench's T_PP, batch
  decode step, T and rates; benchmark_latency's and gptManagerBenchmark's batch latency and B x output / latency).
- load: `max_concurrency` (empty: unbounded), `request_rate` (empty or `inf`: all at once),
  `burstiness` (default 1.0), `num_prompts` (default 1000; a closed loop without it: 10 x C,
  at least 100), `warmup`.
- dataset (`row_lengths`, the one length rule of a row: the serving fit, calibrate/serving/rows.py,
  draws its lengths with it too): `random` with `input_tokens`, `output_tokens`, `range_ratio`
  (empty: the client's default, 0), drawn by sim.bench.datasets.sample_random as the client draws
  them (`range_mode`). vLLM's lengths are uniform in [I(1-r), I(1+r)] (1.0, older vLLM's default when
  its range was [I r, I], meant fixed lengths and replays as 0); SGLang's bench_serving and
  InferenceX's client (`custom`) draw from [I r, I], so their default 0 means lengths uniform in
  [1, I] (mean I / 2) and 1 fixed lengths. Where the notes state the realised mean lengths (the
  client's printed totals) the draw is scaled to them, except outputs that stopped at EOS (a fixed
  requested length, no --ignore-eos, a realised mean below it: `stopped_at_eos`), drawn from a
  constant per-token EOS probability capped at the requested length (`eos_lengths`). Any other dataset replays as fixed lengths at
  the stated means (`mean_lengths`: ShareGPT's mean lengths are what the sources state; the corpus
  has no conversation text to resample). A fixed-prompt dataset (`FIXED_LENGTH_DATASETS`) sends one
  prompt text every time, so its whole prompt is a prefix every request shares (`shared_prefix`),
  which the engine's prefix cache reuses where the engine has it on (EngineConfig.prefix_caching):
  the serving fit's replays (calibrate/serving/replay.py) price it the same way.
- deployment (sim.bench.corpus_deployment, the serving fit's rule too): `device` -> --hw; `model` -> its catalog
  entry (a catalog name, a Hugging Face id an entry's `hf_repos` lists, or a NAMED_MODELS name; any other is a
  one-line error naming it); `engine` + `engine_version` -> the preset release that stands for the version
  (`release_of`: vLLM 0.9.2 -> vllm@0.10; no version -> the newest); `quant`, `tp`, `kv_cache_dtype`
  (fp8 -> kv_dtype fp8; blank tp: 1) and the engine flags vLLM / SGLang / TensorRT-LLM print for batch limits,
  KV dtype, prefix caching and memory share (`engine_overrides`); a speculative run whose acceptance the side
  table benchmarks/serving/side_tables/spec_acceptance.csv states for the row's curve and load point: the
  engine's `speculative` block with that acceptance (sim.bench.corpus_spec, the serving fit's rule too).
- quantities: ttft_ms, tpot_ms, itl_ms, e2el_ms with mean / median / p90 / p95 / p99;
  output_tps, total_tps, request_tps; tps_per_user = 1000 / mean TPOT (tokens per second one
  stream sees while decoding). A static-batch tool's row: only the quantities the tool prints (above).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping

import numpy as np

# a cell's emptiness and number (sim.bench.corpus_cells; re-exported: callers import them from here)
from sim.bench.corpus_cells import blank, cell_number  # noqa: F401
from sim.bench.corpus_deployment import row_engine, row_model
from sim.bench.corpus_spec import row_speculative
from sim.bench.corpus_static import STATIC_BATCH  # noqa: F401  (the static-batch tools: one list, with their figures)
from sim.bench.datasets import release_times, sample_random
from sim.bench.serve import Deployment, ServeClient, Workload, make_workload, run_client
from sim.errors import ConfigError

#: clients predict_row replays as `vllm bench serve` (module docstring, "client"); the serving fit's set
#: (calibrate/serving/rows.py VLLM_LIKE) is derived from this one, less "trtllm-bench"
VLLM_LIKE = ("vllm-bench-serve", "sglang-bench-serving", "trtllm-bench", "custom")
#: static-batch tools: one batch of B requests (B = `max_concurrency`) started together, fixed lengths, every
#: request measured (`static_batch`): llama.cpp's llama-batched-bench, vLLM's benchmark_latency, TensorRT-LLM's
#: gptManagerBenchmark emulated static batching. A client cell holding any of these names is one. The one rule:
#: `point_from_row` (so `predict_row`) and the serving fit's load points (calibrate/serving/rows.py) both use it
STATISTICS = ("mean", "median", "p90", "p95", "p99")

#: server flags (vLLM, SGLang, trtllm-serve) -> EngineConfig field, value type
def _ep_size_on(v: str) -> bool:
    """An expert-parallel size as printed -> whether experts are placed whole (size > 1)."""
    return int(float(v)) > 1


def _yaml_bool(text: str) -> bool:
    """A YAML boolean as an options file writes it (true/false, any case); anything else is a ValueError."""
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise ValueError(text)
    return t == "true"


def _triton_kv_splits(backend: str) -> int:
    """SGLang's `--attention-backend triton` -> its decode kernel's split cap, `--triton-attention-num-kv-splits`
    default 8 (sglang/srt/server_args.py; EngineConfig.decode_kv_splits, sim.cost.split_kv); any other backend
    is a ValueError, so the preset's (no cap) stays."""
    if backend.strip().lower() != "triton":
        raise ValueError(backend)
    return 8


_FLAGS = {
    "--max-num-seqs": ("max_num_seqs", int), "--max-running-requests": ("max_num_seqs", int),
    "--max_batch_size": ("max_num_seqs", int), "--max-batch-size": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int), "--chunked-prefill-size": ("max_num_batched_tokens", int),
    "--max_num_tokens": ("max_num_batched_tokens", int), "--max-num-tokens": ("max_num_batched_tokens", int),
    "--kv-cache-dtype": ("kv_dtype", str), "--block-size": ("block_size", int), "--page-size": ("block_size", int),
    "--gpu-memory-utilization": ("memory_fraction", float), "--mem-fraction-static": ("memory_fraction", float),
    "--kv_cache_free_gpu_memory_fraction": ("memory_fraction", float),
    "--tensor-parallel-size": ("tp", int), "-tp": ("tp", int), "--tp": ("tp", int), "--tp-size": ("tp", int),
    "--tp_size": ("tp", int), "--pipeline-parallel-size": ("pp", int), "-pp": ("pp", int),
    # SGLang's expert-parallel size (--ep-size, alias --ep): experts placed whole on the ranks when > 1
    # (EngineConfig.expert_parallel; sglang/srt/server_args.py `ep_size`, default 1)
    "--ep-size": ("expert_parallel", _ep_size_on), "--ep": ("expert_parallel", _ep_size_on),
    "--expert-parallel-size": ("expert_parallel", _ep_size_on),
    # SGLang's --scheduler-recv-interval (EngineConfig.recv_interval_steps; sim.engine.recv)
    "--scheduler-recv-interval": ("recv_interval_steps", int),
    # SGLang's MoE runner (EngineConfig.moe_runner_backend: flashinfer_trtllm's fused MoE launches fewer kernels in an
    # eager prompt step, sim.cost.eager_backends; server_args.py `moe_runner_backend`, default auto)
    "--moe-runner-backend": ("moe_runner_backend", str),
    # TensorRT-LLM LLM-API options (trtllm-serve --extra_llm_api_options YAML), written key=value with the YAML's
    # nesting dotted: batch waiting (EngineConfig.batch_wait_iters / batch_wait_tokens_ratio) and the KV cache
    "batch_wait_timeout_iters": ("batch_wait_iters", int),
    "batch_wait_max_tokens_ratio": ("batch_wait_tokens_ratio", float),
    "kv_cache_config.dtype": ("kv_dtype", str),
    "kv_cache_config.free_gpu_memory_fraction": ("memory_fraction", float),
    "kv_cache_config.enable_block_reuse": ("prefix_caching", _yaml_bool),
}
# SGLang's `--attention-backend triton` -> decode_kv_splits (`_triton_kv_splits`): not read, its ship rule does not
# pass (calibrate/serving/split_kv_rule.py RECORDED); kept here for the next judgement
UNSHIPPED_FLAGS = {"--attention-backend": ("decode_kv_splits", _triton_kv_splits)}
_SWITCHES = {"--enable-prefix-caching": ("prefix_caching", True), "--no-enable-prefix-caching": ("prefix_caching", False),
             "--disable-radix-cache": ("prefix_caching", False),
             # vLLM's switch (vllm/engine/arg_utils.py `enable_expert_parallel`): experts whole on the tp ranks
             "--enable-expert-parallel": ("expert_parallel", True),
             # SGLang's flashinfer all-reduce + RMSNorm fusion (EngineConfig.flashinfer_allreduce_fusion;
             # sim.cost.eager_backends): on by the flag, off by 0.5.12's enforce-disable flag
             "--enable-flashinfer-allreduce-fusion": ("flashinfer_allreduce_fusion", True),
             "--enforce-disable-flashinfer-allreduce-fusion": ("flashinfer_allreduce_fusion", False)}


def number(row: Mapping, key: str, default=None) -> float | None:
    """A numeric cell (`default` when blank); a cell that is not a number is a one-line error."""
    v = row.get(key)
    x = cell_number(v)
    if x is None and not blank(v):
        raise ConfigError(f"not a number: {v!r}", file=row.get("source_ref") or row.get("row_id"), field=key)
    return default if x is None else x


def engine_overrides(flags: str | None, kv_cache_dtype: str | None = None, tp=None) -> dict:
    """EngineConfig overrides from a server's printed flags (those that change what is simulated)."""
    out: dict = {}
    try:
        words = shlex.split(flags or "")
    except ValueError:  # an unbalanced quote (a collector's prose around the flags, "the blog's commands"): words
        words = (flags or "").split()
    i = 0
    while i < len(words):
        w = words[i]
        key, eq, val = w.partition("=")
        if key in _SWITCHES:
            f, v = _SWITCHES[key]
            out[f] = v
        elif key in _FLAGS:
            f, kind = _FLAGS[key]
            if not eq and i + 1 < len(words):
                val = words[i + 1]
                i += 1
            try:
                out[f] = kind(val)
            except ValueError:
                pass  # a value this table cannot read (e.g. `auto`): the preset's stays
        i += 1
    if out.get("kv_dtype") in ("auto", None):
        out.pop("kv_dtype", None)
    if not blank(kv_cache_dtype) and str(kv_cache_dtype).lower().startswith("fp8"):
        out["kv_dtype"] = "fp8"
    if not blank(tp):
        out["tp"] = int(float(tp))
    return out


def row_overrides(row: Mapping) -> dict:
    """EngineConfig overrides a corpus row states (`engine_overrides`): its `engine_flags` when they are a command
    line (they start with a flag or hold one after a space; a collector's prose about the server, e.g. vLLM's
    logged "non-default args {...}" dict, is not parsed), its `kv_cache_dtype` (fp8 -> kv_dtype fp8) and its `tp`
    (1 when blank); a llama-batched-bench run's own sequences, context and batch (`batched_bench_overrides`). The
    one rule: `point_from_row` and the serving fit's load points (calibrate/serving/rows.py)."""
    flags = row.get("engine_flags") or ""
    cli = flags if flags.strip().startswith("-") or " --" in flags else ""
    return {**engine_overrides(cli, row.get("kv_cache_dtype"), int(cell_number(row.get("tp"), 1) or 1)),
            **batched_bench_overrides(row)}


#: the header llama-batched-bench prints ("n_kv_max = 270336, n_batch = 2048, n_ubatch = 2048, ...") -> field
_BATCHED_BENCH_HEADER = {"n_kv_max": "context_size", "n_batch": "max_num_batched_tokens", "n_ubatch": "ubatch_tokens"}


def batched_bench_overrides(row: Mapping) -> dict:
    """The llama.cpp settings of a llama-batched-bench run (llama.cpp examples/batched-bench/README.md): B =
    `max_concurrency` sequences, each its own PP-token prompt (is_pp_shared 0, N_KV = B (PP + TG)), prefilled and then
    decoded TG tokens together, in one context of N_KV_MAX tokens (-c), prompts read n_batch tokens per llama_decode
    in ubatches of n_ubatch. So the llama.cpp preset's server slots (-np, 4 by default) become B (the tool runs all B
    at once; with 4 slots the replay ran B > 4 in waves), and its context and batch sizes are those the tool's header
    prints. The tool reads every prompt before it decodes (batched-bench.cpp: one batch of all B x PP prompt tokens,
    decoded in n_batch slices and synchronized, then TG decode calls of B tokens), where llama-server's slots decode
    a sequence whose prompt is read while later prompts are still being read: the `prefill_first` scheduler (prompt
    chunks of n_batch tokens until none is left, then every sequence decodes; never mixed) runs the tool's schedule.
    {} for any other client."""
    if "llama-batched-bench" not in str(row.get("client") or ""):
        return {}
    out = {"max_num_seqs": max(1, int(cell_number(row.get("max_concurrency"), 1) or 1)), "scheduler": "prefill_first"}
    flags = str(row.get("engine_flags") or "")
    for key, field in _BATCHED_BENCH_HEADER.items():
        m = re.search(rf"\b{key}\s*=\s*(\d+)", flags)
        if m:
            out[field] = int(m.group(1))
    return out


def range_mode(client: str) -> str:
    """How `client` reads --random-range-ratio r (benchmarks/serving/README.md 'What range_ratio means'):
    "sglang" ([L r, L], 1 = fixed, 0 = uniform in [1, L]) for SGLang's bench_serving and `custom`
    (the corpus's custom random clients are InferenceX's utils/bench_serving/benchmark_serving.py,
    `randint(int(L r), L)`); "vllm" ([L (1 - r), L (1 + r)]) for the rest."""
    return "sglang" if str(client or "").strip() in ("sglang-bench-serving", "custom") else "vllm"


_MEANS_RES = (
    re.compile(r"=\s*([\d.]+)\s*input(?: tokens)?,? and [^=]*=\s*([\d.]+)\s*output"),
    re.compile(r"realised means[^=]*=\s*([\d.]+)\s*input,[^=]*=\s*([\d.]+)\s*output"),
)
_TOTALS_RE = re.compile(r"(\d+) successful requests, total input tokens (\d+), total generated tokens (\d+)")
_OUT_MEAN_RE = re.compile(r"(\d+) / (\d+) = ([\d.]+) tokens per request")


def stated_means(row: Mapping) -> tuple[float, float] | None:
    """Realised mean input/output lengths a row's notes state (the client's printed totals), if any."""
    notes = row.get("notes") or ""
    m = _TOTALS_RE.search(notes)
    if m:
        n = float(m.group(1))
        return float(m.group(2)) / n, float(m.group(3)) / n
    for rx in _MEANS_RES:
        m = rx.search(notes)
        if m:
            return float(m.group(1)), float(m.group(2))
    return None


def mean_lengths(row: Mapping) -> tuple[float, float] | None:
    """(mean input, mean output) a non-random row states: its columns, the client's printed totals, or
    a note's 'TOTAL / N = M tokens per request' for the outputs."""
    means = stated_means(row)
    li, lo = cell_number(row.get("input_tokens")), cell_number(row.get("output_tokens"))
    if means is not None:
        li, lo = li or means[0], lo or means[1]
    if lo is None:
        m = _OUT_MEAN_RE.search(row.get("notes") or "")
        lo = float(m.group(3)) if m else None
    return (li, lo) if li and lo else None


def is_random(row: Mapping) -> bool:
    return str(row.get("dataset") or "random").strip().lower() == "random"


def client_lengths(row: Mapping) -> tuple[int, int, float, str]:
    """(input length, output length, range ratio, range mode) of the row's client, as it reads them:
    a blank ratio is the client's default 0; vLLM with r >= 1 is the older benchmark_serving.py, whose
    default 1.0 meant fixed lengths (today's vLLM takes r < 1 only), so 0. Any other dataset than
    `random`: fixed lengths at the stated means (`mean_lengths`, else the columns)."""
    li, lo = cell_number(row.get("input_tokens")) or 0.0, cell_number(row.get("output_tokens")) or 0.0
    mode = range_mode(row.get("client"))
    if not is_random(row):
        ml = mean_lengths(row)
        li, lo = ml if ml else (li, lo)
        return max(int(round(li)), 1), max(int(round(lo)), 1), 0.0, mode
    rr = cell_number(row.get("range_ratio")) or 0.0
    if mode == "vllm" and rr >= 1.0:
        rr = 0.0
    return int(round(li)), int(round(lo)), rr, mode


def row_lengths(row: Mapping, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The n (input, output) lengths the row's client draws (sim.bench.datasets.sample_random with the
    row's `client_lengths`; fixed lengths for another dataset), scaled to the realised mean lengths
    where the row's notes state them (`stated_means`: the client's printed totals). The one length
    rule of a corpus row: `predict_row` and the serving fit (calibrate/serving/rows.py) both use it."""
    li, lo, rr, mode = client_lengths(row)
    if not is_random(row):
        return np.full(n, li, dtype=np.int64), np.full(n, lo, dtype=np.int64)
    ins, outs = sample_random(ServeClient(num_prompts=n, random_input_len=li, random_output_len=lo,
                                          random_range_ratio=rr, range_mode=mode, seed=seed))
    means = stated_means(row)
    if means is not None:
        ins = np.maximum(1, np.round(ins * means[0] / max(ins.mean(), 1e-9))).astype(np.int64)
        if stopped_at_eos(row, lo, rr, means[1]):
            outs = eos_lengths(n, lo, means[1], seed)
        else:
            outs = np.maximum(1, np.round(outs * means[1] / max(outs.mean(), 1e-9))).astype(np.int64)
    return ins.astype(np.int64), outs.astype(np.int64)


#: datasets whose every request carries the same stated lengths (one fixed prompt of a stated token count, outputs
#: forced to a stated length with ignore_eos/min_tokens; benchmarks/serving/COLLECTIONS-e.md): their lengths do
#: not spread, so a closed loop of them ran in lock-step like its fixed-length replay, and it is replayed
#: (calibrate/serving/rows.py `exclusion`); every request is the same text, so it shares its whole prompt
#: (`shared_prefix`)
FIXED_LENGTH_DATASETS = ("fixed-prompt",)


def shared_prefix(row: Mapping, prompt_lens) -> int:
    """Prompt tokens every request of a row's run shares: the whole prompt for a fixed-prompt dataset (every
    request is the same text, FIXED_LENGTH_DATASETS: e.g. waynehacking8's and Azir111's clients send one
    prompt N times), else 0 (random datasets draw fresh token ids per request; vLLM's random dataset shares
    only a stated --random-prefix-len, which no replayed row sets). Whether the engine reuses it is the
    engine's own setting (EngineConfig.prefix_caching: on by default in vLLM V1 and TensorRT-LLM's PyTorch
    backend), applied by the simulator's prefix cache at the engine's block size. The one sharing rule of a
    corpus row: `predict_row` and the serving fit's load points (calibrate/serving/rows.py) both use it."""
    ds = (row.get("dataset") or "").strip().lower()
    return int(min(prompt_lens)) if ds in FIXED_LENGTH_DATASETS and len(prompt_lens) else 0


def stopped_at_eos(row: Mapping, max_tokens: int, range_ratio: float, mean_out: float) -> bool:
    """True when a random-dataset row's requests stopped at EOS: every request asked for the same
    `max_tokens` (range ratio 0), the client did not say --ignore-eos (the column is not true), and
    the realised mean output its notes state is more than 2% below `max_tokens` (a request can only
    end early by sampling EOS). Scaling the fixed length down to the mean would give every request
    the same output length, which the run did not have: a closed loop of equal requests replays in
    lock-step (C prompts prefilled together every round) where the real clients drifted apart."""
    ignore = str(row.get("ignore_eos") or "").strip().lower()
    return (ignore not in ("true", "yes", "1") and range_ratio == 0 and max_tokens > 1
            and mean_out < 0.98 * max_tokens)


def eos_hazard(max_tokens: int, mean_out: float) -> float:
    """The per-token EOS probability h whose capped geometric length min(G, max_tokens), G ~
    Geometric(h) on 1, 2, ..., has mean `mean_out`: E = (1 - (1 - h)^max_tokens) / h, decreasing in h
    (bisection). The model: every generated token is EOS with the same probability, independently,
    and the server stops at EOS or at max_tokens -- the simplest stopping process with one free
    quantity, set by the stated mean (nothing fitted). Root by scipy.optimize.brentq on (1e-12, 1]."""
    from scipy.optimize import brentq

    target = min(max(float(mean_out), 1.0), float(max_tokens))
    if target >= max_tokens - 1e-9:
        return 0.0
    return brentq(lambda h: (1.0 - (1.0 - h) ** max_tokens) / h - target, 1e-12, 1.0, xtol=1e-15, rtol=1e-15)


def eos_lengths(n: int, max_tokens: int, mean_out: float, seed: int = 0) -> np.ndarray:
    """n output lengths of requests that stop at EOS (`eos_hazard`) or at `max_tokens`: the capped
    geometric's quantiles at (i + 1/2) / n (so their mean is the stated one up to rounding, not up to
    a random draw's noise: 300 draws wander +-5% around it), in an order shuffled by
    numpy.random.default_rng(seed) (deterministic)."""
    h = eos_hazard(max_tokens, mean_out)
    if h <= 0.0:
        return np.full(n, int(max_tokens), dtype=np.int64)
    if h >= 1.0:  # a stated mean of one token: every request stops at its first
        return np.ones(n, dtype=np.int64)
    u = (np.arange(n) + 0.5) / n
    g = np.ceil(np.log1p(-u) / math.log1p(-h))  # inverse CDF of Geometric(h) on 1, 2, ...
    out = np.clip(g, 1, int(max_tokens)).astype(np.int64)
    return np.random.default_rng(seed).permutation(out)


def is_static_batch(client) -> bool:
    """True for a static-batch tool's client cell (STATIC_BATCH)."""
    c = str(client or "").strip()
    return bool(c) and any(s in c for s in STATIC_BATCH)


def static_batch(row: Mapping) -> tuple[int, np.ndarray, np.ndarray]:
    """(B, prompt lengths, output lengths) of a static-batch tool's row: B = its `max_concurrency` (1 when blank)
    requests, every one at the row's `input_tokens` / `output_tokens` (at least 1: the tools take fixed lengths,
    llama-batched-bench's PP / TG, benchmark_latency's --input-len / --output-len; no dataset is drawn)."""
    b = int(cell_number(row.get("max_concurrency")) or 1)
    li = int(round(cell_number(row.get("input_tokens"), 0) or 0))
    lo = int(round(cell_number(row.get("output_tokens"), 0) or 0))
    return b, np.full(b, max(li, 1), dtype=np.int64), np.full(b, max(lo, 1), dtype=np.int64)


def point_from_row(row: Mapping) -> tuple[str, ServeClient, Deployment]:
    """(tool, client settings, deployment) of one corpus row. A static-batch tool (`is_static_batch`) is replayed
    as `vllm bench serve` sending its B requests at once with at most B in flight (`static_batch`), as the serving
    fit replays it (calibrate/serving/replay.py); `predict_row` reports the tool's own figures of that batch
    (sim.bench.corpus_static). The deployment carries the speculative block the side table states for the row
    (`row_speculative`)."""
    return _row_point(row)[:3]


def _row_point(row: Mapping) -> tuple[str, ServeClient, Deployment, tuple[np.ndarray, np.ndarray] | None]:
    """`point_from_row`'s (tool, client, deployment) and a static-batch tool's fixed (input, output) lengths
    (`static_batch`, computed once here and handed on to `predict_row`); None for any other row, whose lengths
    `row_lengths` draws with the client's num_prompts and seed."""
    client = str(row.get("client") or "vllm-bench-serve").strip()
    static = is_static_batch(client)
    tool = "vllm" if client in VLLM_LIKE or static else client
    if tool not in ("vllm", "aiperf", "genai-perf", "guidellm"):
        raise ConfigError(f"unknown client {client!r}", file=row.get("row_id"), field="client")
    conc = number(row, "max_concurrency")
    rate = number(row, "request_rate", math.inf)
    n = number(row, "num_prompts")
    if n is None:
        n = max(100, 10 * int(conc)) if conc else 1000
    lengths = None
    if static:  # one batch, all at once: B requests at the row's fixed lengths
        n, ins, outs = static_batch(row)
        li, lo, rr, mode, rate = int(ins[0]), int(outs[0]), 0.0, range_mode(client), math.inf
        lengths = (ins, outs)
    else:
        li, lo, rr, mode = client_lengths(row)
    client_s = ServeClient(
        num_prompts=int(n), request_rate=rate if rate and rate > 0 else math.inf, burstiness=number(row, "burstiness", 1.0),
        max_concurrency=int(conc) if conc else None,
        random_input_len=li or 1024, random_output_len=lo or 128, random_range_ratio=rr,
        percentile_metrics=("ttft", "tpot", "itl", "e2el"), metric_percentiles=(90.0, 95.0, 99.0),
        num_warmups=int(number(row, "warmup", 0) or 0), range_mode=mode,
    )
    dep = Deployment(hw=str(row["device"]), model=row_model(row), quant=None if blank(row.get("quant")) else
                     str(row["quant"]).strip(), engine=row_engine(row),
                     overrides={**row_overrides(row), **row_speculative(row)},
                     model_overrides=benchmark_routing(client, row_model(row)))
    return tool, client_s.check(), dep, lengths


def benchmark_routing(client: str, model: str) -> dict | None:
    """The model's routing under a benchmark of identical synthetic tokens (sim.catalog.models
    IDENTICAL_TOKEN_BENCHES: llama-batched-bench feeds token 0), where the catalog has it fitted apart
    (ModelSpec.identical_tokens_pool_fraction: gpt-oss-120b 0.4 against 0.8 on real prompts), as the kernel fit
    replays that benchmark's rows; None for any other client or model (the catalog's routing)."""
    from sim.catalog.lookup import get_model
    from sim.catalog.models import IDENTICAL_TOKEN_BENCHES

    if client not in IDENTICAL_TOKEN_BENCHES:
        return None
    pool = get_model(model).identical_tokens_pool_fraction
    return None if pool is None else {"expert_pool_fraction": pool}


def predict_point(tool: str, client: ServeClient, deployment: Deployment, *, load_kind: str = "concurrency",
                  lengths: tuple[np.ndarray, np.ndarray] | None = None, prefix_tokens: int = 0) -> dict:
    """{(quantity, statistic): value} for one load point, in the corpus's quantities. `lengths`: the
    requests' (input, output) lengths (`row_lengths`; default: what `client` samples), released as
    the tool releases them. `prefix_tokens`: leading tokens of those prompts that every request shares
    (`shared_prefix`), handed to the simulator's prefix cache as sim.bench.datasets.Workload.prefix_tokens;
    it needs `lengths` and is at most the shortest of them (0: nothing shared, the workload as before)."""
    from dataclasses import replace

    from sim.bench.tools import guidellm_benchmark, run_aiperf

    if prefix_tokens and (lengths is None or prefix_tokens > int(np.min(lengths[0]))):
        raise ConfigError(f"a shared prefix of {prefix_tokens} tokens needs given prompt lengths at least as long",
                          field="prefix_tokens")

    def workload(releaser: ServeClient) -> Workload:
        wl = make_workload(client) if lengths is None else Workload(lengths[0], lengths[1], np.zeros(len(lengths[0])),
                                                                    prefix_tokens=int(prefix_tokens))
        return replace(wl, release_s=release_times(releaser, len(wl)))

    out: dict[tuple[str, str], float] = {}
    if tool == "vllm":
        r = run_client(client, deployment, workload=workload(client), date="corpus")
        for q in ("ttft", "tpot", "itl", "e2el"):
            for stat, key in (("mean", f"mean_{q}_ms"), ("median", f"median_{q}_ms"), ("p90", f"p90_{q}_ms"),
                              ("p95", f"p95_{q}_ms"), ("p99", f"p99_{q}_ms")):
                if key in r:
                    out[(f"{q}_ms", stat)] = r[key]
        out[("output_tps", "value")] = r["output_throughput"]
        out[("total_tps", "value")] = r["total_token_throughput"]
        out[("request_tps", "value")] = r["request_throughput"]
        tpot = r.get("mean_tpot_ms")
    elif tool in ("aiperf", "genai-perf"):
        # AIPerf's request-rate mode sends at a constant rate (burstiness inf in vLLM's terms)
        rate = client.request_rate != math.inf
        e, _ = run_aiperf(client, deployment, tool=tool,
                          workload=workload(replace(client, burstiness=math.inf) if rate else client))
        for q, key in (("ttft", "time_to_first_token"), ("tpot", "inter_token_latency"), ("itl", "inter_token_latency"),
                       ("e2el", "request_latency")):
            d = e.get(key) or {}
            for stat, src in (("mean", "avg"), ("median", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99")):
                if d.get(src) is not None:
                    out[(f"{q}_ms", stat)] = d[src]
        out[("output_tps", "value")] = e["output_token_throughput"]["avg"]
        out[("request_tps", "value")] = e["request_throughput"]["avg"]
        tpot = (e.get("inter_token_latency") or {}).get("avg")
    else:
        from sim.bench.serve import simulate_workload

        wl = workload(replace(client, request_rate=math.inf))
        if load_kind == "rate" and client.request_rate != math.inf:
            wl = replace(wl, release_s=np.arange(len(wl)) / client.request_rate)
            cap, strategy = client.max_concurrency, {"type_": "constant", "rate": client.request_rate}
        else:
            cap, strategy = client.max_concurrency or 1, {"type_": "concurrent", "streams": client.max_concurrency or 1}
        b = guidellm_benchmark(simulate_workload(wl, deployment, max_concurrency=cap, seed=client.seed), strategy)
        m = b["metrics"]
        for q, key in (("ttft", "time_to_first_token_ms"), ("tpot", "time_per_output_token_ms"),
                       ("itl", "inter_token_latency_ms")):
            s = m[key]["successful"]
            for stat, v in (("mean", s["mean"]), ("median", s["median"]), ("p90", s["percentiles"]["p90"]),
                            ("p95", s["percentiles"]["p95"]), ("p99", s["percentiles"]["p99"])):
                out[(f"{q}_ms", stat)] = v
        out[("output_tps", "value")] = m["output_tokens_per_second"]["successful"]["mean"]
        out[("total_tps", "value")] = m["tokens_per_second"]["successful"]["mean"]
        out[("request_tps", "value")] = m["requests_per_second"]["successful"]["mean"]
        tpot = m["inter_token_latency_ms"]["successful"]["mean"]
    if tpot:
        out[("tps_per_user", "value")] = 1000.0 / tpot
    return out


def predict_row(row: Mapping) -> dict:
    """The simulator's figures for one corpus row's load point (see the module docstring): its lengths
    (`row_lengths`; a static-batch tool's fixed ones, `static_batch`) and the prompt prefix its requests share
    (`shared_prefix`), on the deployment `point_from_row` names, as the serving fit replays it. A static-batch
    tool's row gets the figures the tool prints for that one batch (sim.bench.corpus_static `tool_figures`: e.g.
    llama-batched-bench's T_PP as ttft_ms, its batch decode step as tpot_ms), not vLLM's per-request statistics."""
    tool, client, dep, lengths = _row_point(row)
    if lengths is not None:  # a static-batch tool: its B requests sent at once, the same replay as `predict_point`'s
        from sim.bench.corpus_static import tool_figures
        from sim.bench.serve import simulate_workload

        ins, outs = lengths
        wl = Workload(ins, outs, release_times(client, len(ins)), prefix_tokens=shared_prefix(row, ins))
        return tool_figures(row.get("client"), simulate_workload(wl, dep, max_concurrency=client.max_concurrency,
                                                                  seed=client.seed))
    ins, outs = row_lengths(row, client.num_prompts, client.seed)
    return predict_point(tool, client, dep, load_kind=str(row.get("load_kind") or "concurrency"),
                         lengths=(ins, outs), prefix_tokens=shared_prefix(row, ins))
