"""Model architectures (`ModelSpec`) and the quantities derived from them.

A `ModelSpec` holds the architecture numbers of a decoder-only transformer as published in its
Hugging Face `config.json` (cited per model in `sim/catalog/data/models.yaml`), or as read from a GGUF
header or a config.json by `sim.catalog.model_readers`. Everything the cost model and the memory planner
need — parameter counts, weight bytes, KV bytes, FLOPs per token — is derived here.

Notation in the docstrings: L layers, h hidden size, H attention heads, K KV heads, d head dim,
F FFN width (per expert for MoE), E routed experts, k active experts, V vocabulary,
W sliding window, L_swa layers with sliding-window attention, L_attn layers with attention (the rest
keep a fixed-size recurrent state: `linear_attention`), L_moe layers with routed experts. The per-layer-kind
formulas (GQA, multi-head latent attention, Gated DeltaNet / Mamba state) live in sim.catalog.architectures.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.catalog import architectures as arch
from sim.catalog.architectures import MLA, LinearAttention
from sim.catalog.quant import QUANT_FORMATS, QuantFormat, get_quant, kv_dtype_bytes
from sim.errors import ConfigError, pydantic_error_to_config_error

#: weight formats a catalog entry may declare for its released checkpoints (sim.catalog.weight_format)
WEIGHT_FORMATS = ("block-fp8",)


class WeightFormat(BaseModel):
    """How the publisher's quantized release of a model stores its weights, when engines run it through
    kernels of their own: `block-fp8` = config.json `quantization_config: {quant_method: fp8,
    weight_block_size: [128, 128]}` (one scale per 128x128 weight tile; sim.catalog.weight_format).
    `checkpoints`: each such Hugging Face repository -> the config.json it is read from, the official
    file first and, where that could not be read offline, the public copy the field was read from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal["block-fp8"]
    checkpoints: dict[str, list[str]] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> "WeightFormat":
        for repo, urls in self.checkpoints.items():
            if not urls:
                raise ValueError(f"checkpoints.{repo}: cite the config.json it is read from")
        return self


class ModelSpec(BaseModel):
    """Architecture numbers of one decoder-only transformer (dense or mixture-of-experts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    display_name: str = ""
    architecture: str = "llama"
    n_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    head_dim: int | None = Field(None, gt=0, description="defaults to hidden_size / n_heads")
    intermediate_size: int = Field(gt=0, description="dense FFN width (per expert for MoE if moe_intermediate_size unset)")
    vocab_size: int = Field(gt=0)
    max_context: int = Field(gt=0)
    tie_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU/GeGLU: gate, up and down projections (3 matrices); Phi-3 fuses gate+up
    qkv_bias: bool = Field(False, description="q, k, v projections carry biases (Qwen2)")
    n_experts: int = Field(0, ge=0, description="routed experts per MoE layer; 0 = dense")
    n_experts_active: int = Field(0, ge=0, description="experts each token is routed to")
    moe_intermediate_size: int | None = Field(None, gt=0)
    n_shared_experts: int = Field(0, ge=0)
    expert_pool_fraction: float = Field(
        1.0, gt=0, le=1,
        description=(
            "routing skew: a batch's tokens pick experts as if from this share of them (sim.cost "
            "expected_distinct_experts); 1 = uniform routing. Fitted to public batched-decode rows "
            "(calibrate/public_fit.py -> sim/catalog/data/moe_routing.yaml)"
        ),
    )
    identical_tokens_pool_fraction: float | None = Field(None, gt=0, le=1, description=(
        "expert_pool_fraction under a benchmark of identical synthetic tokens (IDENTICAL_TOKEN_BENCHES), fitted to its "
        "rows apart (fit_routing's model@identical-tokens); only a replay of it reads this (sim.bench.corpus)"))
    sliding_window: int | None = Field(None, gt=0, description="attention window (tokens) of the sliding layers")
    n_sliding_layers: int = Field(0, ge=0, description="layers with sliding-window attention; the rest attend to all")
    sliding_n_heads: int | None = Field(
        None, gt=0, description="query heads of the sliding-window layers where they differ from n_heads (Step-3.5: "
        "attention_other_setting.num_attention_heads; same KV heads and head dim): their q and o projections")
    global_n_kv_heads: int | None = Field(None, gt=0, description="KV heads of the full-attention layers where they "
                                          "differ from n_kv_heads (Gemma 4: num_global_key_value_heads)")
    global_head_dim: int | None = Field(None, gt=0, description="head dim of the full-attention layers where it differs "
                                        "(Gemma 4: global_head_dim): their q/k/v/o, cached K/V and FLOPs per key")
    global_k_eq_v: bool = Field(False, description="the full-attention layers have no v_proj, V comes from k_proj (Gemma "
                                "4 attention_k_eq_v): weights only, engines still cache K and V (`global_cache_elements`)")
    mla: MLA | None = Field(None, description="multi-head latent attention shapes (DeepSeek-V3, Kimi K2); None = GQA")
    attention_output_gate: bool = Field(False, description="q_proj also produces a sigmoid output gate (Qwen3-Next)")
    linear_attention: LinearAttention | None = Field(
        None, description="layers with a fixed-size recurrent state instead of a KV cache (hybrid models)")
    n_moe_layers: int | None = Field(
        None, ge=0,
        description=("layers with routed experts (DeepSeek's first_k_dense_replace, Llama 4's interleave step "
                     "leave the others dense, FFN width intermediate_size); None = every layer of a MoE model"))
    n_ffn_layers: int | None = Field(
        None, ge=0, description="layers with an FFN when the model interleaves mixer-only blocks (Nemotron-H's "
                                "hybrid_override_pattern); None = every layer")
    mtp_layers: int = Field(0, ge=0, description="multi-token-prediction modules (num_nextn_predict_layers), not in "
                            "the parameter count: loaded only when serving with MTP speculative decoding")
    default_quant: str = "bf16"
    weight_bytes_override: float | None = Field(
        None, gt=0, description="real weight bytes (e.g. a GGUF file's tensor data size)"
    )
    quant_override: str | None = Field(None, description="quantization the override bytes are in")
    file_weight_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="measured tensor bytes of this model's GGUF files, by quantization (beats the table for "
        "llama.cpp-family engines; the others load the released checkpoint: as_loaded_by)",
    )
    sources: list[str] = Field(default_factory=list)
    hf_repos: list[str] = Field(
        default_factory=list,
        description="Hugging Face repository ids served as this entry: the release itself and checkpoints of the "
        "same architecture (an instruct or coder sibling with the same config.json shapes, a quantized copy whose "
        "format the row or the run states). Read by the serving corpus's model lookup "
        "(sim.bench.corpus_deployment model_id: predict_row and the serving fit) so each id is written once, here")
    weight_format: WeightFormat | None = Field(
        None, description="the weight format of the publisher's quantized release when an engine rule names it "
        "(block-fp8: FP8 with 128x128 weight blocks, read from each checkpoint's config.json); None = not such a format")
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.n_experts and not (0 < self.n_experts_active <= self.n_experts):
            raise ValueError("n_experts_active must be in 1..n_experts for a MoE model")
        if not self.n_experts and self.n_experts_active:
            raise ValueError("n_experts_active is set but n_experts is 0")
        if self.n_sliding_layers > self.n_attention_layers:
            raise ValueError(f"n_sliding_layers ({self.n_sliding_layers}) exceeds the attention layers "
                             f"({self.n_attention_layers})")
        if self.linear_attention is not None and self.linear_attention.n_layers >= self.n_layers:
            raise ValueError(f"linear_attention.n_layers ({self.linear_attention.n_layers}) must leave at least one "
                             f"attention layer of {self.n_layers}")
        if self.n_moe_layers is not None and (not self.n_experts or self.n_moe_layers > self.n_layers):
            raise ValueError(f"n_moe_layers ({self.n_moe_layers}) needs n_experts and at most n_layers ({self.n_layers})")
        if self.n_sliding_layers and self.sliding_window is None:
            raise ValueError("n_sliding_layers > 0 needs sliding_window")
        if self.sliding_n_heads is not None and (not self.n_sliding_layers or self.mla is not None
                                                 or self.sliding_n_heads % self.n_kv_heads):
            raise ValueError(f"sliding_n_heads ({self.sliding_n_heads}) needs GQA sliding-window layers and a multiple "
                             f"of n_kv_heads ({self.n_kv_heads})")
        if self.has_global_shape and (not self.n_sliding_layers or self.mla is not None
                                      or self.n_heads % (self.global_n_kv_heads or self.n_kv_heads)):
            raise ValueError("global_n_kv_heads / global_head_dim / global_k_eq_v need GQA sliding-window layers and "
                             f"n_heads ({self.n_heads}) a multiple of the full-attention layers' KV heads")
        unknown = [q for q in self.file_weight_bytes if q not in QUANT_FORMATS]
        if unknown:
            raise ValueError(f"file_weight_bytes: unknown quantization {unknown[0]!r}; known: {', '.join(QUANT_FORMATS)}")
        return self

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden_size // self.n_heads

    @property
    def has_global_shape(self) -> bool:
        """The full-attention layers have their own KV heads, head dim or shared K/V projection (Gemma 4)."""
        return self.global_n_kv_heads is not None or self.global_head_dim is not None or self.global_k_eq_v

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def n_cache_heads(self) -> int:
        """Heads the KV cache splits by under tensor parallelism: K for GQA; 1 for MLA, whose latent is
        shared by every head, so each tensor-parallel rank holds and reads all of it (vLLM replicates the
        MLA cache across TP ranks; data-parallel attention is how SGLang avoids it)."""
        return 1 if self.mla is not None else self.n_kv_heads

    @property
    def n_linear_layers(self) -> int:
        """Layers with a fixed-size recurrent state (no KV cache)."""
        return self.linear_attention.n_layers if self.linear_attention is not None else 0

    @property
    def n_attention_layers(self) -> int:
        """L_attn: layers that attend over the context (and cache K/V or MLA latents)."""
        return self.n_layers - self.n_linear_layers

    @property
    def n_full_attention_layers(self) -> int:
        return self.n_attention_layers - self.n_sliding_layers

    @property
    def n_routed_layers(self) -> int:
        """L_moe: layers with routed experts (all layers of a MoE model unless n_moe_layers says fewer)."""
        if not self.is_moe:
            return 0
        return self.n_layers if self.n_moe_layers is None else self.n_moe_layers

    # ---- parameter counts -------------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        """One attention layer's projections: GQA q, k, v, o = h*H*d + 2*h*K*d + H*d*h (+ biases, + the output
        gate), or MLA's (sim.catalog.architectures.mla_params)."""
        if self.mla is not None:
            return arch.mla_params(self.mla, self.hidden_size, self.n_heads)
        return arch.gqa_params(self.hidden_size, self.n_heads, self.n_kv_heads, self.d_head,
                               qkv_bias=self.qkv_bias, output_gate=self.attention_output_gate)

    @property
    def mixer_params(self) -> int:
        """Token-mixer weights of all layers: L_attn x attention + L_lin x the fixed-state mixer's; where the
        sliding-window layers have their own query-head count (`sliding_n_heads`), L_full x attention(H) +
        L_swa x attention(H_swa). The attention-score FLOPs per key stay those of H heads in every layer
        (`attention_flops_per_layer_key`: one figure per model for the cost model)."""
        linear = (self.n_linear_layers * arch.linear_params(self.linear_attention, self.hidden_size)
                  if self.linear_attention is not None else 0)
        if self.sliding_n_heads is not None or self.has_global_shape:
            # Gemma 4's full layers: attention(H, K_g, d_g) less the v projection when K = V (`global_k_eq_v`)
            swa = arch.gqa_params(self.hidden_size, self.sliding_n_heads or self.n_heads, self.n_kv_heads, self.d_head,
                                  qkv_bias=self.qkv_bias, output_gate=self.attention_output_gate)
            full = arch.gqa_params(self.hidden_size, self.n_heads, self.global_n_kv_heads or self.n_kv_heads,
                                   self.global_head_dim or self.d_head, qkv_bias=self.qkv_bias,
                                   output_gate=self.attention_output_gate, no_v=self.global_k_eq_v)
            return self.n_full_attention_layers * full + self.n_sliding_layers * swa + linear
        return self.n_attention_layers * self.attention_params_per_layer + linear

    @property
    def ffn_params_per_expert(self) -> int:
        """One FFN (one expert for MoE): (3 if gated else 2) * h * F."""
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.expert_ffn

    @property
    def dense_ffn_params(self) -> int:
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.intermediate_size

    @property
    def token_embedding_params(self) -> int:
        """The input embedding table: V * h."""
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection stored separately: V * h, or 0 when tied to the input embedding."""
        return 0 if self.tie_embeddings else self.vocab_size * self.hidden_size

    @property
    def embedding_params(self) -> int:
        """Input embedding + LM head (counted once when tied): V*h*(1 or 2)."""
        return self.token_embedding_params + self.lm_head_params

    def _moe_ffn_params_per_layer(self, experts: int) -> int:
        """One MoE layer's FFN: `experts` routed experts + shared experts + router (h*E)."""
        router = self.hidden_size * self.n_experts
        shared = self.n_shared_experts * self.ffn_params_per_expert
        return experts * self.ffn_params_per_expert + shared + router

    def _ffn_params(self, experts: int) -> int:
        """FFN weights of all layers with `experts` routed experts per MoE layer:
        L_moe x (experts x expert + shared + router) + (L - L_moe) x the dense FFN."""
        ffn_layers = self.n_layers if self.n_ffn_layers is None else self.n_ffn_layers
        if not self.is_moe:
            return ffn_layers * self.dense_ffn_params
        moe = self.n_routed_layers
        return moe * self._moe_ffn_params_per_layer(experts) + (ffn_layers - moe) * self.dense_ffn_params

    @property
    def n_params_total(self) -> int:
        """Total parameters: mixers + FFNs (all E experts) + 2 norms*h per layer + embeddings + final norm h."""
        return (self.mixer_params + self._ffn_params(self.n_experts) + 2 * self.hidden_size * self.n_layers
                + self.embedding_params + self.hidden_size)

    @property
    def n_params_active(self) -> int:
        """Parameters one token touches: as the total, but only k of the E experts per MoE layer."""
        if not self.is_moe:
            return self.n_params_total
        return (self.mixer_params + self._ffn_params(self.n_experts_active) + 2 * self.hidden_size * self.n_layers
                + self.embedding_params + self.hidden_size)

    @property
    def block_params(self) -> int:
        """Parameters outside the vocabulary tensors: n_params_total - V*h (- V*h when untied)."""
        return self.n_params_total - self.embedding_params

    @property
    def matmul_params_active(self) -> int:
        """Parameters in matmuls per token: L * (attention + active FFN + router) + V*h.

        Active parameters minus the input-embedding lookup (a gather, no FLOPs) and the norms;
        the LM head (V*h) is a matmul even when it is tied to the embedding.
        """
        return (self.mixer_params + self._ffn_params(self.n_experts_active if self.is_moe else 0)
                + self.vocab_size * self.hidden_size)

    # ---- bytes ------------------------------------------------------------------------------------
    def quant(self, quant: str | QuantFormat | None = None) -> QuantFormat:
        if isinstance(quant, QuantFormat):
            return quant
        return get_quant(quant or self.default_quant)

    @property
    def routed_expert_params(self) -> int:
        """Parameters of the routed experts in all layers: L_moe * E * (3 or 2)*h*F (0 for a dense model)."""
        return self.n_routed_layers * self.n_experts * self.ffn_params_per_expert

    def as_loaded_by(self, kernel_family: str | None) -> "ModelSpec":
        """The spec as an engine of `kernel_family` holds it in memory: the catalog's measured sizes
        (`file_weight_bytes`) are its GGUF files', which only the llama.cpp family ("ggml") loads; the
        others load the released checkpoint, whose bytes the format table gives (gpt-oss-120b MXFP4:
        63.4 GB as GGUF, with its attention and vocabulary tensors at about Q8_0; 65.2 GB as released,
        with them in bf16). The simulator (`CostModel.from_names`) and the public fit both use it."""
        if not self.file_weight_bytes or kernel_family == "ggml":
            return self
        return self.model_copy(update={"file_weight_bytes": {}})

    def nominal_weight_bytes(self, quant: str | QuantFormat | None = None) -> float:
        """Weight bytes from the format table (ignores a GGUF file's real size).

        routed-expert params * bpw/8 + other block params * (non-expert bits)/8 + V*h * (embedding
        bits)/8 + V*h * (lm_head bits)/8, where a tied embedding is one tensor stored at the lm_head
        rate (llama.cpp quantizes it as the output) and the non-expert bits differ from bpw only in a
        format that quantizes the experts alone (`QuantFormat.non_expert_bits`: MXFP4 checkpoints).
        """
        q = self.quant(quant)
        embedding, head = self._vocab_bits(q)
        vocab_bits = head if self.tie_embeddings else embedding + head
        experts = self.routed_expert_params
        return (experts * q.bits_per_weight + (self.block_params - experts) * q.non_expert_bits + vocab_bits) / 8.0

    def _byte_scales(self, q: QuantFormat) -> tuple[float, float]:
        """(scale of the routed experts' bytes, scale of every other tensor's): real / nominal bytes.

        One scale for all tensors, except in a format that fixes the experts' width and leaves the
        rest to the file (`QuantFormat.non_expert_bits_per_weight` set): there the experts keep their
        exact bytes and the file's difference from the table falls on the other tensors. ggml-org's
        gpt-oss-20b MXFP4 GGUF (12.10 GB) stores the experts as MXFP4 (10.15 GB) and the attention
        and vocabulary tensors at about Q8_0 where the released checkpoint has them in bf16 (3.59 GB):
        scale 1 and 0.54, where one scale (0.88) would read 0.7 GB more in every decode step.
        """
        total, nominal = self.weight_bytes(q), self.nominal_weight_bytes(q)
        uniform = total / nominal
        experts = self.routed_expert_params * q.bits_per_weight / 8.0
        if q.non_expert_bits_per_weight is None or not experts or total <= experts:
            return uniform, uniform
        return 1.0, (total - experts) / (nominal - experts)

    def weight_bytes(self, quant: str | QuantFormat | None = None) -> float:
        """Bytes of weights resident in memory (see `nominal_weight_bytes` for the formula).

        Measured figures win over the table: a GGUF-derived spec knows its file's tensor bytes
        (`weight_bytes_override`, used when the requested quantization is the file's own), and a
        catalog entry may list measured file sizes per quantization (`file_weight_bytes`).
        """
        q = self.quant(quant)
        if self.weight_bytes_override and (self.quant_override is None or self.quant_override == q.name):
            return float(self.weight_bytes_override)
        if q.name in self.file_weight_bytes:
            return float(self.file_weight_bytes[q.name])
        return self.nominal_weight_bytes(q)

    def vocab_bytes(self, quant: str | QuantFormat | None = None) -> tuple[float, float]:
        """(input embedding bytes, LM head bytes): V*h x the format's bits for each
        (`QuantFormat.embedding_bits`, `lm_head_bits`), scaled by real bytes / nominal bytes
        (`_byte_scales`). A tied table is one tensor at the head's rate, so both are that tensor.
        Splitting by bytes rather than by parameters matters where the vocabulary tensors are wider
        than the rest: MXFP4's 16-bit tables among 4.25-bit experts are 5.5% of gpt-oss-20b's
        parameters but 17% of its released checkpoint's bytes."""
        q = self.quant(quant)
        scale = self._byte_scales(q)[1]
        embedding, head = self._vocab_bits(q)
        return embedding / 8.0 * scale, head / 8.0 * scale

    def _vocab_bits(self, q: QuantFormat) -> tuple[float, float]:
        """(input embedding bits, LM head bits) by the format table: V*h x each tensor's width; a tied
        table is one tensor stored at the LM head's width (llama.cpp quantizes it as the output), so
        both are that tensor."""
        vh = self.vocab_size * self.hidden_size
        head = vh * q.lm_head_bits
        return (head if self.tie_embeddings else vh * q.embedding_bits), head

    def expert_bytes(self, quant: str | QuantFormat | None = None) -> float:
        """Bytes of one routed expert across all MoE layers: L_moe * (3 or 2)*h*F * bpw/8.

        What a MoE decode step reads per distinct expert it touches. For a GGUF spec the figure is
        scaled by (real file bytes / nominal bytes), so it tracks the file's actual mix
        (`_byte_scales`).
        """
        if not self.is_moe:
            return 0.0
        q = self.quant(quant)
        scale = self._byte_scales(q)[0]
        return self.n_routed_layers * self.ffn_params_per_expert * q.bits_per_weight / 8.0 * scale

    @property
    def cache_elements_per_layer_token(self) -> int:
        """Cached elements per token in one attention layer: 2 K d (GQA: K and V of the KV heads) or
        r + d_R (MLA: the latent and the shared RoPE key; sim.catalog.architectures)."""
        if self.mla is not None:
            return arch.mla_cache_elements_per_token(self.mla)
        return arch.gqa_cache_elements_per_token(self.n_kv_heads, self.d_head)

    @property
    def global_cache_elements(self) -> int:
        """Cached elements per token in one full-attention layer: 2 K_g d_g (Gemma 4: 2 x 4 x 512: K = V shares
        the projection, not the cache: vLLM's gemma4.py Gemma4Attention caches K after k_norm + RoPE and V after
        v_norm), `cache_elements_per_layer_token` where the full layers have no shape of their own."""
        if not self.has_global_shape:
            return self.cache_elements_per_layer_token
        return arch.gqa_cache_elements_per_token(self.global_n_kv_heads or self.n_kv_heads,
                                                 self.global_head_dim or self.d_head)

    @property
    def full_layer_weights(self) -> tuple:
        """(cached bytes, attention FLOPs per key) of a full-attention layer over a sliding-window layer's: the
        weight of each full layer in the token sums that price the cache and the attention (Gemma 4 31B: 0.5
        and 2); int 1s without a shape of their own, so those sums stay exactly as they were."""
        if not self.has_global_shape:
            return 1, 1
        return (self.global_cache_elements / self.cache_elements_per_layer_token,
                (self.global_head_dim or self.d_head) / self.d_head)

    def kv_bytes_per_token(self, kv_dtype: str = "fp16") -> float:
        """KV-cache bytes per token in all attention layers: L_attn * (2 K d, or r + d_R for MLA) * bytes/element.

        GQA-aware (only the K KV heads are cached), MLA-aware (one latent per token per layer) and
        hybrid-aware (fixed-state layers cache nothing per token: `state_bytes_per_sequence`). This is
        what an allocator that ignores sliding windows reserves per token (an upper bound for SWA
        models; see `kv_bytes_per_sequence`). With per-layer-type shapes (Gemma 4) the full layers cache 2 K_g d_g.
        """
        return float(self.n_sliding_layers * self.cache_elements_per_layer_token + self.n_full_attention_layers
                     * self.global_cache_elements) * kv_dtype_bytes(kv_dtype)

    def state_bytes_per_sequence(self, kv_dtype: str = "fp16") -> float:
        """Bytes of fixed-size recurrent state one sequence holds, whatever its context: L_lin x
        (recurrent + convolution state elements, sim.catalog.architectures.linear_state_elements) x
        bytes. The state stays at 16 bits when the KV cache is quantized (vLLM keeps the Mamba /
        Gated DeltaNet state in the model dtype, `mamba_ssm_cache_dtype: auto`); 0 without such layers."""
        if self.linear_attention is None:
            return 0.0
        return float(self.n_linear_layers * arch.linear_state_elements(self.linear_attention)) * max(
            2.0, kv_dtype_bytes(kv_dtype))

    @property
    def recurrent_flops_per_token(self) -> float:
        """FLOPs of the fixed-state layers' recurrences per token, all such layers (beyond their projections)."""
        if self.linear_attention is None:
            return 0.0
        return self.n_linear_layers * arch.linear_flops_per_token(self.linear_attention)

    def attention_flops_per_layer_key(self, *, prompt: bool = False) -> float:
        """Attention FLOPs per (query token, key, attention layer): 4 H d for GQA; for MLA the absorbed
        form in decode and the unabsorbed one over up-projected K/V in a prompt
        (sim.catalog.architectures.mla_flops_per_key)."""
        if self.mla is not None:
            return arch.mla_flops_per_key(self.mla, self.n_heads, absorbed=not prompt)
        return arch.gqa_flops_per_key(self.n_heads, self.d_head)

    def mtp_params(self) -> int:
        """Weights of the multi-token-prediction modules (DeepSeek-V3 sec. 2.2: each is one more decoder
        layer of the model's last kind, an h x 2h projection eh_proj and two RMSNorms; embedding and
        LM head shared with the model): mtp_layers x (mixer + FFN of a MoE layer + 2h^2 + 4h)."""
        if not self.mtp_layers:
            return 0
        ffn = self._moe_ffn_params_per_layer(self.n_experts) if self.is_moe else self.dense_ffn_params
        layer = self.attention_params_per_layer + ffn + 2 * self.hidden_size
        return self.mtp_layers * (layer + 2 * self.hidden_size * self.hidden_size + 2 * self.hidden_size)

    def mtp_draft_cost_fraction(self) -> float:
        """One MTP draft step over one target decode step, by matmul weights touched per token: (one
        layer with k active experts + eh_proj + the shared LM head) / matmul_params_active."""
        if not self.mtp_layers:
            raise ConfigError(f"{self.name} has no multi-token-prediction layers (num_nextn_predict_layers)",
                              field="speculative.method")
        ffn = self._moe_ffn_params_per_layer(self.n_experts_active) if self.is_moe else self.dense_ffn_params
        draft = (self.attention_params_per_layer + ffn + 2 * self.hidden_size * self.hidden_size
                 + self.vocab_size * self.hidden_size)
        return min(1.0, draft / self.matmul_params_active)

    def kv_bytes_per_sequence(self, context, kv_dtype: str = "fp16"):
        """KV bytes one sequence of `context` tokens holds when sliding-window layers keep only W,
        plus the fixed-size state of its recurrent layers:

        e * bytes * ((L_attn - L_swa) * context + L_swa * min(context, W)) + state_bytes_per_sequence,

        e the cached elements per layer token (`cache_elements_per_layer_token`). Equals context *
        kv_bytes_per_token for models without sliding-window or recurrent layers. `context` may be a
        number or a numpy array.
        """
        per_layer_token = float(self.cache_elements_per_layer_token) * kv_dtype_bytes(kv_dtype)
        return (per_layer_token * self._attended_tokens_sum(context, self.full_layer_weights[0])
                + self.state_bytes_per_sequence(kv_dtype))

    def _attended_tokens_sum(self, context, full_weight=1):
        """Sum over attention layers of the tokens each covers: L_full*w*c + L_swa*min(c, W), a full layer
        counted w sliding layers (`full_layer_weights`)."""
        if self.n_sliding_layers:
            return self.n_full_attention_layers * full_weight * context + self.n_sliding_layers * np.minimum(
                context, self.sliding_window
            )
        return self.n_attention_layers * context

    # ---- FLOPs ------------------------------------------------------------------------------------
    def attention_flops_per_token(self, context):
        """Attention score + value FLOPs for one decoded token attending to `context` earlier tokens,
        plus the recurrent layers' state update:

        f * (L_full * context + L_swa * min(context, W)) + recurrent_flops_per_token,

        f = `attention_flops_per_layer_key()` (4 H d for GQA: 4 * L * H * d * context without
        sliding-window or recurrent layers; MLA's absorbed decode form).
        """
        return (self.attention_flops_per_layer_key() * self._attended_tokens_sum(context, self.full_layer_weights[1])
                + self.recurrent_flops_per_token)

    def flops_per_token(self, context=0.0):
        """Forward FLOPs for one token at a given context: 2 * matmul_params_active + attention."""
        return 2.0 * self.matmul_params_active + self.attention_flops_per_token(context)


# ---- catalog ---------------------------------------------------------------------------------------

_CATALOG_FILE = Path(__file__).parent / "data" / "models.yaml"
# Generated by `infersim calibrate --public`: per MoE catalog model, the routing skew fitted to public
# batched-decode measurements (model -> {expert_pool_fraction, rows, source}); merged into the catalog.
_ROUTING_FILE = Path(__file__).parent / "data" / "moe_routing.yaml"
#: benchmarks of identical synthetic tokens (llama-batched-bench feeds token 0: batched-bench.cpp `common_batch_add(batch,
#: 0, ...)`): their sequences pick far more alike experts than real prompts' (ModelSpec.identical_tokens_pool_fraction)
IDENTICAL_TOKEN_BENCHES = ("llama-batched-bench",)


def write_routing_file(text: str) -> None:
    """Replace the MoE routing file (`calibrate --public` writes it) when its text changes, and make
    the next catalog read see it."""
    if not _ROUTING_FILE.is_file() or _ROUTING_FILE.read_text() != text:
        _ROUTING_FILE.write_text(text)
    _load_catalog_file.cache_clear()


def _line_of_key(text: str, key: str) -> int | None:
    """1-based line where a top-level YAML key starts (for error messages)."""
    for i, line in enumerate(text.splitlines(), start=1):
        if line.startswith(f"{key}:"):
            return i
    return None


@lru_cache(maxsize=4)
def _load_catalog_file(path: Path) -> tuple[tuple[str, ModelSpec], ...]:
    text = path.read_text()
    try:
        # libyaml's parser when pyyaml has it (same SafeLoader constructors and resolver, ~10x faster)
        raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(f"invalid YAML: {getattr(e, 'problem', e)}", file=path,
                          line=mark.line + 1 if mark is not None else None) from None
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping of model name -> fields", file=path)
    routing = _routing() if path == _CATALOG_FILE else {}
    out = []
    for name, fields in raw.items():
        if isinstance(fields, dict) and name in routing:
            fields = {**fields, **routing[name]}
        if not isinstance(fields, dict):
            raise ConfigError("expected a mapping of fields", file=path, line=_line_of_key(text, name), field=str(name))
        try:
            out.append((str(name), ModelSpec.model_validate({"name": name, **fields})))
        except ValidationError as e:
            raise pydantic_error_to_config_error(e, file=path, line=_line_of_key(text, name), prefix=f"{name}.") from None
    return tuple(out)


def _routing() -> dict[str, dict[str, float]]:
    """model -> its fitted routing fields (expert_pool_fraction [, identical_tokens_pool_fraction]), {} if no file."""
    if not _ROUTING_FILE.is_file():
        return {}
    raw = yaml.load(_ROUTING_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    try:
        return {str(k): {f: float(v[f]) for f in ("expert_pool_fraction", "identical_tokens_pool_fraction")
                         if f == "expert_pool_fraction" or f in v} for k, v in raw.items()}
    except (TypeError, KeyError, ValueError) as e:
        raise ConfigError(f"expected model: {{expert_pool_fraction: x}} entries ({e})", file=_ROUTING_FILE) from None


def load_catalog(path: str | Path | None = None) -> dict[str, ModelSpec]:
    """The model catalog (name -> spec), from `sim/catalog/data/models.yaml` unless another file is given."""
    return dict(_load_catalog_file(Path(path) if path else _CATALOG_FILE))
