"""TensorRT-LLM's KV pool: the free-memory fraction applies after the driver's and the runtime's reserve
(sim.cost.memory.free_fraction_reserve_bytes, HardwareProfile.memory_reported_gib)."""

from __future__ import annotations

import pytest

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import HardwareProfile, load_profile
from sim.catalog.lookup import get_model
from sim.cost import memory
from sim.cost.memory import GiB, TRTLLM_RUNTIME_RESERVE_BYTES, free_fraction_reserve_bytes
from sim.engine.build import plan_kv


def _capacity(hw, engine="trtllm", model="llama-3.1-8b", quant="fp8", **over):
    eng = load_engine(engine).for_hardware(hw)
    if over:
        eng = eng.with_overrides(**over)
    return plan_kv(hw, get_model(model), quant, eng).capacity_tokens


def test_reserve_is_the_driver_share_plus_the_runtime_reserve():
    """H100 80GB HBM3: nvidia-smi reports 81,559 MiB of the 80 GiB, so the driver keeps 0.35 GiB; an
    L40S with ECC on reports 46,068 MiB of 48 GiB (3.01 GiB of check bits)."""
    assert TRTLLM_RUNTIME_RESERVE_BYTES == pytest.approx(3.56 * GiB)
    h100, l40s = load_profile("h100-sxm"), load_profile("l40s")
    assert free_fraction_reserve_bytes(h100) / GiB == pytest.approx(80 - 79.65 + 3.56)
    assert free_fraction_reserve_bytes(l40s) / GiB == pytest.approx(48 - 44.99 + 3.56)
    bare = h100.model_copy(update={"memory_reported_gib": None})
    assert bare.reported_memory_bytes == bare.memory_bytes
    assert free_fraction_reserve_bytes(bare) == pytest.approx(TRTLLM_RUNTIME_RESERVE_BYTES)


def test_reserve_lowers_tensorrt_llms_kv_pool_by_f_times_the_reserve(monkeypatch):
    """KV = f x (memory - reserve - weights - activations): the reserve takes f x reserve bytes off each
    device's pool: 0.9 x 3.91 GiB / 128 KiB per token (Llama 3.1 8B, bf16 KV cache) on one H100; with
    tp = 2 (Llama 3.1 70B) each device holds half of every token's KV, so the deployment loses twice
    as many tokens per reserve."""
    h100 = load_profile("h100-sxm")
    bare = h100.model_copy(update={"memory_reported_gib": None})
    tp1, tp2 = _capacity(h100), _capacity(h100, model="llama-3.1-70b", tp=2)
    monkeypatch.setattr(memory, "TRTLLM_RUNTIME_RESERVE_BYTES", 0.0)
    tp1_bare, tp2_bare = _capacity(bare), _capacity(bare, model="llama-3.1-70b", tp=2)
    reserve = (80 - 79.65 + 3.56) * GiB
    kv = load_engine("trtllm").kv_dtype  # the preset keeps the KV cache in bf16
    per_token_8b = get_model("llama-3.1-8b").kv_bytes_per_token(kv)
    per_token_70b = get_model("llama-3.1-70b").kv_bytes_per_token(kv)
    assert tp1_bare - tp1 == pytest.approx(0.9 * reserve / per_token_8b, abs=2)
    assert tp2_bare - tp2 == pytest.approx(0.9 * reserve / (per_token_70b / 2), abs=2)


def test_vllm_budget_ignores_the_free_fraction_reserve():
    """vLLM's gpu_memory_utilization is a share of the whole device (memory_fraction_of: total): neither
    the reported memory nor the TensorRT-LLM reserve changes its pool."""
    h100 = load_profile("h100-sxm")
    bare = h100.model_copy(update={"memory_reported_gib": None})
    assert _capacity(h100, engine="vllm") == _capacity(bare, engine="vllm")


def test_fit_table_and_simulator_agree_under_the_reserve():
    """`infersim fit --engine trtllm` prices the same pool: memory.fit at engine_memory_fraction leaves
    f x left for the KV cache."""
    hw, m = load_profile("l40s"), get_model("llama-3.1-8b")
    eng = load_engine("trtllm").for_hardware(hw)
    frac = memory.engine_memory_fraction(hw, m, "fp8", eng)
    row = memory.fit(hw, m, "fp8", kv_dtype=eng.kv_dtype, memory_fraction=frac,
                     max_batched_tokens=eng.max_num_batched_tokens, engine=eng)
    left = (hw.memory_bytes - free_fraction_reserve_bytes(hw) - m.weight_bytes("fp8")
            - memory.engine_activation_bytes(hw, m, eng))
    assert row.kv_budget_bytes == pytest.approx(eng.memory_fraction * left, rel=1e-9)


def test_tensorrt_llm_activations_have_logits_for_the_last_tokens_only():
    """TensorRT-LLM's graph gathers each sequence's last token before the LM head, so its activations
    hold max_batch_size rows of logits, not max_num_tokens (vLLM's profiling pass: every token), and
    tensor parallelism splits the FFN and the vocabulary-parallel head."""
    hw, m = load_profile("h100-sxm"), get_model("llama-3.1-70b")
    eng = load_engine("trtllm").for_hardware(hw).with_overrides(max_num_seqs=64, max_num_batched_tokens=2048)
    per_token = 2 * (2 * m.intermediate_size + 4 * m.hidden_size)  # bf16 FFN gate+up and hidden buffers
    logits_row = 4 * m.vocab_size  # fp32
    assert memory.engine_activation_bytes(hw, m, eng) == pytest.approx(2048 * per_token + 64 * logits_row)
    tp2 = eng.with_overrides(tp=2)
    assert memory.engine_activation_bytes(hw, m, tp2) == pytest.approx(
        2048 * 2 * (m.intermediate_size + 4 * m.hidden_size) + 64 * logits_row / 2)
    # vLLM keeps the profiling pass's rule: logits for every token, no split
    vllm = load_engine("vllm").for_hardware(hw).with_overrides(max_num_batched_tokens=2048)
    assert memory.engine_activation_bytes(hw, m, vllm) == pytest.approx(2048 * (per_token + logits_row))
    # a larger vocabulary costs a TensorRT-LLM engine little: Llama 3.1's 128k entries against Llama 2's 32k
    l2 = get_model("llama-2-70b")
    assert memory.engine_activation_bytes(hw, m, eng) - memory.engine_activation_bytes(hw, l2, eng) < 0.05 * GiB


def test_reported_memory_above_capacity_is_rejected():
    with pytest.raises(ValueError, match="memory_reported_gib"):
        HardwareProfile(name="x", kind="gpu", memory_capacity_gib=48, memory_reported_gib=49,
                        memory_bandwidth_gb_per_s=100, peak_tflops={"bf16": 10.0})


def test_an_engine_plans_memory_for_the_weights_it_loads():
    """The catalog's measured sizes are GGUF files': llama.cpp's memory plan holds gpt-oss-120b's GGUF
    (63.4 GB, attention and vocabulary at about Q8_0), vLLM's the released checkpoint (65.2 GB, bf16)."""
    from sim.engine.build import replica_parts

    hw = load_profile("h100-sxm")
    held = {e: replica_parts(hw, get_model("gpt-oss-120b"), "mxfp4", load_engine(e).for_hardware(hw)).kvp.weight_bytes
            for e in ("llama.cpp", "vllm")}
    assert held["llama.cpp"] == pytest.approx(63.37e9, rel=1e-3)
    assert held["vllm"] == pytest.approx(65.17e9, rel=1e-3)
