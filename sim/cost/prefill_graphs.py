"""Piecewise CUDA graphs for prompt (extend) steps: SGLang 0.5.10+ (EngineConfig.prefill_graphs; issue 38,
session 46). Read by `sim.cost.eager_prefill`: a prompt step that replays a captured graph does not pay the
eager forward's host launch time (`sim.cost.eager_launches`), so its floor is skipped.

What it models. SGLang 0.5.10 turned piecewise CUDA graphs for extend batches on by default: 0.5.9's
python/sglang/srt/server_args.py has `enable_piecewise_cuda_graph: bool = False`, 0.5.10's
`disable_piecewise_cuda_graph: bool = False` with `--enable-piecewise-cuda-graph` "Deprecated: Piecewise cuda
graph is enabled by default" (sgl-project/sglang PR #16331, "Piecewise Cuda Graph set default"; the wheels
sglang-0.5.9 / 0.5.10 / 0.5.12 on PyPI were read). A graph replaces the forward's kernel-by-kernel launches from
Python with one replay per piece (the attention runs outside the graph), so the host no longer bounds a short
prompt step.

Where it is off (`ServerArgs._handle_piecewise_cuda_graph`, 0.5.10 and 0.5.12; only the conditions a
deployment here can show are modelled, `prefill_graphs_active`):
  - non-CUDA hardware: `if is_hip() or is_npu() or is_cpu() or is_mps() or is_xpu()` -> every non-NVIDIA device;
  - the architectures of `model_config.piecewise_cuda_graph_disabled_model_archs` (DeepseekV32, Qwen3Next,
    GlmMoeDsa, BailingMoeV2_5, LLaDA; 0.5.12 adds DeepseekV4): the catalog's `qwen3next` (DISABLED_ARCHITECTURES);
  - multimodal models (`if self.get_model_config().is_multimodal`; `multimodal_model_archs` lists
    Llama4ForConditionalGeneration, Gemma3/Gemma4ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration):
    the catalog's llama4, gemma4, qwen3_5_moe and gemma3 but its text-only gemma-3-270m (Gemma3ForCausalLM);
  - the flashinfer_trtllm MoE runner (`_handle_moe_kernel_config`: "Piecewise cuda graph is disabled for MoE
    runner backend ... (bypassed topk is incompatible with torch.compile)", every model but gpt-oss), which
    `_handle_model_specific_adjustments` picks by itself for DeepseekV3ForCausalLM (the catalog's `deepseek2`:
    DeepSeek-V3/R1, Kimi K2) on compute capability 10 (`is_sm100_supported`: device_capability_majors [10]:
    B200, B300, GB200, GB300: the profile's `compute_capability` read by `sm_major`) when no MoE all-to-all
    backend is set, for FP8, ModelOpt FP8/FP4 and unquantised checkpoints; SemiAnalysis' B300 recipes pass
    `--moe-runner-backend flashinfer_trtllm` too;
  - and, not visible here (a run that sets them keeps its eager prompt steps): DP attention, torch.compile,
    pipeline parallelism, a MoE all-to-all backend (DeepEP), LoRA, symmetric memory (--enable-symm-mem), EPLB,
    context parallelism, CPU offload / hierarchical cache, deterministic inference, PD disaggregation, and in
    0.5.10 (not 0.5.12) speculative decoding.

Which prompt steps replay a graph. `piecewise_cuda_graph_runner.can_run`: `num_tokens <= self.max_num_tokens`
(num_tokens = len(input_ids), the step's prompt tokens), max_num_tokens the largest captured size =
piecewise_cuda_graph_max_tokens, which defaults to chunked_prefill_size, or 2048 for an MLA model ("For MLA
backend ... To avoid the performance regression, we set the max tokens to 2048 by default", server_args.py,
MLA_MAX_TOKENS). A larger step runs eagerly and keeps the floor; a smaller one is padded to the next captured
size (4, 8, ..., 32, 48, ..., 256, 288, ..., 4096, then 512-token steps), which adds GPU work this model leaves
out (at most one step of the capture list)."""

from __future__ import annotations

#: largest prompt step (tokens) a piecewise graph covers for an MLA model (server_args.py,
#: piecewise_cuda_graph_max_tokens default when use_mla_backend())
MLA_MAX_TOKENS = 2048
#: catalog architectures SGLang runs without piecewise graphs: model_config.piecewise_cuda_graph_disabled_model_archs
#: (Qwen3NextForCausalLM) and multimodal_model_archs (Llama4/Gemma3/Gemma4/Qwen3_5Moe ForConditionalGeneration)
DISABLED_ARCHITECTURES = frozenset({"qwen3next", "llama4", "gemma3", "gemma4", "qwen3_5_moe"})
#: catalog models of a disabled architecture whose checkpoint is text-only (Gemma3ForCausalLM): graphs stay on
TEXT_ONLY_MODELS = frozenset({"gemma-3-270m"})
#: the compute-capability major of SGLang's `is_sm100_supported` (device_capability_majors [10]: B200/GB200 10.0,
#: B300/GB300 10.3; not RTX 50 / RTX PRO Blackwell 12.0, GB10 12.1, Jetson Thor 11.0), where DeepSeek-V3-architecture
#: models get the flashinfer_trtllm MoE runner, which turns piecewise graphs off
SM100_MAJOR = 10
#: the major of `is_sm90_supported` (device_capability_majors [9]: H100, H200, H20)
SM90_MAJOR = 9
#: the catalog architecture of DeepseekV3ForCausalLM (DeepSeek-V3/R1, Kimi K2)
DEEPSEEK_V3_ARCHITECTURE = "deepseek2"


def sm_major(hw) -> int | None:
    """The CUDA compute-capability major of `hw` (HardwareProfile.compute_capability '10.3' -> 10), as SGLang's
    is_sm100_supported / is_sm90_supported read torch.cuda.get_device_capability()[0]; None for a device whose
    profile gives none (non-NVIDIA, or `hw` None / not known). The one place the cost model reads the field."""
    cc = getattr(hw, "compute_capability", None)
    return int(str(cc).split(".")[0]) if cc else None


def prefill_graphs_active(model, engine, hw=None) -> bool:
    """Whether SGLang replays piecewise CUDA graphs for this deployment's prompt steps (module docstring):
    the engine's `prefill_graphs` on, an NVIDIA device (`hw` None = not known: assumed NVIDIA), and none of the
    modelled auto-disable conditions."""
    if not bool(getattr(engine, "prefill_graphs", False)):
        return False
    vendor = str(getattr(hw, "vendor", "NVIDIA") or "NVIDIA")
    if vendor.upper() != "NVIDIA":
        return False
    arch = str(getattr(model, "architecture", "") or "")
    if arch in DISABLED_ARCHITECTURES and getattr(model, "name", "") not in TEXT_ONLY_MODELS:
        return False
    if arch == DEEPSEEK_V3_ARCHITECTURE and sm_major(hw) == SM100_MAJOR:
        return False  # flashinfer_trtllm MoE runner
    return True


def graph_max_tokens(model, engine, hw=None) -> int:
    """The largest prompt step [tokens] replayed as a piecewise graph; 0 where graphs are off. MLA models
    MLA_MAX_TOKENS, others chunked_prefill_size (the engine's max_num_batched_tokens)."""
    if not prefill_graphs_active(model, engine, hw):
        return 0
    if getattr(model, "mla", None) is not None:
        return MLA_MAX_TOKENS
    return int(getattr(engine, "max_num_batched_tokens", 0) or 0)
