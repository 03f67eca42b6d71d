"""The engine-preset fields for the host side of prompt (extend) steps (`EngineConfig` inherits them): CUDA graphs
(sim.cost.prefill_graphs) and the fused backends an eager forward runs (sim.cost.eager_backends). Kept apart so
engine_config.py stays within the module size limit."""

from __future__ import annotations

from pydantic import BaseModel, Field


class PrefillGraphSettings(BaseModel):
    """Whether prompt steps replay captured graphs, and which fused backends their eager forward runs
    (EngineConfig's model config applies)."""

    prefill_graphs: bool = Field(
        False, description=("prompt (extend) steps replay piecewise CUDA graphs where the engine enables them (SGLang "
                            "0.5.10+: on by default, off on non-NVIDIA GPUs, for some architectures and for DeepSeek-V3 "
                            "on compute capability 10, and for steps above the captured token count; "
                            "sim.cost.prefill_graphs), so such a step pays no eager launch floor "
                            "(eager_prefill_launch_us). False = every prompt step runs eagerly"))
    eager_launch_backends: bool = Field(
        False, description=("an eager prompt forward's launch count follows the fused backends the deployment runs "
                            "(moe_runner_backend, flashinfer_allreduce_fusion, and those SGLang selects by itself: "
                            "sim.cost.eager_backends); False = SGLang's generic CUDA path's count everywhere. Off: "
                            "its ship rule failed (calibrate/serving/eager_backends_rule.py)"))
    moe_runner_backend: str | None = Field(
        None, description=("SGLang's --moe-runner-backend as the server was started (flashinfer_trtllm: the "
                           "trtllm-gen fused MoE, fewer launches per MoE layer; sim.cost.eager_backends); None = auto"))
    flashinfer_allreduce_fusion: bool | None = Field(
        None, description=("SGLang's --enable-flashinfer-allreduce-fusion (True) / "
                           "--enforce-disable-flashinfer-allreduce-fusion (False): the TP all-reduce fused with the "
                           "next residual add + RMSNorm on steps of at most 2,048 tokens (sim.cost.eager_backends); "
                           "None = what SGLang picks by itself"))
