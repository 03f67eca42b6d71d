"""Per-layer-kind formulas: what each kind of token mixer holds, reads and computes.

A decoder layer mixes tokens with one of:

- **GQA attention** (`ModelSpec` without `mla`): K and V of K KV heads of width d are cached per token:
  2 x K x d elements per token per layer; a query attends to a key with 2 x 2 x H x d FLOPs
  (QK^T and PV, multiply-add).
- **Multi-head latent attention** (`MLA`, DeepSeek-V2/V3, Kimi K2; DeepSeek-V2 paper arXiv 2405.04434
  sec. 2.1): the cache holds one compressed latent c_KV of `kv_lora_rank` (r) plus one decoupled RoPE
  key of `qk_rope_head_dim` (d_R) per token per layer, shared by all H heads: (r + d_R) elements,
  no factor 2 for K and V. Two ways to attend:
  - *absorbed* (decode: vLLM/SGLang/FlashMLA fold W_UK into the query and W_UV into the output, so
    attention runs over the latent): per (query, key, layer) 2 x H x (r + d_R) FLOPs for QK^T and
    2 x H x r for PV;
  - *unabsorbed* (prefill: the latent is up-projected to per-head K (d_nope + d_R) and V (d_v), then
    ordinary attention): 2 x H x (d_nope + d_R) + 2 x H x d_v FLOPs per (query, key, layer).
  The up-projection matrices (kv_b_proj, r x H x (d_nope + d_v)) are weights streamed either way.
- **Linear attention / state-space layers with a fixed-size recurrent state** (`LinearAttention`: Gated
  DeltaNet in Qwen3-Next, Mamba-2 in Nemotron-H / Granite 4, Mamba in Jamba): no per-token cache;
  each sequence holds a state independent of its context: the recurrent state (Gated DeltaNet:
  H_v x d_k x d_v; Mamba-2: H x P x N with P = d_inner / H; Mamba: d_inner x N) plus the causal
  convolution's last (kernel - 1) inputs. A step reads and writes each sequence's state once.
  *Kimi Delta Attention* (KDA, Kimi Linear: arXiv 2510.26692; config.json linear_attn_config: num_heads,
  head_dim, short_conv_kernel_size, kda_layers) is Gated DeltaNet with a per-channel (not per-head) forget
  gate: the same H x d_k x d_v state per head (keys and values of one width, as many key as value heads),
  three short convolutions over q, k and v, and low-rank gate projections (weights in `linear_params`).

Every function takes the raw config numbers (cited per model in sim/catalog/data/models.yaml) and
returns element counts or FLOPs; `ModelSpec` and the cost model multiply by bytes per element.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class MLA(BaseModel):
    """Multi-head latent attention shapes (config.json: kv_lora_rank, q_lora_rank, qk_nope_head_dim,
    qk_rope_head_dim, v_head_dim)."""

    model_config = _FROZEN
    kv_lora_rank: int = Field(gt=0)
    q_lora_rank: int | None = Field(None, gt=0, description="None: queries projected directly from the hidden state")
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class LinearAttention(BaseModel):
    """Layers whose token mixer keeps a fixed-size recurrent state instead of a KV cache.

    - `kind`: `gated_deltanet` (Qwen3-Next: linear_num_value_heads, linear_num_key_heads,
      linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim), `kda` (Kimi Linear's Kimi Delta
      Attention: linear_attn_config num_heads = n_heads = n_groups, head_dim = head_dim = state_dim,
      short_conv_kernel_size = conv_kernel), `mamba2` (Nemotron-H,
      Granite 4: mamba_num_heads, mamba_head_dim, ssm_state_size / mamba_d_state, n_groups,
      conv_kernel), `mamba` (Jamba: mamba_expand x hidden = d_inner, mamba_d_state, mamba_d_conv,
      mamba_dt_rank).
    - `n_layers`: how many of the model's layers are of this kind (the rest are attention layers).
    """

    model_config = _FROZEN
    kind: Literal["gated_deltanet", "kda", "mamba2", "mamba"]
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0, description="value heads (gated_deltanet) / SSM heads (mamba2) / 1 (mamba)")
    head_dim: int = Field(gt=0, description="value head dim (gated_deltanet) / head dim P (mamba2) / d_inner (mamba)")
    state_dim: int = Field(gt=0, description="key head dim d_k (gated_deltanet) / SSM state N (mamba2, mamba)")
    n_groups: int = Field(1, gt=0, description="key heads (gated_deltanet) / B,C groups (mamba2); 1 for mamba")
    conv_kernel: int = Field(4, gt=0)
    dt_rank: int = Field(0, ge=0, description="mamba's dt projection rank")

    @model_validator(mode="after")
    def _check(self) -> "LinearAttention":
        if self.kind == "kda" and (self.n_groups != self.n_heads or self.state_dim != self.head_dim):
            raise ValueError("kda: one key head per value head of the same width (n_groups = n_heads, "
                             "state_dim = head_dim; Kimi Linear's linear_attn_config num_heads, head_dim)")
        return self


# ---- attention (per layer) -----------------------------------------------------------------------

def gqa_cache_elements_per_token(n_kv_heads: int, head_dim: int) -> int:
    """Cached elements per token per layer: 2 (K and V) x K x d."""
    return 2 * n_kv_heads * head_dim


def gqa_flops_per_key(n_heads: int, head_dim: int) -> float:
    """Attention FLOPs per (query, key, layer): 2 (QK^T, PV) x 2 (multiply-add) x H x d."""
    return 4.0 * n_heads * head_dim


def gqa_params(hidden: int, n_heads: int, n_kv_heads: int, head_dim: int, *, qkv_bias: bool = False,
               output_gate: bool = False, no_v: bool = False) -> int:
    """q, k, v, o projections: h*H*d (x2 with a sigmoid output gate folded into q_proj, Qwen3-Next's
    gated attention) + 2*h*K*d + H*d*h, plus (H + 2K)*d biases when qkv_bias; with `no_v` (V computed
    from k_proj's output, Gemma 4's attention_k_eq_v) one h*K*d (and K*d biases) fewer."""
    q = hidden * n_heads * head_dim * (2 if output_gate else 1)
    kv = 1 if no_v else 2
    bias = (n_heads + kv * n_kv_heads) * head_dim if qkv_bias else 0
    return q + kv * hidden * n_kv_heads * head_dim + n_heads * head_dim * hidden + bias


def mla_cache_elements_per_token(m: MLA) -> int:
    """Latent cache elements per token per layer: r + d_R (one latent and one shared RoPE key)."""
    return m.kv_lora_rank + m.qk_rope_head_dim


def mla_flops_per_key(m: MLA, n_heads: int, *, absorbed: bool) -> float:
    """Attention FLOPs per (query, key, layer). Absorbed (decode): 2H(r + d_R) for QK^T over the latent
    plus 2H r for PV. Unabsorbed (prefill over up-projected K, V): 2H(d_nope + d_R) + 2H d_v."""
    if absorbed:
        return 2.0 * n_heads * (m.kv_lora_rank + m.qk_rope_head_dim) + 2.0 * n_heads * m.kv_lora_rank
    return 2.0 * n_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) + 2.0 * n_heads * m.v_head_dim


def mla_params(m: MLA, hidden: int, n_heads: int) -> int:
    """MLA projections of one layer (DeepSeek-V3 modeling code: q_a_proj, q_a_layernorm, q_b_proj,
    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj):

        queries: h*q_r + q_r + q_r*H*(d_nope + d_R)   (or h*H*(d_nope + d_R) without q_lora_rank)
        latent:  h*(r + d_R) + r
        up-proj: r*H*(d_nope + d_v)
        output:  H*d_v*h
    """
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        q = hidden * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n_heads * qk
    else:
        q = hidden * n_heads * qk
    kv_a = hidden * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
    kv_b = m.kv_lora_rank * n_heads * (m.qk_nope_head_dim + m.v_head_dim)
    return q + kv_a + kv_b + n_heads * m.v_head_dim * hidden


# ---- fixed-size-state layers (per layer) ---------------------------------------------------------

def _inner(la: LinearAttention) -> int:
    return la.n_heads * la.head_dim


def linear_state_elements(la: LinearAttention) -> int:
    """Recurrent state + convolution state of one sequence in one layer [elements]:

        gated_deltanet: H_v d_k d_v + (kernel - 1)(2 H_k d_k + H_v d_v)
        kda:            H d d       + (kernel - 1)(3 H d)      (the same with H_k = H_v = H, d_k = d_v = d:
                                                               vLLM's KDA cache: q, k, v conv states + H x d x d)
        mamba2:         H P N       + (kernel - 1)(H P + 2 G N)
        mamba:          d_inner N   + (kernel - 1) d_inner
    """
    conv = la.conv_kernel - 1
    if la.kind in ("gated_deltanet", "kda"):
        return la.n_heads * la.state_dim * la.head_dim + conv * (2 * la.n_groups * la.state_dim + _inner(la))
    if la.kind == "mamba2":
        return _inner(la) * la.state_dim + conv * (_inner(la) + 2 * la.n_groups * la.state_dim)
    return _inner(la) * la.state_dim + conv * _inner(la)


def linear_flops_per_token(la: LinearAttention) -> float:
    """Recurrence FLOPs per token per layer beyond the projections: the state update and readout touch
    every state element a few times (Gated DeltaNet and KDA: S k, the rank-1 update, S q; Mamba: dA*h + dB*x,
    C h), about 6 FLOPs per state element; a coarse figure, small next to the projections."""
    return 6.0 * (linear_state_elements(la) - (la.conv_kernel - 1) * _inner(la))


def linear_params(la: LinearAttention, hidden: int) -> int:
    """Weights of one fixed-size-state mixer layer (projections, convolution, per-head scalars, norm):

        gated_deltanet: h(2 H_k d_k + 2 H_v d_v) + 2 h H_v + kernel (2 H_k d_k + H_v d_v) + H_v d_v h + 2 H_v + d_v
                        (in_proj_qkvz, in_proj_ba, conv1d, out_proj, A_log + dt_bias, gated RMSNorm)
        kda:            4 h D + 2 h d + 2 d D + h H + 3 kernel D + D + H + d                  (D = H d)
                        (q, k, v, o projections; f_a and g_a (h x d) and f_b and g_b (d x D): the low-rank
                        forget and output gates; b_proj (h x H); q, k, v depthwise convs; dt_bias; A_log;
                        o_norm. vLLM's KimiDeltaAttention / Apriel2 KDA mixer modules)
        mamba2:         h(2 D + 2 G N + H) + kernel (D + 2 G N) + D h + 3 H + D   (D = H P)
        mamba:          2 h D + kernel D + D (R + 2 N) + R D + D N + D + D h     (D = d_inner, R = dt_rank)
    """
    d = _inner(la)
    if la.kind == "gated_deltanet":
        key = la.n_groups * la.state_dim
        return (hidden * (2 * key + 2 * d) + 2 * hidden * la.n_heads + la.conv_kernel * (2 * key + d)
                + d * hidden + 2 * la.n_heads + la.head_dim)
    if la.kind == "kda":
        d_head = la.head_dim
        return (4 * hidden * d + 2 * hidden * d_head + 2 * d_head * d + hidden * la.n_heads + 3 * la.conv_kernel * d
                + d + la.n_heads + d_head)
    if la.kind == "mamba2":
        gn = 2 * la.n_groups * la.state_dim
        return hidden * (2 * d + gn + la.n_heads) + la.conv_kernel * (d + gn) + d * hidden + 3 * la.n_heads + d
    r = la.dt_rank
    return 2 * hidden * d + la.conv_kernel * d + d * (r + 2 * la.state_dim) + r * d + d * la.state_dim + d + d * hidden
