"""Rows a fused-MoE grouped GEMM executes for a prompt step: each expert's routed tokens padded up to the
kernel's row tile (issue 38, session 45; docs/cost-model.md 'MoE prompt steps: what the GPU prices').

Not a priced term: no prediction reads it. Its one user is the prompt-step diagnostic
(calibrate/serving/prefill_slope.py `padded_step_ms`), so it lives beside it rather than in sim/cost, which
holds only the terms the cost model prices (moved from sim/cost/moe_tiles.py). Wiring it into the cost model
would be a new priced term, with its own ship rule.

What the kernel does. SGLang's and vLLM's Triton fused MoE (`fused_moe_kernel`) runs one program per
BLOCK_SIZE_M x BLOCK_SIZE_N tile of one expert's rows. Before it, `moe_align_block_size` sorts the routed
(token, expert) pairs by expert and rounds every expert's count up to a multiple of BLOCK_SIZE_M (its CUDA
kernel, csrc/moe/moe_align_sum_kernels.cu in vLLM and sgl-kernel's moe_align_kernel.cu: cumsum[i] = cumsum[i - 1]
+ CEILDIV(count, block_size) x block_size, so an expert with no token gets no block), and the GEMMs execute

    padded_rows(T) = sum_e ceil(m_e / B) x B        [rows through the experts, per MoE layer]

where m_e is the tokens routed to expert e (sum_e m_e = T x k) and B = BLOCK_SIZE_M, instead of T x k.
The padded rows cost MACs (the MMA tiles run full) but read no more weights: each weight tile is loaded
once per row block, from L2 after the first (not modelled: a bytes term would be a guess).

Which B. The tuned configuration file of the device and shape, keyed by the step's total token count M;
`try_get_optimal_moe_config` (vLLM vllm/model_executor/layers/fused_moe/fused_moe.py, and SGLang's port of it)
takes `configs[min(configs.keys(), key=lambda x: abs(x - M))]`, the entry whose key is nearest to M. The tables below are two of SGLang's tuned files for the B200 (cited per table).

Expectation under uniform routing (each token's k experts drawn uniformly, `expected_distinct_experts`'s
assumption): m_e ~ Binomial(T, k / E), so

    E[padded_rows(T)] = E x sum_m P(m) x ceil(m / B) x B,        P = Binomial(T, k / E),

and the padding factor is E[padded_rows] / (T x k): 1 for B = 1, -> 1 as T k / E >> B. With routing skew
(`pool_fraction` < 1) the tokens are spread over E_c = `pool_experts` experts instead (more rows each, less
padding)."""

from __future__ import annotations

import math

import numpy as np

from sim.cost.kernels import pool_experts

#: sgl-project/sglang python/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_4_0/
#: "E=257,N=256,device_name=NVIDIA_B200,dtype=fp8_w8a8,block_shape=[128, 128].json" (commit a47d67a;
#: DeepSeek-V3/R1 at TP8 with the shared expert fused as the 257th): BLOCK_SIZE_M by total tokens M
B200_DEEPSEEK_FP8_BLOCK_M = {1: 16, 2: 16, 4: 16, 8: 16, 16: 16, 24: 16, 32: 16, 48: 16, 64: 16, 96: 16, 128: 16,
                             256: 16, 512: 16, 1024: 32, 1536: 64, 2048: 64, 3072: 64, 4096: 64}
#: the same directory, "E=128,N=768,device_name=NVIDIA_B200,dtype=fp8_w8a8,block_shape=[128, 128].json"
#: (commit a99d968; 128 experts, e.g. Qwen3-235B-A22B-FP8 at TP2): BLOCK_SIZE_M by total tokens M
B200_E128_FP8_BLOCK_M = {1: 16, 2: 16, 4: 16, 8: 16, 16: 16, 24: 16, 32: 16, 48: 16, 64: 16, 96: 16, 128: 16,
                         256: 16, 512: 64, 1024: 64, 1536: 64, 2048: 64, 3072: 64, 4096: 64}


def fused_moe_block_m(tokens: float, table: dict[int, int]) -> int:
    """BLOCK_SIZE_M a tuned fused-MoE config file gives a step of `tokens` rows: the entry whose key is
    nearest to the token count (`try_get_optimal_moe_config`: min(keys, key=|key - M|); a tie takes the smaller
    key, as Python's min keeps the first of the file's ascending keys)."""
    if not table:
        raise ValueError("a fused-MoE config table needs at least one entry")
    if not tokens >= 1:
        raise ValueError(f"a prompt step has at least one token, got {tokens!r}")
    key = min(sorted(table), key=lambda m: abs(m - tokens))
    return int(table[key])


def _binomial_pmf(n: int, p: float) -> np.ndarray:
    """P(m) for m = 0..n of Binomial(n, p), through log-gamma (exact to float rounding for any n)."""
    m = np.arange(n + 1, dtype=float)
    if p <= 0.0:
        return (m == 0).astype(float)
    if p >= 1.0:
        return (m == n).astype(float)
    lg = np.vectorize(math.lgamma)
    log_pmf = lg(n + 1.0) - lg(m + 1.0) - lg(n - m + 1.0) + m * math.log(p) + (n - m) * math.log1p(-p)
    return np.exp(log_pmf)


def expected_padded_rows(tokens: int, n_experts: int, n_active: int, block_m: int, pool_fraction: float = 1.0) -> float:
    """E[sum_e ceil(m_e / B) x B] in one MoE layer for a step of `tokens` tokens (module docstring), m_e ~
    Binomial(T, k / E_c) over the E_c = `pool_experts` experts the tokens pick from."""
    if block_m < 1:
        raise ValueError(f"BLOCK_SIZE_M must be at least 1, got {block_m!r}")
    t = int(tokens)
    if t <= 0:
        return 0.0
    e_c = pool_experts(n_experts, n_active, pool_fraction)
    pmf = _binomial_pmf(t, n_active / e_c)
    m = np.arange(t + 1, dtype=float)
    return float(e_c * np.sum(pmf * np.ceil(m / block_m) * block_m))


def padding_factor(tokens: int, n_experts: int, n_active: int, block_m: int, pool_fraction: float = 1.0) -> float:
    """Executed expert rows over routed ones, E[padded_rows(T)] / (T x k) (>= 1; module docstring)."""
    t = int(tokens)
    if t <= 0:
        return 1.0
    return expected_padded_rows(t, n_experts, n_active, block_m, pool_fraction) / (t * n_active)
