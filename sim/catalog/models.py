"""Model architectures (`ModelSpec`) and the quantities derived from them.

A `ModelSpec` holds the architecture numbers of a decoder-only transformer as published in its
Hugging Face `config.json` (cited per model in `sim/catalog/data/models.yaml`), or as read from a GGUF
header or a config.json by `sim.catalog.model_readers`. Everything the cost model and the memory planner
need — parameter counts, weight bytes, KV bytes, FLOPs per token — is derived here.

Notation in the docstrings: L layers, h hidden size, H attention heads, K KV heads, d head dim,
F FFN width (per expert for MoE), E routed experts, k active experts, V vocabulary,
W sliding window, L_swa layers with sliding-window attention.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.catalog.quant import QUANT_FORMATS, QuantFormat, get_quant, kv_dtype_bytes
from sim.errors import ConfigError, pydantic_error_to_config_error


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
    sliding_window: int | None = Field(None, gt=0, description="attention window (tokens) of the sliding layers")
    n_sliding_layers: int = Field(0, ge=0, description="layers with sliding-window attention; the rest attend to all")
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
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.n_experts and not (0 < self.n_experts_active <= self.n_experts):
            raise ValueError("n_experts_active must be in 1..n_experts for a MoE model")
        if not self.n_experts and self.n_experts_active:
            raise ValueError("n_experts_active is set but n_experts is 0")
        if self.n_sliding_layers > self.n_layers:
            raise ValueError(f"n_sliding_layers ({self.n_sliding_layers}) exceeds n_layers ({self.n_layers})")
        if self.n_sliding_layers and self.sliding_window is None:
            raise ValueError("n_sliding_layers > 0 needs sliding_window")
        unknown = [q for q in self.file_weight_bytes if q not in QUANT_FORMATS]
        if unknown:
            raise ValueError(f"file_weight_bytes: unknown quantization {unknown[0]!r}; known: {', '.join(QUANT_FORMATS)}")
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

    @property
    def n_full_attention_layers(self) -> int:
        return self.n_layers - self.n_sliding_layers

    # ---- parameter counts -------------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        """q, k, v, o projections: h*H*d + 2*h*K*d + H*d*h, plus (H + 2K)*d biases when qkv_bias."""
        h, d = self.hidden_size, self.d_head
        bias = (self.n_heads + 2 * self.n_kv_heads) * d if self.qkv_bias else 0
        return 2 * h * self.n_heads * d + 2 * h * self.n_kv_heads * d + bias

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

    def _ffn_params_per_layer(self, experts: int) -> int:
        if not self.is_moe:
            return self.dense_ffn_params
        router = self.hidden_size * self.n_experts
        shared = self.n_shared_experts * self.ffn_params_per_expert
        return experts * self.ffn_params_per_expert + shared + router

    @property
    def n_params_total(self) -> int:
        """Total parameters: L * (attention + FFN(all E experts) + router + 2 norms*h) + embeddings + final norm h."""
        per_layer = self.attention_params_per_layer + self._ffn_params_per_layer(self.n_experts) + 2 * self.hidden_size
        return self.n_layers * per_layer + self.embedding_params + self.hidden_size

    @property
    def n_params_active(self) -> int:
        """Parameters one token touches: as the total, but only k of the E experts per layer."""
        if not self.is_moe:
            return self.n_params_total
        per_layer = (
            self.attention_params_per_layer
            + self._ffn_params_per_layer(self.n_experts_active)
            + 2 * self.hidden_size
        )
        return self.n_layers * per_layer + self.embedding_params + self.hidden_size

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
        per_layer = self.attention_params_per_layer + self._ffn_params_per_layer(
            self.n_experts_active if self.is_moe else 0
        )
        return self.n_layers * per_layer + self.vocab_size * self.hidden_size

    # ---- bytes ------------------------------------------------------------------------------------
    def quant(self, quant: str | QuantFormat | None = None) -> QuantFormat:
        if isinstance(quant, QuantFormat):
            return quant
        return get_quant(quant or self.default_quant)

    @property
    def routed_expert_params(self) -> int:
        """Parameters of the routed experts in all layers: L * E * (3 or 2)*h*F (0 for a dense model)."""
        return self.n_layers * self.n_experts * self.ffn_params_per_expert if self.is_moe else 0

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
        """Bytes of one routed expert across all layers: L * (3 or 2)*h*F * bpw/8.

        What a MoE decode step reads per distinct expert it touches. For a GGUF spec the figure is
        scaled by (real file bytes / nominal bytes), so it tracks the file's actual mix
        (`_byte_scales`).
        """
        if not self.is_moe:
            return 0.0
        q = self.quant(quant)
        scale = self._byte_scales(q)[0]
        return self.n_layers * self.ffn_params_per_expert * q.bits_per_weight / 8.0 * scale

    def kv_bytes_per_token(self, kv_dtype: str = "fp16") -> float:
        """KV-cache bytes per token in all layers: 2 (K and V) * L * K * d * bytes/element.

        GQA-aware: only the K KV heads are cached, not all H attention heads. This is what an
        allocator that ignores sliding windows reserves per token (an upper bound for SWA models;
        see `kv_bytes_per_sequence`).
        """
        return 2.0 * self.n_layers * self.n_kv_heads * self.d_head * kv_dtype_bytes(kv_dtype)

    def kv_bytes_per_sequence(self, context, kv_dtype: str = "fp16"):
        """KV bytes one sequence of `context` tokens holds when sliding-window layers keep only W:

        2 * K * d * bytes * ((L - L_swa) * context + L_swa * min(context, W)).

        Equals context * kv_bytes_per_token for models without sliding-window layers. `context`
        may be a number or a numpy array.
        """
        per_layer_token = 2.0 * self.n_kv_heads * self.d_head * kv_dtype_bytes(kv_dtype)
        return per_layer_token * self._attended_tokens_sum(context)

    def _attended_tokens_sum(self, context):
        """Sum over layers of the tokens each layer's attention covers: L_full*c + L_swa*min(c, W)."""
        if self.n_sliding_layers:
            return self.n_full_attention_layers * context + self.n_sliding_layers * np.minimum(
                context, self.sliding_window
            )
        return self.n_layers * context

    # ---- FLOPs ------------------------------------------------------------------------------------
    def attention_flops_per_token(self, context):
        """Attention score + value FLOPs for one token attending to `context` earlier tokens:

        2 (QK^T and PV) * 2 (multiply-add) * H * d * (L_full * context + L_swa * min(context, W)),
        i.e. 4 * L * H * d * context for a model without sliding-window layers.
        """
        return 4.0 * self.n_heads * self.d_head * self._attended_tokens_sum(context)

    def flops_per_token(self, context=0.0):
        """Forward FLOPs for one token at a given context: 2 * matmul_params_active + attention."""
        return 2.0 * self.matmul_params_active + self.attention_flops_per_token(context)


# ---- catalog ---------------------------------------------------------------------------------------

_CATALOG_FILE = Path(__file__).parent / "data" / "models.yaml"
# Generated by `infersim calibrate --public`: per MoE catalog model, the routing skew fitted to public
# batched-decode measurements (model -> {expert_pool_fraction, rows, source}); merged into the catalog.
_ROUTING_FILE = Path(__file__).parent / "data" / "moe_routing.yaml"


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
            fields = {**fields, "expert_pool_fraction": routing[name]}
        if not isinstance(fields, dict):
            raise ConfigError("expected a mapping of fields", file=path, line=_line_of_key(text, name), field=str(name))
        try:
            out.append((str(name), ModelSpec.model_validate({"name": name, **fields})))
        except ValidationError as e:
            raise pydantic_error_to_config_error(e, file=path, line=_line_of_key(text, name), prefix=f"{name}.") from None
    return tuple(out)


def _routing() -> dict[str, float]:
    """model -> fitted expert_pool_fraction from the generated routing file (empty when absent)."""
    if not _ROUTING_FILE.is_file():
        return {}
    raw = yaml.load(_ROUTING_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    try:
        return {str(k): float(v["expert_pool_fraction"]) for k, v in raw.items()}
    except (TypeError, KeyError, ValueError) as e:
        raise ConfigError(f"expected model: {{expert_pool_fraction: x}} entries ({e})", file=_ROUTING_FILE) from None


def load_catalog(path: str | Path | None = None) -> dict[str, ModelSpec]:
    """The model catalog (name -> spec), from `sim/catalog/data/models.yaml` unless another file is given."""
    return dict(_load_catalog_file(Path(path) if path else _CATALOG_FILE))
