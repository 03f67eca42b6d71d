"""The engine a deployment runs: one preset resolved for one device and one checkpoint.

Every command that prices a model on a machine under an engine (`run`, `sweep`, `plan`, `bench serve`,
`validate`, `calibrate --from-bench`, the serving fit's replays, `recommend`, `fit --speed`) takes its
`EngineConfig` from `engine_for`, so a rule added to one step applies to all of them. The steps, in order:

1. the preset (a release: `vllm@0.7`), or an `EngineConfig` a caller already holds;
2. `EngineConfig.for_hardware`: the preset's device rules (batch limits, memory reserve, per-vendor scales),
   then the front-end latency the profile measured for this very engine (`Efficiency.request_overhead_ms`
   of its own `engine_efficiency` entry: `calibrate --from-bench`), which replaces the preset's;
3. the checkpoint's release format: an engine that loads a Hugging Face checkpoint as released
   (RELEASE_LOADERS) serves an FP8 / MXFP4 release in that format unless a quantization is given;
4. `EngineConfig.for_checkpoint`: the KV dtype the engine's `auto` picks for the quantization, vLLM V0's
   chunked prefill only on long-context models;
5. `sim.catalog.weight_format.for_weight_format`: rules keyed on the checkpoint's weight format
   (block-scaled FP8 on AMD).

A user's `--engine-file` and command-line overrides come after (sim.api.resolve_engine): an explicit value wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.catalog import cache
from sim.catalog.engine_config import EngineConfig
from sim.catalog.weight_format import for_weight_format

if TYPE_CHECKING:
    from sim.catalog.hardware import HardwareProfile
    from sim.catalog.models import ModelSpec

# engines that serve a Hugging Face checkpoint in its released quantization (quantization_config) unless told
RELEASE_LOADERS = ("vllm", "sglang", "trtllm")


def engine_for(engine: "str | EngineConfig", hw: "HardwareProfile", model: "ModelSpec", quant: str | None = None,
               names: tuple[str, ...] | list[str] = ()) -> EngineConfig:
    """The engine `engine` (preset name, release, YAML file, or an `EngineConfig`) as it runs `model` at
    `quant` (None: the engine's default, or the checkpoint's release format, step 3) on `hw`: steps 1-5 of
    the module docstring. `names`: how the model was named besides its catalog id (the --model as given:
    a Hugging Face repo id), which the weight-format rules also read."""
    eng = engine if isinstance(engine, EngineConfig) else cache.engine(engine)
    eng = eng.for_hardware(hw)
    own = hw.engine_efficiency.get(eng.name)  # this engine's own entry only: a kernel family's never has one
    if own is not None and own.request_overhead_ms is not None:
        eng = eng.with_overrides(request_overhead_ms=own.request_overhead_ms)
    if (quant is None and eng.name in RELEASE_LOADERS and eng.default_quant in ("bf16", "fp16")
            and model.default_quant in ("fp8", "mxfp4")):
        # `vllm serve deepseek-ai/DeepSeek-R1` (or openai/gpt-oss-120b) loads the checkpoint in the format it
        # was released in, read from its config.json's quantization_config: the engine's 16-bit default is
        # for 16-bit releases. An explicit --quant (or an engine file's default_quant) still wins.
        eng = eng.with_overrides(default_quant=model.default_quant)
    q = quant or eng.default_quant
    eng = eng.for_checkpoint(model, q)
    return for_weight_format(eng, hw, tuple(dict.fromkeys([*(n for n in names if n), model.name])), q)
