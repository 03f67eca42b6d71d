"""The engine-preset field for CUDA graphs of prompt (extend) steps (`EngineConfig` inherits it;
sim.cost.prefill_graphs implements it). Kept apart so engine_config.py stays within the module size limit."""

from __future__ import annotations

from pydantic import BaseModel, Field


class PrefillGraphSettings(BaseModel):
    """Whether prompt steps replay captured graphs (EngineConfig's model config applies)."""

    prefill_graphs: bool = Field(
        False, description=("prompt (extend) steps replay piecewise CUDA graphs where the engine enables them (SGLang "
                            "0.5.10+: on by default, off on non-NVIDIA GPUs, for some architectures and for DeepSeek-V3 "
                            "on compute capability 10, and for steps above the captured token count; "
                            "sim.cost.prefill_graphs), so such a step pays no eager launch floor "
                            "(eager_prefill_launch_us). False = every prompt step runs eagerly"))
