"""Memory-fit arithmetic: what fits on a device, and how many KV tokens are left.

One place for the memory budget, used by `infersim fit` and by the simulator's KV capacity:

    memory budget  = memory_bytes x memory_fraction          (vLLM gpu_memory_utilization,
                                                              SGLang mem_fraction_static)
    KV budget      = memory budget - weight bytes - activation reserve
    KV capacity    = floor(KV budget / kv_bytes_per_token)   tokens, all sequences together

This is how vLLM sizes its KV cache (vllm/v1/worker/gpu_worker.py `determine_available_memory`:
requested memory - weights - peak activation of a profiling forward pass - non-torch memory).

The activation reserve (`activation_peak_bytes`) models that profiling pass. It runs one forward
of `max_batched_tokens` tokens and computes logits for all of them, so its peak is

    max_batched_tokens x (4 V  +  2 (2 F_active + 4 h))   bytes

4 V: the fp32 logits of every token; 2 F_active: the gate+up output of the (active) FFN; 4 h:
residual, normed input, attention output and q/k/v-sized buffers; the last two in 2-byte bf16.
Check against the peak activation vLLM logged on one H100 at its default 8192 batched tokens
(llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md): Llama-3.1-8B 4.76 GiB
(formula 4.60), Qwen3-0.6B 5.56 (4.79), Qwen3-32B 5.64 (5.73): within -14% .. +2%, asserted in
tests/test_fit.py. (Llama-3.3-70B FP8 at TP=2 logged 4.84; the formula with the FFN width halved
by tensor parallelism gives 4.85 — infersim does not model TP here.) The default token count follows vLLM's
`EngineArgs` for `vllm serve` (vllm/engine/arg_utils.py): 8192 on GPUs with >= 70 GiB, else 2048.

TensorRT-LLM (`memory_fraction_of: free`) sizes its pool from the memory still free once the engine is
loaded: KV = f x (memory - R - weights - activations), R = what the driver keeps (capacity - the total
nvidia-smi reports) + the runtime's own allocations (`free_fraction_reserve_bytes`,
`TRTLLM_RUNTIME_RESERVE_BYTES`); `engine_memory_fraction` turns that into a share of the device.
Its activations are its engine graph's (`engine_activation_bytes`): logits for the last token of each
sequence only, the FFN and LM head split over the tensor-parallel ranks. Charged vLLM's way (fp32
logits for all 8,192 batched tokens, nothing split), Llama 3.1 70B's 128k vocabulary cost 3.2 GB a GPU
more than Llama 2 70B's 32k, and TensorRT-LLM v0.13's fp16 TP2 rows, which measure the two models
alike (801.8 vs 757.2 output tok/s at 128/2048 on H100s), read 44% slow and 8% fast in the fit
(docs/public-calibration.md, round 22).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sim.catalog.hardware import HardwareProfile
from sim.catalog.models import ModelSpec
from sim.catalog.quant import QuantFormat

GiB = 1024**3

# vLLM `vllm serve` default max_num_batched_tokens (vllm/engine/arg_utils.py, get_batch_defaults).
LARGE_GPU_MEMORY_BYTES = 70 * GiB
LARGE_GPU_MAX_BATCHED_TOKENS = 8192
SMALL_GPU_MAX_BATCHED_TOKENS = 2048

# TensorRT-LLM's per-GPU runtime memory outside the weights, the activations (the engine's execution
# context), the runtime/decoder buffers and the KV cache: the CUDA context, cuBLAS/cuBLASLt workspaces,
# NCCL/MPI state and allocator slack. The KV manager sizes its pool from cudaMemGetInfo after all of these
# are allocated (cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp, calculateMaxNumBlocks: free memory
# x free_gpu_memory_fraction), so they come off the "free" memory before the fraction applies. Measured
# as nvidia-smi's total (81,559 MiB = 79.65 GiB on an H100 80GB HBM3) - the "available" memory the KV
# manager logs - the engine, execution-context, runtime-buffer and decoder allocations TensorRT-LLM logs
# just before it (all 1024-based: tensorrt_llm/runtime/memoryCounters.cpp), in the two logs NVIDIA
# publishes:
#   trtllm-bench throughput, v0.12.0.dev2024073000, Llama-2-7B FP8 on an H100, max batch 4096
#     (NVIDIA/TensorRT-LLM benchmarks/Suite.md, "Running a Max Throughput Benchmark"): 79.65 - 63.62
#     available - 6,214 MiB engine - 928.77 MiB context - 1.14 GB runtime buffers - 4.35 GB decoder
#     = 3.56 GiB;
#   docs/source/reference/memory.md (FAQ 1, later release, small max batch): 79.65 - 70.48 - 6,695 MiB
#     - 1,134.01 MiB - 43.29 MB - 180.30 MB = 1.30 GiB.
# The first is the tool and workflow (trtllm-bench build + throughput, TensorRT engine) of the
# perf-overview rows the public fit replays, and is the one used. Not tuned, but the choice between the
# two documented values was checked against the corpus (docs/public-calibration.md): both lower the
# held-out error; 3.56 GiB more so leaving sources out (LOSO median 16.0% vs 16.3%), 1.30 GiB marginally
# leaving devices out (LODO 16.0% vs 16.1%). The runtime and decoder buffers themselves grow with
# max_batch_size x vocabulary (5.5 GiB at 4,096 x 32,000 above, 0.2 GiB in the second log) and are not
# modelled: charging them per engine did not lower the held-out error.
TRTLLM_RUNTIME_RESERVE_BYTES = 3.56 * GiB

LOGIT_BYTES = 4  # fp32 logits
ACTIVATION_BYTES = 2  # bf16 activations
HIDDEN_BUFFERS = 4  # hidden-sized live buffers at the FFN peak (see module docstring)


def default_max_batched_tokens(hw: HardwareProfile) -> int:
    """vLLM's default tokens per forward for `vllm serve`: 8192 on >= 70 GiB devices, else 2048."""
    return LARGE_GPU_MAX_BATCHED_TOKENS if hw.memory_bytes >= LARGE_GPU_MEMORY_BYTES else SMALL_GPU_MAX_BATCHED_TOKENS


def activation_peak_bytes(model: ModelSpec, max_batched_tokens: int, logit_rows: int | None = None,
                          tp: int = 1) -> float:
    """Peak activation memory of one forward over `max_batched_tokens` tokens:

    tokens x 2 (2 F_active / tp + 4 h)  +  logit_rows x 4 V / tp   bytes,

    F_active = F for dense models and k x F_expert (+ shared experts) for MoE; `logit_rows` the rows
    the LM head computes (default every token: vLLM's profiling pass); `tp` the tensor-parallel
    ranks the FFN and the LM head are split over (default 1: the vLLM check below does not split).
    See the module docstring for the measured check and `engine_activation_bytes` for TensorRT-LLM.
    """
    if max_batched_tokens < 0:
        raise ValueError("max_batched_tokens must be >= 0")
    ffn_active = (
        (model.n_experts_active + model.n_shared_experts) * model.expert_ffn if model.is_moe else model.intermediate_size
    )
    rows = max_batched_tokens if logit_rows is None else min(logit_rows, max_batched_tokens)
    return (float(max_batched_tokens) * ACTIVATION_BYTES * (2 * ffn_active / tp + HIDDEN_BUFFERS * model.hidden_size)
            + float(rows) * LOGIT_BYTES * model.vocab_size / tp)


def engine_activation_bytes(hw: HardwareProfile, model: ModelSpec, engine) -> float:
    """One device's activation memory under `engine`: `activation_peak_bytes` of its
    max_num_batched_tokens (default `default_max_batched_tokens`). For TensorRT-LLM
    (`memory_fraction_of: free`) the engine's own graph: its LM head runs on the last token of each
    sequence only (`gather_last_token_logits` before `lm_head` in tensorrt_llm/models, unless the
    engine is built with gather_context_logits), so logits for max_batch_size rows, and tensor
    parallelism splits the FFN and the vocabulary-parallel LM head (docs/source/reference/memory.md:
    "activation size will be close to max number of input tokens * some constant factor"; "when
    using tensor parallelism ... the activation memory size of each rank will be smaller")."""
    tokens = engine.max_num_batched_tokens or default_max_batched_tokens(hw)
    if engine.memory_fraction_of != "free":
        return activation_peak_bytes(model, tokens)
    return activation_peak_bytes(model, tokens, logit_rows=engine.max_num_seqs, tp=engine.tp)


def activation_reserve_bytes(
    hw: HardwareProfile,
    model: ModelSpec,
    max_batched_tokens: int | None = None,
    reserve_fraction: float = 0.0,
    memory_fraction: float | None = None,
) -> float:
    """Memory kept out of the KV cache for activations: the larger of the peak of one forward of
    `max_batched_tokens` tokens (`activation_peak_bytes`; default `default_max_batched_tokens(hw)`)
    and `reserve_fraction` x the memory budget (an engine's stated workspace share,
    `EngineConfig.activation_reserve_fraction`). The same rule as `sim.engine.build.plan_kv`."""
    tokens = default_max_batched_tokens(hw) if max_batched_tokens is None else max_batched_tokens
    return max(activation_peak_bytes(model, tokens), reserve_fraction * memory_budget_bytes(hw, memory_fraction))


def memory_budget_bytes(hw: HardwareProfile, memory_fraction: float | None = None) -> float:
    """Device memory the serving process may use: memory_bytes x (memory_fraction or the profile's)."""
    fraction = hw.usable_memory_fraction if memory_fraction is None else memory_fraction
    if not 0 < fraction <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1], got {fraction}")
    return hw.memory_bytes * fraction


def free_fraction_reserve_bytes(hw: HardwareProfile) -> float:
    """Per-device memory a `memory_fraction_of: free` engine (TensorRT-LLM) can give neither to the
    model nor to the KV cache: what the driver keeps from processes (memory_bytes - the total
    nvidia-smi reports, `HardwareProfile.reported_memory_bytes`: ECC check bits on GDDR parts, the
    driver's reserved regions) + the runtime's own allocations (`TRTLLM_RUNTIME_RESERVE_BYTES`)."""
    return hw.memory_bytes - hw.reported_memory_bytes + TRTLLM_RUNTIME_RESERVE_BYTES


def engine_memory_fraction(hw: HardwareProfile, model: ModelSpec, quant: str | QuantFormat | None, engine) -> float:
    """The share of `hw`'s memory `engine` fills with weights, activations and KV.

    `engine.memory_fraction` itself when it is a share of the device (`memory_fraction_of: total`:
    vLLM's gpu_memory_utilization). TensorRT-LLM's kv_cache_free_gpu_memory_fraction
    (`memory_fraction_of: free`) is f of the memory still free when the KV pool is sized: what the
    driver and the runtime reserve (`free_fraction_reserve_bytes`, R), the weights (per device:
    tp x pp) and one forward of max_num_batched_tokens leave,

        left = memory - R - weights / (tp x pp) - activations,   KV = f x left;

    as a share of the device (weights + activations + KV) that is
    (memory - R - left x (1 - f)) / memory, at most 1."""
    if engine.memory_fraction_of != "free":
        return engine.memory_fraction
    reserve = free_fraction_reserve_bytes(hw)
    left = (hw.memory_bytes - reserve - model.weight_bytes(quant) / (engine.tp * engine.pp)
            - engine_activation_bytes(hw, model, engine))
    return min(1.0, max(hw.memory_bytes - reserve - left * (1 - engine.memory_fraction), 1.0) / hw.memory_bytes)


def kv_budget_bytes(
    hw: HardwareProfile,
    model: ModelSpec,
    quant: str | QuantFormat | None = None,
    memory_fraction: float | None = None,
    activation_reserve_bytes: float = 0.0,
) -> float:
    """Bytes left for the KV cache: memory budget - weight bytes - activation reserve (may be < 0)."""
    return memory_budget_bytes(hw, memory_fraction) - model.weight_bytes(quant) - activation_reserve_bytes


def kv_capacity_tokens(
    hw: HardwareProfile,
    model: ModelSpec,
    quant: str | QuantFormat | None = None,
    kv_dtype: str = "fp16",
    memory_fraction: float | None = None,
    activation_reserve_bytes: float = 0.0,
) -> int:
    """KV-cache capacity in tokens (all sequences together): floor(KV budget / kv_bytes_per_token).

    0 when the weights and the reserve leave nothing. Uses the all-layer bytes per token, i.e. an
    allocator that does not shrink sliding-window layers (see `ModelSpec.kv_bytes_per_sequence`).
    """
    budget = kv_budget_bytes(hw, model, quant, memory_fraction, activation_reserve_bytes)
    if budget <= 0:
        return 0
    return int(budget // model.kv_bytes_per_token(kv_dtype))


def max_context_tokens(model: ModelSpec, kv_budget: float, kv_dtype: str, concurrency: int) -> int:
    """Largest context c <= model.max_context with concurrency x kv_bytes_per_sequence(c) <= KV budget.

    Bisection on the monotone kv_bytes_per_sequence (exact for sliding-window models too).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    per_seq = kv_budget / concurrency
    if per_seq <= 0 or model.kv_bytes_per_sequence(0, kv_dtype) > per_seq:
        return 0  # nothing fits (a hybrid model's fixed per-sequence state alone is larger than the share)
    if model.kv_bytes_per_sequence(model.max_context, kv_dtype) <= per_seq:
        return model.max_context
    lo, hi = 0, model.max_context  # invariant: fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if model.kv_bytes_per_sequence(mid, kv_dtype) <= per_seq:
            lo = mid
        else:
            hi = mid
    return lo


def max_sequences(model: ModelSpec, kv_budget: float, kv_dtype: str, context: int) -> int:
    """Largest number of concurrent sequences of `context` tokens: floor(KV budget / bytes per sequence)."""
    if context < 1:
        raise ValueError("context must be >= 1")
    if kv_budget <= 0 or context > model.max_context:
        return 0
    return int(kv_budget // model.kv_bytes_per_sequence(context, kv_dtype))


@dataclass(frozen=True)
class FitResult:
    """One row of the fit table: one model in one quantization on one device."""

    model: str
    quant: str
    kv_dtype: str
    weight_bytes: float
    kv_bytes_per_1k_tokens: float
    memory_budget_bytes: float
    activation_reserve_bytes: float
    kv_budget_bytes: float
    context: int
    concurrency: int
    fits: bool
    max_context: int  # at `concurrency`
    max_sequences: int  # at `context`
    reason: str  # why it does not fit ("" when it fits)

    def to_dict(self) -> dict:
        return asdict(self)



WEIGHTS_EXCEED = "weights exceed the memory budget"  # fit_reason's first cause (what callers test a reason for)


def fit_reason(model, kv_dtype: str, context: int, concurrency: int, weights: float, budget: float,
               kv_budget: float, where: str = "") -> str:
    """Why a deployment does not fit ("" when it does): the weights (of the binding device) against the memory
    budget, then the KV budget left, the model's max context, and the KV cache of `concurrency` sequences of
    `context` tokens against that budget (`sim.commands.fit_parallel` passes `where` = " of a device")."""
    need = concurrency * float(model.kv_bytes_per_sequence(context, kv_dtype))
    if weights > budget:
        return f"{WEIGHTS_EXCEED}{where}"
    if kv_budget <= 0:
        return "no room left for the KV cache after the activation reserve"
    if context > model.max_context:
        return f"context exceeds the model's max context ({model.max_context})"
    if need > kv_budget:
        return "KV cache for context x concurrency exceeds the KV budget"
    return ""

def fit(
    hw: HardwareProfile,
    model: ModelSpec,
    quant: str | QuantFormat,
    *,
    kv_dtype: str = "fp16",
    context: int = 4096,
    concurrency: int = 1,
    memory_fraction: float | None = None,
    max_batched_tokens: int | None = None,
    activation_reserve_fraction: float = 0.0,
    engine=None,
) -> FitResult:
    """Does `model` in `quant` serve `concurrency` sequences of `context` tokens on `hw`?

    Fits when the weights and the activation reserve (`activation_reserve_bytes`) leave a KV budget
    that holds concurrency x kv_bytes_per_sequence(context), and context <= the model's max context.
    With a TensorRT-LLM `engine` (`memory_fraction_of: free`) the reserve is its engine's activations
    (`engine_activation_bytes`), as the simulator's KV pool has it.
    """
    q = model.quant(quant)
    if engine is not None and engine.memory_fraction_of == "free":
        if max_batched_tokens is not None:
            engine = engine.with_overrides(max_num_batched_tokens=max_batched_tokens)
        reserve = engine_activation_bytes(hw, model, engine)
    else:
        reserve = activation_reserve_bytes(hw, model, max_batched_tokens, activation_reserve_fraction,
                                           memory_fraction)
    budget = memory_budget_bytes(hw, memory_fraction)
    weights = model.weight_bytes(q)
    kv_budget = budget - weights - reserve
    reason = fit_reason(model, kv_dtype, context, concurrency, weights, budget, kv_budget)
    return FitResult(
        model=model.name, quant=q.name, kv_dtype=kv_dtype, weight_bytes=weights,
        kv_bytes_per_1k_tokens=1000 * model.kv_bytes_per_token(kv_dtype),
        memory_budget_bytes=budget, activation_reserve_bytes=reserve, kv_budget_bytes=kv_budget,
        context=context, concurrency=concurrency, fits=not reason,
        max_context=max_context_tokens(model, kv_budget, kv_dtype, concurrency),
        max_sequences=max_sequences(model, kv_budget, kv_dtype, context),
        reason=reason,
    )


def default_fit_quants(hw: HardwareProfile) -> list[str]:
    """The quantizations the fit table shows by default: bf16, fp8, q8_0, q4_k_m, plus nvfp4 on
    hardware with fp4 units (Blackwell)."""
    quants = ["bf16", "fp8", "q8_0", "q4_k_m"]
    if "fp4" in hw.peak_tflops:
        quants.append("nvfp4")
    return quants


# ---- several devices and partial offload (sim.cost.parallel) ------------------------------------------
# The input embedding and the LM head (V x h each) are placed whole and sized by their own bytes
# (`ModelSpec.vocab_bytes`); the repeating layers are the rest, split in proportion to layers. A tied
# matrix is one tensor on one device, and is duplicated when the head sits on another device, as
# vLLM's pipeline stages and llama.cpp's offloaded output layer do.


def _weight_shares(model: ModelSpec, quant: str | QuantFormat | None) -> tuple[float, float, float, bool]:
    """(bytes of the repeating layers, of the input embedding, of the LM head, tied embeddings)."""
    embedding, head = model.vocab_bytes(quant)
    layers = model.weight_bytes(quant) - (head if model.tie_embeddings else embedding + head)
    return layers, embedding, head, model.tie_embeddings


def device_memory_bytes(
    model: ModelSpec, quant: str | QuantFormat | None, kv_dtype: str, kv_tokens: int, tp: int = 1, pp: int = 1
) -> list[tuple[float, float]]:
    """(weight bytes, KV bytes) on one device of each pipeline stage, for `kv_tokens` KV tokens in all.

    Stage s holds L_s of the L layers (`sim.cost.parallel.stage_layer_counts`), the input embedding on
    the first stage and the LM head on the last; tensor parallelism divides a stage's weights by
    tp and its KV by K / max(1, K // tp) (KV heads are replicated when tp > K):

        weights_s = (layers x L_s / L + embedding [s = 0] + head [s = last]) / tp
        kv_s      = kv_tokens x kv_bytes_per_token x L_s / L x max(1, K // tp) / K

    (the last factor per layer type where the full-attention layers have KV heads of their own:
    `sim.cost.parallel.kv_tp_share`)
    """
    from sim.cost.parallel import kv_tp_share, stage_layer_counts

    layers, embedding, head, tied = _weight_shares(model, quant)
    kv_share = kv_tp_share(model, tp)  # MLA: replicated; per layer type where the full layers have own KV heads
    counts = stage_layer_counts(model.n_layers, pp)
    out = []
    for s, n in enumerate(counts):
        first, last = s == 0, s == pp - 1
        vocab = embedding * first + head * (last and (not tied or not first))
        weights = (layers * n / model.n_layers + vocab) / tp
        kv = kv_tokens * model.kv_bytes_per_token(kv_dtype) * n / model.n_layers * kv_share
        out.append((weights, kv))
    return out


def check_parallel_fit(
    hw: HardwareProfile,
    model: ModelSpec,
    quant: str | QuantFormat | None,
    kv_dtype: str,
    kv_tokens: int,
    tp: int = 1,
    pp: int = 1,
    memory_fraction: float | None = None,
    activation_reserve_bytes: float = 0.0,
) -> None:
    """Raise `ConfigError` unless every device holds its weights + KV + activation reserve:

        weights_s + kv_s + reserve <= memory budget of one device   for every stage s

    The message names the device, what it needs and the shortfall."""
    from sim.errors import ConfigError

    budget = memory_budget_bytes(hw, memory_fraction)
    for s, (weights, kv) in enumerate(device_memory_bytes(model, quant, kv_dtype, kv_tokens, tp, pp)):
        need = weights + kv + activation_reserve_bytes
        if need > budget:
            where = f"each {hw.name}" + (f" of pipeline stage {s}" if pp > 1 else "")
            raise ConfigError(
                f"{model.name} in {model.quant(quant).name} with tp={tp} pp={pp} needs {need / 1e9:.1f} GB on {where} "
                f"({weights / 1e9:.1f} weights + {kv / 1e9:.1f} KV for {kv_tokens} tokens + "
                f"{activation_reserve_bytes / 1e9:.1f} reserve) but {budget / 1e9:.1f} GB is usable: "
                f"short by {(need - budget) / 1e9:.1f} GB", field="--tp")


def parallel_kv_capacity_tokens(
    hw: HardwareProfile,
    model: ModelSpec,
    quant: str | QuantFormat | None,
    kv_dtype: str = "fp16",
    tp: int = 1,
    pp: int = 1,
    memory_fraction: float | None = None,
    activation_reserve_bytes: float = 0.0,
) -> int:
    """KV tokens (all sequences together) a tp x pp deployment holds: the most-loaded device decides,

        min over stages s of floor((budget - weights_s - reserve) / kv bytes per token on s)

    Equals `kv_capacity_tokens` for tp = pp = 1; 0 when some device has no room."""
    budget = memory_budget_bytes(hw, memory_fraction)
    per_device = device_memory_bytes(model, quant, kv_dtype, 1, tp, pp)  # KV of one token
    free = [(budget - w - activation_reserve_bytes, kv) for w, kv in per_device]
    if any(room <= 0 for room, _ in free):
        return 0
    return int(min(room // kv for room, kv in free))


def offload_memory_bytes(
    model: ModelSpec, quant: str | QuantFormat | None, kv_dtype: str, kv_tokens: int, gpu_layers: int
) -> tuple[float, float]:
    """(GPU bytes, host bytes) of weights + KV under llama.cpp's `-ngl gpu_layers`
    (`sim.cost.parallel.offload_split`): each layer's KV lives with the layer, the input embedding on
    the host, the output layer on the GPU from gpu_layers >= 1 (a tied one duplicated there)."""
    from sim.cost.parallel import offload_split

    layers, embedding, head, tied = _weight_shares(model, quant)
    on_gpu, head_on_gpu = offload_split(model.n_layers, gpu_layers)
    frac = on_gpu / model.n_layers
    kv = kv_tokens * model.kv_bytes_per_token(kv_dtype)
    gpu = layers * frac + kv * frac + (head if head_on_gpu else 0.0)
    host = layers * (1 - frac) + kv * (1 - frac) + embedding + (head if not head_on_gpu and not tied else 0.0)
    return gpu, host


def auto_gpu_layers(
    hw: HardwareProfile,
    model: ModelSpec,
    quant: str | QuantFormat | None,
    kv_dtype: str,
    kv_tokens: int,
    memory_fraction: float | None = None,
    activation_reserve_bytes: float = 0.0,
) -> int:
    """The largest llama.cpp `-ngl` (0 .. n_layers + 1) whose GPU share of weights + KV + the
    activation reserve fits the device's memory budget (what `--fit` / `-ngl auto` does)."""
    budget = memory_budget_bytes(hw, memory_fraction) - activation_reserve_bytes
    best = 0
    for g in range(1, model.n_layers + 2):  # GPU bytes grow with g
        if offload_memory_bytes(model, quant, kv_dtype, kv_tokens, g)[0] > budget:
            break
        best = g
    return best


def offload_kv_tokens(model: ModelSpec, engine) -> int:
    """KV tokens llama.cpp allocates when fitting layers: the engine's context buffer, or, when it
    sizes the context to memory (`--fit`, no `-c`), its smallest context (`min_fit_context`) —
    llama.cpp's fit lowers the context to that minimum before it moves layers to the host."""
    if engine.total_context_tokens is not None:
        return min(engine.total_context_tokens, model.max_context * engine.max_num_seqs)
    if engine.fit_context_to_memory:
        return min(engine.min_fit_context, model.max_context)
    return model.max_context


def resolve_gpu_layers(hw: HardwareProfile, model: ModelSpec, quant: str | QuantFormat | None, engine) -> int:
    """`engine.gpu_layers` as a number: itself (None: n_layers + 1, all on the device), or for "auto" `auto_gpu_layers` with the engine's
    memory fraction, its activation reserve (same rule as the simulator) and `offload_kv_tokens`."""
    if engine.gpu_layers is None:  # everything on the device, output layer included
        return model.n_layers + 1
    if engine.gpu_layers != "auto":
        return int(engine.gpu_layers)
    reserve = activation_reserve_bytes(hw, model, engine.forward_tokens, engine.activation_reserve_fraction,
                                       engine.memory_fraction)
    return auto_gpu_layers(hw, model, quant, engine.kv_dtype, offload_kv_tokens(model, engine),
                           engine.memory_fraction, reserve)


def host_fit_check(host: HardwareProfile, host_bytes: float) -> None:
    """Raise `ConfigError` when the host's share of an offloaded model exceeds the host's usable memory."""
    from sim.errors import ConfigError

    if host_bytes > host.usable_memory_bytes:
        raise ConfigError(
            f"the host ({host.name}) would hold {host_bytes / 1e9:.1f} GB of offloaded weights and KV but "
            f"{host.usable_memory_bytes / 1e9:.1f} GB is usable: short by "
            f"{(host_bytes - host.usable_memory_bytes) / 1e9:.1f} GB", field="gpu_layers")


def deployment_kv_capacity_tokens(
    hw: HardwareProfile,
    model: ModelSpec,
    quant: str | QuantFormat | None,
    engine,
    activation_reserve_bytes: float = 0.0,
    extra_weight_bytes: float = 0.0,
    host: HardwareProfile | None = None,
) -> int:
    """KV tokens the engine's deployment holds, all sequences together — what the simulator's KV
    allocator should be sized with when `engine` has tp, pp, gpu_layers or a draft model:

    - no offload: `parallel_kv_capacity_tokens` (the most-loaded device decides), with
      `extra_weight_bytes` (a draft model's weights, split tp ways) added to each device's reserve;
    - offload (`engine.gpu_layers`): each layer's KV lives with its layer, so both the GPU and the
      host (`host`, default `engine.offload_host`) must hold their share: the smaller of
      (GPU budget - reserve - GPU weights) / (KV bytes per token x GPU layers / L) and the host's
      (usable memory - host weights) / (KV bytes per token x host layers / L).
    0 when the weights alone do not fit. Equals `kv_capacity_tokens` for a plain one-device engine.
    """
    fraction = engine.memory_fraction
    if engine.gpu_layers is None:
        reserve = activation_reserve_bytes + extra_weight_bytes / engine.tp
        return parallel_kv_capacity_tokens(hw, model, quant, engine.kv_dtype, engine.tp, engine.pp, fraction, reserve)
    from sim.catalog.hardware import load_profile
    from sim.cost.parallel import offload_split

    host = host or load_profile(engine.offload_host)
    g = resolve_gpu_layers(hw, model, quant, engine)
    on_gpu, _ = offload_split(model.n_layers, g)
    gpu_w, host_w = offload_memory_bytes(model, quant, engine.kv_dtype, 0, g)
    per_token = model.kv_bytes_per_token(engine.kv_dtype)
    gpu_room = memory_budget_bytes(hw, fraction) - activation_reserve_bytes - extra_weight_bytes - gpu_w
    host_room = host.usable_memory_bytes - host_w
    if gpu_room < 0 or host_room < 0:
        return 0
    limits = []
    if on_gpu:
        limits.append(gpu_room / (per_token * on_gpu / model.n_layers))
    if on_gpu < model.n_layers:
        limits.append(host_room / (per_token * (model.n_layers - on_gpu) / model.n_layers))
    return int(min(limits))
