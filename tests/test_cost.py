"""Physics and closed-form checks of the cost model (sim/cost/roofline.py).

Expected figures are computed by hand in each test from the numbers written in it, not read back
from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import Efficiency, HardwareProfile
from sim.catalog.lookup import get_model
from sim.catalog.models import ModelSpec
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel, expected_distinct_experts
from sim.errors import ConfigError

# A toy dense model whose sizes are easy to count by hand:
# attention per layer = 2*h*H*d + 2*h*K*d = 2*1024*1024 + 2*1024*1024 = 4,194,304
# FFN per layer       = 3*h*F = 3*1024*4096                            = 12,582,912
# norms per layer     = 2*h                                            = 2,048
# 2 layers = 33,558,528; tied embedding V*h = 32,000*1024 = 32,768,000; final norm 1,024
# total = 66,327,552 parameters -> 132,655,104 bytes in bf16.
TOY = ModelSpec(
    name="toy", n_layers=2, hidden_size=1024, n_heads=8, n_kv_heads=8, head_dim=128,
    intermediate_size=4096, vocab_size=32000, max_context=8192, tie_embeddings=True,
)
TOY_PARAMS = 66_327_552
TOY_WEIGHT_BYTES = 132_655_104
TOY_KV_BYTES_PER_TOKEN = 2 * 2 * 8 * 128 * 2  # K and V, 2 layers, 8 KV heads, head_dim 128, 2 bytes = 8192
TOY_MATMUL_PARAMS = 2 * (4_194_304 + 12_582_912) + 32_768_000  # layers' matmuls + LM head = 66,322,432

# 1000 GB/s, 1000 dense TFLOP/s; 80% of bandwidth, 50% of FLOP/s, attention at 50% of that.
PROFILE = HardwareProfile(
    name="toy-gpu", kind="gpu", memory_capacity_gb=80, memory_bandwidth_gb_per_s=1000,
    peak_tflops={"bf16": 1000.0}, efficiency=Efficiency(compute=0.5, bandwidth=0.8, attention=0.5),
)


def toy_cost(**overrides) -> CostModel:
    params = CostParams.from_profile(PROFILE, "bf16")
    if overrides:
        params = CostParams(**{**{f: getattr(params, f) for f in CostParams.FIELDS}, **overrides})
    return CostModel(TOY, "bf16", params, kv_dtype="bf16")


def test_toy_model_sizes_match_the_hand_count():
    assert TOY.n_params_total == TOY_PARAMS
    assert TOY.weight_bytes("bf16") == TOY_WEIGHT_BYTES
    assert TOY.kv_bytes_per_token("bf16") == TOY_KV_BYTES_PER_TOKEN


def test_single_request_decode_on_bandwidth_bound_profile_runs_at_bandwidth_over_bytes():
    cm = toy_cost()
    context = 1000
    # bytes per step: all weights + the 1000 cached tokens' K/V + the new token's K/V
    step_bytes = TOY_WEIGHT_BYTES + TOY_KV_BYTES_PER_TOKEN * context + TOY_KV_BYTES_PER_TOKEN
    expected_tok_s = 1000e9 * 0.8 / step_bytes  # = 8e11 / 140,855,296 = 5679.6 tok/s
    assert cm.single_stream_decode_tok_s(context) == pytest.approx(expected_tok_s, rel=1e-12)
    assert cm.breakdown(decode_context=[context])["bound"] == "memory"


def test_decode_adds_iteration_and_per_sequence_overheads():
    cm = toy_cost(iteration_overhead_s=0.002, per_sequence_overhead_s=0.0001)
    bare = toy_cost()
    ctx = np.array([100, 200, 300])
    assert cm.step_time((), (), ctx) == pytest.approx(bare.step_time((), (), ctx) + 0.002 + 3 * 0.0001, rel=1e-12)


def test_large_prefill_is_compute_bound_at_flops_over_two_params():
    cm = toy_cost()
    p = 2048
    matmul_flops = 2 * (TOY_MATMUL_PARAMS - 32_768_000) * p + 2 * 32_768_000  # LM head once (last position)
    attention_flops = 4 * 8 * 128 * 2 * p * (p + 1) / 2  # 4*H*d per layer-key, 2 layers, causal keys
    expected_s = matmul_flops / (1000e12 * 0.5) + attention_flops / (1000e12 * 0.5 * 0.5)
    assert cm.step_time((p,), (0,), ()) == pytest.approx(expected_s, rel=1e-12)
    assert cm.breakdown((p,), (0,))["bound"] == "compute"


def test_large_prefill_of_an_8b_model_runs_near_flops_over_two_params():
    llama = get_model("llama-3.1-8b")  # 8.03 B parameters; vocabulary and attention are small corrections
    cm = CostModel(llama, "bf16", CostParams.from_profile(PROFILE, "bf16"), kv_dtype="bf16")
    textbook_tok_s = 1000e12 * 0.5 / (2 * 8.03e9)  # = 31,133 tok/s
    assert cm.prefill_tok_s(2048) == pytest.approx(textbook_tok_s, rel=0.15)
    assert cm.breakdown((2048,), (0,))["bound"] == "compute"


def test_weight_gemms_and_attention_each_take_their_own_roofline_in_sequence():
    # One decode at a deep context with slow attention: the GEMMs are weight-bound and the attention
    # compute-bound, so the step is weights/bw + attention FLOPs/rate (kernels run one after the
    # other), not the larger of the iteration's totals. Hand-worked on the toy model, bf16:
    bw, mm, att = 1e12, 1e15, 1e10
    cm = CostModel(TOY, "bf16", CostParams(bw, mm, att, 0.0, 0.0), kv_dtype="bf16")
    ctx = 4000
    weights_s = TOY_WEIGHT_BYTES / bw  # tied embedding: the LM head streams the shared table once
    matmul_s = 2 * TOY_MATMUL_PARAMS / mm
    attention_s = 4 * 8 * 128 * 2 * (ctx + 1) / att  # 2 layers x (ctx + 1) keys
    kv_s = TOY_KV_BYTES_PER_TOKEN * (ctx + 1) / bw  # the cache read and the new token written
    assert matmul_s < weights_s and kv_s < attention_s  # one kernel group of each kind
    b = cm.breakdown(decode_context=[ctx])
    assert b["step_s"] == pytest.approx(weights_s + attention_s, rel=1e-9)
    assert cm.step_time((), (), (ctx,)) == pytest.approx(weights_s + attention_s, rel=1e-9)
    assert b["step_s"] > max(b["compute_s"], b["memory_s"])  # what one max over the totals gave
    assert (b["gemm_bound"], b["attention_bound"]) == ("memory", "compute")
    # and a run of decode steps sums the same per-step figure exactly (the closed form)
    steps = [cm.step_time((), (), (ctx + i,)) for i in range(50)]
    assert cm.decode_run_time([ctx], 50) == pytest.approx(sum(steps), rel=1e-12)


def test_prefill_chunk_attends_to_cached_context_and_its_causal_prefix():
    cm = toy_cost()
    b = cm.breakdown((100,), (400,))
    keys = 2 * (100 * 400 + 100 * 101 / 2)  # 2 layers x (chunk x cached + causal triangle)
    assert b["attention_flops"] == pytest.approx(4 * 8 * 128 * keys)
    assert b["kv_read_bytes"] == pytest.approx(TOY_KV_BYTES_PER_TOKEN * 400)
    assert b["kv_write_bytes"] == pytest.approx(TOY_KV_BYTES_PER_TOKEN * 100)


def test_empty_iteration_costs_nothing():
    assert toy_cost(iteration_overhead_s=0.01).step_time((), (), ()) == 0.0


def test_sliding_window_layers_read_at_most_the_window():
    gemma = get_model("gemma-3-270m")
    cm = CostModel(gemma, "bf16", CostParams.from_profile(PROFILE, "bf16"), kv_dtype="bf16")
    w, swa, full = gemma.sliding_window, gemma.n_sliding_layers, gemma.n_layers - gemma.n_sliding_layers
    per_layer_token = gemma.kv_bytes_per_token("bf16") / gemma.n_layers
    for ctx in (100, w, 5000):
        b = cm.breakdown(decode_context=[ctx])
        assert b["kv_read_bytes"] == pytest.approx(per_layer_token * (full * ctx + swa * min(ctx, w)))


def _loop_sum(cm: CostModel, ctx: np.ndarray, k: int) -> float:
    return sum(cm.step_time((), (), ctx + i) for i in range(k))


# dense, sliding-window (Gemma 3: 15 of 18 layers with a 512-token window) and MoE
MODELS = {"toy": TOY, "gemma-3-270m": get_model("gemma-3-270m"), "qwen3-30b-a3b": get_model("qwen3-30b-a3b")}
MODEL_NAMES = st.sampled_from(sorted(MODELS))
BATCH_CONTEXTS = st.lists(st.integers(0, 3000), min_size=1, max_size=12)
# a slow attention unit makes the compute line steeper than the memory line, so runs cross over
ATTENTION_TFLOPS = st.floats(0.001, 500.0)


# KV-view padding (llama.cpp: 256 cells): none, a fine one (many block crossings per run), llama.cpp's
KV_PADS = st.sampled_from([0, 32, 256])


@settings(deadline=None, max_examples=60)
@given(model=MODEL_NAMES, contexts=BATCH_CONTEXTS, k=st.integers(1, 200), attention_tflops=ATTENTION_TFLOPS,
       overhead_ms=st.floats(0.0, 3.0), kv_pad=KV_PADS, flash=st.booleans())
def test_closed_form_decode_run_equals_the_loop_sum(model, contexts, k, attention_tflops, overhead_ms, kv_pad, flash):
    params = CostParams(8e11, 5e14, attention_tflops * 1e12, overhead_ms / 1e3, 1e-5)
    cm = CostModel(MODELS[model], "bf16", params, kv_dtype="bf16", kv_pad=kv_pad, flash_attention=flash)
    ctx = np.array(contexts)
    assert cm.decode_run_time(ctx, k) == pytest.approx(_loop_sum(cm, ctx, k), rel=1e-9)


def test_closed_form_is_exact_across_a_compute_memory_crossover():
    params = CostParams(8e11, 5e14, 2e9, 0.0, 0.0)  # 2 GFLOP/s attention: compute overtakes memory as contexts grow
    cm = CostModel(TOY, "bf16", params, kv_dtype="bf16")
    ctx = np.array([10, 20])
    first, last = cm.breakdown(decode_context=ctx), cm.breakdown(decode_context=ctx + 999)
    assert first["bound"] == "memory" and last["bound"] == "compute"
    assert cm.decode_run_time(ctx, 1000) == pytest.approx(_loop_sum(cm, ctx, 1000), rel=1e-9)


@settings(deadline=None, max_examples=60)
@given(model=MODEL_NAMES, contexts=BATCH_CONTEXTS, budget_s=st.floats(0.0, 5.0), attention_tflops=ATTENTION_TFLOPS,
       kv_pad=KV_PADS, flash=st.booleans())
def test_decode_steps_within_is_the_exact_inverse_of_the_closed_form(model, contexts, budget_s, attention_tflops, kv_pad,
                                                                     flash):
    cm = CostModel(MODELS[model], "bf16", CostParams(8e11, 5e14, attention_tflops * 1e12, 1e-3, 1e-5), kv_dtype="bf16",
                   kv_pad=kv_pad, flash_attention=flash)
    ctx = np.array(contexts)
    k = cm.decode_steps_within(ctx, budget_s)
    assert cm.decode_run_time(ctx, k) <= budget_s < cm.decode_run_time(ctx, k + 1)


def test_attention_without_flash_attention_moves_16_bytes_per_score_through_memory():
    # 1 TB/s, compute so fast that the attention kernels are bound by their bytes
    params = CostParams(1e12, 1e15, 1e15, 0.0, 0.0)
    fused = CostModel(TOY, "bf16", params, kv_dtype="bf16")
    unfused = CostModel(TOY, "bf16", params, kv_dtype="bf16", flash_attention=False)
    # a 512-token prompt from an empty cache: layer keys = 2 layers x (1 + 2 + ... + 512) = 262,656
    keys = 2 * 512 * 513 // 2
    scores = 16 * 8 * keys  # 16 B per (query, key, head, layer) x 8 heads = 33,619,968 B
    kv_write = 512 * TOY_KV_BYTES_PER_TOKEN  # 4,194,304 B; nothing cached is read
    a, b = fused.breakdown([512], [0]), unfused.breakdown([512], [0])
    assert a["attention_score_bytes"] == 0 and b["attention_score_bytes"] == scores
    assert a["attention_s"] == pytest.approx(kv_write / 1e12)
    assert b["attention_s"] == pytest.approx((kv_write + scores) / 1e12)
    assert b["attention_bound"] == "memory"
    # the GEMMs do not change, so the step grows by exactly the scores' time
    assert unfused.step_time([512], [0]) - fused.step_time([512], [0]) == pytest.approx(scores / 1e12)
    # a decode token at 1,000 cached tokens attends to 1,001 keys per layer
    d_keys = 2 * 1001
    assert (unfused.step_time((), (), [1000]) - fused.step_time((), (), [1000])
            == pytest.approx(16 * 8 * d_keys / 1e12))


def test_unfused_attention_reads_each_kv_head_once_per_query_head_less_what_the_backend_reuses():
    # TOY with grouped-query attention: 8 query heads share 2 K/V heads (a group of 4), so one token
    # holds 2 (K, V) x 2 heads x 128 x 2 B = 1,024 B of cache per layer
    gqa = TOY.model_copy(update={"n_kv_heads": 2})
    params = CostParams(1e12, 1e15, 1e15, 0.0, 0.0)  # 1 TB/s, compute so fast that bytes decide
    fused = CostModel(gqa, "bf16", params, kv_dtype="bf16")
    # a decode token at 1,000 cached tokens: 2 layers x 1,000 cached tokens read, 2 x 1,001 keys scored
    scores = 16 * 8 * 2 * 1001
    extra = {}
    for reads in (1.0, 2.0, 4.0, 10.0):
        unfused = CostModel(gqa, "bf16", params, kv_dtype="bf16", flash_attention=False, unfused_kv_reads=reads)
        extra[reads] = unfused.step_time((), (), [1000]) - fused.step_time((), (), [1000])
    one_read = 1024 * 2 * 1000  # 2,048,000 B: the cache once more
    assert extra[1.0] == pytest.approx(scores / 1e12)
    assert extra[2.0] == pytest.approx((scores + one_read) / 1e12)
    # at most one fetch per query head: 4 reads, whatever the backend's value
    assert extra[4.0] == pytest.approx((scores + 3 * one_read) / 1e12)
    assert extra[10.0] == pytest.approx(extra[4.0])
    b = CostModel(gqa, "bf16", params, kv_dtype="bf16", flash_attention=False,
                  unfused_kv_reads=2.0).breakdown((), (), [1000])
    assert b["kv_read_bytes"] == 2 * 1024 * 2 * 1000
    # without grouped-query attention every K/V head has one query head: read once
    mha = [CostModel(TOY, "bf16", params, kv_dtype="bf16", flash_attention=False, unfused_kv_reads=r)
           for r in (1.0, 4.0)]
    assert mha[0].step_time((), (), [1000]) == mha[1].step_time((), (), [1000])
    # the closed form of a decode run prices the same bytes as its steps
    cm = CostModel(gqa, "bf16", params, kv_dtype="bf16", flash_attention=False, unfused_kv_reads=2.0)
    steps = sum(cm.step_time((), (), [1000 + i]) for i in range(5))
    assert cm.decode_run_time(np.array([1000]), 5) == pytest.approx(steps)


def test_the_backend_sets_how_often_unfused_attention_reads_the_cache():
    from sim.cost.llamacpp import UNFUSED_KV_READS, unfused_kv_reads

    assert unfused_kv_reads("NVIDIA", "ggml") == UNFUSED_KV_READS["NVIDIA"] > 1
    assert unfused_kv_reads("Apple", "ggml") == UNFUSED_KV_READS["Apple"] > 1
    # other engines fuse attention; no public row checks llama.cpp's HIP or CPU kernels
    assert unfused_kv_reads("NVIDIA", "vllm") == unfused_kv_reads("AMD", "ggml") == 1.0
    llama = load_engine("llama.cpp").with_overrides(flash_attention=False)
    gqa = TOY.model_copy(update={"n_kv_heads": 2})
    nvidia = PROFILE.model_copy(update={"vendor": "NVIDIA"})
    off = CostModel.from_names(gqa, "bf16", nvidia, llama)
    on = CostModel.from_names(gqa, "bf16", nvidia, load_engine("llama.cpp"))
    assert off.kv_read_bytes_per_layer_token == UNFUSED_KV_READS["NVIDIA"] * 1024
    assert on.kv_read_bytes_per_layer_token == 1024


def test_the_engine_says_whether_attention_is_fused():
    llama = load_engine("llama.cpp")
    assert llama.flash_attention  # -fa auto: llama.cpp's default since 2025-08
    on = CostModel.from_names(TOY, "bf16", PROFILE, llama)
    off = CostModel.from_names(TOY, "bf16", PROFILE, llama.with_overrides(flash_attention=False))
    assert on.score_bytes_per_layer_key == 0
    assert off.score_bytes_per_layer_key == 16 * 8  # 16 B x 8 heads
    assert off.step_time([2048], [0]) > on.step_time([2048], [0])


def test_decode_steps_within_respects_max_steps_and_empty_batches():
    cm = toy_cost()
    assert cm.decode_steps_within(np.array([10]), 10.0, max_steps=7) == 7
    assert cm.decode_steps_within(np.array([10]), math.inf, max_steps=3) == 3
    assert cm.decode_steps_within(np.array([], dtype=int), 1.0) == 0
    assert cm.decode_steps_within(np.array([10]), 0.0) == 0


def test_distinct_experts_is_k_for_one_token_and_tends_to_all_experts():
    assert expected_distinct_experts(128, 8, 1) == pytest.approx(8)
    assert expected_distinct_experts(128, 8, 10_000) == pytest.approx(128)
    counts = expected_distinct_experts(128, 8, np.arange(1, 200))
    assert np.all(np.diff(counts) > 0)
    # two tokens: 2k minus the expected overlap k*k/E
    assert expected_distinct_experts(64, 4, 2) == pytest.approx(64 * (1 - (1 - 4 / 64) ** 2))


def test_moe_decode_reads_more_expert_weights_as_the_batch_grows():
    cm = CostModel.from_names("qwen3-30b-a3b", "bf16", PROFILE, "vllm")
    one, many = cm.breakdown(decode_context=[100]), cm.breakdown(decode_context=[100] * 256)
    assert one["experts_touched"] == pytest.approx(8)
    # 256 tokens touch nearly every expert of the pool their router draws from (128 x the model's
    # fitted expert_pool_fraction; all 128 under uniform routing)
    pool = 128 * cm.model.expert_pool_fraction
    assert 0.95 * pool < many["experts_touched"] <= pool + 1e-9
    assert many["weight_bytes"] - one["weight_bytes"] == pytest.approx(
        (many["experts_touched"] - 8) * cm.expert_bytes
    )


def test_a_wide_embedding_table_among_narrow_weights_leaves_its_own_bytes_out_of_the_stream():
    # gpt-oss-20b as ggml-org's MXFP4 GGUF (12.10 GB): the experts in MXFP4 (4.25 bits, exact), the
    # attention and vocabulary tensors at about Q8_0 (the file's remainder). The input table is a
    # gather, not streamed: what is left out is its own bytes, not its share of the parameters
    # (2.8%), which would leave ~0.8 GB of it in every decode step.
    cm = CostModel.from_names("gpt-oss-20b", "mxfp4", PROFILE, "llama.cpp")
    spec, q = cm.model, cm.quant
    total = spec.weight_bytes(q)
    experts = spec.routed_expert_params * 4.25 / 8
    assert cm.expert_bytes * spec.n_experts == pytest.approx(experts)
    table = spec.vocab_size * spec.hidden_size * 2 * (total - experts) / (spec.nominal_weight_bytes(q) - experts)
    assert cm.dense_weight_bytes == pytest.approx(total - table)
    # one token reads attention + LM head + 4 of 32 experts in 24 layers. Counted from the tensors
    # (attention 24 x 26.5M and LM head 201,088 x 2,880 at Q8_0's 8.5 bits: 1.29 GB; 96 experts of
    # 3 x 2,880^2 at 4.25 bits: 1.27 GB) that is 2.56 GB; the parameter-share split read 3.37 GB
    one = cm.breakdown(decode_context=[1])["weight_bytes"]
    assert 2.4e9 < one < 2.75e9
    # vLLM loads the released checkpoint (attention, router, vocabulary in bf16; 13.75 GB), not the
    # GGUF: the same token reads 1.27 GB of bf16 attention + 1.16 GB of bf16 LM head + the experts
    vllm = CostModel.from_names("gpt-oss-20b", "mxfp4", PROFILE, "vllm")
    assert vllm.model.weight_bytes("mxfp4") == pytest.approx(spec.nominal_weight_bytes(q))
    assert vllm.breakdown(decode_context=[1])["weight_bytes"] == pytest.approx(3.70e9, rel=0.01)
    # a format with one width for every tensor splits exactly by parameters, as before
    cm8 = CostModel.from_names("qwen3-30b-a3b", "q8_0", PROFILE, "llama.cpp")
    m8 = cm8.model
    assert cm8.dense_weight_bytes == pytest.approx(
        m8.weight_bytes("q8_0") * (m8.n_params_total - m8.vocab_size * m8.hidden_size) / m8.n_params_total)


def test_predict_times_vectorised_matches_step_time():
    cm = toy_cost(iteration_overhead_s=1e-3, per_sequence_overhead_s=2e-5)
    feats = cm.probe_features(
        prefill_tokens=[16, 512, 2048], prefill_context=[0, 100, 4000], decode_batch=[1, 8], decode_context=[50, 3000]
    )
    expected = [cm.step_time((16,), (0,)), cm.step_time((512,), (100,)), cm.step_time((2048,), (4000,)),
                cm.step_time((), (), [50]), cm.step_time((), (), [3000] * 8)]
    np.testing.assert_allclose(cm.predict_times(cm.params, feats), expected, rtol=1e-12)
    np.testing.assert_allclose(cm.predict_times(cm.params.to_array(), feats), expected, rtol=1e-12)


def test_cost_params_from_profile_applies_engine_scale_and_adds_overheads():
    engine = load_engine("vllm").with_overrides(
        efficiency_scale={"compute": 0.5, "bandwidth": 0.9}, iteration_overhead_ms=1.0, per_sequence_overhead_ms=0.01
    )
    p = CostParams.from_profile(PROFILE, "bf16", engine)
    assert p.bandwidth_bytes_per_s == pytest.approx(1000e9 * 0.8 * 0.9)
    assert p.matmul_flops_per_s == pytest.approx(1000e12 * 0.5 * 0.5)
    assert p.attention_flops_per_s == pytest.approx(1000e12 * 0.5 * 0.5 * 0.5)
    assert p.iteration_overhead_s == pytest.approx(1e-3)
    assert p.per_sequence_overhead_s == pytest.approx(1e-5)


def test_engine_specific_profile_efficiency_replaces_the_engine_scale():
    measured = Efficiency(compute=0.3, bandwidth=0.6, attention=0.4)
    hw = PROFILE.model_copy(update={"engine_efficiency": {"vllm": measured}})
    engine = load_engine("vllm").with_overrides(efficiency_scale={"bandwidth": 0.5})
    assert CostParams.from_profile(hw, "bf16", engine).bandwidth_bytes_per_s == pytest.approx(1000e9 * 0.6)


def test_profile_calibrated_on_an_engine_does_not_add_its_overheads_twice():
    hw = PROFILE.model_copy(update={"iteration_overhead_ms": 0.7, "calibration": {"engine": "llama.cpp"}})
    p = CostParams.from_profile(hw, "q4_k_m", load_engine("llama.cpp"))
    assert p.iteration_overhead_s == pytest.approx(0.7e-3)


def test_cost_params_reject_non_physical_values():
    with pytest.raises(ConfigError, match="bandwidth_bytes_per_s"):
        CostParams(0.0, 1e12, 1e12)
    with pytest.raises(ConfigError, match="iteration_overhead_s"):
        CostParams(1e9, 1e12, 1e12, -1.0)
    assert CostParams.from_array(CostParams(1e9, 2e12, 3e12, 4e-3, 5e-6).to_array()) == CostParams(1e9, 2e12, 3e12, 4e-3, 5e-6)


def test_padded_kv_views_price_every_row_over_the_padded_cells():
    # llama.cpp's attention spans n_kv = the used cells rounded up to 256 (masked cells computed)
    cm = CostModel(TOY, "bf16", toy_cost().params, kv_dtype="bf16", kv_pad=256)
    L = TOY.n_layers
    assert list(cm.padded_kv([1, 256, 257, 512, 513])) == [256, 256, 512, 512, 768]
    for p in (1, 200, 256, 257, 300):  # a prompt chunk from an empty cache: P rows x n_kv(P) cells
        b = cm.breakdown((p,), (0,), ())
        assert b["attention_flops"] == pytest.approx(cm.attention_flops_per_layer_key * L * p * cm.padded_kv(p))
    # one more prompt token past a block boundary doubles the attention, not a causal 1/256
    a256, a257 = (cm.breakdown((p,), (0,), ())["attention_flops"] for p in (256, 257))
    assert a257 / a256 == pytest.approx(257 * 512 / (256 * 256))
    # decodes of one pass share the longest sequence's view: 10 and 300 cached tokens both span 512 cells
    b = cm.breakdown((), (), [10, 300])
    assert b["attention_flops"] == pytest.approx(cm.attention_flops_per_layer_key * L * 2 * 512)
    assert b["kv_read_bytes"] == pytest.approx(cm.kv_bytes_per_layer_token * L * 2 * 512)
    # without padding (paged-attention engines) the causal keys stand
    plain = toy_cost()
    assert plain.breakdown((), (), [10, 300])["attention_flops"] == pytest.approx(
        plain.attention_flops_per_layer_key * L * (11 + 301))


def test_only_llama_cpp_pads_its_kv_views():
    from sim.catalog.engine_config import available_engines

    pads = {name: load_engine(name).attention_kv_padding for name in available_engines()}
    assert pads.pop("llama.cpp") == 256
    assert set(pads.values()) == {0}, pads


# ---- llama.cpp's CUDA MMQ tiles for routed experts (sim.cost.llamacpp.moe_expert_rows) ----------------


def _poisson_tiles_by_hand(lam: float, m: int) -> float:
    """E[ceil(X / m)] for X ~ Poisson(lam), from the probability mass function term by term."""
    total, pmf, x = 0.0, math.exp(-lam), 0
    while x < lam + 20 * math.sqrt(lam) + 50:
        total += pmf * math.ceil(x / m)
        x += 1
        pmf *= lam / x
    return total


def test_llama_cpp_cuda_runs_one_token_as_a_gemv_and_pads_each_expert_to_its_mmq_tiles():
    from sim.cost.llamacpp import moe_expert_rows

    # one token: its k experts, one row each (the mat-vec kernel with expert ids)
    assert moe_expert_rows(1, 4, 128.0, 128, 30.0) == pytest.approx(4.0)
    # 2,048 tokens over 128 experts, top 4: 64 rows an expert on average in 128-row tiles -> about one
    # tile each, twice the rows there are (no start-up)
    rows = moe_expert_rows(2048, 4, 128.0, 128, 0.0)
    assert rows == pytest.approx(128 * 128 * _poisson_tiles_by_hand(64.0, 128), rel=1e-9)
    assert rows / (2048 * 4) == pytest.approx(2.0, rel=0.01)
    # 16 tokens: the tile narrows to 16 rows (the batch rounded up to 8); 128 experts, top 8: one
    # row an expert on average, so ~81 experts run a 16-row tile, plus 16 start-up rows each
    rows16 = moe_expert_rows(16, 8, 128.0, 128, 16.0)
    assert rows16 == pytest.approx(128 * _poisson_tiles_by_hand(1.0, 16) * (16 + 16), rel=1e-9)
    assert 128 * (1 - math.exp(-1)) < rows16 / 32 < 128 * (1 - math.exp(-1)) + 1
    # many rows per expert: the waste shrinks to the last, partial tile
    big = moe_expert_rows(65536, 4, 128.0, 128, 0.0)
    assert 1.0 < big / (65536 * 4) < 1.1
    # arrays give what scalars give
    t = np.array([1.0, 16.0, 2048.0])
    assert np.allclose(moe_expert_rows(t, 8, 128.0, 128, 16.0),
                       [moe_expert_rows(float(x), 8, 128.0, 128, 16.0) for x in t])


def test_the_tile_rule_applies_to_llama_cpp_on_nvidia_gpus_only():
    from sim.cost.llamacpp import cuda_moe_expert_tile

    assert CostModel.from_names("gpt-oss-120b", "mxfp4", "dgx-spark", "llama.cpp").moe_expert_tile == 128
    assert CostModel.from_names("gpt-oss-20b", "mxfp4", "rtx-4090", "ollama").moe_expert_tile == 128
    assert CostModel.from_names("gpt-oss-120b", "mxfp4", "dgx-spark", "vllm").moe_expert_tile == 0
    assert CostModel.from_names("gpt-oss-20b", "mxfp4", "apple-m4-max", "llama.cpp").moe_expert_tile == 0
    assert cuda_moe_expert_tile("AMD", "ggml") == 0
    # in the cost model: a 2,048-token prompt's experts cost twice their FLOPs; an 8,192-token one's
    # (256 +- 16 rows an expert: two tiles, a third for about half of them) 1.24 times; the dense
    # layers are unchanged
    cm = CostModel.from_names("gpt-oss-120b", "mxfp4", "dgx-spark", "llama.cpp")
    cm.model = cm.model.model_copy(update={"expert_pool_fraction": 1.0})
    experts = cm.flops_per_token - cm.non_expert_flops_per_token
    per_token = {t: (cm._layer_matmul_flops(float(t), 0.0) - cm.non_expert_flops_per_token * t) / t
                 for t in (2048, 8192)}
    assert per_token[2048] == pytest.approx(2.0 * experts, rel=0.01)
    assert per_token[8192] == pytest.approx(experts * _poisson_tiles_by_hand(256.0, 128) * 128 / 256, rel=1e-6)
    assert 1.2 < per_token[8192] / experts < 1.3


# ---- llama.cpp's CUDA MMQ tile traffic (sim.cost.llamacpp.mmq_tile_traffic_bytes) ------------------------

def test_mmq_tile_traffic_counts_weight_and_activation_tiles_by_hand():
    """Dense: the weights once per 128-row column tile, the q8_1 activations (1.125 bytes a value) once
    per 128-row weight tile. MoE: each routed expert's weights once per tile of its rows, the tiles
    counted as `moe_expert_rows` counts them."""
    from sim.cost.llamacpp import moe_expert_rows, mmq_tile_traffic_bytes

    w, macs = 7.0e9, 6.5e9
    assert mmq_tile_traffic_bytes(512, w, 0.0, 0, 0.0, macs) == pytest.approx(4 * w + 512 * macs * 1.125 / 128)
    assert mmq_tile_traffic_bytes(100, w, 0.0, 0, 0.0, macs) == pytest.approx(w + 100 * macs * 1.125 / 128)
    t = np.array([100.0, 512.0, 2048.0])
    assert np.allclose(mmq_tile_traffic_bytes(t, w, 0.0, 0, 0.0, macs),
                       [mmq_tile_traffic_bytes(float(x), w, 0.0, 0, 0.0, macs) for x in t])
    # gpt-oss-120b-like: 128 experts, top 4; a 2,048-token prompt gives an expert 64 rows, one tile each
    e_bytes = 0.45e9
    got = mmq_tile_traffic_bytes(2048, 1.0e9, e_bytes, 4, 128.0, 5.1e9)
    tiles = moe_expert_rows(2048, 4, 128.0, 128, 0.0) / 128
    assert 127 < tiles < 128.01
    assert got == pytest.approx(1.0e9 * 16 + e_bytes * tiles + 2048 * 5.1e9 * 1.125 / 128)


def test_the_mmq_tile_floor_binds_llama_cpp_quantized_prompts_on_nvidia_only():
    """The floor: tile traffic over the datasheet bandwidth, for llama.cpp's quantized matmuls on an
    NVIDIA GPU from 9 rows on (up to 8 the mat-vec kernels run); not f16 weights (cuBLAS), not other
    engines or devices. On the DGX Spark (273 GB/s) a 2,048-token Qwen2.5-7B Q8_0 pass cannot beat
    the traffic floor however fast the int8 rate."""
    spark = CostModel.from_names("qwen2.5-7b", "q8_0", "dgx-spark", "llama.cpp")
    assert spark.mmq_tile_bandwidth == pytest.approx(273e9)
    assert CostModel.from_names("qwen2.5-7b", "q4_k_m", "rtx-4090", "ollama").mmq_tile_bandwidth == pytest.approx(1008e9)
    assert CostModel.from_names("qwen2.5-7b", "f16", "dgx-spark", "llama.cpp").mmq_tile_bandwidth == 0.0
    assert CostModel.from_names("qwen2.5-7b", "q8_0", "apple-m4-max", "llama.cpp").mmq_tile_bandwidth == 0.0
    assert CostModel.from_names("llama-3.1-8b", "bf16", "dgx-spark", "vllm").mmq_tile_bandwidth == 0.0
    assert spark._mmq_tile_s(8.0) == 0.0 and spark._mmq_tile_s(9.0) > 0.0
    floor = spark._mmq_tile_s(2048.0)
    dense = spark.dense_weight_bytes - spark.head_bytes
    assert floor == pytest.approx((dense * 16 + 2048 * spark.flops_per_token / 2 * 1.125 / 128) / 273e9)
    fast = CostParams(spark.params.bandwidth_bytes_per_s, 1e17, spark.params.attention_flops_per_s)
    no_floor = CostModel.from_names("qwen2.5-7b", "q8_0", "dgx-spark", "llama.cpp", params=fast)
    no_floor.mmq_tile_bandwidth = 0.0
    with_floor = CostModel.from_names("qwen2.5-7b", "q8_0", "dgx-spark", "llama.cpp", params=fast)
    # with an unbounded int8 rate the weight GEMMs take the floor instead of the weight stream
    matmul_s, weights_s = no_floor._kernel_terms(no_floor._param_tuple(), 2048.0, 1.0, 0.0, 0.0)[:2]
    assert matmul_s < weights_s < floor
    step = {cm: cm.step_time(prefill_tokens=[2048], prefill_context=[0]) for cm in (no_floor, with_floor)}
    assert step[with_floor] - step[no_floor] == pytest.approx(floor - weights_s, rel=1e-6)
    # a decode step of one sequence is untouched
    assert with_floor.step_time(decode_context=[512]) == pytest.approx(no_floor.step_time(decode_context=[512]))
