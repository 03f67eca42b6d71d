"""The engine-preset fields of how attention runs (`EngineConfig` inherits them): fused flash-attention kernels or
materialised scores, and the padded KV views llama.cpp's attention spans. The two meet on a CPU, where ggml's flash
attention skips the padded cells (`kv_padding_for`), so both are resolved here, per model, after the user's
overrides (`--no-flash-attn` reaches them). Kept apart so engine_config.py stays within the module size limit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from sim.catalog.models import ModelSpec


class AttentionSettings(BaseModel):
    """Flash attention and KV-view padding (EngineConfig's model config applies)."""

    attention_kv_padding: int = Field(
        0, ge=0,
        description=(
            "attention spans the KV cells in use rounded up to a multiple of this, masked cells computed "
            "(llama.cpp: 256, src/llama-kv-cache.cpp get_n_kv); 0 = exactly the causal keys (paged-attention "
            "engines). Priced per pass: with per_sequence_kv_streams, the longest sequence of each pass. "
            "The padding a model is priced with is `kv_padding_for`"
        ),
    )
    flash_attention_skips_kv_padding: bool = Field(
        False,
        description=(
            "the flash-attention kernels skip the masked cells of the padded KV view, so attention_kv_padding "
            "costs nothing while flash attention is on for the model (ggml-cpu: llama.cpp's hardware rule for "
            "kind cpu); with it off the unfused KQ matmul still spans the padded view"
        ),
    )
    flash_attention: bool = Field(
        True,
        description=(
            "attention runs as fused flash-attention kernels (scores stay on chip). False: the scores are "
            "materialised in memory, 16 bytes per (query token, key, head, layer) on the memory side of the "
            "attention roofline (sim.cost.roofline SCORE_BYTES): llama.cpp -fa off, its default before "
            "PR #15434 (2025-08)"
        ),
    )
    flash_attention_architectures: list[str] | None = Field(
        None,
        description=(
            "when set, flash attention is on only for models of these architectures (ModelSpec.architecture): "
            "Ollama enables it per model family (gpt-oss, qwen3, qwen3moe, gemma3, ...) unless "
            "OLLAMA_FLASH_ATTENTION says otherwise. None or [\"*\"]: `flash_attention` holds for every model"
        ),
    )

    def flash_attention_for(self, model: "ModelSpec") -> bool:
        """Whether this engine runs `model`'s attention as flash-attention kernels
        (`flash_attention`, narrowed by `flash_attention_architectures` when set)."""
        if not self.flash_attention:
            return False
        archs = self.flash_attention_architectures
        return archs is None or "*" in archs or model.architecture in archs

    def kv_padding_for(self, model: "ModelSpec") -> int:
        """The KV-view padding `model`'s attention is priced with: `attention_kv_padding`, or 0 where the
        engine's flash attention skips the masked cells (`flash_attention_skips_kv_padding`) and runs for
        this model (`flash_attention_for`). Read after the user's overrides, so `--no-flash-attn` on a CPU
        brings llama.cpp's 256-cell padding back (benchmarks/llamacpp_cpu_kv_padding.py measured both)."""
        if self.flash_attention_skips_kv_padding and self.flash_attention_for(model):
            return 0
        return self.attention_kv_padding
