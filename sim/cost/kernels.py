"""Kernel-level formulas the roofline (`sim.cost.roofline`) uses: the mat-vec kernels' ALU roof of a
step's weight stream, and how many distinct MoE experts a batch's tokens touch."""

from __future__ import annotations

import numpy as np

from sim.cost.parallel import expert_parallel_imbalance

# Rows up to which a step's weight matmuls run as mat-vec kernels (`CostParams.matvec_s_per_weight`):
# llama.cpp's Metal backend switches to its mat-mat kernel above 8 rows (ggml-metal-ops.cpp,
# `ne11_mm_min = 8`).
MATVEC_MAX_ROWS = 8.0


def weight_stream_s(tokens, weight_bytes, bandwidth: float, weights_per_byte: float, s_per_weight: float):
    """Seconds a step's weight matmuls need to get through their weights (numpy-broadcast): the stream,
    `weight_bytes` / `bandwidth`, or, where slower, the mat-vec kernels' ALU time: every
    weight streamed (`weight_bytes` x `weights_per_byte`) dequantized once at `s_per_weight` seconds, in
    steps of up to MATVEC_MAX_ROWS tokens; no ALU roof above (mat-mat kernels, whose dequantization a
    tile of many rows shares) or when `s_per_weight` is 0 (then the stream alone, as a scalar for scalar
    arguments). Once per step, not per row: the multi-row mat-vec kernels (mul_mv_ext, 2-8 rows)
    dequantize a block once for the rows of a threadgroup; the public rows that fit the cost are
    single-sequence decodes, so more rows than one are an extrapolation, and this is its least costly
    form."""
    stream_s = weight_bytes / bandwidth
    if not s_per_weight:
        return stream_s
    matvec_alu_s = np.where(tokens <= MATVEC_MAX_ROWS, weight_bytes * weights_per_byte * s_per_weight, 0.0)
    return np.maximum(stream_s, matvec_alu_s)


def expected_distinct_experts(n_experts: int, n_active: int, tokens: float | np.ndarray,
                              pool_fraction: float = 1.0) -> float | np.ndarray:
    """Expected number of distinct experts a batch of `tokens` tokens routes to in one MoE layer.

    Assumes each token picks its `n_active` experts uniformly at random, independently of the other
    tokens (real routers are skewed, which touches fewer experts; uniform routing is the upper-bound
    case load-balancing losses push towards). One expert is missed by one token with probability
    1 - k/E, by all T tokens with (1 - k/E)^T, so

        E_distinct = E x (1 - (1 - k/E)^T)

    which is k for T = 1 and tends to E as T grows.

    Routing skew (`pool_fraction` = c < 1, `ModelSpec.expert_pool_fraction`): the tokens of a batch
    pick as if from E_c = max(k, c x E) equally likely experts, E_c x (1 - (1 - k/E_c)^T): the same k
    for one token, fewer distinct experts as the batch grows. Fitted per model to public batched
    decode (calibrate/public_fit.py, sim/catalog/data/moe_routing.yaml): 0.8 for gpt-oss-120b on real prompts
    (the DGX Spark's vLLM rows), so a batch of 32 reads 74 of its 128 experts where uniform routing says 82;
    0.4 under llama-batched-bench's identical tokens (`ModelSpec.identical_tokens_pool_fraction`): 47.
    """
    n_pool = pool_experts(n_experts, n_active, pool_fraction)
    miss = 1.0 - n_active / n_pool
    return n_pool * (1.0 - np.power(miss, tokens))


def moe_weight_bytes_read(cost, new_tokens):
    """`CostModel.weight_bytes_read` of a MoE model (a `sim.cost.roofline.CostModel` `cost`): the non-expert
    weights once, plus one read per distinct routed expert the step's tokens touch (`expected_distinct_experts`),
    the busiest rank's under expert parallelism (sim.cost.parallel `expert_parallel_imbalance`).
    A nonzero scalar's bytes are kept per (type, value) in `cost._weight_bytes` (a run prices the same token
    counts again and again), tagged with what they are computed from, so a copy of `cost` or a changed field
    starts afresh."""
    m = cost.model
    key = (type(new_tokens), new_tokens) if type(new_tokens) in (float, int, np.float64) and new_tokens else None
    tag = (id(cost), id(m), cost.non_expert_bytes, cost.expert_bytes, cost.ep_ranks)
    memo = getattr(cost, "_weight_bytes", {})
    memo = memo if memo.get("of") == tag else {"of": tag}
    out = memo.get(key)
    if out is None:
        touched = expected_distinct_experts(m.n_experts, m.n_experts_active, new_tokens, m.expert_pool_fraction)
        if cost.ep_ranks > 1:  # the busiest rank's experts set the step (sim.cost.parallel)
            touched = touched * expert_parallel_imbalance(touched, m.n_experts, cost.ep_ranks)
        out = cost.non_expert_bytes + touched * cost.expert_bytes
        if key is not None and len(memo) < 65536:
            cost._weight_bytes = memo
            memo[key] = out
    return out


def pool_experts(n_experts: int, n_active: int, pool_fraction: float = 1.0) -> float:
    """E_c, the experts a batch's tokens pick from as if equally likely (`expected_distinct_experts`):
    E for uniform routing, max(k, c x E) with routing skew c < 1."""
    return max(float(n_active), pool_fraction * n_experts) if pool_fraction < 1.0 else float(n_experts)


def extra_expert_bytes(cost, new_tokens):
    """Routed-expert bytes a step of T = `new_tokens` tokens streams beyond a one-token step's [B], for a
    `sim.cost.roofline.CostModel` `cost`: weight_bytes_read(T) - weight_bytes_read(1) = (E_T - k) x
    expert bytes (x the expert-parallel imbalance), E_T = `expected_distinct_experts`; 0 for a dense model.

    They stream on top of the per-layer kernel floor (`CostModel._kernel_terms`, sim.cost.placed), not under
    it: the floor is a layer's chain of small kernels as measured at one sequence, its grouped-GEMM kernel
    streaming k experts; a batch's grouped GEMM (SGLang/vLLM fused_moe: one program per block of rows routed
    to one expert) streams these extra bytes in the same CUDA stream, after the chain's other kernels, which
    keep their own latency (docs/cost-model.md 'Per-layer kernel floor'). DeepSeek-R1 FP8 (256 experts,
    top-8, 58 routed layers of 3 x 7168 x 2048 weights = 44.0 MB each at 1 B): 14 tokens touch
    256 x (1 - (1 - 8/256)^14) = 92.1 experts per layer, 84.1 x 58 x 44.0 MB = 215 GB more than one token."""
    if not cost.model.is_moe:
        return 0.0
    extra = cost.weight_bytes_read(new_tokens) - cost.one_token_weight_bytes
    return np.maximum(extra, 0.0) if np.ndim(extra) else max(float(extra), 0.0)


def layer_floor_stream_s(cost, new_tokens, bandwidth: float, part_bytes=None, share: float = 1.0):
    """Seconds a step's weight GEMMs and TP all-reduces take under the per-layer kernel floor on top of the
    layers' chain latencies (`CostModel.gemm_floor_s`, their sum by kind: sim.catalog.layer_floor), for a
    `sim.cost.roofline.CostModel` `cost`, on a device (or TP group) of effective weight bandwidth `bandwidth`
    [B/s] (scalar or numpy-broadcast). `share`: the fraction of the layers priced (a pipeline part's);
    `part_bytes`: the weight bytes that part streams (None = the whole step's, `weight_bytes_read`). Two forms
    (EngineConfig.layer_floor_plus_stream):

      constant (`floor_stream_ratio` 0): share x extra_expert_bytes(T) / bandwidth
          the chain as measured at one sequence, only a MoE batch's extra experts streamed after it; the
          floor is then a constant, so it hides a TP group's or a smaller format's faster stream (32 layers x
          200 us = 6.4 ms for Llama-3.1-8B at TP1 BF16 and at TP2 FP8 alike, where waynehacking8's H100 vLLM
          runs measure a TPOT of 6.19 and 2.98 ms at one client: benchmarks/serving/corpus_e_wayne.py).
      chain + stream (`floor_stream_ratio` r > 0): part_bytes / (bandwidth x r)
          the Hockney form: each layer's kernel chain has a fixed latency (launch-to-completion of its small
          kernels in a CUDA graph) that does not overlap the weight stream, and the stream runs at no more
          than the datasheet bandwidth: r = the device's datasheet bandwidth / its effective one
          (`CostModel.from_names`; hardware_profiles/*.yaml), so bandwidth x r is the datasheet rate. The
          bytes read include the routed experts the step touches, so no extra-expert term is added."""
    r = cost.floor_stream_ratio
    if r > 0:
        b = cost.weight_bytes_read(new_tokens) if part_bytes is None else part_bytes
        return b / (bandwidth * r)
    return share * extra_expert_bytes(cost, new_tokens) / bandwidth
