"""Quantization formats: bits per weight (including scale overhead) and the compute format used.

A format stores three groups of tensors at (possibly) different precisions, because every
toolchain treats the vocabulary tensors differently from the transformer blocks:

- `bits_per_weight` — the attention and FFN matrices of the transformer blocks, averaged over
  the format's mix (a K-quant "_M" mix keeps some of them at Q6_K), scale overhead included;
- `embedding_bits_per_weight` — the input token-embedding table;
- `lm_head_bits_per_weight` — the output projection (also the one shared tensor when the
  embeddings are tied: llama.cpp then quantizes `token_embd` with the output-tensor rule).

weight bytes = block params x bits_per_weight / 8 + V*h x embedding bits / 8 + V*h x lm_head bits / 8;
a format that quantizes only a MoE model's routed experts (MXFP4 as gpt-oss is released) prices the
other block weights at `non_expert_bits_per_weight` (sim.catalog.models ModelSpec.nominal_weight_bytes).
`compute_format` is the number format the matmuls run in; it picks the peak FLOP/s of the
hardware profile. Weight-only formats (GGUF, AWQ/GPTQ, MLX) dequantize to fp16 inside the
kernel, so they compute at the fp16 peak; what they save is memory traffic.

Sources (block layouts are exact; mixes are measured file sizes):
- GGUF block types, ggml/src/ggml-common.h in llama.cpp: block_q4_0 = fp16 scale + 32 x 4 bit =
  18 B / 32 weights = 4.5 bpw; block_q8_0 = 34 B / 32 = 8.5; block_q4_K = 144 B / 256 = 4.5;
  block_q5_K = 176 B / 256 = 5.5; block_q6_K = 210 B / 256 = 6.5625.
- GGUF tensor-type rules, src/llama-quant.cpp `llama_tensor_get_type`: the output tensor (or the
  tied token embedding) becomes Q6_K unless the file type is Q8_0 (Q8_0 when its row length is not
  a multiple of 256); `token_embd` keeps the file type's base type; in Q4_K_M / Q5_K_M, `attn_v`
  and `ffn_down` of the layers chosen by `use_more_bits` (half of them) become Q6_K. For
  Llama-3-8B that puts 14.4% of the block weights at Q6_K: Q4_K_M blocks = 4.5 + 0.144 x 2.0625
  = 4.80 bpw, Q5_K_M blocks = 5.5 + 0.144 x 1.0625 = 5.65 bpw. Check: these rules reproduce the
  file sizes `llama-quantize --help` prints for Llama-3-8B (Q4_0 4.34G, Q4_K_M 4.58G, Q5_K_M
  5.33G, Q6_K 6.14G, Q8_0 7.96G, in GiB) within 0.5% — see tests/test_quant.py.
- NVFP4: E2M1 values + one FP8 E4M3 scale per 16 values = 4 + 8/16 = 4.5 bpw (NVIDIA Blackwell
  / TensorRT Model Optimizer docs); MXFP4: E2M1 + one E8M0 scale per 32 = 4.25 bpw (OCP
  Microscaling Formats spec v1.0). ModelOpt and llm-compressor leave embeddings and lm_head in bf16.
- FP8 / INT8 (W8A8, llm-compressor / vLLM checkpoints): 8-bit blocks, per-channel scales
  (< 0.01 bpw), embeddings and lm_head in bf16. Check: RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic
  loads as 67.72 GiB in vLLM (llm-d empirical-vllm-memory-results.md); this table gives 67.7 GiB.
- AWQ / GPTQ int4, group size 128 (AutoAWQ / GPTQModel defaults): 4 bits + fp16 scale per 128 +
  4-bit packed zero point per 128 = 4 + 16/128 + 4/128 = 4.16 bpw; embeddings and lm_head stay fp16.
- MLX 4-bit (`mlx_lm.convert -q`, group_size 64, bits 4): 4 bits + fp16 scale + fp16 bias per
  64 weights = 4.5 bpw; MLX quantizes the embedding and lm_head too (QuantizedEmbedding).

Where the GGUF figures are estimates (read the GGUF file for exact bytes: `infersim models show
file.gguf`; a catalog entry may also list measured sizes in `file_weight_bytes`):
- rows whose length is not a multiple of 256 cannot hold K-quant blocks; llama.cpp falls back to
  Q5_0 (for Q4_K), Q5_1 (Q5_K) or Q8_0 (Q6_K): Gemma 3 270M (h = 640) Q4_K_M is 246.6 MB, not
  the 197.8 MB this table gives;
- Phi-3's fused attn_qkv goes to Q5_K in Q4_K_M; 8-expert MoE files bump attn_v to Q8_0; 70B
  llama files bump attn_v to Q5_K: each changes a whole file by a few percent at most.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import ConfigError


@dataclass(frozen=True)
class QuantFormat:
    """One weight format: storage cost per weight of each tensor group and the compute format."""

    name: str
    bits_per_weight: float  # transformer-block matrices, mix-averaged, scales included
    compute_format: str  # key into HardwareProfile.peak_tflops
    family: str  # "float", "gguf", "int4-weight-only", "microscaling", "mlx"
    description: str = ""
    embedding_bits_per_weight: float | None = None  # token embedding table; None = bits_per_weight
    lm_head_bits_per_weight: float | None = None  # output projection (tied: the shared tensor)
    # a MoE model's block weights outside the routed experts (attention, router, shared experts) when a
    # format quantizes the experts only; None = bits_per_weight
    non_expert_bits_per_weight: float | None = None

    @property
    def non_expert_bits(self) -> float:
        return self.bits_per_weight if self.non_expert_bits_per_weight is None else self.non_expert_bits_per_weight

    @property
    def embedding_bits(self) -> float:
        return self.bits_per_weight if self.embedding_bits_per_weight is None else self.embedding_bits_per_weight

    @property
    def lm_head_bits(self) -> float:
        return self.bits_per_weight if self.lm_head_bits_per_weight is None else self.lm_head_bits_per_weight


# Block bit rates of the GGUF types (bytes per block x 8 / weights per block), ggml-common.h.
Q4_0_BPW = 18 * 8 / 32
Q8_0_BPW = 34 * 8 / 32
Q4_K_BPW = 144 * 8 / 256
Q5_K_BPW = 176 * 8 / 256
Q6_K_BPW = 210 * 8 / 256
# AWQ/GPTQ int4, group 128: 4-bit weight + fp16 scale / 128 + 4-bit zero / 128.
INT4_G128_BPW = 4 + 16 / 128 + 4 / 128
BF16_BITS = 16.0

QUANT_FORMATS: dict[str, QuantFormat] = {
    q.name: q
    for q in [
        QuantFormat("bf16", 16.0, "bf16", "float", "bfloat16 weights and compute"),
        QuantFormat("fp16", 16.0, "fp16", "float", "float16 weights and compute"),
        QuantFormat("fp8", 8.0, "fp8", "float", "FP8 E4M3 W8A8, per-channel scales; embeddings/lm_head bf16",
                    BF16_BITS, BF16_BITS),
        QuantFormat("int8", 8.0, "int8", "float", "INT8 W8A8 (SmoothQuant-style); embeddings/lm_head bf16",
                    BF16_BITS, BF16_BITS),
        QuantFormat("nvfp4", 4.5, "fp4", "microscaling", "NVFP4: E2M1 + FP8 scale per 16; embeddings/lm_head bf16",
                    BF16_BITS, BF16_BITS),
        # gpt-oss's released checkpoints quantize the MoE experts only; attention, router and the
        # vocabulary tensors stay bf16 (huggingface.co/openai/gpt-oss-120b config.json,
        # quantization_config.modules_to_not_convert: model.layers.*.self_attn,
        # model.layers.*.mlp.router, model.embed_tokens, lm_head)
        QuantFormat("mxfp4", 4.25, "fp4", "microscaling",
                    "MXFP4: E2M1 + E8M0 scale per 32 on the MoE experts; attention, router, embeddings bf16",
                    BF16_BITS, BF16_BITS, BF16_BITS),
        QuantFormat("awq", INT4_G128_BPW, "fp16", "int4-weight-only", "AWQ int4, group 128, fp16 compute",
                    16.0, 16.0),
        QuantFormat("gptq", INT4_G128_BPW, "fp16", "int4-weight-only", "GPTQ int4, group 128, fp16 compute",
                    16.0, 16.0),
        QuantFormat("q4_0", Q4_0_BPW, "fp16", "gguf", "GGUF Q4_0: fp16 scale per 32; output Q6_K",
                    Q4_0_BPW, Q6_K_BPW),
        QuantFormat("q4_k_m", 4.80, "fp16", "gguf", "GGUF Q4_K_M: Q4_K with half of attn_v/ffn_down at Q6_K",
                    Q4_K_BPW, Q6_K_BPW),
        QuantFormat("q5_k_m", 5.65, "fp16", "gguf", "GGUF Q5_K_M: Q5_K with half of attn_v/ffn_down at Q6_K",
                    Q5_K_BPW, Q6_K_BPW),
        QuantFormat("q6_k", Q6_K_BPW, "fp16", "gguf", "GGUF Q6_K: 210 bytes per 256", Q6_K_BPW, Q6_K_BPW),
        QuantFormat("q8_0", Q8_0_BPW, "fp16", "gguf", "GGUF Q8_0: fp16 scale per 32", Q8_0_BPW, Q8_0_BPW),
        QuantFormat("mlx-4bit", 4.5, "fp16", "mlx", "MLX 4-bit, group 64, fp16 scale + bias (all tensors)"),
    ]
}

# Other spellings users (and GGUF/HF files) use for the same formats.
QUANT_ALIASES: dict[str, str] = {
    "mlx_4bit": "mlx-4bit", "mlx4": "mlx-4bit", "mlx-4": "mlx-4bit", "int4": "awq", "fp4": "nvfp4",
    "q4_k": "q4_k_m", "q5_k": "q5_k_m", "f16": "fp16", "float16": "fp16", "bfloat16": "bf16",
    "fp8_e4m3": "fp8", "w8a8": "int8",
}

# KV-cache element sizes in bytes: fp16/bf16 2; fp8 (E4M3 or E5M2, per-tensor scale) 1;
# GGUF q8_0 = 34 bytes per 32 values, q4_0 = 18 bytes per 32 (llama.cpp --cache-type-k/-v).
KV_DTYPE_BYTES: dict[str, float] = {
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
}
KV_DTYPE_ALIASES: dict[str, str] = {
    "f16": "fp16", "float16": "fp16", "auto": "fp16", "bfloat16": "bf16",
    "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
}


# Weight classes: which matmul kernels a format runs under a kernel family, and the datasheet peak
# their efficiency is quoted against. Efficiencies fitted to public measurements
# (calibrate/public_fit.py) are kept per class, because one engine's kernels for different formats
# reach very different shares of the chip: llama.cpp's quantized MMQ/MMVQ kernels vs its cuBLAS fp16
# path, TensorRT-LLM's fp8 vs bf16 GEMMs.
DENSE_KERNEL_CLASSES = ("f16", "fp8", "int8", "fp4", "gguf", "mlx", "int4wo")
# A MoE model's routed experts run in their own kernels under TensorRT-LLM: the MoE plugin's
# grouped GEMMs (cutlass_kernels/moe_gemm) over the tokens each expert was routed, between
# permute / finalize passes, where its dense layers run the GEMM plugin's cuBLASLt / CUTLASS GEMMs.
# Their efficiency is fitted as a class of its own, `<class>-moe` (its format's peak), and falls
# back to the format's class where nothing measured it (`base_class`). The class prices all of a
# MoE model's GEMMs: the routed experts are most of them (Mixtral 8x7B: its two routed experts are
# 352 M weights a layer against 42 M of attention, 88% of the weight FLOPs a token with the LM
# head). Fitted on NVIDIA's v0.13 Mixtral 8x7B rows: 0.71-0.72 of the dense fp8 share on the H100
# SXM and the H200, 0.84-0.88 of the dense fp16 share on the A100 and H100
# (docs/public-calibration.md, round 20). Only
# TensorRT-LLM: llama.cpp's experts run the very MMQ kernels of its dense layers (mul_mat_id ->
# mul_mat_q), whose per-expert start-up `matmul_half_rows` prices; held out by device a gguf-moe
# class did worse (round 20), and no vLLM / SGLang device has both dense and MoE rows to fit one.
MOE_SUFFIX = "-moe"
MOE_CLASS_FAMILIES = ("trtllm",)
KERNEL_CLASSES = DENSE_KERNEL_CLASSES + tuple(c + MOE_SUFFIX for c in DENSE_KERNEL_CLASSES)


def base_class(cls: str | None) -> str | None:
    """The dense class a MoE class falls back to ("fp8-moe" -> "fp8"); any other class unchanged."""
    return cls[: -len(MOE_SUFFIX)] if cls and cls.endswith(MOE_SUFFIX) else cls


def kernel_class(q: QuantFormat, family: str | None = None, moe: bool = False) -> tuple[str, str]:
    """(class, peak format) of format `q` under kernel family `family` (sim.catalog.engine_config
    `kernel_family`): ggml runs every block-quantized format, MXFP4 included, through its own
    kernels (class gguf), quoted against the int8 peak: llama.cpp's MMQ kernels quantize the
    activations to 8 bits and multiply with int8 MMA / dp4a on CUDA (ggml-cuda/mmq.cuh); a chip
    without int8 units (Apple GPUs) falls back to its fp16 peak (HardwareProfile.peak_flops).
    Quoted against fp16, llama.cpp's prefill efficiency ranged 0.16-0.94 over the public rows'
    NVIDIA devices (GeForce datasheets quote fp32-accumulate peaks); against int8, 0.08-0.24;
    elsewhere microscaling formats run fp4 tensor cores, fp8/int8 their own, AWQ/GPTQ fp16 with
    int4 weights. `moe`: the format carries a MoE model's experts (`MOE_CLASS_FAMILIES`)."""
    cls, peak = _dense_kernel_class(q, family)
    return (cls + MOE_SUFFIX if moe and family in MOE_CLASS_FAMILIES else cls), peak


def _dense_kernel_class(q: QuantFormat, family: str | None) -> tuple[str, str]:
    if q.family == "gguf" or (family == "ggml" and q.family == "microscaling"):
        return "gguf", "int8"
    if q.family == "mlx":
        return "mlx", q.compute_format
    if q.family == "int4-weight-only":
        return "int4wo", q.compute_format
    if q.family == "microscaling" or q.compute_format == "fp4":
        return "fp4", q.compute_format
    if q.compute_format in ("fp16", "bf16", "fp32"):
        return "f16", q.compute_format
    return q.compute_format, q.compute_format


def is_k_quant(q: QuantFormat) -> bool:
    """A GGUF K-quant (Q4_K_M, Q5_K_M, Q6_K): 256-weight super-blocks of 16- or 32-weight blocks with
    6- or 8-bit packed scales (and mins), whose dequantization costs more arithmetic per weight than
    the legacy one-scale-per-32 formats (Q4_0, Q8_0). Apple GPUs' llama.cpp mat-vec kernels for them
    are ALU-bound (`Efficiency.kquant_matvec_flops_per_weight`)."""
    return q.family == "gguf" and q.name.endswith(("_k", "_k_m", "_k_s", "_k_l"))


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_") if name.strip().lower() != "mlx-4bit" else "mlx-4bit"


def get_quant(name: str) -> QuantFormat:
    """The format called `name` (case-insensitive; '-' and '_' interchangeable; aliases allowed)."""
    key = _key(name)
    key = QUANT_ALIASES.get(key, key)
    if key not in QUANT_FORMATS:
        raise ConfigError(f"unknown quantization '{name}'; known: {', '.join(QUANT_FORMATS)}", field="--quant")
    return QUANT_FORMATS[key]


def kv_dtype_bytes(name: str) -> float:
    """Bytes per cached K or V element for a KV-cache dtype name."""
    key = name.strip().lower().replace("-", "_")
    key = KV_DTYPE_ALIASES.get(key, key)
    if key not in KV_DTYPE_BYTES:
        raise ConfigError(f"unknown KV-cache dtype '{name}'; known: {', '.join(KV_DTYPE_BYTES)}", field="--kv-dtype")
    return KV_DTYPE_BYTES[key]
