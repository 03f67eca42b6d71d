"""Fit the cost model to published measurements of hardware infersim cannot touch.

The corpus (`calibrate.public_corpus`, `benchmarks/public/*.csv`) holds what people measured:
llama-bench pp/tg, llama-batched-bench tables, TensorRT-LLM's offline throughput tables, vLLM and
SGLang latency and serving runs. Each row is turned into the iterations the engine ran
(`row_shape`), priced with the cost model's own formulas (`sim.cost.roofline.CostModel.predict_times`,
the same code the simulator calls), and the free parameters of one (device, kernel family) are
fitted to all of that group's rows at once:

    bandwidth          sustained / datasheet memory bandwidth                 (decode)
    compute[class]     sustained / datasheet matmul FLOP/s per weight class   (prefill, big batches)
                       classes: f16 (fp16/bf16), fp8, int8, fp4 (nvfp4/mxfp4), gguf (llama.cpp's
                       quantized MMQ/MMVQ kernels), mlx, int4wo (AWQ/GPTQ)
    attention          attention FLOP/s / datasheet bf16 peak                  (long prompts, depth)
    floor_ms           device-side cost per engine iteration: kernel launches and the gaps
                       between them, which set the pace of small-batch decode on big GPUs
    seq_ms             device-side cost per sequence per iteration: per-sequence kernel work the
                       roofline leaves out (sampling, rope/norm of its rows, per-sequence attention
                       launches, the imperfect overlap of compute and memory as a batch grows)

Kernel families share kernels, so they share these numbers: `ggml` (llama.cpp, Ollama, LM Studio's
llama.cpp runtime), `mlx` (mlx-lm, LM Studio's MLX runtime), `torch` (vLLM, SGLang, TGI) and
`trtllm`. Each engine keeps its own software overheads (EngineConfig.iteration_overhead_ms).

The fit is `scipy.optimize.least_squares` on log(predicted / measured) — a relative error, so a
70B row and a 1B row weigh the same — plus weak log-normal priors that hold a parameter the group's
rows cannot see (no fp8 rows: no fp8 efficiency to learn) at a generic value; a parameter the rows
do see moves freely. A device with no rows of a family gets the parameters of its nearest
devices (`transfer`): same generation and memory class, then same vendor and memory class, then —
for matmul-side parameters — every device of the vendor, for memory-side ones the same generation
(`_tier`; between Apple chips the memory side goes by package, Max with Max, Ultra with Ultra); matmul efficiencies travel as shares of the peak the family's kernels can reach
(`achievable_share`), all-reduce latency as a multiple of the link's own; and it says so.

Held-out error (`cross_validate`): leave-one-device-out (each device predicted from the others
only, through `transfer`: the error a user of an unmeasured device should expect) and
leave-one-source-out (each source predicted from the rest: the error when a new benchmark of a
measured device comes in). The shipped error bands come from these held-out residuals.

Rows are modelled only where the row says what ran. A row without the prompt or output length it
measured, or whose quantity this module cannot replay (ITL of a multi-step scheduler, a Poisson
serving run without lengths), is reported as excluded with its reason, never silently dropped.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field, fields, replace
from functools import cached_property, lru_cache

import numpy as np

from calibrate.public_corpus import REPO_SOURCE, PublicRow
from sim.catalog.engine_config import kernel_family_of
from sim.catalog.hardware import Efficiency
from sim.catalog.quant import base_class, kernel_class
from sim.cost.memory import GiB
from sim.cost.llamacpp import llamacpp_kernel_args
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel, StepFeatures

# ---- kernel families and weight classes ---------------------------------------------------------

def engine_family(engine: str, settings: dict | None = None) -> str:
    """The kernels an engine runs (what its efficiencies are shared with): its preset's `kernel_family`
    (sim/catalog/engines). LM Studio runs MLX or llama.cpp: a row naming its runtime takes that preset's."""
    runtime = str((settings or {}).get("runtime", "")).lower() if engine == "lmstudio" else ""
    if runtime:
        engine = "mlx" if runtime.startswith("mlx") else "llama.cpp"
    return kernel_family_of(engine)


# ---- parameters ---------------------------------------------------------------------------------

# Priors (log-normal: centre, sigma in natural-log units). Centres are the generic values the
# profiles carried before this fit (sim/catalog/hardware.py Efficiency defaults; FlashAttention-2 at ~35% of
# bf16 peak, arXiv 2307.08691); sigmas are wide (x2.7 per unit) so data wins wherever it speaks.
PRIOR_BANDWIDTH = (0.75, 1.0)
PRIOR_COMPUTE = (0.4, 3.0)
PRIOR_ATTENTION = (0.3, 3.0)
# floor: a normal prior in ms (not log: a floor near 0 must be free to grow to milliseconds, which a
# log scale makes a flat, gradient-free climb); 5 ms wide
PRIOR_FLOOR_MS = (0.1, 5.0)
# per-sequence cost: normal prior around 0 ms, 50 us wide (a decode row's sampling, norms and rope are
# microseconds to tens of microseconds of GPU time; a group must show more with rows over many batch
# sizes — 3 rows at one batch size cannot tell it from the iteration floor)
PRIOR_SEQ_MS = (0.0, 0.05)
# GEMM start-up n_1/2 in rows (sim.cost `_layer_matmul_flops`): normal prior at 0, 128 rows wide; with
# dense prompts of >= 512 rows it barely shows, with a MoE prompt's few rows per expert it dominates
PRIOR_HALF_ROWS = (0.0, 128.0)
# A row's log error is measured against ROW_SIGMA: the scatter between two published measurements of
# the same setup (builds, drivers, clocks) is about 10%, so a 10% miss weighs as much as a one-sigma
# move of a prior. Past ROBUST_SCALE sigmas (15%) a row pulls linearly, not quadratically
# (soft_l1): one misprinted or mislabelled figure cannot drag a whole device.
ROW_SIGMA = 0.1
ROBUST_SCALE = 1.5
def robust_loss(r) -> float:
    """The fit's soft-L1 loss of residuals `r` in ROW_SIGMA units: quadratic up to ROBUST_SCALE, linear
    past it (scipy least_squares' soft_l1 with f_scale = ROBUST_SCALE, x 2 f_scale^2)."""
    r = np.asarray(r, dtype=float)
    return float(np.sum(2 * ROBUST_SCALE**2 * (np.sqrt(1 + (r / ROBUST_SCALE) ** 2) - 1)))


def _rows_loss(items, p: "GroupParams") -> float:
    """`robust_loss` of rows [Prepared] predicted with a group's parameters."""
    return robust_loss([math.log(max(predict(it.row, it.shape, p), 1e-12) / it.row.value) / ROW_SIGMA
                        for it in items])


def _grid_choice(grid, apply, groups: dict, rows_of: dict) -> tuple[float, dict]:
    """A kernel or model property chosen on all rows: for each value of `grid`, `apply(value)`, refit
    every group of `rows_of` ({group key: the rows scored}) and sum the robust loss of those rows; the
    value with the least loss is applied again and returned with {value: loss}."""
    scores = {}
    for c in grid:
        apply(c)
        loss = 0.0
        for k, rows in rows_of.items():
            loss += _rows_loss(rows, fit_group(groups[k], *k))
        scores[c] = loss
    best = min(scores, key=scores.get)
    apply(best)
    return best, scores


BOUNDS = {"bandwidth": (0.05, 1.0), "compute": (0.002, 1.0), "attention": (0.005, 1.0), "floor_ms": (0.0, 30.0),
          "seq_ms": (0.0, 10.0), "half_rows": (0.0, 1024.0), "lat_us": (0.2, 50.0)}
PRIOR_LATENCY_US_SIGMA = 5.0


@dataclass
class GroupParams:
    """Fitted (or transferred) parameters of one (device, family)."""

    device: str
    family: str
    bandwidth: dict[str, float]
    compute: dict[str, float]
    attention: float
    floor_ms: float
    seq_ms: float = 0.0
    half_rows: float = 0.0
    lat_us: float | None = None  # step latency of the family's all-reduce (fitted only from TP rows)
    rows: list[str] = field(default_factory=list)  # corpus row ids the values were fitted to
    sources: list[str] = field(default_factory=list)
    transferred_from: list[str] = field(default_factory=list)  # "device/family" when not fitted here
    seen_classes: tuple[str, ...] = ()  # weight classes the group's rows measured
    current_share: float | None = None  # share of its rows run on current software (`row_is_current`)
    rows_here: int = 0  # of `rows`, those timed with this repository's scripts (source `repo:<path>`)
    # values the rows pinned down (`fit_group`, PIN_INFO): "attention", "half_rows",
    # "bandwidth:<class>", "compute:<class>"; None (a hand-made group): the attention, the GEMM
    # start-up and every efficiency of a measured class count as pinned
    pinned: frozenset | None = None
    # how closely the fitted values follow the group's rows: median |log(predicted / measured)| over
    # them (`fit_group`); None for a hand-made or transferred group. `transfer` weighs a donor by it.
    spread: float | None = None
    # every row ran without CUDA graphs (settings enforce_eager): its per-step floor and all-reduce
    # latency are eager mode's, which the presets (graphs on) do not pay; `transfer` lends neither
    eager: bool = False
    # a transferred group's `lat_us` is the device's own all-reduce micro-benchmark
    # (`allreduce_step_latency_us`): no donor of the family ran with CUDA graphs
    lat_from_microbench: bool = False
    # the rows' Fisher information on the log attention efficiency (`fit_group`; None when not fitted)
    attention_info: float | None = None
    # a fitted group whose rows carry next to no information on its attention ships one transferred
    # from these devices (`params_for`); empty when the attention is its own
    attention_from: list[str] = field(default_factory=list)

    def pins(self, what: str, cls: str = "") -> bool:
        """Whether the group's rows pinned `what` ("attention", "half_rows", "bandwidth", "compute") of `cls`."""
        if self.pinned is None:
            return what in ("attention", "half_rows") or cls in self.seen_classes
        return (f"{what}:{cls}" if cls else what) in self.pinned

    def compute_for(self, cls: str) -> float:
        """Matmul efficiency of a weight class; an unmeasured class takes the geometric mean of the others."""
        return _class_value(self.compute, cls, PRIOR_COMPUTE[0])

    def bandwidth_for(self, cls: str) -> float:
        """Bandwidth efficiency of a weight class's kernels (GEMV of quantized weights dequantizes
        on the fly and reaches less of the bus than a plain fp16 GEMV)."""
        return _class_value(self.bandwidth, cls, PRIOR_BANDWIDTH[0])

    @cached_property
    def efficiency(self) -> Efficiency:
        """These values as the profile entry they become (sim.catalog.hardware.Efficiency): an unmeasured
        weight class falls back to `compute` / `bandwidth`, the geometric means of the measured ones."""
        return Efficiency(
            compute=_class_value(self.compute, "", PRIOR_COMPUTE[0]),
            bandwidth=_class_value(self.bandwidth, "", PRIOR_BANDWIDTH[0]),
            compute_by_class=self.compute, bandwidth_by_class=self.bandwidth, attention_of_peak=self.attention,
            floor_ms=self.floor_ms, per_sequence_ms=self.seq_ms, matmul_half_rows=self.half_rows,
            interconnect_latency_us=self.lat_us,
            kquant_matvec_flops_per_weight=matvec_flops_for(self.device, self.family),
        )


def _class_value(values: dict[str, float], cls: str, default: float) -> float:
    """A class's value: its own, else its dense class's for a MoE class (`base_class`), else the
    geometric mean of the dense classes measured (of all when only MoE classes were), else `default`."""
    if cls in values:
        return values[cls]
    if base_class(cls) in values:
        return values[base_class(cls)]
    dense = [v for c, v in values.items() if base_class(c) == c] or list(values.values())
    return float(np.exp(np.mean(np.log(dense)))) if dense else default


# ---- turning a row into iterations ----------------------------------------------------------------

@dataclass
class Shape:
    """What the engine ran for one row: iteration aggregates, how often each ran, and how the
    measured figure follows from their total time T: value = numerator / T (a rate) or T x scale."""

    features: StepFeatures
    weights: np.ndarray
    numerator: float = 0.0
    scale: float = 0.0
    tp: int = 1
    comm_per_token_s: float = 0.0
    comm_steps: float = 0.0  # collective steps per pass (each costs the step latency)


class Excluded(Exception):
    """A row the cost model cannot replay (the reason says why)."""


def _row_objects(row: PublicRow, fitting: bool = False):
    """(profile, engine preset for that device, model, quant format, CostModel) a row is replayed with;
    the KV dtype is the row's own when its settings name one (kv_cache_dtype=fp8). `fitting`: the
    cost model a group's own fit uses, without the MMQ tile floor (`row_mmq_tiles`)."""
    return _objects(row.device, row.engine, row.model, row.quant, row.n_devices, _row_kv_dtype(row),
                    POOL_OVERRIDE.get(routing_key(row)), row.settings.get("mxfp4_layers", ""), row_flash_attention(row),
                    row_mmq_tiles(row) and not fitting)


def row_mmq_tiles(row: PublicRow) -> bool:
    """Whether a row ran llama.cpp's stream-k MMQ kernels, whose tile traffic the cost model floors
    the quantized matmuls with (sim.cost.llamacpp `mmq_tile_traffic_bytes`): a current build
    (`row_is_current`). The corpus's 2023-24 builds (1619-2843) predate the int8 tensor-core MMQ
    and its stream-k loop (mid-2024): on tensor-core GPUs they dequantized a prompt's weights to fp16
    for cuBLAS instead, a different traffic.

    The floor bounds predictions, not a group's own fit (`fit_group` prices its rows without it). No
    device's fitted matmul rate runs into it on its own rows, but where the rows sit near it the
    floor turns the matmul rate into a flat direction: the RTX 5090's four llama-bench rows (pp512 at
    1.5x the floor) then left the matmul rate at its prior and moved the prompt time onto the
    attention efficiency (0.19 -> 0.065 of peak), which pp512 barely exercises, and the simulator's
    8,192-token 5090 prompt took 2.1x as long. Fitted without it, every group's parameters are what
    they were; held out by device the floor then keeps a transferred rate from outrunning the
    memory (docs/public-calibration.md, round 22)."""
    return bool(row_is_current(row))


def row_flash_attention(row: PublicRow) -> bool:
    """Whether a row's attention ran as flash-attention kernels (EngineConfig.flash_attention). A
    llama.cpp-family row: its settings' `fa` when printed (llama-bench -fa 0/1), else on for a
    current build (`row_is_current`) and off for an earlier one. Flash attention became llama.cpp's
    default ("-fa auto") with PR #15434 (merged 2025-08); before it, -fa was off unless passed, and
    the 2023-24 tables the corpus scraped (XiongjieDai's, discussion #4167's) print no fa column. This
    repository's 2026 llama-bench run on the H200 prints the fa column only where -fa was passed
    (benchmarks/gpu/h200-2026-12-04/h200_llamacpp.log), as llama-bench does for default values. The
    2025-08 RTX 4090 rows of PR #15631 (no fa printed; build b64ba1cc8, days before #15434 merged)
    count as current: taken as off, held out by device the p90 goes 29.5 -> 33.6% and 163 -> 193 rows
    past 25% (their attention is then bandwidth-bound and no RTX 4090 row pins the kernel's rate),
    so the rows themselves say the kernels were fused. Other families always fuse attention
    (FlashAttention / FlashInfer in vLLM and SGLang, TensorRT-LLM's fused kernels, MLX's
    scaled_dot_product_attention)."""
    if engine_family(row.engine, row.settings) != "ggml":
        return True
    # anything else printed ("auto (on)" in this repository's H200 rows) goes by the build's era
    fa = row.settings.get("fa", "").strip().lower()
    if fa in ("0", "off", "false"):
        return False
    if fa in ("1", "on", "true"):
        return True
    return bool(row_is_current(row))


def _row_kv_dtype(row: PublicRow) -> str:
    """The KV dtype a row ran with: its settings' (kv_cache_dtype=fp8), FP8 for the v1.0 PyTorch-backend
    TensorRT-LLM FP8 rows (`_pytorch_trtllm_fp8`), else "" (the engine preset's)."""
    kv = row.settings.get("kv_cache_dtype") or row.settings.get("kv_dtype") or ""
    kv = kv.split()[0].lower() if kv else ""
    if not kv and _pytorch_trtllm_fp8(row):
        kv = "fp8"
    return kv if kv in ("fp8", "fp16", "bf16") else ""


def _pytorch_trtllm_fp8(row: PublicRow) -> bool:
    """TensorRT-LLM v1.0 perf-overview rows (PyTorch backend, ModelOpt FP8 checkpoints) ran with an FP8
    KV cache. The source does not print the KV dtype, but its own figures rule a BF16 cache out: Llama
    3.1 8B (32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B of BF16 KV per token) at
    128/2048 on an H100 SXM makes 22,714 output tok/s; each output token reads the cache of its
    sequence, on average 128 + 2048/2 = 1,152 tokens = 151 MB in BF16, and 3.35 TB/s / 151 MB = 22,200
    tok/s is the most HBM can serve for the KV reads alone, before any weight is read. With FP8 KV
    (75 MB per token) the figure fits. (The v0.13 FP8 rows state FP8 KV: "If you specify FP8
    quantization, the KV cache will automatically be set to FP8 as well".)"""
    return row.quant == "fp8" and _pytorch_flow(row)


def _pytorch_flow(row: PublicRow) -> bool:
    """A TensorRT-LLM row of `trtllm-bench throughput --backend pytorch` (the v1.0 perf-overview rows)."""
    return row.engine == "trtllm" and "--backend pytorch" in (row.settings.get("bench") or "")


# routing key (`routing_key`) -> expert_pool_fraction tried by `fit_routing` (None: the catalog's)
POOL_OVERRIDE: dict[str, float] = {}

# Benchmarks whose sequences are all the same synthetic tokens: llama-batched-bench feeds token 0 at
# every position of every sequence (tools/batched-bench/batched-bench.cpp, `common_batch_add(batch, 0,
# ...)`), so its sequences' hidden states, and the experts they pick, are far more alike than real
# prompts'. Their routing skew is a property of the benchmark, fitted apart from the model's
# (`routing_key`), and not shipped in the catalog (`fit_routing`).
SYNTHETIC_TOKEN_BENCHES = ("llama-batched-bench",)
SYNTHETIC_SUFFIX = "@identical-tokens"


def routing_key(row: PublicRow) -> str:
    """The POOL_OVERRIDE key of a row's routing: the model's, or for a benchmark of identical synthetic
    sequences (SYNTHETIC_TOKEN_BENCHES) the model's under that benchmark (model + SYNTHETIC_SUFFIX)."""
    bench = (row.settings.get("bench") or "").split()
    return row.model + SYNTHETIC_SUFFIX if bench and bench[0] in SYNTHETIC_TOKEN_BENCHES else row.model


@lru_cache(maxsize=None)
def _objects(device: str, engine: str, model: str, quant: str, tp: int, kv_dtype: str = "",
             pool: float | None = None, mxfp4_layers: str = "", flash_attention: bool = True,
             mmq_tiles: bool = True):
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile
    from sim.catalog.lookup import get_model

    hw = load_profile(device)
    eng = load_engine(engine).for_hardware(hw)  # each engine's rows replay with its own preset
    if tp > 1:
        eng = eng.with_overrides(tp=tp)
    if kv_dtype:
        eng = eng.with_overrides(kv_dtype=kv_dtype)
    # the attention kernels the row ran, for every model (`row_flash_attention`), so that the engine
    # the report's simulator check runs (public_report.simulate_row) prices the row alike
    eng = eng.with_overrides(flash_attention=flash_attention, flash_attention_architectures=["*"])
    spec = get_model(model).as_loaded_by(eng.kernel_family)  # as the simulator holds it
    if pool is not None:
        spec = spec.model_copy(update={"expert_pool_fraction": pool})
    q = _with_mxfp4_layers(spec.quant(quant), mxfp4_layers)
    kernels = llamacpp_kernel_args(hw, eng.kernel_family, q)
    if not mmq_tiles:
        kernels["mmq_tile_bandwidth"] = 0.0
    cm = CostModel(spec, q, CostParams(1e12, 1e12, 1e12), kv_dtype=eng.kv_dtype, kv_pad=eng.attention_kv_padding,
                   flash_attention=flash_attention, **kernels)
    return hw, eng, spec, q, cm


def _with_mxfp4_layers(q, layers: str):
    """The format a row's `mxfp4_layers` setting names: an MXFP4 checkpoint whose attention
    projections ("qkv", "o") and LM head ("lm_head") were quantized to MXFP4 as well as the experts
    (kubis.ai's vllm-node-mxfp4 image: mxfp4_layers=moe,qkv,o,lm_head), where the released one keeps
    them in bf16 (`QuantFormat.non_expert_bits_per_weight`)."""
    parts = {x.strip() for x in layers.split(",") if x.strip()}
    if q.name != "mxfp4" or not parts:
        return q
    if {"qkv", "o"} <= parts:
        q = replace(q, non_expert_bits_per_weight=q.bits_per_weight)
    if "lm_head" in parts:
        q = replace(q, lm_head_bits_per_weight=q.bits_per_weight)
    return q


def _kv_capacity(hw, spec, q, eng) -> int:
    """KV tokens of the deployment, by the simulator's own rule (sim.engine.build.plan_kv); 0 when the
    weights do not fit."""
    from sim.engine.build import plan_kv
    from sim.errors import ConfigError

    try:
        return plan_kv(hw, spec, q.name, eng).capacity_tokens
    except ConfigError:
        return 0


def _comm(hw, spec, tp: int) -> tuple[float, float]:
    """A TP group's all-reduces (sim.cost.parallel's placement): seconds per token (bandwidth term) and
    collective steps per pass, which cost the family's step latency each (`GroupParams.lat_us`)."""
    if tp <= 1:
        return 0.0, 0.0
    from sim.cost.parallel import ParallelConfig, build_placement

    pl = build_placement(spec, CostParams(1e12, 1e12, 1e12), ParallelConfig.for_profile(hw, tp, 1, latency_us=1.0),
                         None)
    return pl.comm_s_per_token, pl.comm_s_per_pass / 1e-6  # per pass at 1 us per step = steps


def _decode_steps(cm, batch: int, start: int, steps: int, samples: int = 24):
    """Decode iterations of `batch` sequences from context `start` for `steps` steps, sampled at up to
    `samples` evenly spaced steps (each standing for its share of the steps: the step time is
    piecewise linear in the context, so the midpoint rule is within a fraction of a percent)."""
    n = min(steps, samples)
    edges = np.linspace(0, steps, n + 1)
    items = []
    for a, b in zip(edges[:-1], edges[1:]):
        ctx = int(start + (a + b) / 2)
        items.append((cm.features(decode_context=[ctx] * batch), b - a))
    return items


def _prefill_passes(cm, prompts: int, tokens: int, depth: int, ubatch: int):
    """Prompt passes of `prompts` sequences of `tokens` each after `depth` cached tokens, in physical
    batches of `ubatch` tokens (llama.cpp -ub; a paged engine's token budget): a prompt longer than
    a batch is split into chunks; shorter ones share a batch."""
    items = []
    if tokens <= ubatch:
        per = max(1, ubatch // tokens)
        full, rest = divmod(prompts, per)
        if full:
            items.append((cm.features(prefill_tokens=[tokens] * per, prefill_context=[depth] * per), full))
        if rest:
            items.append((cm.features(prefill_tokens=[tokens] * rest, prefill_context=[depth] * rest), 1))
        return items
    done = 0
    while done < tokens:
        p = min(ubatch, tokens - done)
        items.append((cm.features(prefill_tokens=[p], prefill_context=[depth + done]), prompts))
        done += p
    return items


def _ubatch(row: PublicRow, eng) -> int:
    # the row's own, else the preset's physical batch (llama.cpp -ub 512, Ollama num_batch 512), else its
    # token budget
    return row.ubatch or eng.forward_tokens or 8192


def _pack(items) -> tuple[StepFeatures, np.ndarray]:
    return StepFeatures.concat([f for f, _ in items]), np.array([w for _, w in items], dtype=float)


def _steady_iteration(cm, batch: float, isl: int, osl: int):
    """The average iteration of an engine kept full at `batch` sequences of isl/osl tokens: every
    sequence decodes one token, and batch / osl prompts enter per iteration (each finishing request
    is replaced), their prefill spread over the iterations."""
    dec = cm.features(decode_context=[isl + osl // 2])
    pre = cm.features(prefill_tokens=[isl], prefill_context=[0])
    k = batch / osl
    return StepFeatures(*(batch * getattr(dec, f.name) + k * getattr(pre, f.name) for f in fields(StepFeatures)))


# ---- trtllm-bench's engine limits ---------------------------------------------------------------------


def trtllm_bench_limits(row: PublicRow, hw, spec) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) that `trtllm-bench` picks for a row's ISL/OSL when the run does
    not name them: the TensorRT-LLM perf-overview tables build engines with `trtllm-bench build
    --dataset` (v0.13: NVIDIA/TensorRT-LLM@v0.13.0 docs/source/performance/perf-overview.md,
    "Commands"), and the PyTorch-backend `trtllm-bench throughput` of v1.0 takes the same settings
    from `get_settings` (tensorrt_llm/bench/build/build.py: `calc_engine_setting` for FP8 and
    unquantized models). `calc_engine_setting` (tensorrt_llm/bench/build/tuning.py):

        bytes/elem    = 1 (FP8) or 2; KV bytes/elem = 1 (FP8 KV cache) or 2
        bytes/token   = 2 x layers x max(tp, kv_heads) x head_size x KV bytes/elem      [GiB]
        engine size   = params / 1e9 x bytes/elem
        KV memory     = (GPU memory [GiB, NVML] x GPUs - engine size) x 0.95
        max requests  = KV memory / bytes/token / (ISL + OSL)

    and `finetune_setting`: raw_bs = min(max requests, 4096); raw_tokens = min(raw_bs x (1 + ISL/OSL),
    32768); max_batch_size = max(64, 32-multiple ceiling) below 256, 128-multiple below 1024, else a
    256-multiple; max_num_tokens = max(2048, 256-multiple ceiling) below 4096, 512-multiple below
    8192, else a 1024-multiple. The KV bytes/elem are those of the KV cache the row ran with
    (`_row_kv_dtype`): the PyTorch flow takes them from the checkpoint (get_settings ->
    validate_and_set_kv_cache_quant with kv_cache_dtype "auto": a ModelOpt FP8 checkpoint's
    kv_cache_quant_algo is FP8), as the replay's KV pool does. GPU memory is the profile's (NVML reports a little less: 79.6 GiB
    for an H100 80GB, 45 GiB for an L40S, which the profiles quote as 80 and 48)."""
    bpe = 1.0 if row.quant == "fp8" else 2.0
    bkv = 1.0 if _row_kv_dtype(row) == "fp8" else 2.0
    tp = max(row.n_devices, 1)
    per_token = 2 * spec.n_layers * max(tp, spec.n_kv_heads) * spec.d_head * bkv / GiB
    engine = spec.n_params_total / 1e9 * bpe
    free = hw.memory_bytes / GiB * tp - engine
    isl, osl = row.input_tokens, row.output_tokens
    requests = max(free * 0.95 / per_token / (isl + osl), 1.0)
    raw_bs = min(requests, 4096)
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    bs = _tiered_ceiling(raw_bs, 64, ((256, 32), (1024, 128)), 256)
    tok = _tiered_ceiling(raw_tok, 2048, ((4096, 256), (8192, 512)), 1024)
    if _pytorch_flow(row):
        # the PyTorch flow's get_settings runs without chunked prefill (enable_chunked_prefill defaults to
        # False) and then raises max_num_tokens to at least the longest prompt + max_batch_size
        tok = max(tok, isl + bs)
    return bs, tok


def _tiered_ceiling(x: float, least: int, tiers: tuple[tuple[int, int], ...], last: int) -> int:
    """`finetune_setting`'s rounding: x rounded up to a multiple of the step of the first tier whose
    bound it is below (`last` above them all), at least `least` (which only the first tier can undercut)."""
    step = next((s for bound, s in tiers if x < bound), last)
    return max(least, step * math.ceil(x / step))


def row_shape(row: PublicRow) -> Shape:
    """The iterations behind one corpus row (raises Excluded with a reason when it cannot be replayed)."""
    tp = row.n_devices
    from sim.errors import ConfigError

    try:
        hw, eng, spec, q, cm = _row_objects(row)
    except ConfigError as e:
        raise Excluded(f"cannot build the engine/model: {e.problem}") from None
    comm = _comm(hw, spec, tp)
    isl, osl, depth = row.input_tokens, row.output_tokens, row.depth
    quantity, metric = row.quantity, row.metric

    def shape(items, numerator=0.0, scale=0.0, **kw) -> Shape:
        f, w = _pack(items)
        return Shape(f, w, numerator, scale, tp, comm[0], comm[1], **kw)

    if row.engine in ("llama.cpp", "ollama", "lmstudio") and tp > 1:
        raise Excluded("llama.cpp over several GPUs splits layers (pipeline), not tensor parallel")
    if metric == "pp":
        if not isl:
            raise Excluded("no prompt length")
        return shape(_prefill_passes(cm, 1, isl, depth, _ubatch(row, eng)), numerator=isl)
    if metric == "tg":
        if not osl:
            raise Excluded("no generated-token count")
        return shape(_decode_steps(cm, 1, depth + (isl or 0), osl), numerator=osl)
    if metric == "batched":
        b = row.batch
        if not (b and isl and osl):
            raise Excluded("batched row without batch, prompt and output lengths")
        if quantity == "prompt_tps":
            return shape(_prefill_passes(cm, b, isl, depth, _ubatch(row, eng)), numerator=b * isl)
        if quantity in ("decode_tps", "decode_tps_per_user"):
            return shape(_decode_steps(cm, b, depth + isl, osl), numerator=b * osl if quantity == "decode_tps" else osl)
        if quantity == "e2e_s":
            # one prefill of the whole batch (chunked at the engine's token budget), then osl - 1 decode
            # steps: the first output token comes from the prefill (vLLM benchmark_latency)
            items = _prefill_passes(cm, b, isl, depth, max(_ubatch(row, eng), isl))
            items += _decode_steps(cm, b, depth + isl, max(osl - 1, 1))
            return shape(items, scale=1.0)
        raise Excluded(f"batched {quantity} not replayed")
    if metric in ("offline", "serving"):
        if not (isl and osl):
            raise Excluded("no fixed prompt/output lengths (a dataset's own lengths cannot be replayed)")
        if quantity == "itl_ms" and (row.setting_int("--num-scheduler-steps", "num_scheduler_steps") or 1) > 1:
            raise Excluded("ITL of a multi-step scheduler is the gap between bursts of tokens")
        budget = eng.max_num_batched_tokens or 10**9
        max_seqs = eng.max_num_seqs
        if row.engine == "trtllm" and metric == "offline" and not row.batch:
            max_seqs, budget = trtllm_bench_limits(row, hw, spec)
            # the engine trtllm-bench built: its activations (and so its KV pool) are sized by these limits
            eng = eng.with_overrides(max_num_seqs=max_seqs, max_num_batched_tokens=budget)
        cap = _kv_capacity(hw, spec, q, eng)
        # a paged engine's sequence holds isl + osl/2 tokens on average over its life (blocks are taken
        # as it grows); a contiguous one (TRT-LLM's GUARANTEED_NO_EVICT) reserves isl + osl at admission,
        # as the simulator's allocators do
        from sim.engine.kv import ALLOCATORS

        per_seq = isl + osl / 2 if ALLOCATORS[eng.kv_allocator].grows_on_decode else isl + osl
        limit = min(row.batch or max_seqs, max_seqs if metric == "offline" else 10**9)
        b_mem = cap / per_seq if per_seq else limit
        b_budget = budget * osl / (isl + osl)
        if row.request_rate and metric == "serving":
            raise Excluded("serving at a request rate is not replayed (its queueing is the simulator's, "
                           "not one steady iteration's)")
        # an offline run of N identical requests never holds more than N at once (trtllm-bench's
        # num_requests; TensorRT-LLM perf overview: 1,500 requests at 128/4096 against max batch sizes of
        # up to 4,096)
        n_req = row.setting_int("num_requests") if metric == "offline" else None
        b = max(1.0, min(limit, b_mem, b_budget, n_req or 10**9))
        it = _steady_iteration(cm, b, isl, osl)
        if quantity == "output_tps":
            return shape([(it, 1.0)], numerator=b)
        if quantity == "total_tps":
            return shape([(it, 1.0)], numerator=b * (isl + osl) / osl)
        if quantity in ("tpot_ms", "itl_ms"):
            return shape([(it, 1.0)], scale=1e3)
        if quantity == "decode_tps_per_user":
            return shape([(it, 1.0)], numerator=1.0)
        first = cm.features(prefill_tokens=[isl], prefill_context=[0], decode_context=[isl + osl // 2] * int(b - 1))
        if quantity == "ttft_ms":
            return shape([(first, 1.0)], scale=1e3)
        if quantity == "e2e_s":
            return shape([(first, 1.0), (it, osl - 1)], scale=1.0)
        raise Excluded(f"{metric} {quantity} not replayed")
    raise Excluded(f"metric {metric} not replayed")


# ---- prediction ---------------------------------------------------------------------------------

def cost_params(hw, engine_cfg, q, p: GroupParams, moe: bool = False) -> CostParams:
    """CostParams of a group's parameters on one device (`moe`: for a MoE model): what the simulator
    builds from a profile carrying them (`CostParams.from_profile` -> `from_efficiency`, the same code)."""
    return CostParams.from_efficiency(hw, q, p.efficiency, p.family, engine_cfg, moe=moe)


def predict(row: PublicRow, shape: Shape, p: GroupParams, fitting: bool = False) -> float:
    """The row's figure under a group's parameters (`fitting`: as the group's own fit prices it,
    `_row_objects`)."""
    hw, eng, spec, q, cm = _row_objects(row)
    return predict_with(row, shape, cost_params(hw, eng, q, p, spec.is_moe), p.lat_us, fitting)


def predict_with(row: PublicRow, shape: Shape, cp: CostParams, lat_us: float | None = None,
                 fitting: bool = False) -> float:
    """The row's figure under one device's CostParams (a TP group of `shape.tp` devices priced as one
    device of tp x the rates, as sim.cost.parallel does; `lat_us` = all-reduce step latency, default the
    profile's)."""
    hw, eng, spec, q, cm = _row_objects(row, fitting)
    if shape.tp > 1:
        from sim.cost.parallel import tp_group_params

        cp = tp_group_params(cp, shape.tp)  # as sim.cost.parallel prices a TP group
    lat_s = (lat_us if lat_us is not None else hw.interconnect_latency_us) * 1e-6
    f = shape.features
    t = cm.predict_times(cp, f) + shape.comm_per_token_s * f.new_tokens + shape.comm_steps * lat_s
    total = float(np.dot(t, shape.weights))
    return shape.numerator / total if shape.numerator else total * shape.scale


# ---- fitting one group ------------------------------------------------------------------------------

@dataclass
class Prepared:
    """A row with its shape (or the reason it is excluded)."""

    row: PublicRow
    family: str
    shape: Shape | None
    excluded: str = ""


# A corpus row whose `notes` contain this (e.g. "treat as a low outlier") is not fitted.
OUTLIER_MARK = "outlier"
# A row whose `notes` contain "Set aside: <why>." is kept in the corpus and listed in the report with
# that reason, but not fitted: a measurement the cost model cannot yet follow without distorting the
# fits users' predictions come from (docs/public-calibration.md, rounds 10 and 14).
SET_ASIDE_MARK = "set aside:"


def prepare(rows: list[PublicRow]) -> list[Prepared]:
    out = []
    for r in rows:
        fam = engine_family(r.engine, r.settings)
        notes = r.extra.get("notes", "")
        if SET_ASIDE_MARK in notes.lower():
            why = notes[notes.lower().index(SET_ASIDE_MARK) + len(SET_ASIDE_MARK):].strip().split(". ")[0].rstrip(".")
            out.append(Prepared(r, fam, None, f"set aside: {why}"))
            continue
        if OUTLIER_MARK in notes.lower():
            # kept in the corpus (someone measured it) but not fitted: its collector judged the setup
            # unrepresentative (a misconfigured run reported as a bug, say) and said so in `notes`
            out.append(Prepared(r, fam, None, "its notes mark it as an outlier (not a representative setup)"))
            continue
        try:
            out.append(Prepared(r, fam, row_shape(r)))
        except Excluded as e:
            out.append(Prepared(r, fam, None, str(e)))
    return out


def _classes(items: list[Prepared]) -> tuple[str, ...]:
    seen = []
    for it in items:
        _, _, spec, q, _ = _row_objects(it.row)
        c = kernel_class(q, it.family, spec.is_moe)[0]
        if c not in seen:
            seen.append(c)
    return tuple(seen)


def _unpack(x: np.ndarray, classes: tuple[str, ...], device: str, family: str) -> GroupParams:
    """x = [log attention, floor ms, seq ms, half rows, log bandwidth per class..., log compute per class...]."""
    n = len(classes)
    att, floor, seq, half = float(np.exp(x[0])), float(max(x[1], 0.0)), float(max(x[2], 0.0)), float(max(x[3], 0.0))
    bw = {c: float(np.exp(v)) for c, v in zip(classes, x[4:4 + n])}
    comp = {c: float(np.exp(v)) for c, v in zip(classes, x[4 + n:4 + 2 * n])}
    lat = float(max(x[4 + 2 * n], 0.0)) if len(x) > 4 + 2 * n else None
    return GroupParams(device, family, bw, comp, att, floor, seq, half, lat)


def fit_group(items: list[Prepared], device: str, family: str) -> GroupParams:
    """Least squares on log(predicted / measured) of the group's rows, with priors at generic values
    (PRIOR_*) that hold what the rows do not measure."""
    from scipy.optimize import least_squares

    items = [it for it in items if it.shape is not None]
    classes = _classes(items)
    n = len(classes)
    centre = np.array([math.log(PRIOR_ATTENTION[0]), PRIOR_FLOOR_MS[0], PRIOR_SEQ_MS[0], PRIOR_HALF_ROWS[0]]
                      + [math.log(PRIOR_BANDWIDTH[0])] * n + [math.log(PRIOR_COMPUTE[0])] * n)
    sigma = np.array([PRIOR_ATTENTION[1], PRIOR_FLOOR_MS[1], PRIOR_SEQ_MS[1], PRIOR_HALF_ROWS[1]] + [PRIOR_BANDWIDTH[1]] * n + [PRIOR_COMPUTE[1]] * n)
    lo = np.array([math.log(BOUNDS["attention"][0]), BOUNDS["floor_ms"][0], BOUNDS["seq_ms"][0], BOUNDS["half_rows"][0]]
                  + [math.log(BOUNDS["bandwidth"][0])] * n + [math.log(BOUNDS["compute"][0])] * n)
    hi = np.array([0.0, BOUNDS["floor_ms"][1], BOUNDS["seq_ms"][1], BOUNDS["half_rows"][1]] + [0.0] * (2 * n))
    if any(it.row.n_devices > 1 for it in items):
        # rows over several devices also measure the all-reduce's step latency (normal prior at the
        # profile's interconnect_latency_us, 5 us wide)
        from sim.catalog.hardware import load_profile

        lat0 = load_profile(device).interconnect_latency_us
        centre, sigma = np.append(centre, lat0), np.append(sigma, PRIOR_LATENCY_US_SIGMA)
        lo, hi = np.append(lo, BOUNDS["lat_us"][0]), np.append(hi, BOUNDS["lat_us"][1])
    # a (source, quantity) block of n rows weighs as much as n^0.75 rows, so one 100-row table does
    # not drown a 4-row one
    blocks: dict = defaultdict(int)
    for it in items:
        blocks[(it.row.source, it.row.quantity)] += 1
    w = np.array([blocks[(it.row.source, it.row.quantity)] ** -0.125 for it in items])
    meas = np.array([it.row.value for it in items])

    def resid(x):
        p = _unpack(x, classes, device, family)
        # the group's own fit prices its rows without the MMQ tile floor (`row_mmq_tiles`)
        pred = np.array([predict(it.row, it.shape, p, fitting=True) for it in items])
        pred = np.where(np.isfinite(pred) & (pred > 0), pred, meas * 1e3)
        return np.concatenate([w * np.log(pred / meas) / ROW_SIGMA, (x - centre) / sigma])


    # The roofline's max(compute, memory) is flat in the parameter that does not bind: a prompt the
    # prior's compute rate makes memory-bound gives the compute efficiency no gradient, however slow the
    # measured prompt was. So the descent starts from the best of a few points that differ in the
    # compute efficiencies (x 1, 1/4, 1/16 of the prior) and bandwidths (x 1, 1/2).
    starts = []
    for dc in (0.0, -math.log(4), -math.log(16)):
        for db in (0.0, -math.log(2)):
            x = centre.copy()
            x[4:4 + n] += db
            x[4 + n:4 + 2 * n] += dc
            starts.append(np.clip(x, lo + 1e-9, hi - 1e-9))

    def cost(x):
        return robust_loss(resid(x))

    x0 = min(starts, key=cost)
    sol = least_squares(resid, x0, bounds=(lo, hi), x_scale=1.0, method="trf", loss="soft_l1", f_scale=ROBUST_SCALE,
                        max_nfev=400, ftol=1e-10, xtol=1e-10, gtol=1e-10)
    p = _unpack(sol.x, classes, device, family)
    # which efficiencies the rows pinned: the rows' Fisher information on each log-efficiency (the sum
    # of squared Jacobian entries of the row residuals, whose unit is ROW_SIGMA) at least PIN_INFO
    info = np.sum(sol.jac[:len(items)] ** 2, axis=0)
    # x's layout (`_unpack`): log attention, floor, per-sequence cost, half rows, log bandwidths, log
    # compute efficiencies[, all-reduce latency]; the log-efficiencies and the start-up are named
    names = ["attention", "", "", "half_rows"] + [f"bandwidth:{c}" for c in classes] + [f"compute:{c}" for c in classes]
    # a value at its bound was set by the bound, not the rows (the M4 Max's MLX bandwidth, 1.0: rows
    # faster than its datasheet allows with the model's per-step costs): not pinned either
    at_bound = np.isclose(sol.x, lo, atol=1e-6) | np.isclose(sol.x, hi, atol=1e-6)
    # The GEMM start-up (half_rows, Hockney's n_1/2 in rows, not a log) counts as pinned when the rows
    # tell more than its prior (a standard deviation under PRIOR_HALF_ROWS' 128 rows) and it is off its
    # bound of 0. Without this a device whose rows never ran small matmuls (the RTX 4090's and M1 Max's
    # llama.cpp rows: dense pp512 and tg128, fitted n_1/2 = 0 at the bound) lent a start-up of 0 as if
    # measured; `transfer` now counts such a donor UNPINNED_TIERS tiers further, as an unpinned
    # efficiency. Held out by device on the 1,234 rows (median / p90, rows past 25%): without 8.9 / 31.5%,
    # 189; this rule 8.9 / 31.1%, 185; a stricter one, a standard deviation of at most 8 / 16 / 24 rows:
    # 8.9 / 31.7%, 186; 9.0 / 31.9%, 185; 8.9 / 31.5%, 184 (docs/public-calibration.md, round 17).
    need = [PRIOR_HALF_ROWS[1] ** -2 if nm == "half_rows" else PIN_INFO for nm in names]
    p.pinned = frozenset(nm for nm, i, b, lim in zip(names, info, at_bound, need) if nm and i >= lim and not b)
    p.attention_info = float(info[0])
    # the rows' residuals at the solution, unweighted: sol.fun's first len(items) are w x log(pred / meas)
    # / ROW_SIGMA (`resid`)
    p.spread = float(np.median(np.abs(sol.fun[:len(items)]) * ROW_SIGMA / w))
    p.eager = all(it.row.setting_flag("enforce_eager") for it in items)
    p.rows = [it.row.row_id for it in items]
    p.sources = sorted({it.row.source for it in items})
    p.rows_here = sum(it.row.source.startswith(REPO_SOURCE) for it in items)
    p.seen_classes = classes
    p.current_share = current_share([it.row for it in items])
    return p


# ---- transfer to devices without rows ---------------------------------------------------------------

def _memory_class(memory_type: str) -> str:
    m = memory_type.lower()
    for c in ("hbm", "gddr", "lpddr", "ddr"):
        if m.startswith(c):
            return c
    return m


def device_traits(device: str) -> tuple[str, str, str]:
    """(generation, memory class, vendor) of a shipped profile, what `transfer` compares."""
    from sim.catalog.hardware import load_profile

    hw = load_profile(device)
    return hw.generation, _memory_class(hw.memory_type), hw.vendor


def device_package(device: str) -> str:
    """The profile's `package` ('pro', 'max', 'ultra' on Apple chips; '' elsewhere), see `_tier`."""
    from sim.catalog.hardware import load_profile

    return load_profile(device).package


# ---- software era: which llama.cpp a row ran ------------------------------------------------------------

# llama.cpp's CUDA decode got much faster between the 2023-24 builds most published tables used and
# the 2025-26 ones (CUDA graphs, fused kernels, flash attention by default): Llama 2 7B Q4_0 tg128 on
# an A100 was 136 t/s at build 1680 (XiongjieDai's table, Dec 2023) and 191 / 201 t/s (fa off / on)
# on the 2025 CUDA scoreboard (discussion #15013); this repository's H200 run (2026, build 0c1e5709)
# decodes Llama 3.1 8B Q4_K_M at 273 t/s where a same-generation H100 PCIe at build 2843 did 146.
# So a donor fitted on the other era's software is a worse donor than its hardware tier says.
CURRENT_BUILD = 5000    # llama.cpp build numbers: the corpus has 1619-2843 (2023-24) and 6918 (2025-11)
CURRENT_PR = 10000      # PR numbers: #2917-#6017 (2023-24) and #15616-#22298 (2025-26)
CURRENT_YEAR = 2025
# Tiers (`_tier`) a memory-side donor of the other era is moved away: the bandwidth efficiencies, the
# per-iteration floor and per-sequence cost are where the builds differ (launch path, GEMV kernels).
# Chosen by leave-one-device-out error on the 1,216 rows with this repository's 58 H200 rows (median /
# p90 / single-stream decode median): no era 12.3 / 47.9 / 12.4%; 1 tier on both sides 12.4 / 51.3 /
# 10.2% (the DGX Spark's matmul donors narrowed to the H200: its batched rows 18 -> 29%); on the memory
# side only, 1 tier 11.8 / 43.0 / 10.2%, 2 tiers 11.7 / 43.0 / 9.0%, 4 tiers 11.3 / 41.4 / 8.1%, 6 tiers
# 11.6 / 41.7 / 9.0%. Again on the final 1,232 rows (the second H200 run added): none 12.1 / 46.2 /
# 11.3%, 2 or 3 tiers 11.7 / 43.0 / 9.0%, 4 tiers 11.3 / 41.4 / 8.1%, 5 or 6 tiers 11.7 / 42.4 / 9.0%.
# With 4, a device's own generation on the other era (tier 4) ties with any
# NVIDIA part of its era (tier 4 is "anything" on the memory side), so both count. A hyper-parameter
# picked on all rows, like `_tier`'s orderings.
ERA_TIERS = 4
_CURRENT_SOURCES = ("discussions/15013",)  # the CUDA scoreboard, opened 2025-08


def row_is_current(row: PublicRow) -> bool | None:
    """Whether a llama.cpp-family row ran a 2025-or-later build, read from what the row prints: a date
    (YYYY-MM), a build number, a PR number, or the source (the 2025 CUDA scoreboard). Rows whose
    build is not printed (the scrape of discussion #4167's summary table, 2023-24 submissions) count
    as earlier builds. None for other families (their versions are not compared)."""
    if engine_family(row.engine, row.settings) != "ggml":
        return None
    text = row.engine_version
    if m := re.search(r"\b(20\d\d)-\d\d", text):
        return int(m.group(1)) >= CURRENT_YEAR
    if m := re.search(r"build(?::\s*[0-9a-f]+)?\s*(?:=\s*)?\(?(\d{3,5})\)?", text):
        return int(m.group(1)) >= CURRENT_BUILD
    if m := re.search(r"PR #(\d+)", text):
        return int(m.group(1)) >= CURRENT_PR
    return any(s in row.source for s in _CURRENT_SOURCES)


def current_share(rows: list[PublicRow]) -> float | None:
    """Share of `rows` run on current llama.cpp builds; None when no row is of the llama.cpp family."""
    flags = [f for f in (row_is_current(r) for r in rows) if f is not None]
    return sum(flags) / len(flags) if flags else None


def _era_step(target_share: float | None, donor: "GroupParams") -> int:
    """1 between a prediction for one software era and a donor fitted mostly on the other (shares of
    current-build rows differing by more than a half), else 0; 0 when either is unknown. `transfer`
    moves such a donor ERA_TIERS tiers away on the memory side."""
    if target_share is None or donor.current_share is None:
        return 0
    return int(abs(target_share - donor.current_share) > 0.5)


def _tier(target: str, other: str, side: str = "compute") -> int:
    """How close two devices are for sharing efficiencies. Both orderings start with 0 same
    generation and memory class, 1 same vendor and memory class (the same market segment:
    datacenter HBM parts, GeForce GDDR cards, Apple's unified LPDDR — kernels tuned for one segment
    reach similar shares of its chips, and consumer datasheet peaks are quoted differently). Then:

    - side "compute" (matmul efficiencies, attention, GEMM start-up, all-reduce latency: what the
      family's kernel code reaches): 2 same vendor (llama.cpp's CUDA MMQ kernels run on every NVIDIA
      chip, its Metal ones on every Apple one), 3 same generation, 4 same memory class, 5 anything;
    - side "memory" (bandwidth efficiencies, the per-iteration floor and per-sequence cost: what the
      memory system and the chip's launch path allow): 2 same generation, 3 same memory class, 4
      anything.

    So the DGX Spark, the only LPDDR NVIDIA part, takes its matmul efficiency from every NVIDIA device
    of the family and its bandwidth and launch floor from the same-generation card. The orderings
    were chosen by leave-one-device-out error over the four combinations (1,059 rows, achievable-peak
    and link-latency transfer in all; median / p80 / p90 / single-stream decode median): generation
    first for both (the ordering before) 20.7 / 45.1 / 69.1 / 11.3%, vendor first for both 20.8 /
    39.5 / 51.3 / 12.5%, vendor for memory and generation for compute 22.2 / 45.5 / 68.7 / 12.5%,
    this split 19.6 / 37.7 / 50.9 / 11.3%. A hyper-parameter picked on all rows (one of four).

    Between two Apple chips the memory side goes by package first (`device_package`): 0 same
    package (Max with Max, Ultra with Ultra), 1 same generation, 2 any other Apple chip. What a
    Metal kernel reaches of the datasheet bandwidth follows the memory system more than the GPU
    generation: an Ultra is two Max dies over UltraFusion and decodes at a lower share of its
    800 GB/s than one Max die of its 400 (llama.cpp discussion #4167's LLaMA 7B Q4_0 tg128: M2
    Ultra 94.27 t/s, 0.45 of 800 GB/s; M2 Max 65.95, 0.63 of 400), so an Ultra held out took an
    M2 Max's share and came out fast (M2 Ultra single-stream decode +18.5% median). The matmul
    side keeps the generation (the GPU's kernels). On 1,141 rows (median / p80 / p90 /
    single-stream decode median, leave-one-device-out): generation for both sides 16.3 / 31.4 /
    45.8 / 10.4%, package for the memory side 15.9 / 31.1 / 45.9 / 8.3%; Apple rows alone 12.9% ->
    10.7% median. Chosen on all rows, like the orderings above."""
    g1, m1, v1 = device_traits(target)
    g2, m2, v2 = device_traits(other)
    if side == "memory" and v1 == v2 and m1 == m2:
        p1, p2 = device_package(target), device_package(other)
        if p1 and p2:
            if p1 == p2:
                return 0
            return 1 if g1 and g1 == g2 else 2
    if g1 and g1 == g2 and m1 == m2:
        return 0
    if v1 == v2 and m1 == m2:
        return 1
    if side == "memory":
        if g1 and g1 == g2:
            return 2
        return 3 if m1 == m2 else 4
    if v1 == v2:
        return 2
    if g1 and g1 == g2:
        return 3
    return 4 if m1 == m2 else 5


# The peak a kernel family can reach, as a share of the datasheet peak the profile quotes for a weight
# class's format (sim.catalog.quant.kernel_class). Efficiencies are fitted against the datasheet peak (what the
# simulator multiplies); a transfer compares devices by their share of the *achievable* peak, so a chip
# whose datasheet quotes a rate the family's kernels cannot use does not pass that gap on:
# - ggml f16 on GeForce cards: llama.cpp multiplies fp16 weights with cuBLAS in CUBLAS_COMPUTE_16F (fp16
#   accumulate; ggml-org/llama.cpp@f6d77a1b ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_op_mul_mat_cublas),
#   which GeForce chips run at twice the fp32-accumulate rate their profiles quote (rtx-3090/4090/5090
#   provenance `peak_tflops`: 142 vs 71, 330.3 vs 165.2, 419 vs 209.6 dense TFLOPS); datacenter parts
#   run both at one rate. Share 2.
# - ggml attention on GeForce cards: the fused (flash-attention) mma kernel accumulates KQ in fp32 and
#   VKQ in fp16 (ggml-org/llama.cpp ggml/src/ggml-cuda/fattn-mma-f16.cuh, `mma_tile_sizes`: T_C_KQ is a
#   float tile, T_C_VKQ a half2 one), half of the attention FLOPs each. On a GeForce chip, whose profile
#   quotes the fp32-accumulate rate P, the KQ half runs at P and the VKQ half at 2P: F/2/P + F/2/(2P) =
#   3F/(4P), an achievable rate of 4/3 P. Share 4/3 (datacenter parts and the DGX Spark: 1). Until
#   round 18 attention travelled on the f16 share (2), a rule drawn from 2023-24 rows that ran without
#   flash attention, whose attention is now priced as memory traffic (`row_flash_attention`). Held out
#   by device, all rows: 163 -> 160 rows more than 25% off, p90 29.5 -> 29.0% (the DGX Spark's 48 ->
#   45 rows, its median 16.7 -> 15.5%; nothing else moved).
# - ggml quantized (MMQ) on Hopper: llama.cpp's quantized matmuls issue Ampere-style mma.sync int8
#   instructions (ggml/src/ggml-cuda/mma.cuh); Hopper's datasheet int8/fp8 rate is reached only through
#   its warpgroup wgmma instructions, which the legacy ones reach about half of ("WGMMA has 2x
#   throughput of WMMA in H100", and "Hopper's Tensor Core ceiling is only reachable through wgmma":
#   public kernel write-ups, not an NVIDIA figure). Share 1/2, a coarse value; with it the A100 and
#   H100 PCIe llama.cpp prompts predict each other within 13% / 11% median (31% / 40% without).
ATTENTION_CLASS = "attention"  # `achievable_share`'s class for the attention kernels (not a weight class)
# llama.cpp's achievable share of a GeForce profile's quoted (fp32-accumulate) peak, by class (above)
GEFORCE_GGML_SHARE = {"f16": 2.0, ATTENTION_CLASS: 4.0 / 3.0}


def achievable_share(device: str, family: str, cls: str) -> float:
    from sim.catalog.hardware import load_profile

    hw = load_profile(device)
    if family != "ggml":
        return 1.0
    if "GeForce" in (hw.display_name or ""):
        return GEFORCE_GGML_SHARE.get(cls, 1.0)
    if cls == "gguf" and hw.generation == "hopper":
        return 0.5
    return 1.0


# ---- device micro-benchmarks: the bandwidth anchor of a transfer ---------------------------------------

# The kernel of each micro-benchmark (benchmarks/public/device_microbench.csv) whose figure anchors the
# transfer: the one stream-copy-like kernel every benchmark in the file has, one read stream and one
# write stream of the same size (BabelStream Copy, gpu-stream scale A[i] = B[i] * c, torch's
# Tensor.copy_, and the read probe of the only device that ran one), so two devices are compared by
# the same access pattern. Not the read-only kernels: BabelStream's Dot is a reduction with a fixed
# grid, and gpu-stream's read kernel does not saturate an H200 at its occupancy (2,756 GB/s against
# 3,534 for its triad), so they measure the kernel as much as the memory.
ANCHOR_KERNEL = {"babelstream": "Copy", "gpu-stream": "scale", "torch-copy": "copy", "read-probe": "read"}
# False: every transfer keeps the datasheet anchor (what the transfer did before the micro-benchmarks)
USE_MICROBENCH = True
_MICRO: dict = {"rows": None, "shares": {}, "matmul": {}}


def set_microbench(rows) -> None:
    """Use these micro-benchmark rows (calibrate.public_corpus.load_microbench) for the anchors; the
    default is the shipped file, read on first use."""
    _MICRO["rows"], _MICRO["shares"], _MICRO["matmul"] = list(rows), {}, {}


def _micro_rows() -> list:
    """The micro-benchmark rows in use: those `set_microbench` gave, else the shipped file's."""
    if _MICRO["rows"] is None:
        from calibrate.public_corpus import load_microbench

        set_microbench(load_microbench())
    return _MICRO["rows"]


def bandwidth_shares(device: str) -> dict[str, float]:
    """benchmark -> the device's micro-benchmark bandwidth (ANCHOR_KERNEL's kernel) / its profile's
    datasheet bandwidth: the share of the datasheet figure that kernel reached on it."""
    rows = _micro_rows()
    if device not in _MICRO["shares"]:
        from sim.catalog.hardware import load_profile

        peak = load_profile(device).memory_bandwidth_gb_per_s
        _MICRO["shares"][device] = {
            r.benchmark: r.value / peak for r in rows
            if r.device == device and r.quantity == "memory_bandwidth" and ANCHOR_KERNEL.get(r.benchmark) == r.kernel}
    return _MICRO["shares"][device]


def bandwidth_anchor(target: str, donor: str) -> float:
    """How much more of its datasheet bandwidth `target` reaches than `donor`, by the micro-benchmarks
    both ran: the geometric mean over their common benchmarks of (target's share) / (donor's share).
    A donor's fitted bandwidth efficiency (engine-achieved / datasheet) times this is the target's, if
    the engine reaches the same share of what the micro-benchmark reaches on both: the transfer then
    carries engine-achieved / micro-benchmark, not engine-achieved / datasheet. 1 (the datasheet
    anchor) when the two share no benchmark, or USE_MICROBENCH is off. Device data only: a held-out
    device's own micro-benchmark figure is used, none of its engine rows."""
    return _share_ratio(target, donor, bandwidth_shares)


def _share_ratio(target: str, donor: str, shares) -> float:
    """Geometric mean over the micro-benchmarks both devices ran of target's / donor's `shares`
    (benchmark -> share of the datasheet figure); 1 when they share none or USE_MICROBENCH is off."""
    if not USE_MICROBENCH or target == donor:
        return 1.0
    st, sd = shares(target), shares(donor)
    common = sorted(set(st) & set(sd))
    if not common:
        return 1.0
    return float(np.exp(np.mean([math.log(st[b] / sd[b]) for b in common])))


def matmul_shares(device: str) -> dict[str, dict[str, float]]:
    """benchmark -> {number format: the device's micro-benchmark GEMM rate (quantity `matmul`; the
    kernel names the format first, e.g. "fp8 16384x16384x16384") / its profile's datasheet peak of
    that format}."""
    rows = _micro_rows()
    if device not in _MICRO["matmul"]:
        from sim.catalog.hardware import load_profile

        hw = load_profile(device)
        shares: dict[str, dict[str, float]] = defaultdict(dict)
        for r in rows:
            if r.device == device and r.quantity == "matmul":
                fmt = r.kernel.split()[0]
                shares[r.benchmark][fmt] = r.value * 1e12 / hw.peak_flops(fmt)
        _MICRO["matmul"][device] = dict(shares)
    return _MICRO["matmul"][device]


# Kernel families whose GEMMs are the vendor libraries' (cuBLAS / CUTLASS / hipBLASLt) that a GEMM
# micro-benchmark times: their matmul efficiencies travel as shares of what that benchmark reached
# (`compute_anchor`). Not ggml (llama.cpp's own MMQ kernels; `achievable_share` holds what they can
# reach) nor mlx (Metal; no such figure).
COMPUTE_ANCHOR_FAMILIES = ("trtllm", "torch")
# Weight classes of other families whose GEMMs are the vendor library's too, so they travel the same way:
# llama.cpp multiplies f16 (and bf16) weights with cuBLAS / hipBLAS GEMMs (ggml/src/ggml-cuda/ggml-cuda.cu,
# `ggml_cuda_op_mul_mat_cublas`), only its quantized classes with its own MMQ kernels. Held out by device,
# all rows: 137 -> 136 rows past 25% (the A100's fp16 prompts, which borrow the H200's cuBLAS share scaled
# by the two GEMM micro-benchmarks), p90 25.78 -> 25.72%, nothing else moved (docs/public-calibration.md,
# round 22).
COMPUTE_ANCHOR_CLASSES = {"ggml": ("f16",)}


def compute_anchor(target: str, donor: str) -> float:
    """As `bandwidth_anchor`, for the matmul side: how much more of its datasheet GEMM peak `target`'s
    micro-benchmarks reached than `donor`'s, 1 when they ran none in common (or USE_MICROBENCH is off).
    Per benchmark both ran: the mean log ratio over the number formats both ran it in; where they ran
    it in different formats, the ratio of their mean log shares (each a share of its own format's
    peak). Then the geometric mean over benchmarks.

    Two benchmarks: the Azure ND results time cuBLASLt at m = n = k = 16384 (A100 0.822 of its fp16
    peak, H100 SXM 0.696 and H200 0.690 of their fp8 peaks: Hopper's datasheet figures assume clocks
    its 700 W rarely holds under dense GEMMs); stas00's ml-engineering MAMF table times torch.matmul
    at the best of a shape search (A100 SXM 0.869 and H100 SXM 0.803 of bf16, H100 0.709 and H200
    0.734 of fp8, MI300X 0.511 of bf16 on ROCm 6.3 with TunableOp).
    - With the cuBLASLt figures alone, held out by device, the A100's TensorRT-LLM rows borrowed the
      H100's fp16 share (0.55 of peak against the A100's own 0.64) and read 9.3% slow (signed median,
      94 rows); with the anchor 7.5% (|median|, from 10.3%), all rows held out by device 10.2 -> 9.7%
      median (p90 40.2% unchanged), nothing else moved (docs/public-calibration.md, round 14).
    - The MAMF rows give the MI300X its first GEMM figure: its vLLM rows held out (no ROCm donor;
      the H100 SXM lends) had large batches 20-50% too short, its GEMMs priced at Hopper's share.
      With it (0.64 of the H100's bf16 share): 13.1 -> 12.6% median, 17 -> 13 of 64 rows past 25%;
      all rows held out by device 8.9 / 31.6% -> 8.9 / 31.5% (round 17)."""
    if not USE_MICROBENCH or target == donor:
        return 1.0
    st, sd = matmul_shares(target), matmul_shares(donor)
    logs = []
    for bench in sorted(set(st) & set(sd)):
        both = sorted(set(st[bench]) & set(sd[bench]))
        if both:
            logs.append(float(np.mean([math.log(st[bench][f] / sd[bench][f]) for f in both])))
        else:
            logs.append(float(np.mean(np.log(list(st[bench].values())))
                              - np.mean(np.log(list(sd[bench].values())))))
    return float(np.exp(np.mean(logs))) if logs else 1.0


# How much a fitted device counts in a transfer, per tier of distance (`_tier`): each step away
# weighs TIER_DECAY times less, and a device counts with the square root of its rows (a 4-row fit is
# a noisy estimate of its own parameters). Chosen by leave-one-device-out error over the corpus
# (median / p90 / single-stream decode median, before the achievable-peak shares and vendor tier):
# 1e-4 21.3% / 81% / 11.7%, 0.03 21.9% / 90% / 11.7%, 0.1 22.1% / 101% / 13.0%, 0.3 21.4% / 120% / 15.7%
# — the closest tier should decide, the rest only stands in for what it did not measure (a weight
# class it never ran).
TIER_DECAY = 1e-4
# An efficiency a donor's rows did not pin down counts this many tiers further than one they did
# (`transfer`, `GroupParams.pins`). Two cases, both measured after seeing these rows, like `_tier`'s
# orderings (docs/public-calibration.md, round 14):
# - a weight class the donor did not measure (its value is the geometric mean of its other classes).
#   Held out by device, the H100 SXM's fp16 TensorRT-LLM rows took the A100's fp16 values (the only
#   fp16 donor) instead of the H200's fp8 ones (the same GH100 chip, fp8 rows only): its 92 fp16 rows
#   read 12.6% off (median; +11.7% signed: fast). The Hopper efficiencies are a property of the chip's
#   GEMM and memory pipeline more than of the number format (the H100's own fit: fp16 0.55, fp8 0.50 of
#   the format's peak). With 1 the A100 and the H200 weigh alike: those rows 12.6 -> 6.3% (signed
#   +0.9%), all 216 H100 SXM TRT-LLM rows 10.2 -> 7.2%, all rows held out by device 11.3 -> 10.9% (p90
#   41.4% unchanged, nothing else moved); with 0 (another class as good as a measurement) 11.0 /
#   41.6%; with 2 nothing changes.
# - an efficiency of a measured class that the rows left near its prior (PIN_INFO): the M4 Pro's one
#   MLX row is a decode, so its MLX matmul efficiency is the prior's 0.40, and it was a donor of the M3
#   Max's MLX prompts, read 17.8% slow held out (21 rows) -> 4.9%; all rows held out by device
#   10.9 / 25.7 / 41.4% -> 10.2 / 26.0 / 40.2% (median / p80 / p90), by source 12.6 / 37.4% ->
#   12.1 / 36.8%, single-stream decode 8.1% unchanged; worse: the A100's llama.cpp prompts 11.7 ->
#   19.1% (25 rows). A fitted value at its bound counts as not pinned as well (the M4 Max's MLX
#   bandwidth at 1.0, lent to the M4 Pro and M2 Ultra MLX decodes: 20.8 -> 11.4%, 10.5 -> 4.5%; all
#   rows 9.7 -> 9.6% median, single-stream decode 8.1 -> 7.9%).
UNPINNED_TIERS = 1
# Fisher information the rows must carry on a log-efficiency for it to count as pinned: 16 = the rows
# alone fix it to +-25% (one standard deviation; ROW_SIGMA is the rows' unit). Of three tried, held
# out by device (median / p90, single-stream decode): 1 -> 10.5 / 43.4%, 8.1%; 16 -> 10.2 / 40.2%,
# 8.1%; 100 -> 11.1 / 43.2%, 9.0%.
PIN_INFO = 16.0
# A donor counts in inverse proportion to how poorly the model follows its own rows: weight x
# (ROW_SIGMA / max(spread, SPREAD_FLOOR)) ** SPREAD_POWER, `GroupParams.spread` being the median
# |log(predicted / measured)| of its fit. Two sources on one device that disagree (the M1 Max's
# llama.cpp decodes: XiongjieDai's Llama 3 8B Q4_K_M table at 0.44 of the datasheet bandwidth,
# discussion #4167's Llama 2 7B Q4_0 at 0.58) leave a compromise the model cannot follow (spread
# 0.077, against 0.004-0.005 for the M2 and M4 Max), and that compromise was a nearest bandwidth
# donor of the M3 Max (its 20 decodes 10.8% slow held out, 4.7% with this rule). Inverse-variance weighting
# (power 2) is the textbook estimator for combining estimates of unequal precision; power 3 leans
# further. Held out by device, on the 1,232 rows with `ModelSpec.vocab_bytes` (median / p90 /
# single-stream decode median): without 9.7 / 40.1 / 7.9%; power 2 9.4 / 41.4 / 7.1%; power 3
# 9.3 / 41.9 / 6.7%; power 4 9.6 / 43.0 / 7.1%; power 3 with floor 0.02 9.8 / 43.3 / 7.1%, 0.05
# 9.5 / 41.2 / 7.4%; power 2 with floor 0.05 9.6 / 40.7 / 7.5%. Spreads of the decode or prompt rows
# alone for the memory and matmul sides: power 2 9.7 / 42.3 / 7.5%, power 3 10.1 / 42.9 / 7.2%;
# the spread corrected for the fit's degrees of freedom (x sqrt(rows / max(rows - parameters, 1)),
# which stops a 6-row group that its 8 parameters follow exactly from counting as precise): 9.7 /
# 42.7 / 7.3%.
# Chosen on all rows after seeing them, like `_tier`'s orderings, and narrowly: the figures on either
# side of (3, 0.03) were 0.4-0.8 points worse on decode. Within a tier only: TIER_DECAY (1e-4 a tier)
# still decides between tiers.
# The floor is ROW_SIGMA since round 24: a fit cannot be more precise than the scatter of the rows it
# follows, so a donor counts less only when its fit misses its own rows by more than that. Rechecked
# after round 23 had priced the unfused attention's K/V reads (the M1 Max's and the CUDA cards' long
# decodes, which the compromise fits had absorbed), a spread below 10% had stopped meaning precision:
# groups that their parameters follow to 1-3% (the RTX 5090's 4 rows, the L40S's 20, the RTX 3090's 23)
# weighed 16 times as much per row as the H200's 74 (spread 7.6%), and they lent the DGX Spark its
# matmul rate. Held out by device, rows past 25% of 1,234 (median / p90 / single-stream decode
# median), power 3: floor 0.03 128 (8.5 / 25.5 / 6.5%); 0.04 122; 0.05 119 (8.5 / 24.6 / 6.5%);
# 0.06 115; 0.08 112; ROW_SIGMA 112 (8.5 / 24.4 / 6.6%), the same as no spread weighting, since no
# fitted donor's spread exceeds 0.1 but the eager-mode DGX Spark vLLM group's; power 2: 0.03 124,
# 0.05 118. Again chosen on all rows after seeing them.
SPREAD_POWER = 3.0
SPREAD_FLOOR = ROW_SIGMA


def transfer(device: str, family: str, fits: dict[tuple[str, str], GroupParams],
             era: float | None = None) -> GroupParams | None:
    """Parameters for `device` under `family` from the other fitted devices of that family: a
    weighted geometric mean (arithmetic for the floor and per-sequence cost), weight =
    TIER_DECAY ** tier x sqrt(rows) x (ROW_SIGMA / spread) ** SPREAD_POWER, per weight class (a donor
    whose rows did not pin an efficiency or the GEMM start-up down, e.g. of a class it did not
    measure, counts UNPINNED_TIERS tiers further); the tier of matmul-side parameters is `_tier(..., "compute")`, of
    bandwidth, floor and per-sequence cost `_tier(..., "memory")`. `transferred_from` names the
    nearest devices of both. Matmul and attention efficiencies are averaged as shares of each device's
    achievable peak (`achievable_share`; attention on its own, `ATTENTION_CLASS`) and turned back into the target's
    share of its datasheet peak. The per-iteration floor and per-sequence cost come from devices of
    the same vendor only (`_launch_costs`), and they and the all-reduce latency only from donors whose
    rows ran with CUDA graphs (`GroupParams.eager`). `era` is the share of current-build rows the
    prediction is for (1 for a shipped profile: users run today's llama.cpp; a held-out group's own
    share when cross-validating); on the memory side a donor of the other era is ERA_TIERS tiers
    further (`_era_step`). None when the family was fitted nowhere else."""
    others = [g for (d, f), g in fits.items() if f == family and d != device]
    if not others:
        return None

    def tier(g: GroupParams, side: str) -> int:
        return _tier(device, g.device, side) + (ERA_TIERS * _era_step(era, g) if side == "memory" else 0)

    def weight(g: GroupParams, side: str = "compute") -> float:
        trust = 1.0 if g.spread is None else (ROW_SIGMA / max(g.spread, SPREAD_FLOOR)) ** SPREAD_POWER
        return TIER_DECAY ** tier(g, side) * math.sqrt(max(len(g.rows), 1)) * trust

    def wgeo(pairs) -> float:
        w = np.array([a for a, _ in pairs])
        return float(np.exp(np.sum(w * np.log([b for _, b in pairs])) / np.sum(w)))

    def wmean(pairs) -> float:
        w = np.array([a for a, _ in pairs])
        return float(np.sum(w * np.array([b for _, b in pairs])) / np.sum(w))

    classes = sorted({c for g in others for c in g.seen_classes})
    def measured(g: GroupParams, what: str, c: str = "") -> float:
        # a donor offers an efficiency its rows did not pin down (a class it did not measure: the geometric
        # mean of its measured classes, `GroupParams.compute_for`; or one left at the prior) UNPINNED_TIERS
        # tiers further than a donor whose rows pinned it
        return 1.0 if g.pins(what, c) else TIER_DECAY ** UNPINNED_TIERS

    def anchor(g: GroupParams, c: str) -> float:
        # library GEMMs travel as shares of a GEMM micro-benchmark both devices ran (`compute_anchor`)
        library = family in COMPUTE_ANCHOR_FAMILIES or c in COMPUTE_ANCHOR_CLASSES.get(family, ())
        return compute_anchor(device, g.device) if library else 1.0

    # bandwidth efficiencies travel as shares of what a micro-benchmark reached on each device, where
    # both devices ran the same one (`bandwidth_anchor`; 1 = the datasheet anchor), capped at the
    # datasheet peak as a fitted value is
    bw = {c: min(BOUNDS["bandwidth"][1],
                 wgeo([(weight(g, "memory") * measured(g, "bandwidth", c),
                        g.bandwidth_for(c) * bandwidth_anchor(device, g.device)) for g in others]))
          for c in classes}
    def achievable(what: str, cls: str, donors) -> float:
        # a weighted geometric mean of [(weight, donor, value)] taken as shares of each device's
        # achievable peak (`achievable_share`) and turned back into the target's datasheet share, capped
        # at the bound a fitted value has
        return min(BOUNDS[what][1], achievable_share(device, family, cls)
                   * wgeo([(w, v / achievable_share(g.device, family, cls)) for w, g, v in donors]))

    comp = {c: achievable("compute", c, [(weight(g) * measured(g, "compute", c), g, g.compute_for(c) * anchor(g, c))
                                         for g in others])
            for c in classes}
    nearest = set()
    for side in ("compute", "memory"):
        best = min(tier(g, side) for g in others)
        nearest |= {g.device for g in others if tier(g, side) == best}
    # the floor and the all-reduce latency are the launch path's: eager-mode donors do not lend them
    graphs = [g for g in others if not g.eager]
    floor_ms, seq_ms = _launch_costs(device, [(weight(g, "memory"), g) for g in graphs], wmean)
    lat_donors = [(weight(g), g) for g in graphs if g.lat_us is not None]
    lat_us = _transfer_latency(device, lat_donors, wgeo, wmean)
    return GroupParams(
        device, family, bw, comp,
        achievable("attention", ATTENTION_CLASS,
                   [(weight(g) * measured(g, "attention"), g, g.attention) for g in others]),
        floor_ms, seq_ms,
        wmean([(weight(g) * measured(g, "half_rows"), g.half_rows) for g in others]),
        lat_us,
        transferred_from=sorted(nearest), seen_classes=(), current_share=era,
        # without donors `_transfer_latency` gives the device's own micro-benchmark (or None)
        lat_from_microbench=not lat_donors and lat_us is not None,
    )


def _launch_costs(device: str, donors: list, wmean) -> tuple[float, float]:
    """Per-iteration floor and per-sequence cost [ms] for `device` from fitted donors [(weight,
    GroupParams)] of the same vendor; with none, the profile's own `iteration_overhead_ms` and
    `per_sequence_overhead_ms` (its engineering estimates, which its provenance says are unmeasured).
    The floor is the engine's launch path on that vendor's runtime — kernel launches and graph
    replays through CUDA or HIP, the host's scheduling between steps — not a property of the memory
    or the kernels' arithmetic, so it does not cross vendors: held out, the MI300X's vLLM rows (HIP,
    vLLM 0.9-0.10) took the NVIDIA parts' floors fitted on 2024's vLLM (2.2 ms on the H100, 4.2 ms on
    the A100, against none on the MI300X's own rows) and read 90-132% slow at batch 1 (72.9% median;
    46.9% with this rule, all rows held out by device p90 44.4% -> 42.5%, nothing else moved; chosen
    after seeing those rows, like `_tier`'s orderings)."""
    from sim.catalog.hardware import load_profile

    me = load_profile(device)
    mates = [(w, g) for w, g in donors if load_profile(g.device).vendor == me.vendor]
    if not mates:
        return me.iteration_overhead_ms, me.per_sequence_overhead_ms
    return wmean([(w, g.floor_ms) for w, g in mates]), wmean([(w, g.seq_ms) for w, g in mates])


def allreduce_step_latency_us(device: str) -> float | None:
    """The device's measured collective step latency [us]: the median over its `allreduce_time`
    micro-benchmark rows (NCCL/RCCL all-reduce of 1-8 KB, where the time is latency) of time / (2 (N - 1)),
    the ring all-reduce's latency term (sim/cost/parallel.py `ring_allreduce_s`: 2 (N - 1) steps) for
    its N devices. None without such rows. The Azure ND results give 8-GPU nodes: H100 SXM 1.86 us,
    H200 2.16, A100 3.15, MI300X 3.47 (RCCL)."""
    from calibrate.public_corpus import allreduce_devices

    steps = [r.value / (2 * (allreduce_devices(r.kernel) - 1)) for r in _micro_rows()
             if r.device == device and r.quantity == "allreduce_time"]
    return float(np.median(steps)) if steps and USE_MICROBENCH else None


def _transfer_latency(device: str, donors: list, wgeo, wmean) -> float | None:
    """All-reduce step latency for `device` from fitted donors [(weight, GroupParams)]: the fitted
    latency as a multiple of each donor's own link latency (profile `interconnect_latency_us`: NVLink
    5 us, PCIe 10 us), applied to the target's link. What a family's collectives add to a link's
    latency (launches, synchronisation, the ring's steps) carries over between devices; the link does
    not: an L40S's PCIe all-reduce held out and priced at the NVLink parts' fitted latency was 67%
    fast (median) on its tp4/tp8 TensorRT-LLM rows, 53% with the multiple. A plain weighted mean
    when a link latency is 0 (unified-memory devices).

    With no donor (no other device of the family ran with CUDA graphs), the device's own measured
    collective step latency (`allreduce_step_latency_us`) replaces the profile's engineering default,
    else None (the profile's). Not as an anchor between donors: NCCL's small-message time does not
    follow the engines' own all-reduce kernels (TensorRT-LLM's fitted step latency is 1.15x the
    H100's on the A100; NCCL's is 1.7x). Held out by device, the MI300X's 64 vLLM rows (then without a
    graph-mode donor; the H100 SXM's SGLang rows, added after, are one) had been priced at the profile's 5 us against their own fitted 2.7 and read 30.8%
    off (median; 41 of them > 25%); at RCCL's 3.47 us, 13.0% (16 > 25%); all rows 9.3 / 37.9% ->
    9.0 / 31.9% (median / p90), nothing else moved (docs/public-calibration.md, round 16)."""
    from sim.catalog.hardware import load_profile

    if not donors:
        return allreduce_step_latency_us(device)
    link = {d: load_profile(d).interconnect_latency_us for d in {device, *(g.device for _, g in donors)}}
    if all(v > 0 for v in link.values()):
        return link[device] * wgeo([(w, g.lat_us / link[g.device]) for w, g in donors])
    return wmean([(w, g.lat_us) for w, g in donors])


# ---- the ALU cost of K-quant mat-vec kernels on Apple GPUs (a kernel property, fitted across devices) --

# FLOP-equivalents per K-quant weight that llama.cpp's Metal mat-vec kernels spend at the fp32
# ALU rate (`Efficiency.kquant_matvec_flops_per_weight`, sim.cost.roofline `weight_stream_s`); None until
# `fit_matvec_alu` chooses it (then every Apple profile's llama.cpp entry carries the choice).
APPLE_KQUANT_MATVEC_FLOPS: dict[str, float | None] = {"value": None}
MATVEC_GRID = (0.0, 8.0, 16.0, 24.0, 32.0, 40.0, 48.0, 64.0)


def matvec_flops_for(device: str, family: str) -> float | None:
    """The K-quant mat-vec ALU cost (FLOP-equivalents per weight) a (device, family) entry carries: the
    fitted value for llama.cpp's kernels on Apple GPUs, None elsewhere (CUDA's mat-vec kernels
    multiply with int8 dot products and are not ALU-bound at these rates: no such roof)."""
    from sim.catalog.hardware import load_profile

    v = APPLE_KQUANT_MATVEC_FLOPS["value"]
    if not v or family != "ggml" or load_profile(device).vendor != "Apple":
        return None
    return v


def fit_matvec_alu(prepared: list[Prepared]) -> dict:
    """The K-quant mat-vec ALU cost on Apple GPUs: the value from MATVEC_GRID that, with every Apple
    llama.cpp group holding K-quant rows refitted, gives those groups' rows the smallest robust error.
    Leaves APPLE_KQUANT_MATVEC_FLOPS set. One number for llama.cpp's Metal kernels on every Apple GPU,
    scaled by each GPU's fp32 rate; chosen on all rows (a property of the kernels, not of a device),
    so the held-out errors reported for these rows are not independent of it.

    The evidence (XiongjieDai's Llama 3 8B Q4_K_M decode, one build on three Macs): 34.5 / 50.7 /
    76.3 tok/s on the M1 Max / M3 Max / M2 Ultra follow their fp32 rates (10.4 / 14.2 / 27.2 TFLOPS)
    more than their bandwidths (400 / 400 / 800 GB/s), while discussion #4167's Q4_0 decodes on the
    same chips follow bandwidth (M1 Max / M3 Max 0.92). At ~29 ms a token the M1 Max spends 40
    FLOP-equivalents per weight; the M3 Max 37."""
    from sim.catalog.hardware import load_profile
    from sim.catalog.quant import is_k_quant

    groups = _groups(prepared)
    keys = sorted({(it.row.device, it.family) for it in prepared
                   if it.shape is not None and it.family == "ggml" and load_profile(it.row.device).vendor == "Apple"
                   and is_k_quant(_row_objects(it.row)[3])})
    best, scores = _grid_choice(MATVEC_GRID, lambda c: APPLE_KQUANT_MATVEC_FLOPS.__setitem__("value", c or None),
                                groups, {k: groups[k] for k in keys})
    return {"flops_per_weight": best, "devices": [d for d, _ in keys],
            "rows": sum(len(groups[k]) for k in keys),
            "loss_by_value": {f"{c:g}": round(v, 2) for c, v in scores.items()}}


# ---- routing skew of MoE models (a model property, fitted across devices) ---------------------------

POOL_GRID = (1.0, 0.8, 0.65, 0.5, 0.4, 0.32, 0.25)


def fit_routing(prepared: list[Prepared]) -> dict[str, dict]:
    """Per MoE model with rows of more than one sequence per step: the expert_pool_fraction
    (sim.cost `expected_distinct_experts`) from POOL_GRID that, with every group holding the model's
    rows refitted, gives those rows the smallest robust error. Leaves POOL_OVERRIDE set to the
    choices. Chosen on all rows (a property of the model, not of a device): the held-out errors
    reported for these models are not independent of this choice. Keyed by `routing_key`: a
    benchmark of identical synthetic sequences (llama-batched-bench) gets a fraction of its own; a
    model with no multi-sequence rows but that benchmark's is tied to it (`tied_to`: the only
    routing evidence there is, shipped as the model's, and so not left to the catalog's last value).
    With one key for both, gpt-oss-120b's came out at 0.4, set by the DGX Spark's batched-bench
    rows, and the same Spark's vLLM decodes of real prompts at 64 sequences read 64% and 97% fast
    in sample (TP 1, TP 2); with two keys the model's own is 0.8 and those rows 12% and 40%
    (docs/public-calibration.md, round 21)."""
    from sim.catalog.lookup import get_model

    groups = _groups(prepared)
    multi = [it for it in prepared if it.shape is not None and get_model(it.row.model).is_moe
             and ((it.row.batch or 1) > 1 or it.row.metric == "offline")]
    out = {}
    models = sorted({routing_key(it.row) for it in multi})
    # A model whose own rows are all single-sequence (its multi-sequence rows are a synthetic
    # benchmark's) has no routing evidence of its own: its key follows the benchmark's, set together
    # with it, rather than whatever the catalog held from a previous run
    moe_models = {it.row.model for it in prepared if get_model(it.row.model).is_moe}
    tied = {m + SYNTHETIC_SUFFIX: m for m in moe_models if m not in models and m + SYNTHETIC_SUFFIX in models}
    # start every MoE model from uniform routing, whatever a previous fit wrote: the same corpus then
    # gives the same choices (models share groups, so the order is fixed: alphabetical)
    POOL_OVERRIDE.update({m: 1.0 for m in moe_models | set(models)})

    def setter(key: str):
        def put(c: float) -> None:
            POOL_OVERRIDE[key] = c
            if key in tied:
                POOL_OVERRIDE[tied[key]] = c
        return put

    for model in models:
        mine = [it for it in multi if routing_key(it.row) == model]
        keys = sorted({(it.row.device, it.family) for it in mine})
        best, scores = _grid_choice(POOL_GRID, setter(model), groups,
                                    {k: [it for it in mine if (it.row.device, it.family) == k] for k in keys})
        out[model] = {"expert_pool_fraction": best, "rows": len(mine),
                      "devices": sorted({it.row.device for it in mine}),
                      "loss_by_fraction": {f"{c:g}": round(v, 2) for c, v in scores.items()}}
        if model in tied:
            out[tied[model]] = {**out[model], "tied_to": model}
    return dict(sorted(out.items()))


# ---- the whole fit and its held-out error -----------------------------------------------------------

KINDS = {"prompt_tps": "prefill", "ttft_ms": "prefill", "decode_tps": "decode", "tpot_ms": "decode",
         "itl_ms": "decode", "decode_tps_per_user": "decode", "output_tps": "throughput",
         "total_tps": "throughput", "e2e_s": "latency"}


def _groups(prepared: list[Prepared]) -> dict[tuple[str, str], list[Prepared]]:
    g: dict = defaultdict(list)
    for it in prepared:
        if it.shape is not None:
            g[(it.row.device, it.family)].append(it)
    return dict(sorted(g.items()))


def fit_all(prepared: list[Prepared]) -> dict[tuple[str, str], GroupParams]:
    """One fit per (device, family) with rows."""
    return {k: fit_group(items, *k) for k, items in _groups(prepared).items()}


def _err(row: PublicRow, shape: Shape, p: GroupParams | None) -> float:
    """Signed relative error (predicted / measured - 1); nan when nothing predicts the row."""
    if p is None:
        return float("nan")
    pred = predict(row, shape, p)
    return pred / row.value - 1.0 if math.isfinite(pred) else float("inf")


@dataclass
class Validation:
    """Per-row errors: in-sample, leave-one-device-out, leave-one-source-out, leave-one-model-out."""

    prepared: list[Prepared]
    fits: dict
    in_sample: dict[str, float]
    lodo: dict[str, float]
    loso: dict[str, float]
    lodo_from: dict[str, list[str]]
    lomo: dict[str, float] = field(default_factory=dict)


def cross_validate(prepared: list[Prepared], fits: dict | None = None) -> Validation:
    fits = fits if fits is not None else fit_all(prepared)
    groups = _groups(prepared)
    ins, lodo, loso, lodo_from = {}, {}, {}, {}
    for (d, f), items in groups.items():
        for it in items:
            ins[it.row.row_id] = _err(it.row, it.shape, fits[(d, f)])
    # leave one device out: every group of that device predicted from the other devices only
    for d in sorted({d for d, _ in groups}):
        rest = {k: v for k, v in fits.items() if k[0] != d}
        for (dd, f), items in groups.items():
            if dd != d:
                continue
            p = transfer(d, f, rest, era=current_share([it.row for it in items]))
            for it in items:
                lodo[it.row.row_id] = _err(it.row, it.shape, p)
                lodo_from[it.row.row_id] = p.transferred_from if p else []
    # leave one source out: refit the groups a source touches without it
    by_source: dict = defaultdict(list)
    for k, items in groups.items():
        for it in items:
            by_source[it.row.source].append((k, it))
    for src, members in by_source.items():
        keys = sorted({k for k, _ in members})
        for k in keys:
            left = [it for it in groups[k] if it.row.source != src]
            if left:
                p = fit_group(left, *k)
            else:
                p = transfer(k[0], k[1], {kk: v for kk, v in fits.items() if kk != k},
                             era=current_share([it.row for it in groups[k]]))
            for kk, it in members:
                if kk == k:
                    loso[it.row.row_id] = _err(it.row, it.shape, p)
    # leave one model out, within a device: what a user predicting a model the device's rows never
    # measured should expect (groups with a single model have no such error)
    lomo = {}
    for k, items in groups.items():
        models = sorted({it.row.model for it in items})
        if len(models) < 2:
            continue
        for m in models:
            p = fit_group([it for it in items if it.row.model != m], *k)
            for it in items:
                if it.row.model == m:
                    lomo[it.row.row_id] = _err(it.row, it.shape, p)
    return Validation(prepared, fits, ins, lodo, loso, lodo_from, lomo)


def _stats(errs: list[float]) -> dict:
    a = np.abs(np.array([e for e in errs if not math.isnan(e)], dtype=float))
    if not len(a):
        return {"n": 0, "median": None, "p80": None, "p90": None}
    a = np.where(np.isfinite(a), a, 10.0)
    return {"n": int(len(a)), "median": float(np.median(a)), "p80": float(np.percentile(a, 80)),
            "p90": float(np.percentile(a, 90))}


BAND_MIN_ROWS = 3  # fewer held-out rows than this of a kind: the next basis down is quoted


def error_bands(v: Validation, device: str, family: str) -> dict[str, dict]:
    """Expected error per kind of figure for `device` under `family`: the 80th percentile of
    held-out |predicted / measured - 1|. Where the device has rows of the kind for at least two
    models, leave-one-model-out on this device (a model the fit did not see: what a user asks about
    next); else the family's leave-one-device-out error over the comparable devices (same
    generation, or same vendor and memory class), or over every device when those have too few
    rows of the kind (what a transferred prediction has shown elsewhere)."""
    out = {}
    own = [it for it in v.prepared if it.shape is not None and it.row.device == device and it.family == family]
    fam = [it for it in v.prepared if it.shape is not None and it.family == family]
    fitted_here = (device, family) in v.fits
    for kind in ("prefill", "decode", "throughput", "latency"):
        mine = [v.lomo[it.row.row_id] for it in own if KINDS[it.row.quantity] == kind and it.row.row_id in v.lomo]
        st = _stats(mine)
        if fitted_here and st["n"] >= BAND_MIN_ROWS:
            out[kind] = {"pct": round(100 * st["p80"], 1), "n": st["n"], "basis": "held out by model, this device"}
            continue
        # a transfer's error as shown by comparable devices (same generation, or same vendor and memory
        # class: the tiers `transfer` leans on) when they have rows of the kind, else by every device
        near = sorted({it.row.device for it in fam if it.row.device != device and _tier(device, it.row.device) <= 1})
        for pool, label in ((near, f"{family} on {', '.join(near)}"), (None, f"all {family} devices")):
            theirs = [v.lodo[it.row.row_id] for it in fam
                      if KINDS[it.row.quantity] == kind and (pool is None or it.row.device in pool)]
            st = _stats(theirs)
            if st["n"] >= BAND_MIN_ROWS:
                out[kind] = {"pct": round(100 * st["p80"], 1), "n": st["n"], "basis": f"held out by device, {label}"}
                break
    return out


# ---- writing the shipped profiles ---------------------------------------------------------------------

BLOCK_START = "# ---- fitted to public measurements"
BLOCK_END = "# ---- end of fitted block"


# Below this Fisher information on the log attention efficiency (a standard deviation above 1, an
# e-fold) a fitted group's rows are taken to say nothing about the attention kernels' rate (`params_for`)
LEND_ATTENTION_INFO = 1.0


def params_for(device: str, family: str, fits: dict[tuple[str, str], GroupParams],
               era: float | None = 1.0) -> GroupParams | None:
    """What a profile ships for (device, family): its own fit where it has rows, else a transfer for
    `era` (1 = today's llama.cpp builds, what users run; `transfer`).

    A fitted group whose rows carry next to no information on its attention efficiency (Fisher
    information under LEND_ATTENTION_INFO: a standard deviation of more than one e-fold) ships the
    transferred one instead, when some donor's rows pinned it (`attention_from` names them). The
    rows of a device measured on 2023-24 llama.cpp builds ran attention without flash attention,
    whose cost is the scores' bytes (sim.cost.roofline SCORE_BYTES), so they leave the fused kernel's
    rate at its prior (0.3), while the simulator prices today's builds with that kernel
    (EngineConfig.flash_attention): the L40S would otherwise ship 0.3 of its 362 TFLOPS, 4.5x the
    rate its own die reaches in the RTX 4090 (0.146 of 165). A group that measured the rate a little
    (the H200's, information 8) keeps its own."""
    own = fits.get((device, family))
    if own is None:
        return transfer(device, family, fits, era=era)
    pinned = [d for (d, f), g in fits.items() if f == family and d != device and g.pins("attention")]
    if own.attention_info is None or own.attention_info >= LEND_ATTENTION_INFO or not pinned:
        return own
    lent = transfer(device, family, fits, era=era)
    # name the donors that carry the weight: those whose rows pinned it, at the nearest matmul-side tier
    nearest = min(_tier(device, d, "compute") for d in pinned)
    donors = sorted(d for d in pinned if _tier(device, d, "compute") == nearest)
    return replace(own, attention=lent.attention, attention_from=donors)


# which kernel families run on which kind of device (mlx only on Apple Silicon; TensorRT-LLM only on
# NVIDIA; vLLM/SGLang/TGI on CUDA and ROCm GPUs)
def families_for(device: str) -> tuple[str, ...]:
    from sim.catalog.hardware import load_profile

    hw = load_profile(device)
    if hw.kind == "cpu":
        return ()
    if hw.vendor == "Apple":
        return ("ggml", "mlx")
    if hw.vendor == "NVIDIA":
        return ("ggml", "torch", "trtllm")
    return ("ggml", "torch")


def profile_entries(v: Validation) -> dict[str, dict[str, dict]]:
    """device -> family -> the `engine_efficiency` entry to ship (fitted, or transferred when the
    device has no rows of that family), with its error bands."""
    from sim.catalog.hardware import available_profiles

    out: dict = {}
    for device in available_profiles():
        for family in families_for(device):
            p = params_for(device, family, v.fits)
            if p is None:
                continue
            bw = {c: round(x, 4) for c, x in sorted(p.bandwidth.items())}
            comp = {c: round(x, 4) for c, x in sorted(p.compute.items())}
            if p.transferred_from:
                src = (f"no public rows of {family} kernels on {device}: transferred from "
                       f"{', '.join(p.transferred_from)} (nearest architecture, calibrate/public_fit.py transfer)")
                if p.lat_from_microbench:
                    src += ("; all-reduce step latency: this device's own NCCL/RCCL all-reduce micro-benchmark "
                            "(benchmarks/public/device_microbench.csv), no donor of the family ran with CUDA graphs")
            else:
                here = "timed with this repository's benchmarks/gpu scripts"
                kind = ("public measurements" if not p.rows_here else f"measurements {here}"
                        if p.rows_here == len(p.rows) else f"public measurements and ones {here}")
                src = (f"fitted by calibrate/public_fit.py to {len(p.rows)} {kind} from "
                       f"{len(p.sources)} source(s): " + "; ".join(p.sources))
                if p.attention_from:
                    src += ("; attention_of_peak: these rows carry next to no information on it (run without "
                            "flash attention, or too shallow), transferred from the devices whose rows pinned it: "
                            + ", ".join(p.attention_from))
            entry = {
                "compute": round(p.efficiency.compute, 4),
                "bandwidth": round(p.efficiency.bandwidth, 4),
                "compute_by_class": comp,
                "bandwidth_by_class": bw,
                "attention_of_peak": round(p.attention, 4),
                "floor_ms": round(p.floor_ms, 3),
                "per_sequence_ms": round(p.seq_ms, 4),
                "matmul_half_rows": round(p.half_rows, 2),
                "interconnect_latency_us": None if p.lat_us is None else round(p.lat_us, 2),
                "source": src,
                "corpus_rows": list(p.rows),
                "transferred_from": list(p.transferred_from),
                "error": error_bands(v, device, family),
            }
            if p.efficiency.kquant_matvec_flops_per_weight is not None:
                entry["kquant_matvec_flops_per_weight"] = p.efficiency.kquant_matvec_flops_per_weight
            if p.current_share is not None and not p.transferred_from:
                entry["current_build_share"] = round(p.current_share, 2)
            if p.rows_here and not p.transferred_from:
                entry["rows_timed_here"] = p.rows_here
            out.setdefault(device, {})[family] = entry
    return out


def render_block(entries: dict[str, dict]) -> str:
    import yaml

    class _Flow(list):
        pass

    def flow(dumper, data):
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)

    yaml.SafeDumper.add_representer(_Flow, flow)
    data = {fam: {**e, "corpus_rows": _Flow(e["corpus_rows"]), "transferred_from": _Flow(e["transferred_from"])}
            for fam, e in entries.items()}
    body = yaml.safe_dump({"engine_efficiency": data}, sort_keys=False, width=100, allow_unicode=True)
    return (f"{BLOCK_START}: generated by `infersim calibrate --public` (calibrate/public_fit.py)\n"
            f"# from benchmarks/public/*.csv; rerun the fit instead of editing by hand. Held-out error per\n"
            f"# kind of figure in `error` (benchmarks/public_fidelity.md).\n{body}{BLOCK_END}\n")


def write_profile_block(path, entries: dict[str, dict]) -> bool:
    """Replace (or append) the generated block of a profile YAML; True when the file changed."""
    from pathlib import Path

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if BLOCK_START in text:
        head = text[: text.index(BLOCK_START)]
        tail = text[text.index(BLOCK_END) + len(BLOCK_END):].lstrip("\n") if BLOCK_END in text else ""
    else:
        head, tail = text, ""
    new = head.rstrip("\n") + "\n" + render_block(entries) + tail
    if new != text:
        path.write_text(new, encoding="utf-8")
        return True
    return False
