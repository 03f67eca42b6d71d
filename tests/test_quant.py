"""Quantization table: block layouts, whole-file sizes against measured files, names and KV dtypes."""

from __future__ import annotations

import pytest

from sim.catalog.hardware import HardwareProfile
from sim.catalog.models import ModelSpec, load_catalog
from sim.catalog.quant import KV_DTYPE_BYTES, QUANT_FORMATS, get_quant, kv_dtype_bytes
from sim.errors import ConfigError

GiB = 1024**3


def test_gguf_block_types_cost_what_their_ggml_block_layouts_say():
    # ggml-common.h: bytes per block x 8 / weights per block.
    assert get_quant("q4_0").bits_per_weight == pytest.approx((2 + 16) * 8 / 32)  # fp16 d + 32 nibbles = 4.5
    assert get_quant("q8_0").bits_per_weight == pytest.approx((2 + 32) * 8 / 32)  # fp16 d + 32 int8 = 8.5
    assert get_quant("q6_k").bits_per_weight == pytest.approx((128 + 64 + 16 + 2) * 8 / 256)  # 6.5625
    # Q4_K_M and Q5_K_M: base K-type (144 B and 176 B per 256) with 14.4% of block weights at Q6_K.
    assert get_quant("q4_k_m").embedding_bits == pytest.approx(144 * 8 / 256)
    assert get_quant("q5_k_m").embedding_bits == pytest.approx(176 * 8 / 256)
    assert 4.5 < get_quant("q4_k_m").bits_per_weight < 6.5625
    assert 5.5 < get_quant("q5_k_m").bits_per_weight < 6.5625


def test_llama3_8b_gguf_sizes_match_the_llama_quantize_table():
    # `llama-quantize --help` (tools/quantize/quantize.cpp QUANT_OPTIONS) prints the size of each
    # type for Llama-3-8B, in GiB: Q4_0 4.34G, Q4_K_M 4.58G, Q5_K_M 5.33G, Q6_K 6.14G, Q8_0 7.96G.
    llama3_8b = load_catalog()["llama-3.1-8b"]  # same architecture numbers as Llama-3-8B
    published_gib = {"q4_0": 4.34, "q4_k_m": 4.58, "q5_k_m": 5.33, "q6_k": 6.14, "q8_0": 7.96}
    for quant, gib in published_gib.items():
        assert llama3_8b.weight_bytes(quant) / GiB == pytest.approx(gib, rel=0.005), quant


def test_q4_0_file_is_blocks_at_4_5_bits_plus_a_q6_k_output_tensor():
    m = load_catalog()["llama-3.1-8b"]
    vh = 128256 * 4096
    blocks_and_embedding = m.n_params_total - vh  # everything but output.weight
    expected = blocks_and_embedding * 4.5 / 8 + vh * 6.5625 / 8
    assert m.weight_bytes("q4_0") == pytest.approx(expected)


def test_fp8_llama_70b_matches_the_weight_memory_vllm_reports():
    # llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md: vLLM loaded
    # RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic in 67.72 GiB and Llama-3.1-8B-Instruct (bf16) in
    # 14.99 GiB on one H100. FP8 blocks are 1 byte/param; embedding and lm_head stay bf16.
    cat = load_catalog()
    assert cat["llama-3.3-70b"].weight_bytes("fp8") / GiB == pytest.approx(67.72, rel=0.005)
    assert cat["llama-3.1-8b"].weight_bytes("bf16") / GiB == pytest.approx(14.99, rel=0.005)


def test_bf16_qwen3_32b_matches_the_weight_memory_vllm_reports():
    # Qwen/Qwen3-32B config.json: 64 layers, hidden 5120, 64 heads, 8 KV heads, head_dim 128,
    # intermediate 25600, vocab 151936, untied. vLLM reported 61.03 GiB (same llm-d table).
    qwen3_32b = ModelSpec(name="qwen3-32b", n_layers=64, hidden_size=5120, n_heads=64, n_kv_heads=8,
                          head_dim=128, intermediate_size=25600, vocab_size=151936, max_context=40960)
    assert qwen3_32b.weight_bytes("bf16") / GiB == pytest.approx(61.03, rel=0.005)


def test_microscaling_and_int4_formats_add_their_scale_bits():
    assert get_quant("nvfp4").bits_per_weight == 4 + 8 / 16  # FP8 scale per 16 E2M1 values
    assert get_quant("mxfp4").bits_per_weight == 4 + 8 / 32  # E8M0 scale per 32
    assert get_quant("awq").bits_per_weight == 4 + 16 / 128 + 4 / 128  # fp16 scale + 4-bit zero per 128
    assert get_quant("gptq").bits_per_weight == get_quant("awq").bits_per_weight
    assert get_quant("mlx-4bit").bits_per_weight == 4 + 32 / 64  # fp16 scale + fp16 bias per 64
    assert get_quant("mlx-4bit").embedding_bits == 4.5  # MLX quantizes the embedding too
    assert get_quant("awq").embedding_bits == 16.0  # AWQ leaves embeddings and lm_head in fp16


def test_every_catalog_model_gets_smaller_with_fewer_bits_in_the_table():
    order = ["q4_0", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "bf16"]
    for name, m in load_catalog().items():
        sizes = [m.nominal_weight_bytes(q) for q in order]
        assert sizes == sorted(sizes), name
        assert m.weight_bytes("bf16") == pytest.approx(2 * m.n_params_total), name


def test_compute_formats_are_number_formats_a_hardware_profile_knows():
    known = set(HardwareProfile.model_fields["peak_tflops"].annotation.__args__[0].__args__)
    for q in QUANT_FORMATS.values():
        assert q.compute_format in known, q.name
    assert get_quant("fp8").compute_format == "fp8"
    assert get_quant("nvfp4").compute_format == "fp4"
    assert get_quant("q4_k_m").compute_format == "fp16"  # weight-only: dequantized into fp16 matmuls


@pytest.mark.parametrize("spelling, name", [
    ("Q4_K_M", "q4_k_m"), ("q4-k-m", "q4_k_m"), ("BF16", "bf16"), ("mlx-4bit", "mlx-4bit"),
    ("MLX_4bit", "mlx-4bit"), ("int4", "awq"), ("f16", "fp16"), ("q5_k", "q5_k_m"),
])
def test_get_quant_accepts_case_dashes_and_aliases(spelling, name):
    assert get_quant(spelling).name == name


def test_unknown_quant_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError) as e:
        get_quant("q3_k_xl")
    assert e.value.field == "--quant"
    assert "unknown quantization 'q3_k_xl'" in str(e.value) and "q4_k_m" in str(e.value)


def test_kv_dtype_bytes_per_element():
    assert kv_dtype_bytes("fp16") == kv_dtype_bytes("bf16") == kv_dtype_bytes("F16") == 2.0
    assert kv_dtype_bytes("fp8") == kv_dtype_bytes("fp8_e5m2") == 1.0
    assert kv_dtype_bytes("q8_0") == 34 / 32  # llama.cpp --cache-type-k q8_0
    assert kv_dtype_bytes("q4_0") == 18 / 32
    assert set(KV_DTYPE_BYTES) >= {"fp16", "bf16", "fp8", "q8_0"}
    with pytest.raises(ConfigError, match="unknown KV-cache dtype 'int3'"):
        kv_dtype_bytes("int3")
