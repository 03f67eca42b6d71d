"""Memory-fit arithmetic (sim.cost.memory) and the `infersim fit` table."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import INFERSIM
from typer.testing import CliRunner

from sim.catalog.hardware import HardwareProfile, load_profile
from sim.catalog.models import ModelSpec, load_catalog
from sim.cli import app
from sim.commands.models_cmd import predicted_speed
from sim.cost import memory

REPO = Path(__file__).resolve().parents[1]
GiB = 1024**3
runner = CliRunner()
CATALOG = load_catalog()


def gpu(memory_gb: float = 80, fraction: float = 0.9, **peaks) -> HardwareProfile:
    return HardwareProfile(name=f"test-{memory_gb}g", kind="gpu", memory_capacity_gb=memory_gb,
                           usable_memory_fraction=fraction, memory_bandwidth_gb_per_s=3000,
                           peak_tflops={"bf16": 1000, **peaks})


def test_kv_capacity_of_llama_8b_on_an_80_gb_gpu_by_hand():
    hw, m = gpu(80, 0.9), CATALOG["llama-3.1-8b"]
    # budget 80e9 x 0.9 = 72,000,000,000; bf16 weights 2 x 8,030,261,248 = 16,060,522,496
    # KV budget 55,939,477,504 / 131,072 bytes per token = 426,784.34 -> 426,784 tokens.
    assert memory.kv_budget_bytes(hw, m, "bf16") == 72_000_000_000 - 16_060_522_496
    assert memory.kv_capacity_tokens(hw, m, "bf16", "fp16") == 426_784
    # fp8 KV halves the bytes per token: 55,939,477,504 / 65,536 = 853,568.69
    assert memory.kv_capacity_tokens(hw, m, "bf16", "fp8") == 853_568
    # Reserve 10 GB, memory_fraction 0.5: 40e9 - 16,060,522,496 - 10e9 = 13,939,477,504 / 131,072 = 106,349.77
    assert memory.kv_capacity_tokens(hw, m, "bf16", "fp16", 0.5, 10e9) == 106_349
    assert memory.kv_capacity_tokens(hw, CATALOG["llama-3.1-70b"], "bf16") == 0  # weights alone overflow


def test_activation_reserve_formula_by_hand_for_llama_8b():
    # 8192 tokens x (4 x 128,256 fp32 logits + 2 x (2 x 14,336 gate/up + 4 x 4,096 hidden)) bytes
    per_token = 4 * 128256 + 2 * (2 * 14336 + 4 * 4096)  # 603,136
    assert memory.activation_peak_bytes(CATALOG["llama-3.1-8b"], 8192) == 8192 * per_token == 4_940_890_112
    # MoE: the active FFN width is k x expert width (8 x 768 for Qwen3-30B-A3B).
    assert memory.activation_peak_bytes(CATALOG["qwen3-30b-a3b"], 1) == 4 * 151936 + 2 * (2 * 8 * 768 + 4 * 2048)


@pytest.mark.parametrize("spec, measured_gib", [
    (CATALOG["llama-3.1-8b"], 4.76),
    # Qwen/Qwen3-0.6B and Qwen/Qwen3-32B config.json numbers.
    (ModelSpec(name="qwen3-0.6b", n_layers=28, hidden_size=1024, n_heads=16, n_kv_heads=8, head_dim=128,
               intermediate_size=3072, vocab_size=151936, max_context=40960, tie_embeddings=True), 5.56),
    (ModelSpec(name="qwen3-32b", n_layers=64, hidden_size=5120, n_heads=64, n_kv_heads=8, head_dim=128,
               intermediate_size=25600, vocab_size=151936, max_context=40960), 5.64),
])
def test_activation_reserve_is_close_to_the_peak_vllm_measured_on_h100(spec, measured_gib):
    # llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md: "Peak activation memory"
    # vLLM logged on one H100 (vllm serve defaults: 8192 max_num_batched_tokens on >= 70 GiB GPUs).
    predicted_gib = memory.activation_peak_bytes(spec, 8192) / GiB
    assert predicted_gib == pytest.approx(measured_gib, rel=0.2)


def test_kv_budget_reproduces_the_kv_memory_vllm_allocated_for_llama_8b():
    # Same llm-d run: H100 with 79.18 GiB, gpu_memory_utilization 0.9 -> vLLM allocated 51.38 GiB of KV
    # cache for Llama-3.1-8B-Instruct (bf16). Non-torch memory (0.13 GiB) is not modelled.
    h100 = HardwareProfile(name="h100-torch-view", kind="gpu", memory_capacity_gb=79.18 * GiB / 1e9,
                           usable_memory_fraction=0.9, memory_bandwidth_gb_per_s=3350, peak_tflops={"bf16": 989})
    m = CATALOG["llama-3.1-8b"]
    kv = memory.kv_budget_bytes(h100, m, "bf16", activation_reserve_bytes=memory.activation_peak_bytes(m, 8192))
    assert kv / GiB == pytest.approx(51.38, rel=0.02)


def test_activation_reserve_is_the_larger_of_the_forward_peak_and_the_engine_share():
    hw, m = gpu(80, 0.9), CATALOG["llama-3.1-8b"]
    peak = memory.activation_peak_bytes(m, 8192)  # 4,940,890,112
    assert memory.activation_reserve_bytes(hw, m) == peak  # 80 GB device: vLLM's 8192 tokens
    assert memory.activation_reserve_bytes(hw, m, 2048) == memory.activation_peak_bytes(m, 2048)
    assert memory.activation_reserve_bytes(hw, m, 8192, reserve_fraction=0.1) == 0.1 * 72e9  # 7.2 GB > peak
    r = memory.fit(hw, m, "bf16", activation_reserve_fraction=0.1)
    assert r.kv_budget_bytes == 72e9 - 16_060_522_496 - 7.2e9


def test_default_batched_tokens_and_quants_follow_the_hardware():
    assert memory.default_max_batched_tokens(gpu(80)) == 8192  # 80 GB = 74.5 GiB >= 70 GiB
    assert memory.default_max_batched_tokens(gpu(24)) == 2048
    assert memory.default_fit_quants(gpu(80)) == ["bf16", "fp8", "q8_0", "q4_k_m"]
    assert "nvfp4" in memory.default_fit_quants(gpu(128, fp4=1000))
    assert "nvfp4" not in memory.default_fit_quants(load_profile("h100-sxm"))


def test_fit_reasons_for_not_fitting():
    hw = gpu(80, 0.9)
    assert memory.fit(hw, CATALOG["llama-3.1-70b"], "bf16").reason == "weights exceed the memory budget"
    assert memory.fit(hw, CATALOG["llama-3.1-8b"], "bf16", context=4096, concurrency=1).fits
    too_long = memory.fit(hw, CATALOG["llama-2-7b"], "bf16", context=8192)
    assert not too_long.fits and "max context (4096)" in too_long.reason and too_long.max_sequences == 0
    crowded = memory.fit(hw, CATALOG["llama-2-7b"], "bf16", context=4096, concurrency=1000)
    assert not crowded.fits and crowded.reason.startswith("KV cache")
    assert crowded.max_context < 4096 and 0 < crowded.max_sequences < 1000


@settings(deadline=None, max_examples=80)
@given(name=st.sampled_from(sorted(CATALOG)), budget_gb=st.floats(0.001, 500), concurrency=st.integers(1, 512),
       context=st.integers(1, 140_000), kv=st.sampled_from(["fp16", "fp8", "q8_0"]))
def test_max_context_and_max_sequences_are_the_largest_that_fit(name, budget_gb, concurrency, context, kv):
    m, budget = CATALOG[name], budget_gb * 1e9
    c = memory.max_context_tokens(m, budget, kv, concurrency)
    assert 0 <= c <= m.max_context
    # 0 also when not even an empty sequence fits (a hybrid model's fixed recurrent state per sequence)
    assert c == 0 and concurrency * m.kv_bytes_per_sequence(0, kv) > budget or \
        concurrency * m.kv_bytes_per_sequence(c, kv) <= budget
    if c < m.max_context:
        assert concurrency * m.kv_bytes_per_sequence(c + 1, kv) > budget
    n = memory.max_sequences(m, budget, kv, context)
    if context <= m.max_context:
        per_seq = m.kv_bytes_per_sequence(context, kv)
        assert n * per_seq <= budget < (n + 1) * per_seq
    else:
        assert n == 0


@settings(deadline=None, max_examples=60)
@given(name=st.sampled_from(sorted(CATALOG)), quant=st.sampled_from(["bf16", "fp8", "q8_0", "q4_k_m", "nvfp4"]),
       memory_gb=st.sampled_from([16, 24, 48, 80, 141, 192]), context=st.integers(1, 140_000),
       concurrency=st.integers(1, 256))
def test_fit_verdict_agrees_with_its_own_limits(name, quant, memory_gb, context, concurrency):
    r = memory.fit(gpu(memory_gb), CATALOG[name], quant, context=context, concurrency=concurrency)
    assert r.fits == (context <= CATALOG[name].max_context and r.max_sequences >= concurrency)
    if r.fits:
        assert r.max_context >= context
        assert r.weight_bytes + r.activation_reserve_bytes < r.memory_budget_bytes


@settings(deadline=None, max_examples=40)
@given(name=st.sampled_from(sorted(CATALOG)), reserve_gb=st.floats(0, 20), extra_gb=st.floats(0, 20),
       fraction=st.floats(0.3, 0.95))
def test_more_reserve_or_less_memory_never_adds_kv_tokens(name, reserve_gb, extra_gb, fraction):
    hw, m = gpu(141), CATALOG[name]
    base = memory.kv_capacity_tokens(hw, m, "q4_k_m", "fp16", fraction, reserve_gb * 1e9)
    assert memory.kv_capacity_tokens(hw, m, "q4_k_m", "fp16", fraction, (reserve_gb + extra_gb) * 1e9) <= base
    assert memory.kv_capacity_tokens(hw, m, "q4_k_m", "fp16", min(1.0, fraction + 0.05), reserve_gb * 1e9) >= base


def test_cli_fit_json_rows_are_the_library_results():
    result = runner.invoke(app, ["fit", "--hw", "h100-sxm", "--context", "8192", "--concurrency", "4", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["hw"], out["context"], out["concurrency"], out["max_batched_tokens"]) == ("h100-sxm", 8192, 4, 8192)
    assert len(out["rows"]) == len(CATALOG) * 4  # bf16, fp8, q8_0, q4_k_m (an H100 has no fp4 units)
    rows = {(r["model"], r["quant"]): r for r in out["rows"]}
    hw = load_profile("h100-sxm")
    expected = memory.fit(hw, CATALOG["qwen3-8b"], "fp8", context=8192, concurrency=4).to_dict()
    assert {k: rows[("qwen3-8b", "fp8")][k] for k in expected} == expected
    assert rows[("llama-3.1-8b", "bf16")]["fits"] is True
    assert rows[("llama-3.1-70b", "bf16")]["fits"] is False
    assert rows[("llama-3.1-70b", "q4_k_m")]["weight_bytes"] < rows[("llama-3.1-70b", "fp8")]["weight_bytes"]


def test_cli_fit_table_filters_models_and_quants_and_reads_model_files(tmp_path):
    cfg = tmp_path / "my-model" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
                               "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
                               "max_position_embeddings": 2048}))
    result = runner.invoke(app, ["fit", "--hw", "h100-sxm", "--model", f"mixtral-8x7b,{cfg}",
                                 "--quant", "bf16,q4_k_m", "--kv-dtype", "fp8", "--no-speed"])
    assert result.exit_code == 0, result.output
    assert "mixtral-8x7b" in result.output and "my-model" in result.output and "q4_k_m" in result.output
    assert "decode tok/s" not in result.output


@pytest.mark.parametrize("args, message", [
    (["--hw", "h100-sxn"], "error: --hw: unknown hardware profile 'h100-sxn'; did you mean: h100-sxm"),
    (["--hw", "h100-sxm", "--quant", "bf16,q3"], "error: --quant: unknown quantization 'q3'"),
    (["--hw", "h100-sxm", "--kv-dtype", "int4"], "error: --kv-dtype: unknown KV-cache dtype 'int4'"),
    (["--hw", "h100-sxm", "--model", "gpt-5"], "error: --model: unknown model 'gpt-5'"),
    (["--hw", "h100-sxm", "--context", "0"], "Invalid value for '--context'"),
])
def test_cli_fit_bad_input_exits_2_with_one_clear_line(args, message):
    result = runner.invoke(app, ["fit", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_cli_fit_with_an_engine_takes_its_memory_fraction_batched_tokens_and_kv_dtype():
    from sim.catalog.engine_config import load_engine

    hw = load_profile("rtx-4090")
    eng = load_engine("llama.cpp").for_hardware(hw)
    result = runner.invoke(app, ["fit", "--hw", "rtx-4090", "--engine", "llama.cpp", "--model", "qwen3-8b",
                                 "--quant", "q4_k_m", "--json", "--no-speed"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["engine"] == "llama.cpp" and out["kv_dtype"] == eng.kv_dtype
    assert out["memory_budget_bytes"] == pytest.approx(hw.memory_bytes * eng.memory_fraction)
    expected = memory.fit(hw, CATALOG["qwen3-8b"], "q4_k_m", kv_dtype=eng.kv_dtype, memory_fraction=eng.memory_fraction,
                          max_batched_tokens=eng.max_num_batched_tokens,
                          activation_reserve_fraction=eng.activation_reserve_fraction)
    assert out["rows"][0]["max_context"] == expected.max_context
    bad = runner.invoke(app, ["fit", "--hw", "rtx-4090", "--engine", "vlm"])
    assert bad.exit_code == 2 and "error: --engine: unknown engine" in bad.output


def test_speed_columns_come_from_the_cost_model_when_it_exists():
    hw = load_profile("h100-sxm")
    s = predicted_speed(CATALOG["llama-3.1-8b"], "q4_k_m", hw, 4096)
    assert s["engine"] == "llama.cpp" and s["decode_tok_s"] > 0 and s["prefill_tok_s"] > 0
    assert predicted_speed(CATALOG["llama-3.1-8b"], "bf16", hw, 4096)["engine"] == "vllm"


def test_installed_infersim_fit_prints_json():
    cmd = [INFERSIM]
    proc = subprocess.run([*cmd, "fit", "--hw", "h100-sxm", "--model", "llama-3.1-8b", "--quant", "bf16,q4_k_m",
                           "--json", "--no-speed"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert [r["quant"] for r in rows] == ["bf16", "q4_k_m"] and all(r["fits"] for r in rows)
