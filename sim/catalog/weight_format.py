"""How an FP8 checkpoint scales its weights: block-scaled ("w8a8 block FP8", DeepSeek-style) or not.

Two FP8 W8A8 layouts run through different GEMM / fused-MoE kernels, with the same bytes per weight
(sim.catalog.quant `fp8`, 8 bits; a 128x128 block's fp32 scale adds 32 / 16384 = 0.002 bpw):
- per-tensor / per-channel scales (llm-compressor `FP8_DYNAMIC`, AMD Quark `*-FP8-KV`, ModelOpt FP8): one scale
  per output channel (or tensor), applied once after the GEMM's accumulation (hipBLASLt / cuBLASLt scaled GEMMs);
- block-scaled: `quantization_config: {quant_method: fp8, fmt: e4m3, activation_scheme: dynamic,
  weight_block_size: [128, 128]}` in the checkpoint's config.json: one inverse scale per 128x128 weight tile,
  activations quantized per token per 128-wide group at run time, so the kernel rescales its partial sums
  every 128 values of K (DeepGEMM / CUTLASS blockwise on NVIDIA; on ROCm aiter's `gemm_a8w8_blockscale`
  (CK or Triton) and the block-scale fused MoE).

Which checkpoints are block-scaled is read from their config.json (`BLOCK_FP8_REPOS`, each with the file it
comes from); nothing here is fitted. The serving fit (calibrate/serving/blockfp8.py) uses it to tell an AMD
block-FP8 point from the others, and an engine preset's hardware rule may name the format
(`when: {vendor: [AMD], weight_format: [block-fp8]}`), applied by `for_weight_format` once the checkpoint is known.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile

BLOCK_FP8 = "block-fp8"

#: Hugging Face repositories (lower case) whose config.json declares `quantization_config.weight_block_size`
#: [128, 128] with `quant_method: fp8`, each with that file. The DeepSeek-V3 / R1 family and MiniMax-M2(.5)
#: ship it as their only release format (sim/catalog/data/models.yaml notes "fp8 (128x128 blocks), as
#: released" on the same files); Qwen's `-FP8` repositories are Qwen's "fine-grained fp8 quantization with block
#: size 128" (their model cards), the same quantization_config.
BLOCK_FP8_REPOS: dict[str, str] = {
    "deepseek-ai/deepseek-v3": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
    "deepseek-ai/deepseek-v3-0324": "https://huggingface.co/deepseek-ai/DeepSeek-V3-0324/blob/main/config.json",
    "deepseek-ai/deepseek-v3.1": "https://huggingface.co/deepseek-ai/DeepSeek-V3.1/blob/main/config.json",
    "deepseek-ai/deepseek-r1": "https://huggingface.co/deepseek-ai/DeepSeek-R1/blob/main/config.json",
    "deepseek-ai/deepseek-r1-0528": "https://huggingface.co/deepseek-ai/DeepSeek-R1-0528/blob/main/config.json",
    "minimaxai/minimax-m2": "https://huggingface.co/MiniMaxAI/MiniMax-M2/blob/main/config.json",
    "minimaxai/minimax-m2.5": "https://huggingface.co/MiniMaxAI/MiniMax-M2.5/blob/main/config.json",
    "qwen/qwen3-coder-480b-a35b-instruct-fp8":
        "https://huggingface.co/Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8/blob/main/config.json",
    "qwen/qwen3.5-397b-a17b-fp8": "https://huggingface.co/Qwen/Qwen3.5-397B-A17B-FP8/blob/main/config.json",
}
#: catalog ids whose FP8 release (the publisher's own FP8 checkpoint) is one of the repositories above
#: (sim/catalog/data/models.yaml `hf_repos`): `--model deepseek-r1 --quant fp8` runs that checkpoint, and a corpus
#: row naming `Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8` is replayed as `qwen3-coder-480b-a35b` at fp8
BLOCK_FP8_CATALOG_IDS: frozenset[str] = frozenset({"deepseek-v3", "deepseek-r1", "minimax-m2", "minimax-m2.5",
                                                   "qwen3-coder-480b-a35b", "qwen3.5-397b-a17b"})


def is_block_fp8(model: str, quant: str | None) -> bool:
    """Whether `model` (a Hugging Face repository or a catalog id) run at `quant` is a block-scaled FP8
    checkpoint (BLOCK_FP8_REPOS / BLOCK_FP8_CATALOG_IDS); only an `fp8` (or unstated: the release format)
    quant can be."""
    if quant not in (None, "", "fp8", "fp8_e4m3"):
        return False
    m = (model or "").strip().lower()
    return m in BLOCK_FP8_REPOS or m in BLOCK_FP8_CATALOG_IDS


def weight_format(names: tuple[str, ...] | list[str], quant: str | None) -> str | None:
    """BLOCK_FP8 when any of `names` (the run's --model as given, the catalog id it resolved to) at `quant` is a
    block-scaled FP8 checkpoint (`is_block_fp8`), else None (no rule names the other formats)."""
    return BLOCK_FP8 if any(is_block_fp8(n, quant) for n in names if n) else None


def for_weight_format(engine: "EngineConfig", hw: "HardwareProfile", names, quant: str | None) -> "EngineConfig":
    """The engine with its hardware rules that name a weight format applied, in order, where the checkpoint has
    that format and the rule's other conditions hold on `hw` (sim.catalog.engine_settings.RuleCondition);
    `for_hardware` has applied the others. Call after `for_checkpoint`, before the user's overrides."""
    wf = weight_format(tuple(names), quant)
    if wf is None:
        return engine
    changes: dict = {}
    for rule in engine.hardware_rules:
        if rule.when.weight_format and rule.when.matches(hw, wf):
            changes.update(rule.set)
    return engine.with_overrides(**changes) if changes else engine
