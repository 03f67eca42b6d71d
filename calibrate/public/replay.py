"""What one corpus row ran, priced with the cost model's own formulas.

The objects a row is replayed with (`_row_objects`: profile, engine preset, model, format, CostModel),
the iteration builders the replayers (`calibrate.public.replayers`) compose (`_prefill_passes`,
`_decode_steps`, `_steady_iteration`), the `Shape` they return, and `predict`: a shape's figure
under a group's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np

from calibrate.public.corpus import PublicCorpus
from calibrate.public.era import row_is_current
from calibrate.public.params import GroupParams, engine_family
from sim.catalog.engine_config import base_family
from sim.catalog.models import IDENTICAL_TOKEN_BENCHES
from calibrate.public_corpus import PublicRow
from sim.cost.llamacpp import llamacpp_kernel_args
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel, StepFeatures


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
    # per iteration of `features` (arrays) or per token / per pass (floats): the all-reduces' seconds
    # without the hop latency, and the hops that each cost the family's latency (`lat_us`)
    comm_per_token_s: "float | np.ndarray" = 0.0
    comm_steps: "float | np.ndarray" = 0.0  # collective steps (hops) per pass (each costs the step latency)
    comm_fixed_s: "float | np.ndarray" = 0.0  # seconds per iteration not scaled by the step latency


class Excluded(Exception):
    """A row the cost model cannot replay (the reason says why)."""


def _row_objects(row: PublicRow, fitting: bool = False, corpus: PublicCorpus | None = None):
    """(profile, engine preset for that device, model, quant format, CostModel) a row is replayed with;
    the KV dtype is the row's own when its settings name one (kv_cache_dtype=fp8). `fitting`: the
    cost model a group's own fit uses, without the MMQ tile floor (`row_mmq_tiles`). The routing skew
    of a MoE model is `corpus`'s (`PublicCorpus.pool`, keyed by `routing_key`), else the catalog's."""
    pool = corpus.pool.get(routing_key(row)) if corpus is not None else None
    return _objects(row.device, row.engine, row.model, row.quant, row.n_devices, _row_kv_dtype(row),
                    pool, row.settings.get("mxfp4_layers", ""), row_flash_attention(row),
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
    quantization, the KV cache will automatically be set to FP8 as well".) The NVFP4 rows of the same doc
    (B200, GB200, RTX 6000 Pro; NVIDIA's ModelOpt FP4 checkpoints) are taken the same way, as the
    trtllm engine preset does (`kv_dtype_for_quant`: nvfp4 -> fp8); their own figures do not rule a
    BF16 cache out."""
    return row.quant in ("fp8", "nvfp4") and _pytorch_flow(row)


def _pytorch_flow(row: PublicRow) -> bool:
    """A TensorRT-LLM row of `trtllm-bench throughput --backend pytorch` (the v1.0 perf-overview rows)."""
    return row.engine == "trtllm" and "--backend pytorch" in (row.settings.get("bench") or "")


# Benchmarks whose sequences are all the same synthetic tokens: llama-batched-bench feeds token 0 at
# every position of every sequence (tools/batched-bench/batched-bench.cpp, `common_batch_add(batch, 0,
# ...)`), so its sequences' hidden states, and the experts they pick, are far more alike than real
# prompts'. Their routing skew is a property of the benchmark, fitted apart from the model's
# (`routing_key`) and shipped beside the model's as ModelSpec.identical_tokens_pool_fraction, which only a
# replay of that benchmark uses (`public_report.write_routing`, sim.bench.corpus).
SYNTHETIC_SUFFIX = "@identical-tokens"


def routing_key(row: PublicRow) -> str:
    """The `PublicCorpus.pool` key of a row's routing: the model's, or for a benchmark of identical synthetic
    sequences (sim.catalog.models IDENTICAL_TOKEN_BENCHES) the model's under that benchmark (model + SYNTHETIC_SUFFIX)."""
    bench = (row.settings.get("bench") or "").split()
    return row.model + SYNTHETIC_SUFFIX if bench and bench[0] in IDENTICAL_TOKEN_BENCHES else row.model


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
    cm = CostModel(spec, q, CostParams(1e12, 1e12, 1e12), kv_dtype=eng.kv_dtype, kv_pad=eng.kv_padding_for(spec),
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


def _comm(hw, spec, tp: int, eng=None):
    """A TP group's all-reduces as sim.cost.parallel's placement prices them with `eng`'s algorithm choice:
    a function of the iterations' token counts -> (seconds not scaled by the hop latency, hops), the hops
    costing the family's fitted latency each (`GroupParams.lat_us`). None for one device."""
    if tp <= 1:
        return None
    from sim.cost.parallel import ParallelConfig, build_placement

    pl = build_placement(spec, CostParams(1e12, 1e12, 1e12),
                         ParallelConfig.for_profile(hw, tp, 1, latency_us=1.0, engine=eng), None)
    if pl.allreduce is not None:
        return pl.allreduce.terms
    per_token, steps = pl.comm_s_per_token, pl.comm_s_per_pass / 1e-6  # per pass at 1 us per step = steps
    return lambda tokens: (per_token * np.asarray(tokens, dtype=float), steps + 0.0 * np.asarray(tokens, dtype=float))


@lru_cache(maxsize=None)
def _release_allreduce_algorithms(engine: str, version: str) -> bool:
    from calibrate.serving.rows import release_of
    from sim.catalog.engine_config import load_engine
    from sim.errors import ConfigError

    try:
        return bool(load_engine(release_of(engine, version) or engine).allreduce_algorithms)
    except ConfigError:
        return False


def row_allreduce_algorithms(row: PublicRow) -> bool:
    """Whether a row's TP all-reduces are priced by algorithm (sim.cost.parallel `AllReducePolicy`): its
    engine release's `allreduce_algorithms`, the release mapped as the serving corpus maps it
    (calibrate.serving.rows `release_of`: the release whose `covers` range holds the row's engine_version,
    else the release below/above it by major.minor, a dated build's release by VLLM_RELEASE_DATES, the
    newest for none), as the simulator prices `--engine NAME@RELEASE`. TensorRT-LLM's AUTO tables are cited
    for 1.x: its 0.x release (the v0.5 / v0.13 / v0.16 TensorRT-engine rows) keeps NCCL's ring at the
    family's fitted step. (Before the two shared the mapping, a version no `covers` range held, e.g.
    '0.5.0 (TensorRT 9.1.0.4)', took the preset's default release, TensorRT-LLM 1.0.)"""
    return _release_allreduce_algorithms(row.engine, row.engine_version)


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


# ---- prediction ---------------------------------------------------------------------------------

def cost_params(hw, engine_cfg, q, p: GroupParams, moe: bool = False) -> CostParams:
    """CostParams of a group's parameters on one device (`moe`: for a MoE model): what the simulator
    builds from a profile carrying them (`CostParams.from_profile` -> `from_efficiency`, the same code)."""
    # a backend family (ggml-vulkan, ggml-rocm) prices GGUF formats by the ggml rules, as the simulator
    # does for any llama.cpp engine (its EngineConfig.kernel_family stays ggml)
    return CostParams.from_efficiency(hw, q, p.efficiency, base_family(p.family), engine_cfg, moe=moe)


def predict(row: PublicRow, shape: Shape, p: GroupParams, fitting: bool = False,
            corpus: PublicCorpus | None = None) -> float:
    """The row's figure under a group's parameters (`fitting`: as the group's own fit prices it,
    `_row_objects`; `corpus`: whose fitted routing skew the row is replayed with)."""
    hw, eng, spec, q, cm = _row_objects(row, corpus=corpus)
    return predict_with(row, shape, cost_params(hw, eng, q, p, spec.is_moe), p.lat_us, fitting, corpus)


def predict_with(row: PublicRow, shape: Shape, cp: CostParams, lat_us: float | None = None,
                 fitting: bool = False, corpus: PublicCorpus | None = None) -> float:
    """The row's figure under one device's CostParams (a TP group of `shape.tp` devices priced as one
    device of tp x the rates, as sim.cost.parallel does; `lat_us` = all-reduce step latency, default the
    profile's)."""
    hw, eng, spec, q, cm = _row_objects(row, fitting, corpus)
    if shape.tp > 1:
        from sim.cost.parallel import tp_group_params

        cp = tp_group_params(cp, shape.tp)  # as sim.cost.parallel prices a TP group
    lat_s = (lat_us if lat_us is not None else hw.interconnect_latency_us) * 1e-6
    f = shape.features
    t = (cm.predict_times(cp, f) + shape.comm_per_token_s * f.new_tokens + shape.comm_fixed_s
         + shape.comm_steps * lat_s)
    total = float(np.dot(t, shape.weights))
    return shape.numerator / total if shape.numerator else total * shape.scale
