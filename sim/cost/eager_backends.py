"""Kernel launches of an eager SGLang prompt (extend) forward under the fused backends a deployment runs (issue 38,
session 47): `sim.cost.eager_launches` counts SGLang's generic CUDA path; a deployment that runs flashinfer's
trtllm-gen fused MoE or its all-reduce + residual + RMSNorm fusion launches fewer. Read by `sim.cost.eager_prefill`
(floor = launches x EngineConfig.eager_prefill_launch_us), only where EngineConfig.eager_launch_backends is on: off
by default, as its ship rule failed (calibrate/serving/eager_backends_rule.py: held out by source TTFT p50
44.5 -> 42.5%, but the SGLang cookbook's own 41.1 -> 41.2%).

Source read: the released wheels sglang==0.5.12 (SemiAnalysis InferenceX's B300/H200 rows) and sglang==0.5.6.post1
(the SGLang cookbook's B200 rows) from PyPI (tags v0.5.12 / v0.5.6.post1 of github.com/sgl-project/sglang), paths
under python/sglang/srt/ of the repository (sglang/srt/ in the wheel), line numbers of the wheels' files. A launch
here is what the generic count counts: one host-side op issued from Python (a C++ op that launches several kernels
itself, as the fused MoE does, counts once: its inner launches cost the host far less than a Python op).

The fused MoE (`--moe-runner-backend flashinfer_trtllm`; TRTLLM_MOE). models/deepseek_v2.py 0.5.12 :811-886
(DeepseekV2MoE.forward_normal): the router GEMM (`self.gate`, F.linear above 16 tokens, MoEGate.forward), then
`self.topk` returns a BypassedTopKOutput (layers/moe/topk.py :425-445: no top-k kernel), then `self.experts`. The
runner, layers/moe/moe_runner/flashinfer_trtllm.py 0.5.12:
  - block-FP8 (DeepSeek's checkpoints, quantization fp8), fused_experts_none_to_flashinfer_trtllm_fp8 :569-721:
    correction-bias cast (`correction_bias.to(hidden_states.dtype)`, the fp32 e_score_correction_bias,
    deepseek_v2.py :350-366), per_token_group_quant_fp8, the scale transpose (`a_sf.t().contiguous()`), the router
    logits to float32 (DeepSeekV3 routing), trtllm_fp8_block_scale_moe (routing, both grouped GEMMs, the activation
    and the finalize inside), and `symm_output.copy_(output)`: 6 + the router GEMM = 7 (0.5.6.post1's
    quantization/fp8.py :1305-1380 has no final copy: 6; the preset's one 0.5 release takes the newer 7);
  - NVFP4 (modelopt_fp4), fused_experts_none_to_flashinfer_trtllm_fp4 :842-990: fp4_quantize
    (quantize_hidden_states_fp4 :811-840), the router logits to float32, trtllm_fp4_block_scale_moe (the
    correction bias is bf16 under this runner, deepseek_v2.py :352-357, so its cast launches nothing): 3 + the
    router GEMM = 4.
  against the generic 7 + 2 (router GEMM, top-k, align/sort, GEMM 1, activation, GEMM 2, weighted sum, two
  activation quantisations). Other weight formats keep the generic count (their runner paths were not read).
  Shared experts are unchanged (deepseek_v2.py _forward_shared_experts: their own linears).

The all-reduce fusion (`--enable-flashinfer-allreduce-fusion`). layers/communicator.py 0.5.12 :153-168
(apply_flashinfer_allreduce_fusion: SM90 or SM100, flashinfer present, 0 < tokens <= FUSE_ALLREDUCE_MAX_BATCH_SIZE =
2048, no DP attention, the flag on) and 0.5.6.post1 :79, :535-571, :766-781 (the same 2,048-token bound): the
all-reduce after attention runs inside the post-attention RMSNorm (`forward_with_allreduce_fusion`, 0.5.12
:985-1004), and the FFN's all-reduce is skipped and run inside the next layer's input RMSNorm (0.5.12 :505-531;
should_fuse_mlp_allreduce_with_next_layer :716-752: not on the last layer, tp > 1, the step's len(input_ids) <=
2048). One launch fewer per all-reduce: 2 per layer but the last, which keeps its FFN all-reduce: 2 n_layers - 1
(ALLREDUCE_FUSED_SAVED), on prompt steps of at most FUSE_ALLREDUCE_MAX_TOKENS tokens only; a larger step launches
the generic count.

Attention (`--attention-backend trtllm_mla`): no change. An extend step without speculative decoding dispatches to
MHA_CHUNKED_KV (models/deepseek_common/attention_backend_handler.py 0.5.12 :124-134, handle_attention_trtllm_mla),
whose prepare is forward_normal_prepare (attention_forward_methods/forward_mha.py :280-296), the path the generic
count reads, and whose core runs one MHA kernel (:298-332; the chunked-prefix loop only with a cached prefix).

What SGLang selects by itself (ServerArgs._handle_model_specific_adjustments, DeepseekV3ForCausalLM branch; the
catalog's `deepseek2`: DeepSeek-V3/R1, Kimi K2): on compute capability 10 (B200, B300, GB200, GB300: the profile's
`compute_capability`, prefill_graphs.sm_major),
  - 0.5.6.post1 server_args.py :1050-1082 and 0.5.12 :1903-1961: the flashinfer_trtllm MoE runner when no MoE
    all-to-all backend and no runner is set and the quantization is fp8 / modelopt_fp8 / modelopt_fp4 (0.5.12 also
    unquantised and Kimi's int4; not applied here: 0.5.6 does not);
  - 0.5.6.post1 :1050-1056 (no DP attention, one node) and 0.5.12 :2444-2470 (tp > 1, no DP attention, one node,
    no all-to-all backend; 0.5.12 also on SM90, which 0.5.6 does not: not applied): the all-reduce fusion.
The one sglang@0.5 preset stands for every 0.5.x, so only what both releases read do is applied."""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost.eager_launches import MOE_OTHER, MOE_QUANT, forward_launches
from sim.cost.prefill_graphs import DEEPSEEK_V3_ARCHITECTURE, SM90_MAJOR, SM100_MAJOR, sm_major

#: launches of one MoE layer's routed experts under flashinfer_trtllm, per weight format (module docstring)
TRTLLM_MOE = {"fp8": 7, "fp4": 4}
#: the largest prompt step [tokens, len(input_ids)] whose all-reduces are fused (FUSE_ALLREDUCE_MAX_BATCH_SIZE)
FUSE_ALLREDUCE_MAX_TOKENS = 2048
#: the --moe-runner-backend value of the fused trtllm-gen MoE
FLASHINFER_TRTLLM = "flashinfer_trtllm"


@dataclass(frozen=True)
class Backends:
    """The fused paths an eager prompt forward runs: the MoE runner ('flashinfer_trtllm' or None = generic) and
    whether the TP all-reduces are fused with the next RMSNorm (on steps of <= FUSE_ALLREDUCE_MAX_TOKENS)."""

    moe_runner: str | None = None
    allreduce_fusion: bool = False


def _sglang_auto(model, hw) -> bool:
    """Whether SGLang 0.5 picks its DeepSeek-V3 Blackwell defaults (module docstring): a DeepseekV3ForCausalLM
    model on a compute-capability-10 device (the profile's `compute_capability`, `sm_major`; the fused MoE runner
    also needs FP8 or FP4 weights)."""
    return (str(getattr(model, "architecture", "") or "") == DEEPSEEK_V3_ARCHITECTURE
            and sm_major(hw) == SM100_MAJOR)


def deployment_backends(model, engine, hw=None, quant=None) -> Backends | None:
    """The fused backends of this deployment's eager prompt forward: the engine's `moe_runner_backend` /
    `flashinfer_allreduce_fusion` (from the server's flags) where set, else what SGLang picks by itself (SGLang
    engines only; `hw` None = not known: nothing picked; an explicit fusion only on SM90 / SM100, or `hw` None);
    None when the engine's `eager_launch_backends` is off or
    nothing is fused (the generic count)."""
    if not bool(getattr(engine, "eager_launch_backends", False)):
        return None
    auto = str(getattr(engine, "name", "") or "") == "sglang" and _sglang_auto(model, hw)
    moe = getattr(engine, "moe_runner_backend", None)
    if moe in (None, "auto"):
        moe = FLASHINFER_TRTLLM if auto and quant is not None and quant.compute_format in TRTLLM_MOE else None
    fusion = getattr(engine, "flashinfer_allreduce_fusion", None)
    if fusion is None:
        fusion = auto
    elif fusion and hw is not None and sm_major(hw) not in (SM90_MAJOR, SM100_MAJOR):
        # the flag is honoured on SM90 / SM100 only (apply_flashinfer_allreduce_fusion, communicator.py 0.5.12
        # :153-168, module docstring): elsewhere the server runs the unfused all-reduces whatever it was told
        fusion = False
    b = Backends(moe_runner=moe if moe == FLASHINFER_TRTLLM else None, allreduce_fusion=bool(fusion))
    return b if (b.moe_runner or b.allreduce_fusion) else None


def moe_launches_saved(model, quant, backends: Backends | None) -> int:
    """Launches one MoE layer saves under the fused MoE runner: the generic routed-expert count (MOE_OTHER, +
    MOE_QUANT for quantised experts) less TRTLLM_MOE of the weight format; 0 for formats not read."""
    if backends is None or backends.moe_runner != FLASHINFER_TRTLLM or quant is None:
        return 0
    fused = TRTLLM_MOE.get(quant.compute_format)
    if fused is None or not quant.bits_per_weight < 16:
        return 0
    return MOE_OTHER + MOE_QUANT - fused


def backend_launches(model, quant, tp: int, backends: Backends | None, n_tokens: int | None = None) -> int:
    """Kernel launches of one eager prompt forward of `n_tokens` input tokens (None = a step too large for the
    all-reduce fusion) under `backends`: the generic count (`forward_launches`), less the fused MoE's saving per
    MoE layer, less ALLREDUCE_FUSED_SAVED (2 n_layers - 1) when the all-reduces are fused (tp > 1 and
    0 < n_tokens <= FUSE_ALLREDUCE_MAX_TOKENS)."""
    n = forward_launches(model, quant, tp)
    if backends is None:
        return n
    n -= int(getattr(model, "n_routed_layers", 0) or 0) * moe_launches_saved(model, quant, backends)
    if backends.allreduce_fusion and tp > 1 and n_tokens is not None and 0 < n_tokens <= FUSE_ALLREDUCE_MAX_TOKENS:
        n -= 2 * int(model.n_layers) - 1
    return n
