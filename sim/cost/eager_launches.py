"""Kernel launches of one eager SGLang forward, counted per layer kind from the model's architecture, and the
host time one launch costs (EngineConfig.eager_prefill_launch_us; issue 38, session 45). Read by
`sim.cost.eager_prefill`, whose floor is  n_launches(model, quant, tp) x eager_prefill_launch_us.

Why per model. Session 44's floor was one value per MoE layer (1425 us, sglang PR #12160's DeepSeek-V3
forward over its 58 MoE layers); it over-priced Qwen3-235B (bf16, 94 slim GQA+MoE layers) and under-priced
models whose layers launch more kernels. An eager forward's host time is its launches x the host's time per
launch (Python module call, PyTorch dispatch, the CUDA launch itself; about 5-25 us per op for plain PyTorch:
https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html, "~5-25 us of CPU-side work
per op"), so the count carries what differs between models: attention type, MoE or dense FFN, shared
experts, linear-attention layers, quantised linears, tensor-parallel all-reduces.

The counts (one prompt step, CUDA path of SGLang's model files, python/sglang/srt/models/ of
sgl-project/sglang: deepseek_v2.py with deepseek_common/attention_forward_methods/forward_mha.py, qwen3_moe.py,
minimax_m2.py, glm4_moe_lite.py, kimi_linear.py, qwen3_next.py, llama.py; read, not traced, so a release's
fusions can shift a component by a launch or two):

  every layer         2  fused add + RMSNorm before the mixer and before the FFN
                      2  tensor-parallel all-reduces (after o_proj, after the FFN) when tp > 1
  a linear            1  its GEMM, +1 per-token(-group) activation quantisation when its weights are FP8 /
                         INT8 / FP4 (W8A8 / W4A4: sglang's fp8 linear quantises the input before every GEMM)
  GQA attention       2 linears (qkv_proj, o_proj) + 3: rotary, KV-cache store, attention kernel
  MLA attention       5 linears (fused q_a/kv_a, q_b, kv_b, o_proj; one counted for the split MQA path)
                      + 7: q_a and kv_a RMSNorms, rotary, q_pe copy into q, latent-cache store, concat of
                      k_nope and k_pe (concat_mla_k), attention kernel (forward_mha.py forward_normal_prepare)
  linear attention    4 linears (in_proj_qkvz, in_proj_ba / the KDA f and g projections, out_proj)
  (GDN, KDA, Mamba)   + 12: causal conv1d, gate computation (2), the chunked delta-rule scan (fla's chunk
                      pipeline: two l2norms, local cumsum, scaled KKT, solve_tril, recompute w/u, chunk h,
                      chunk o: 8), gated RMSNorm
  dense FFN           2 linears (gate_up, down) + 1: SiLU-and-mul
  MoE FFN             7: router GEMM, top-k (fused softmax / biased grouped top-k), align-and-sort by expert,
                      expert GEMM 1, SiLU-and-mul, expert GEMM 2, weighted sum over the top-k
                      + 2 when the experts are quantised (the activation quantisation before each grouped GEMM)
  shared experts      2 linears + 2: SiLU-and-mul, the add onto the routed output
  per forward         8: embedding, final norm, lm_head, logits processing and sampling

The per-launch cost. sglang PR #12160 (https://github.com/sgl-project/sglang/pull/12160) logs DeepSeek-V3's
eager forward of one new token at "forward cost-82.6406478881836 ms" (23.1 ms with its prefill CUDA graph).
One token is almost no GPU work, so the 82.6 ms is host time. DeepSeek-V3 (block FP8, 3 dense + 58 MoE
layers, MLA, one shared expert), at TP 8 as the model is served on one 8-GPU node, launches by the table

    58 x (2 + 2 + MLA 5x2+7 + MoE 7+2 + shared 2x2+2) + 3 x (2 + 2 + 17 + dense 2x2+1) + 8
  = 58 x 36 + 3 x 26 + 8 = 2174 launches                                       (CITED_DEEPSEEK_V3_LAUNCHES)

so one launch costs the host 82.64 ms / 2174 = 38 us (CITED_US_PER_LAUNCH): above plain PyTorch's 5-25 us
per op, as SGLang's layers add Python (quant-method dispatch, attention-backend wrappers, custom ops) around
each kernel. The log's GPU, CPU and TP are not stated; TP 8 is the assumption (at TP 1 there would be
116 + 6 fewer all-reduce launches: 40 us).

These are the generic path's counts. Under flashinfer's fused trtllm-gen MoE and its all-reduce + RMSNorm fusion
(from the server's flags, or chosen by SGLang itself for DeepSeek-V3 on compute capability 10) a forward launches
fewer: `sim.cost.eager_backends` counts them (EngineConfig.eager_launch_backends)."""

from __future__ import annotations

#: sglang PR #12160's eager DeepSeek-V3 forward of one new token [ms]
CITED_FORWARD_MS = 82.6406478881836
#: DeepSeek-V3's launches per forward by the table above (block FP8, TP 8); tests/test_eager_launches.py
#: recomputes it from the catalog's deepseek-v3 entry
CITED_DEEPSEEK_V3_LAUNCHES = 2174
#: host time per kernel launch of an eager SGLang forward [us]
CITED_US_PER_LAUNCH = CITED_FORWARD_MS * 1e3 / CITED_DEEPSEEK_V3_LAUNCHES

PER_FORWARD = 8  # embedding, final norm, lm_head, logits processing and sampling
NORMS = 2
ALL_REDUCES = 2
GQA_LINEARS, GQA_OTHER = 2, 3
MLA_LINEARS, MLA_OTHER = 5, 7
LINEAR_ATTN_LINEARS, LINEAR_ATTN_OTHER = 4, 12
DENSE_LINEARS, DENSE_OTHER = 2, 1
MOE_OTHER, MOE_QUANT = 7, 2
SHARED_LINEARS, SHARED_OTHER = 2, 2

_QUANTISED_COMPUTE = {"fp8", "int8", "fp4"}  # W8A8 / W4A4 formats: the activations are quantised per GEMM


def _per_linear(quant, bits: float) -> int:
    """Launches of one linear: the GEMM, + the activation quantisation when its weights are W8A8/W4A4."""
    if quant is None:
        return 1
    return 2 if quant.compute_format in _QUANTISED_COMPUTE and bits < 16 else 1


def layer_launches(model, quant, tp: int) -> dict[str, int]:
    """Launches of one layer of each kind the model has: {'attention': ..., 'linear': ...} for the mixers,
    {'moe': ..., 'dense': ...} for the FFNs (module docstring's table); `quant` a QuantFormat or None (bf16)."""
    lin = _per_linear(quant, quant.non_expert_bits if quant is not None else 16.0)
    expert_q = quant is not None and _per_linear(quant, quant.bits_per_weight) == 2
    common = NORMS + (ALL_REDUCES if tp > 1 else 0)
    if model.mla is not None:
        attn = MLA_LINEARS * lin + MLA_OTHER
    else:
        attn = GQA_LINEARS * lin + GQA_OTHER
    moe = MOE_OTHER + (MOE_QUANT if expert_q else 0)
    if model.n_shared_experts:
        moe += SHARED_LINEARS * lin + SHARED_OTHER
    return {"attention": attn + common, "linear": LINEAR_ATTN_LINEARS * lin + LINEAR_ATTN_OTHER + common,
            "moe": moe, "dense": DENSE_LINEARS * lin + DENSE_OTHER}


def forward_launches(model, quant, tp: int) -> int:
    """Kernel launches of one eager forward: each layer's mixer (attention or linear attention) and FFN
    (MoE on the routed layers, dense elsewhere; none on mixer-only layers), plus PER_FORWARD."""
    per = layer_launches(model, quant, tp)
    n_lin = model.n_linear_layers
    n_attn = model.n_layers - n_lin
    n_moe = model.n_routed_layers
    n_ffn = model.n_layers if model.n_ffn_layers is None else model.n_ffn_layers
    n_dense = max(n_ffn - n_moe, 0)
    return (n_attn * per["attention"] + n_lin * per["linear"] + n_moe * per["moe"] + n_dense * per["dense"]
            + PER_FORWARD)
