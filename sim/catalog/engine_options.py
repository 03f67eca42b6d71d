"""The engine options a user gives on the command line, declared once.

`infersim run` (and `infersim bench serve`, which takes run's engine options) overrides fields of the
engine preset with options such as `--max-seqs` or `--spec-k`; a sweep file may use the same short
names (`max_seqs: [8, 16]`). Each option is one `EngineOption` below: its parameter name, its flag(s),
the `EngineConfig` field it sets, its type and its help. From this one table:

- `sim.commands.engine_flags` builds run's typer options and bench serve's argparse arguments;
- `overrides_from` turns their values into the `EngineConfig.with_overrides` dict (speculative
  decoding's five options become the `speculative` block; `--flash-attn` forces flash attention for
  every model);
- `SWEEP_ALIASES` gives a sweep file's short names (`sim.plan.sweep`).

Adding an option is one entry here (its field must be an `EngineConfig` field; a test checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.catalog.policies import KV_ALLOCATORS, SCHEDULERS, choices


@dataclass(frozen=True)
class EngineOption:
    """One command-line engine option."""

    param: str  #: parameter name (run's keyword, bench serve's argparse dest)
    flags: str  #: `--name`, or `--name/--no-name` for an on/off option
    field: str  #: EngineConfig field it overrides; `speculative.<key>` for a key of the speculative block
    type: type  #: value type (str, int, float, bool)
    help: str

    @property
    def switch(self) -> bool:
        """An on/off pair (`--x/--no-x`)."""
        return "/" in self.flags


def _options() -> tuple[EngineOption, ...]:
    o = EngineOption
    return (
        o("scheduler", "--scheduler", "scheduler", str, choices(SCHEDULERS)),
        o("kv", "--kv", "kv_allocator", str, f"KV allocator: {choices(KV_ALLOCATORS)}"),
        o("max_seqs", "--max-seqs", "max_num_seqs", int,
          "concurrency limit (vLLM max_num_seqs, llama-server slots, OLLAMA_NUM_PARALLEL)"),
        o("max_batched_tokens", "--max-batched-tokens", "max_num_batched_tokens", int, "tokens per iteration"),
        o("ubatch", "--ubatch", "ubatch_tokens", int,
          "tokens per pass over the weights (llama.cpp -ub); an iteration with more runs as several passes"),
        o("block_size", "--block-size", "block_size", int, "tokens per KV block (paged)"),
        o("mem_fraction", "--mem-fraction", "memory_fraction", float, "share of device memory the engine takes"),
        o("kv_dtype", "--kv-dtype", "kv_dtype", str, "KV-cache element type: fp16|bf16|fp8|q8_0|q4_0"),
        o("llama_backend", "--llama-backend", "backend", str,
          "llama.cpp GPU backend: cuda|metal|vulkan|rocm (default: the device's usual one: ROCm on AMD Instinct, "
          "Vulkan on Ryzen AI APUs); Vulkan and ROCm have their own fitted efficiencies"),
        o("tp", "--tp", "tp", int, "tensor-parallel degree (devices per layer)"),
        o("pp", "--pp", "pp", int, "pipeline-parallel degree (stages)"),
        o("gpu_layers", "--gpu-layers", "gpu_layers", str,
          "llama.cpp -ngl: layers on the GPU, N or 'auto' (the rest run from host memory)"),
        o("spec_method", "--spec-method", "speculative.method", str,
          "speculative decoding: draft|eagle|mtp (the model's own MTP layers)"),
        o("spec_k", "--spec-k", "speculative.k", int, "tokens drafted per verify step"),
        o("spec_acceptance", "--spec-acceptance", "speculative.acceptance_rate", float,
          "per-token acceptance probability of drafted tokens"),
        o("spec_draft_model", "--spec-draft-model", "speculative.draft_model", str, "draft model (method draft)"),
        o("spec_draft_fraction", "--spec-draft-fraction", "speculative.draft_cost_fraction", float,
          "EAGLE head step as a fraction of a target decode step (method eagle)"),
        o("prefix_caching", "--prefix-caching/--no-prefix-caching", "prefix_caching", bool,
          "reuse cached KV of shared prompt prefixes (default: the engine's)"),
        o("flash_attn", "--flash-attn/--no-flash-attn", "flash_attention", bool,
          "fused flash-attention kernels (default: the engine's, on); off materialises the attention scores"),
    )


#: Every engine option, in the order `infersim run --help` lists them.
ENGINE_OPTIONS: tuple[EngineOption, ...] = _options()

#: A sweep file's short names for engine fields: the valued options whose name is not the field's
#: (`kv`, `max_seqs`, `max_batched_tokens`, `ubatch`, `mem_fraction`).
SWEEP_ALIASES: dict[str, str] = {
    o.param: o.field for o in ENGINE_OPTIONS if not o.switch and "." not in o.field and o.param != o.field}


def overrides_from(values: dict[str, Any]) -> dict[str, Any]:
    """The `EngineConfig.with_overrides` fields for the engine options' values (by `param`; None =
    not given, left out). The `--spec-*` options make the `speculative` block: a draft model alone
    implies method draft, a draft fraction alone method eagle. `--flash-attn` (on) also forces flash
    attention for every model (`flash_attention_architectures: ["*"]`, Ollama's
    OLLAMA_FLASH_ATTENTION=1), not per architecture."""
    out: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    for o in ENGINE_OPTIONS:
        value = values.get(o.param)
        if value is None:
            continue
        if o.field.startswith("speculative."):
            out["speculative"] = spec  # where the first --spec-* option stands
            spec[o.field.split(".", 1)[1]] = value
        else:
            out[o.field] = value
    if spec and "method" not in spec:
        spec["method"] = "eagle" if "draft_cost_fraction" in spec else "draft"
    if values.get("flash_attn"):
        out["flash_attention_architectures"] = ["*"]
    return out
