"""Partial offload (llama.cpp --n-gpu-layers) and KV-cache quantization in the cost and memory models.

Expected figures are worked out by hand in each test from the numbers written in it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.catalog.models import ModelSpec
from sim.cost.memory import (
    auto_gpu_layers,
    host_fit_check,
    kv_capacity_tokens,
    offload_memory_bytes,
    resolve_gpu_layers,
)
from sim.cost.parallel import OffloadConfig, offload_split
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel
from sim.errors import ConfigError

# The toy model of tests/test_cost.py (2 layers, h = 1024, tied V = 32,000; 132,655,104 bytes in
# bf16, of which the LM head 65,536,000 and the layers 67,119,104; 4,096 KV bytes per layer-token).
TOY = ModelSpec(
    name="toy", n_layers=2, hidden_size=1024, n_heads=8, n_kv_heads=8, head_dim=128,
    intermediate_size=4096, vocab_size=32000, max_context=8192, tie_embeddings=True,
)
GPU = CostParams(8e11, 5e14, 5e14)  # 800 GB/s, 500 TFLOP/s
HOST = CostParams(1e11, 1e12, 1e12)  # 100 GB/s, 1 TFLOP/s
LINK_BW = 32e9  # PCIe 4.0 x16 per direction


def toy(gpu_layers: int) -> CostModel:
    off = OffloadConfig(gpu_layers=gpu_layers, host_params=HOST, link_bandwidth_bytes_per_s=LINK_BW)
    return CostModel(TOY, "bf16", GPU, kv_dtype="bf16", offload=off)


def test_gpu_layers_follow_llama_cpp_output_layer_first_counting():
    # llama.cpp: i_gpu_start = max(n_layer + 1 - ngl, 0); the output layer is the first offloaded
    assert offload_split(80, 0) == (0, False)
    assert offload_split(80, 1) == (0, True)
    assert offload_split(80, 80) == (79, True)  # -ngl 80 on an 80-layer model leaves layer 0 on the host
    assert offload_split(80, 81) == (80, True)
    assert offload_split(80, 999) == (80, True)
    with pytest.raises(ConfigError, match="gpu_layers"):
        offload_split(80, -1)


def test_half_offloaded_decode_step_matches_the_hand_worked_case():
    # -ngl 2 on the 2-layer toy: layer 1 + the output layer on the GPU, layer 0 on the host.
    # One sequence at context 1000; each layer reads 1000 and writes 1 token of KV (4096 B each).
    # host:  33,559,552 (half the layers) + 4096 x 1001 = 37,659,648 B / 1e11 B/s = 3.7659648e-4 s
    #        (compute: 33,554,432 matmul + 4,100,096 attention FLOP / 1e12 = 3.77e-5 s: memory-bound)
    # GPU:   33,559,552 + 65,536,000 (head) + 4,100,096 = 103,195,648 B / 8e11 = 1.2899456e-4 s
    # link:  one crossing of 1 token x 1024 x 4 B (f32) / 32e9 + 10 us = 1.0128e-5 s
    # step = 3.7659648e-4 + 1.2899456e-4 + 1.0128e-5 = 5.1571904e-4 s
    cm = toy(2)
    assert cm.step_time((), (), [1000]) == pytest.approx(5.1571904e-4, rel=1e-9)
    parts = {p["name"]: p for p in cm.breakdown(decode_context=[1000])["parts"]}
    assert parts["host"]["memory_s"] == pytest.approx(3.7659648e-4, rel=1e-9)
    assert parts["gpu"]["memory_s"] == pytest.approx(1.2899456e-4, rel=1e-9)


def test_no_gpu_layers_is_the_host_alone_and_all_layers_is_the_gpu_plus_one_crossing():
    host_only = CostModel(TOY, "bf16", HOST, kv_dtype="bf16")
    gpu_only = CostModel(TOY, "bf16", GPU, kv_dtype="bf16")
    ctx = [300, 700]
    assert toy(0).step_time((), (), ctx) == pytest.approx(host_only.step_time((), (), ctx), rel=1e-12)
    # everything on the GPU: the embedding rows (2 tokens x 1024 x 4 B) still come from the host
    assert toy(3).step_time((), (), ctx) == pytest.approx(
        gpu_only.step_time((), (), ctx) + 2 * 1024 * 4 / LINK_BW + 10e-6, rel=1e-12)


@settings(deadline=None, max_examples=25)
@given(gpu_layers=st.integers(0, 3), contexts=st.lists(st.integers(0, 3000), min_size=1, max_size=8),
       k=st.integers(1, 80), budget_s=st.floats(0.0, 0.5))
def test_offloaded_closed_form_equals_the_loop_and_inverts_exactly(gpu_layers, contexts, k, budget_s):
    cm = toy(gpu_layers)
    ctx = np.array(contexts)
    assert cm.decode_run_time(ctx, k) == pytest.approx(sum(cm.step_time((), (), ctx + i) for i in range(k)), rel=1e-9)
    j = cm.decode_steps_within(ctx, budget_s)
    assert cm.decode_run_time(ctx, j) <= budget_s < cm.decode_run_time(ctx, j + 1)


def test_70b_q4_on_a_24gb_card_auto_fits_some_layers_between_cpu_and_gpu_speed():
    rtx, m = load_profile("rtx-4090"), get_model("llama-3.1-70b")
    engine = load_engine("llama.cpp").with_overrides(gpu_layers="auto")
    g = resolve_gpu_layers(rtx, m, "q4_k_m", engine)
    assert 1 < g < m.n_layers + 1  # some layers, not all: 42.5 GB of weights on a 24 GiB card
    # the choice is the largest that fits: its GPU share fits the budget, one more layer does not
    budget = rtx.memory_bytes * engine.memory_fraction
    # activation reserve (sim.cost.memory rule): one 2048-token batch's peak, 4V + 2(2F + 4h) bytes a token,
    # = 2048 x 693,248 = 1.42 GB, or the engine's 5% of its memory if larger
    reserve = max(2048 * (4 * m.vocab_size + 2 * (2 * m.intermediate_size + 4 * m.hidden_size)),
                  engine.activation_reserve_fraction * budget)
    assert offload_memory_bytes(m, "q4_k_m", "fp16", 4096, g)[0] <= budget - reserve
    assert offload_memory_bytes(m, "q4_k_m", "fp16", 4096, g + 1)[0] > budget - reserve
    partial = CostModel.from_names(m, "q4_k_m", rtx, engine)
    all_cpu = CostModel.from_names(m, "q4_k_m", "cpu-x86-generic", "llama.cpp")
    all_gpu = CostModel.from_names(m, "q4_k_m", rtx, "llama.cpp")  # would not fit: the impossible bound
    rates = [cm.single_stream_decode_tok_s(1000) for cm in (all_cpu, partial, all_gpu)]
    assert rates[0] < rates[1] < rates[2]


def test_auto_fit_puts_everything_on_the_gpu_when_it_fits_and_nothing_when_nothing_does():
    m = get_model("llama-3.1-8b")
    assert auto_gpu_layers(load_profile("rtx-4090"), m, "q4_k_m", "fp16", 4096) == m.n_layers + 1
    assert auto_gpu_layers(load_profile("rtx-4090"), get_model("llama-3.1-70b"), "bf16", "fp16", 4096,
                           activation_reserve_bytes=24e9) == 0


def test_offloaded_bytes_add_up_to_the_model_and_its_kv():
    m = get_model("llama-3.1-70b")
    kv = 4096 * m.kv_bytes_per_token("fp16")
    for g in (0, 1, 40, 81):
        gpu, host = offload_memory_bytes(m, "q4_k_m", "fp16", 4096, g)
        assert gpu + host == pytest.approx(m.weight_bytes("q4_k_m") + kv, rel=1e-12)


def test_host_that_cannot_hold_the_rest_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"cpu-x86-generic.*short by 10\.0 GB"):
        host_fit_check(load_profile("cpu-x86-generic"), load_profile("cpu-x86-generic").usable_memory_bytes + 10e9)


def test_quantized_kv_cache_shrinks_both_capacity_and_the_kv_read_term():
    m, h100 = get_model("llama-3.1-8b"), load_profile("h100-sxm")
    # bytes per element: fp16 2, q8_0 34/32 = 1.0625, fp8 1
    for dtype, elem in (("q8_0", 34 / 32), ("fp8", 1.0)):
        fp16 = CostModel.from_names(m, "bf16", h100, load_engine("vllm"))
        quant = CostModel.from_names(m, "bf16", h100, load_engine("vllm").with_overrides(kv_dtype=dtype))
        b16, bq = fp16.breakdown(decode_context=[8000] * 16), quant.breakdown(decode_context=[8000] * 16)
        assert bq["kv_read_bytes"] == pytest.approx(b16["kv_read_bytes"] * elem / 2, rel=1e-12)
        assert quant.step_time((), (), [8000] * 16) < fp16.step_time((), (), [8000] * 16)
        cap16 = kv_capacity_tokens(h100, m, "bf16", "fp16", 0.9, 2e9)
        capq = kv_capacity_tokens(h100, m, "bf16", dtype, 0.9, 2e9)
        assert capq == pytest.approx(cap16 * 2 / elem, rel=1e-4)


def test_auto_offload_leaves_room_for_the_context_it_was_fitted_with():
    from sim.cost.memory import activation_reserve_bytes, deployment_kv_capacity_tokens, offload_kv_tokens

    rtx, m = load_profile("rtx-4090"), get_model("llama-3.1-70b")
    engine = load_engine("llama.cpp").with_overrides(gpu_layers="auto")
    reserve = activation_reserve_bytes(rtx, m, engine.max_num_batched_tokens, engine.activation_reserve_fraction,
                                       engine.memory_fraction)
    assert offload_kv_tokens(m, engine) == 4096  # --fit lowers an unset context to its 4096 minimum first
    assert deployment_kv_capacity_tokens(rtx, m, "q4_k_m", engine, reserve) >= 4096


def test_large_batches_ship_host_weights_to_the_gpu_as_llama_cpp_op_offload_does():
    # -ngl 2 on the toy, one 512-token prompt (>= 32 tokens: op offload; one 512-token ubatch = 1 upload).
    # host layer: upload 33,559,552 B / 32e9 = 1.048736e-3 s
    #             + matmuls on the GPU: 0.5 x 67,108,864 x 512 = 17,179,869,184 FLOP / 5e14 = 3.4359738368e-5 s
    #             + attention on the host: 0.5 x 4096 x (2 layers x 512 x 513 / 2) = 537,919,488 FLOP / 1e12
    #               = 5.37919488e-4 s (> its KV traffic 0.5 x 4096 x 1024 B / 1e11 = 2.1e-5 s)
    # GPU layer + head: 33,559,552 + 65,536,000 + 2,097,152 (KV written) = 101,192,704 B / 8e11 = 1.2649088e-4 s
    #             (its 1.7e10 FLOP take 3.6e-5 s: memory-bound)
    # link: 512 x 1024 x 4 B / 32e9 + 10 us = 7.5536e-5 s
    # step = 1.621015226368e-3 + 1.2649088e-4 + 7.5536e-5 = 1.823042106368e-3 s
    cm = toy(2)
    assert cm.step_time((512,), (0,), ()) == pytest.approx(1.823042106368e-3, rel=1e-9)
    # below 32 tokens the host computes its layer itself
    no_op = CostModel(TOY, "bf16", GPU, kv_dtype="bf16", offload=OffloadConfig(
        gpu_layers=2, host_params=HOST, link_bandwidth_bytes_per_s=LINK_BW, op_offload_min_tokens=float("inf")))
    assert cm.step_time((31,), (0,), ()) == pytest.approx(no_op.step_time((31,), (0,), ()), rel=1e-12)
    assert no_op.step_time((512,), (0,), ()) > 5 * cm.step_time((512,), (0,), ())
    # a 1024-token batch is two ubatches: the host weights cross the link twice
    one, two = cm.breakdown((512,), (0,)), cm.breakdown((1024,), (0,))
    assert two["parts"][0]["memory_s"] - one["parts"][0]["memory_s"] > 33_559_552 / LINK_BW


def test_offloaded_closed_form_holds_for_decode_batches_that_trigger_op_offload():
    cm = toy(2)
    ctx = np.arange(40) * 50  # 40 sequences: >= 32 tokens a step
    assert cm.decode_run_time(ctx, 70) == pytest.approx(sum(cm.step_time((), (), ctx + i) for i in range(70)), rel=1e-9)
    j = cm.decode_steps_within(ctx, 0.1)
    assert cm.decode_run_time(ctx, j) <= 0.1 < cm.decode_run_time(ctx, j + 1)


def test_gpu_layers_accepts_a_number_its_text_or_auto_and_names_the_field_otherwise():
    eng = load_engine("llama.cpp")
    assert eng.with_overrides(gpu_layers="12").gpu_layers == 12
    assert eng.with_overrides(gpu_layers="auto").gpu_layers == "auto"
    for bad in ("most", -1):
        with pytest.raises(ConfigError, match="gpu_layers: .*integer >= 0 or 'auto'"):
            eng.with_overrides(gpu_layers=bad)


def test_engine_file_with_an_incomplete_speculative_block_names_file_line_and_field(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("base: vllm\ntp: 2\nspeculative:\n  method: eagle\n  k: 4\n")
    with pytest.raises(ConfigError) as err:
        load_engine(str(path))
    assert err.value.format_message() == f"{path}:3: speculative: Value error, method 'eagle' needs draft_cost_fraction"
