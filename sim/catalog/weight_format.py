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

Which checkpoints are block-scaled is a property of the model catalog: an entry of
sim/catalog/data/models.yaml declares `weight_format: {format: block-fp8, checkpoints: {REPO: [config.json, ...]}}`
(sim.catalog.models.WeightFormat), each checkpoint with the config.json it is read from; nothing here is fitted.
The serving fit (calibrate/serving/blockfp8.py) uses it to tell an AMD
block-FP8 point from the others, and an engine preset's hardware rule may name the format
(`when: {vendor: [AMD], weight_format: [block-fp8]}`), applied by `for_weight_format` once the checkpoint is known.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile

BLOCK_FP8 = "block-fp8"


def _index(path=None) -> tuple[dict[str, str], frozenset[str]]:
    """(repository (lower case) -> its official config.json, catalog ids) of the block-FP8 checkpoints the model
    catalog (`path`, default sim/catalog/data/models.yaml) declares (`weight_format.format: block-fp8`)."""
    from sim.catalog.models import load_catalog

    repos: dict[str, str] = {}
    ids: set[str] = set()
    for name, spec in load_catalog(path).items():
        wf = spec.weight_format
        if wf is not None and wf.format == BLOCK_FP8:
            ids.add(name)
            repos.update({repo.lower(): urls[0] for repo, urls in wf.checkpoints.items()})
    return repos, frozenset(ids)


@lru_cache(maxsize=1)
def _cached_index() -> tuple[dict[str, str], frozenset[str]]:
    return _index()


def block_fp8_repos() -> dict[str, str]:
    """Hugging Face repositories (lower case) whose config.json declares `quantization_config.weight_block_size`
    [128, 128] with `quant_method: fp8`, each with that file (the catalog's `weight_format.checkpoints`)."""
    return _cached_index()[0]


def block_fp8_catalog_ids() -> frozenset[str]:
    """Catalog ids whose FP8 release (the publisher's own FP8 checkpoint) is block-scaled: `--model deepseek-r1
    --quant fp8` runs that checkpoint, and a corpus row naming `Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8` is
    replayed as `qwen3-coder-480b-a35b` at fp8."""
    return _cached_index()[1]


def __getattr__(name: str):
    """`BLOCK_FP8_REPOS` / `BLOCK_FP8_CATALOG_IDS`, read from the catalog on first use (PEP 562)."""
    if name == "BLOCK_FP8_REPOS":
        return block_fp8_repos()
    if name == "BLOCK_FP8_CATALOG_IDS":
        return block_fp8_catalog_ids()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_block_fp8(model: str, quant: str | None) -> bool:
    """Whether `model` (a Hugging Face repository or a catalog id) run at `quant` is a block-scaled FP8
    checkpoint (the catalog's `weight_format`: block_fp8_repos / block_fp8_catalog_ids); only an `fp8` (or unstated: the release format)
    quant can be."""
    if quant not in (None, "", "fp8", "fp8_e4m3"):
        return False
    m = (model or "").strip().lower()
    return m in block_fp8_repos() or m in block_fp8_catalog_ids()


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
