"""Quantization formats: bits per weight (including scale overhead) and the compute format used.

`bits_per_weight` is what a weight costs in memory, averaged over a whole model file, so that
weight bytes = parameters x bits_per_weight / 8. `compute_format` is the number format the matmuls
run in, which picks the peak FLOP/s of the hardware profile.

Sources for the block layouts:
- GGUF block types: ggml/src/ggml-common.h in llama.cpp (block_q4_0 = fp16 scale + 32 x 4 bit =
  18 bytes / 32 weights = 4.5 bpw; block_q8_0 = 34 bytes / 32 = 8.5 bpw; block_q6_K = 210 bytes /
  256 = 6.5625 bpw). The K-quant "mixes" (q4_k_m, q5_k_m) keep some tensors at higher precision;
  their whole-file averages come from `llama-quantize --help` sizes for Llama-3-8B
  (Q4_K_M 4.58 GiB, Q5_K_M 5.33 GiB, Q6_K 6.14 GiB for 8.03 B parameters -> 4.90, 5.70, 6.57 bpw).
- NVFP4: 4-bit E2M1 values + one FP8 (E4M3) scale per 16 values = 4.5 bpw (NVIDIA Blackwell docs).
- MXFP4: 4-bit E2M1 + one 8-bit E8M0 scale per 32 values = 4.25 bpw (OCP Microscaling spec v1.0).
- AWQ / GPTQ int4, group size 128: 4 bits + fp16 scale + packed 4-bit zero per group ~ 4.16 bpw;
  we use 4.25 (fp16 zero) as the common upper bound.
- MLX 4-bit (mlx.nn.QuantizedLinear default group_size=64): 4 bits + fp16 scale + fp16 bias per
  64 weights = 4.5 bpw.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import ConfigError


@dataclass(frozen=True)
class QuantFormat:
    name: str
    bits_per_weight: float
    compute_format: str  # key into HardwareProfile.peak_tflops
    family: str  # "float", "gguf", "int4-weight-only", "microscaling", "mlx"
    description: str = ""

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8.0


# Weight-only formats (GGUF, AWQ/GPTQ, MLX) dequantize to fp16 inside the matmul kernel, so their
# compute runs at the fp16 peak; what they save is memory traffic, which dominates decode.
QUANT_FORMATS: dict[str, QuantFormat] = {
    q.name: q
    for q in [
        QuantFormat("bf16", 16.0, "bf16", "float", "bfloat16 weights and compute"),
        QuantFormat("fp16", 16.0, "fp16", "float", "float16 weights and compute"),
        QuantFormat("fp8", 8.0, "fp8", "float", "FP8 E4M3 weights and activations, per-tensor scales"),
        QuantFormat("int8", 8.0, "int8", "float", "W8A8 int8 (SmoothQuant-style) weights and activations"),
        QuantFormat("nvfp4", 4.5, "fp4", "microscaling", "NVFP4: E2M1 + FP8 scale per 16"),
        QuantFormat("mxfp4", 4.25, "fp4", "microscaling", "MXFP4: E2M1 + E8M0 scale per 32"),
        QuantFormat("awq", 4.25, "fp16", "int4-weight-only", "AWQ int4, group 128, fp16 compute"),
        QuantFormat("gptq", 4.25, "fp16", "int4-weight-only", "GPTQ int4, group 128, fp16 compute"),
        QuantFormat("q4_0", 4.5, "fp16", "gguf", "GGUF Q4_0: fp16 scale per 32"),
        QuantFormat("q4_k_m", 4.9, "fp16", "gguf", "GGUF Q4_K_M mix (file average)"),
        QuantFormat("q5_k_m", 5.7, "fp16", "gguf", "GGUF Q5_K_M mix (file average)"),
        QuantFormat("q6_k", 6.5625, "fp16", "gguf", "GGUF Q6_K: 210 bytes per 256"),
        QuantFormat("q8_0", 8.5, "fp16", "gguf", "GGUF Q8_0: fp16 scale per 32"),
        QuantFormat("mlx-4bit", 4.5, "fp16", "mlx", "MLX 4-bit, group 64, fp16 scale + bias"),
    ]
}

# KV-cache element sizes in bytes. q8_0 = 34 bytes per 32 values; q4_0 = 18 bytes per 32.
KV_DTYPE_BYTES: dict[str, float] = {
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
}


def get_quant(name: str) -> QuantFormat:
    key = name.lower().replace("-", "_") if name.lower() != "mlx-4bit" else "mlx-4bit"
    aliases = {"mlx_4bit": "mlx-4bit", "mlx4": "mlx-4bit", "int4": "awq", "fp4": "nvfp4", "q4_k": "q4_k_m", "q5_k": "q5_k_m"}
    key = aliases.get(key, key)
    if key not in QUANT_FORMATS:
        raise ConfigError(
            f"unknown quantization '{name}'; known: {', '.join(QUANT_FORMATS)}", field="--quant"
        )
    return QUANT_FORMATS[key]


def kv_dtype_bytes(name: str) -> float:
    key = name.lower()
    if key not in KV_DTYPE_BYTES:
        raise ConfigError(
            f"unknown KV-cache dtype '{name}'; known: {', '.join(KV_DTYPE_BYTES)}", field="--kv-dtype"
        )
    return KV_DTYPE_BYTES[key]
