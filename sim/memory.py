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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from sim.hardware import HardwareProfile
from sim.models import ModelSpec
from sim.quant import QuantFormat

GiB = 1024**3

# vLLM `vllm serve` default max_num_batched_tokens (vllm/engine/arg_utils.py, get_batch_defaults).
LARGE_GPU_MEMORY_BYTES = 70 * GiB
LARGE_GPU_MAX_BATCHED_TOKENS = 8192
SMALL_GPU_MAX_BATCHED_TOKENS = 2048

LOGIT_BYTES = 4  # fp32 logits
ACTIVATION_BYTES = 2  # bf16 activations
HIDDEN_BUFFERS = 4  # hidden-sized live buffers at the FFN peak (see module docstring)


def default_max_batched_tokens(hw: HardwareProfile) -> int:
    """vLLM's default tokens per forward for `vllm serve`: 8192 on >= 70 GiB devices, else 2048."""
    return LARGE_GPU_MAX_BATCHED_TOKENS if hw.memory_bytes >= LARGE_GPU_MEMORY_BYTES else SMALL_GPU_MAX_BATCHED_TOKENS


def activation_peak_bytes(model: ModelSpec, max_batched_tokens: int) -> float:
    """Peak activation memory of one forward over `max_batched_tokens` tokens:

    tokens x (4 V + 2 (2 F_active + 4 h)) bytes, F_active = F for dense models and
    k x F_expert (+ shared experts) for MoE. See the module docstring for the measured check.
    """
    if max_batched_tokens < 0:
        raise ValueError("max_batched_tokens must be >= 0")
    ffn_active = (
        (model.n_experts_active + model.n_shared_experts) * model.expert_ffn if model.is_moe else model.intermediate_size
    )
    per_token = LOGIT_BYTES * model.vocab_size + ACTIVATION_BYTES * (2 * ffn_active + HIDDEN_BUFFERS * model.hidden_size)
    return float(max_batched_tokens) * per_token


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
    `EngineConfig.activation_reserve_fraction`). The same rule as `sim.simulate.plan_kv`."""
    tokens = default_max_batched_tokens(hw) if max_batched_tokens is None else max_batched_tokens
    return max(activation_peak_bytes(model, tokens), reserve_fraction * memory_budget_bytes(hw, memory_fraction))


def memory_budget_bytes(hw: HardwareProfile, memory_fraction: float | None = None) -> float:
    """Device memory the serving process may use: memory_bytes x (memory_fraction or the profile's)."""
    fraction = hw.usable_memory_fraction if memory_fraction is None else memory_fraction
    if not 0 < fraction <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1], got {fraction}")
    return hw.memory_bytes * fraction


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
    if per_seq <= 0:
        return 0
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
) -> FitResult:
    """Does `model` in `quant` serve `concurrency` sequences of `context` tokens on `hw`?

    Fits when the weights and the activation reserve (`activation_reserve_bytes`) leave a KV budget
    that holds concurrency x kv_bytes_per_sequence(context), and context <= the model's max context.
    """
    q = model.quant(quant)
    reserve = activation_reserve_bytes(hw, model, max_batched_tokens, activation_reserve_fraction, memory_fraction)
    budget = memory_budget_bytes(hw, memory_fraction)
    weights = model.weight_bytes(q)
    kv_budget = budget - weights - reserve
    need = concurrency * float(model.kv_bytes_per_sequence(context, kv_dtype))
    if weights > budget:
        reason = "weights exceed the memory budget"
    elif kv_budget <= 0:
        reason = "no room left for the KV cache after the activation reserve"
    elif context > model.max_context:
        reason = f"context exceeds the model's max context ({model.max_context})"
    elif need > kv_budget:
        reason = "KV cache for context x concurrency exceeds the KV budget"
    else:
        reason = ""
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


def bytes_to_gib(n: float) -> float:
    return n / GiB if math.isfinite(n) else n
