"""Model architectures (`ModelSpec`) and the quantities derived from them.

A `ModelSpec` holds the architecture numbers of a decoder-only transformer as published in its
Hugging Face `config.json` (cited per model in `sim/data/models.yaml`). Everything the cost model
needs — parameter counts, weight bytes, KV bytes per token, FLOPs per token — is derived here.
"""

from __future__ import annotations

import difflib
from functools import cached_property
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.errors import ConfigError, pydantic_error_to_config_error
from sim.quant import QuantFormat, get_quant, kv_dtype_bytes


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
    gated_mlp: bool = True  # SwiGLU/GeGLU: gate, up and down projections (3 matrices)
    n_experts: int = Field(0, ge=0, description="routed experts per MoE layer; 0 = dense")
    n_experts_active: int = Field(0, ge=0, description="experts each token is routed to")
    moe_intermediate_size: int | None = Field(None, gt=0)
    n_shared_experts: int = Field(0, ge=0)
    default_quant: str = "bf16"
    weight_bytes_override: float | None = Field(
        None, gt=0, description="real weight bytes (e.g. a GGUF file's tensor data size)"
    )
    quant_override: str | None = Field(None, description="quantization the override bytes are in")
    sources: list[str] = Field(default_factory=list)
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.n_experts and not (0 < self.n_experts_active <= self.n_experts):
            raise ValueError("n_experts_active must be in 1..n_experts for a MoE model")
        return self

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden_size // self.n_heads

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    # ---- parameter counts -------------------------------------------------------------------------
    @cached_property
    def attention_params_per_layer(self) -> int:
        """q, k, v, o projections: h*(H*d) + 2*h*(K*d) + (H*d)*h  (biases ignored: < 0.1%)."""
        h, d = self.hidden_size, self.d_head
        return 2 * h * self.n_heads * d + 2 * h * self.n_kv_heads * d

    @cached_property
    def ffn_params_per_expert(self) -> int:
        """One FFN: (3 if gated else 2) * hidden * ffn_width."""
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.expert_ffn

    @cached_property
    def dense_ffn_params(self) -> int:
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.intermediate_size

    @cached_property
    def embedding_params(self) -> int:
        """Input embedding + LM head (counted once when tied): V*h*(1 or 2)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    def _ffn_params_per_layer(self, experts: int) -> int:
        if not self.is_moe:
            return self.dense_ffn_params
        router = self.hidden_size * self.n_experts
        shared = self.n_shared_experts * self.ffn_params_per_expert
        return experts * self.ffn_params_per_expert + shared + router

    @cached_property
    def n_params_total(self) -> int:
        """Total parameters: L * (attention + FFN(all experts) + 2 norms) + embeddings + final norm."""
        per_layer = self.attention_params_per_layer + self._ffn_params_per_layer(self.n_experts) + 2 * self.hidden_size
        return self.n_layers * per_layer + self.embedding_params + self.hidden_size

    @cached_property
    def n_params_active(self) -> int:
        """Parameters one token touches: as total, but only `n_experts_active` experts per layer."""
        if not self.is_moe:
            return self.n_params_total
        per_layer = (
            self.attention_params_per_layer
            + self._ffn_params_per_layer(self.n_experts_active)
            + 2 * self.hidden_size
        )
        return self.n_layers * per_layer + self.embedding_params + self.hidden_size

    @cached_property
    def matmul_params_active(self) -> int:
        """Parameters in matmuls per token: active params minus the input-embedding lookup and norms.

        The LM head (V*h) is a matmul even when tied to the embedding.
        """
        per_layer = self.attention_params_per_layer + self._ffn_params_per_layer(
            self.n_experts_active if self.is_moe else 0
        )
        return self.n_layers * per_layer + self.vocab_size * self.hidden_size

    # ---- bytes ------------------------------------------------------------------------------------
    def quant(self, quant: str | QuantFormat | None = None) -> QuantFormat:
        if isinstance(quant, QuantFormat):
            return quant
        return get_quant(quant or self.default_quant)

    def weight_bytes(self, quant: str | QuantFormat | None = None) -> float:
        """Bytes of weights resident in memory: n_params_total * bits_per_weight / 8.

        A GGUF-derived spec knows its real tensor bytes (`weight_bytes_override`); that figure is
        used when the requested quantization is the file's own.
        """
        q = self.quant(quant)
        if self.weight_bytes_override and (self.quant_override is None or self.quant_override == q.name):
            return float(self.weight_bytes_override)
        return self.n_params_total * q.bits_per_weight / 8.0

    def expert_bytes(self, quant: str | QuantFormat | None = None) -> float:
        """Bytes of one routed expert across all layers (what a MoE decode step reads per distinct expert)."""
        if not self.is_moe:
            return 0.0
        q = self.quant(quant)
        scale = self.weight_bytes(q) / (self.n_params_total * q.bits_per_weight / 8.0)
        return self.n_layers * self.ffn_params_per_expert * q.bits_per_weight / 8.0 * scale

    def kv_bytes_per_token(self, kv_dtype: str = "fp16") -> float:
        """KV-cache bytes per token: 2 (K and V) * n_layers * n_kv_heads * head_dim * bytes/element.

        GQA-aware: only the KV heads are cached, not all attention heads.
        """
        return 2.0 * self.n_layers * self.n_kv_heads * self.d_head * kv_dtype_bytes(kv_dtype)

    # ---- FLOPs ------------------------------------------------------------------------------------
    def attention_flops_per_token(self, context: float) -> float:
        """Attention score + value FLOPs for one token attending to `context` tokens:
        2 (QK^T and PV) * 2 (multiply-add) * n_layers * n_heads * head_dim * context."""
        return 4.0 * self.n_layers * self.n_heads * self.d_head * context

    def flops_per_token(self, context: float = 0.0) -> float:
        """Forward FLOPs for one token at a given context: 2 * matmul_params_active + attention."""
        return 2.0 * self.matmul_params_active + self.attention_flops_per_token(context)


# ---- catalog ---------------------------------------------------------------------------------------

_CATALOG_FILE = Path(__file__).parent / "data" / "models.yaml"


def load_catalog() -> dict[str, ModelSpec]:
    raw = yaml.safe_load(_CATALOG_FILE.read_text()) or {}
    out: dict[str, ModelSpec] = {}
    for name, fields in raw.items():
        try:
            out[name] = ModelSpec.model_validate({"name": name, **fields})
        except ValidationError as e:
            raise pydantic_error_to_config_error(e, file=_CATALOG_FILE, prefix=f"{name}.") from None
    return out


def get_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name, or a spec read from a GGUF file or a Hugging Face config.json."""
    p = Path(name_or_path)
    if name_or_path.endswith(".gguf"):
        from sim.model_readers import spec_from_gguf

        return spec_from_gguf(p)
    if name_or_path.endswith(".json"):
        from sim.model_readers import spec_from_hf_config

        return spec_from_hf_config(p)
    cat = load_catalog()
    if name_or_path in cat:
        return cat[name_or_path]
    close = difflib.get_close_matches(name_or_path, list(cat), n=4, cutoff=0.4)
    hint = f"; did you mean: {', '.join(close)}?" if close else f"; known: {', '.join(cat)}"
    raise ConfigError(f"unknown model '{name_or_path}'{hint}", field="--model")
