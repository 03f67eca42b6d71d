"""Tensor and pipeline parallelism in the cost model (sim/cost/parallel.py, sim/cost/roofline.py, sim/cost/memory.py).

Expected figures are worked out by hand in each test from the numbers written in it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import Efficiency, HardwareProfile, load_profile
from sim.catalog.lookup import get_model
from sim.catalog.models import ModelSpec
from sim.cost.memory import check_parallel_fit, device_memory_bytes, kv_capacity_tokens, parallel_kv_capacity_tokens
from sim.cost.parallel import (
    ParallelConfig,
    gpipe_time_s,
    kv_heads_per_device,
    pipeline_bubble_fraction,
    ring_allreduce_s,
    stage_layer_counts,
)
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel
from sim.errors import ConfigError

# The toy model of tests/test_cost.py: 2 layers, h = 1024, 8 heads = 8 KV heads of 128, F = 4096,
# V = 32,000 tied. 66,327,552 parameters = 132,655,104 bytes in bf16; the LM head (= the tied
# embedding) is 32,768,000 parameters = 65,536,000 bytes; the rest 67,119,104 bytes.
# KV: 2 (K, V) x 8 heads x 128 x 2 bytes = 4,096 bytes per token per layer.
TOY = ModelSpec(
    name="toy", n_layers=2, hidden_size=1024, n_heads=8, n_kv_heads=8, head_dim=128,
    intermediate_size=4096, vocab_size=32000, max_context=8192, tie_embeddings=True,
)
WEIGHT_BYTES = 132_655_104
HEAD_BYTES = 65_536_000
LAYER_BYTES = WEIGHT_BYTES - HEAD_BYTES  # 67,119,104
KV_PER_LAYER_TOKEN = 4096
# per device: 800 GB/s effective, 500 TFLOP/s matmul and attention; links of 100 GB/s and 5 us
PARAMS = CostParams(8e11, 5e14, 5e14)
LINK_BW, LINK_LAT = 1e11, 5e-6


def toy(tp=1, pp=1) -> CostModel:
    return CostModel(TOY, "bf16", PARAMS, kv_dtype="bf16",
                     parallel=ParallelConfig(tp, pp, LINK_BW, LINK_LAT))


def test_ring_allreduce_moves_two_n_minus_one_over_n_of_the_message_plus_step_latencies():
    # 4 devices, 1 MB over 100 GB/s, 5 us per step: 2*3/4 * 1e6/1e11 = 1.5e-5 s; 2*3 * 5e-6 = 3e-5 s
    assert ring_allreduce_s(1e6, 4, 1e11, 5e-6) == pytest.approx(4.5e-5, rel=1e-12)
    assert ring_allreduce_s(1e6, 1, 1e11, 5e-6) == 0.0


def test_tensor_parallel_decode_step_matches_the_hand_worked_case():
    # tp = 2, one sequence at context 1000 (memory-bound).
    # Per device bytes: (weights 132,655,104 + KV read 2 layers x 1000 x 4096 = 8,192,000
    #   + KV write 2 x 4096 = 8,192) / 2 = 70,427,648 B -> / 8e11 B/s = 8.803456e-5 s
    # All-reduces: 2 per layer x 2 layers, each of 1 token x 1024 x 2 B = 2048 B over 2 devices:
    #   2*1/2 * 2048/1e11 + 2*1 * 5e-6 = 1.002048e-5 s -> x 4 = 4.008192e-5 s
    # step = 8.803456e-5 + 4.008192e-5 = 1.2811648e-4 s
    cm = toy(tp=2)
    assert cm.step_time((), (), [1000]) == pytest.approx(1.2811648e-4, rel=1e-9)
    b = cm.breakdown(decode_context=[1000])
    assert b["comm_s"] == pytest.approx(4.008192e-5, rel=1e-9)
    assert b["bound"] == "memory"


def test_tensor_parallel_splits_prefill_compute_n_ways_plus_an_allreduce_term_linear_in_tokens():
    one, four = toy(), toy(tp=4)
    p = 4096
    b1, b4 = one.breakdown((p,), (0,)), four.breakdown((p,), (0,))
    assert b1["bound"] == b4["bound"] == "compute"
    # all-reduces: 4 of 4096 x 1024 x 2 B over 4 devices: 2*3/4 * 8,388,608 / 1e11 + 6 * 5e-6 per all-reduce
    comm = 4 * (1.5 * 8_388_608 / 1e11 + 6 * 5e-6)
    assert b4["comm_s"] == pytest.approx(comm, rel=1e-9)
    assert four.step_time((p,), (0,)) == pytest.approx(one.step_time((p,), (0,)) / 4 + comm, rel=1e-9)


def test_all_reduces_run_at_the_profiles_bus_bandwidth_and_pipeline_sends_at_the_link_rate():
    """Over PCIe a ring all-reduce reaches what the host's fabric delivers, not the link rate
    (`allreduce_bus_bandwidth_gb_per_s`); a point-to-point pipeline send keeps the link."""
    p = 4096
    # tp = 4 with a 25 GB/s bus bandwidth on a 100 GB/s link: 4 all-reduces of 8,388,608 B,
    # each 2*3/4 * 8,388,608 / 2.5e10 + 6 * 5e-6
    slow = CostModel(TOY, "bf16", PARAMS, kv_dtype="bf16",
                     parallel=ParallelConfig(4, 1, LINK_BW, LINK_LAT, allreduce_bandwidth_bytes_per_s=2.5e10))
    assert slow.breakdown((p,), (0,))["comm_s"] == pytest.approx(4 * (1.5 * 8_388_608 / 2.5e10 + 6 * 5e-6), rel=1e-9)
    # pp = 2: the boundary send of 2 tokens is unchanged by the all-reduce figure (1e11 B/s link)
    staged = CostModel(TOY, "bf16", PARAMS, kv_dtype="bf16",
                       parallel=ParallelConfig(1, 2, LINK_BW, LINK_LAT, allreduce_bandwidth_bytes_per_s=2.5e10))
    assert staged.breakdown(decode_context=[1000] * 4)["comm_s"] == pytest.approx(5.04096e-6, rel=1e-9)
    # the profiles carry it: an L40S pair all-reduces at 14 GB/s, an H100 SXM at its NVLink rate
    l40s, h100 = ParallelConfig.for_profile(load_profile("l40s"), 2), ParallelConfig.for_profile(load_profile("h100-sxm"), 2)
    assert (l40s.allreduce_bandwidth_bytes_per_s, l40s.interconnect_bandwidth_bytes_per_s) == (14e9, 32e9)
    assert h100.allreduce_bandwidth_bytes_per_s is None
    with pytest.raises(ConfigError, match="all-reduce"):
        ParallelConfig(2, 1, LINK_BW, LINK_LAT, allreduce_bandwidth_bytes_per_s=0.0)


def test_kv_heads_are_replicated_when_tp_exceeds_the_kv_head_count():
    assert kv_heads_per_device(8, 2) == 4
    assert kv_heads_per_device(8, 16) == 1  # 16 ranks, 8 KV heads: each rank keeps one (replicated)
    # per-device KV of llama-3.1-8b (8 KV heads) at tp=16 is 1/8 of the total, not 1/16
    m = get_model("llama-3.1-8b")
    total_kv = 1000 * m.kv_bytes_per_token("fp16")
    [(_, kv16)] = device_memory_bytes(m, "bf16", "fp16", 1000, tp=16)
    [(_, kv8)] = device_memory_bytes(m, "bf16", "fp16", 1000, tp=8)
    assert kv16 == pytest.approx(total_kv / 8) and kv8 == pytest.approx(total_kv / 8)


def test_pipeline_parallel_decode_step_matches_the_hand_worked_case():
    # pp = 2, four sequences at context 1000 -> m = 2 micro-batches of 2 sequences.
    # Stage 0: layer 1 (half the layer bytes), stage 1: layer 2 + the LM head.
    # A micro-batch: 2 tokens, KV layer-tokens read 2 layers x 2 x 1000 = 4000, written 2 x 2 = 4.
    # stage 0 memory: 67,119,104/2 + 0.5 x 4096 x 4004 = 33,559,552 + 8,200,192 = 41,759,744 B -> 5.219968e-5 s
    # stage 1 memory: 33,559,552 + 65,536,000 + 8,200,192 = 107,295,744 B -> 1.3411968e-4 s
    # transfer at the boundary: 2 tokens x 1024 x 2 B / 1e11 + 5e-6 = 5.04096e-6 s
    # one micro-batch's pass = 5.219968e-5 + 1.3411968e-4 + 5.04096e-6 = 1.9136032e-4 s
    # (compute is < 1e-6 s a stage); but the last stage (LM head) must run both micro-batches:
    # 2 x 1.3411968e-4 = 2.6823936e-4 s > the pass, so the slowest stage sets the iteration.
    cm = toy(pp=2)
    ctx = [1000] * 4
    assert cm.step_time((), (), ctx) == pytest.approx(2.6823936e-4, rel=1e-9)
    b = cm.breakdown(decode_context=ctx)
    assert b["microbatches"] == 2
    assert [p["memory_s"] for p in b["parts"]] == pytest.approx([5.219968e-5, 1.3411968e-4], rel=1e-9)
    assert b["comm_s"] == pytest.approx(5.04096e-6, rel=1e-9)
    assert b["pipeline_bottleneck_s"] == b["step_s"] == pytest.approx(2.6823936e-4, rel=1e-9)


def test_a_layer_split_without_overlap_runs_the_whole_step_through_the_stages_in_turn():
    # llama.cpp's --split-mode layer (`pipeline_overlap: none`): the toy's four decodes at context 1000
    # are one pass, GPU 0's layer then GPU 1's, no micro-batches. Per stage, the four sequences' K/V:
    # 4 x 1000 x 4096 B read + 4 x 4096 B written = 16,400,384 B
    # stage 0: 33,559,552 + 16,400,384 = 49,959,936 B / 8e11 = 6.244992e-5 s
    # stage 1: 49,959,936 + 65,536,000 (LM head) = 115,495,936 B -> 1.4436992e-4 s
    # one hop: 4 tokens x 1024 x 2 B / 1e11 + 5e-6 = 5.08192e-6 s
    # step = 6.244992e-5 + 1.4436992e-4 + 5.08192e-6 = 2.1190176e-4 s (the sum, not max(pass, 2 x slowest))
    cm = CostModel(TOY, "bf16", PARAMS, kv_dtype="bf16",
                   parallel=ParallelConfig(1, 2, LINK_BW, LINK_LAT, microbatch_overlap=False))
    ctx = [1000] * 4
    assert cm.step_time((), (), ctx) == pytest.approx(2.1190176e-4, rel=1e-9)
    b = cm.breakdown(decode_context=ctx)
    assert b["microbatches"] == 1
    assert [p["memory_s"] for p in b["parts"]] == pytest.approx([6.244992e-5, 1.4436992e-4], rel=1e-9)
    # the closed-form decode run agrees with the per-step sum
    steps = sum(cm.step_time((), (), [c + i for c in ctx]) for i in range(50))
    assert cm.decode_run_time(ctx, 50) == pytest.approx(steps, rel=1e-9)
    # the same split with micro-batch overlap (vLLM's pipeline) keeps its own figure (previous test)
    assert toy(pp=2).step_time((), (), ctx) == pytest.approx(2.6823936e-4, rel=1e-9)


def test_llama_cpp_and_ollama_layer_splits_do_not_overlap_micro_batches_and_vllm_pipelines_do():
    for engine, overlap in (("llama.cpp", False), ("ollama", False), ("vllm", True), ("trtllm", True), ("sglang", True)):
        eng = load_engine(engine).with_overrides(pp=2)
        cm = CostModel.from_names("llama-3.1-8b", None, "h100-sxm", eng)
        assert cm.parallel.microbatch_overlap is overlap, engine
        assert cm.placement.microbatches == (2 if overlap else 1), engine


def test_balanced_pipeline_iteration_is_one_pass_of_a_micro_batch():
    # The toy with an 8-token vocabulary: the head is 8 x 1024 x 2 = 16,384 B, so the stages balance.
    # Layers (and final norm) still 67,119,104 B; pp = 2, four sequences at context 1000, m = 2.
    # stage 0: 33,559,552 + 8,200,192 = 41,759,744 B -> 5.219968e-5 s
    # stage 1: 41,759,744 + 16,384     = 41,776,128 B -> 5.222016e-5 s
    # pass = 5.219968e-5 + 5.222016e-5 + 5.04096e-6 (transfer) = 1.094608e-4 s
    #      > 2 x 5.222016e-5 = 1.0444032e-4 s (the slowest stage's two micro-batches): the pass sets it
    small_vocab = TOY.model_copy(update={"vocab_size": 8})
    cm = CostModel(small_vocab, "bf16", PARAMS, kv_dtype="bf16", parallel=ParallelConfig(1, 2, LINK_BW, LINK_LAT))
    b = cm.breakdown(decode_context=[1000] * 4)
    assert b["step_s"] == pytest.approx(1.094608e-4, rel=1e-9)
    assert b["pipeline_bottleneck_s"] == pytest.approx(1.0444032e-4, rel=1e-9)


def test_gpipe_bubble_is_n_minus_one_over_m_plus_n_minus_one():
    # 4 stages, 8 micro-batches: idle 3/11 of the pass; pass = 11 stage times + 3 transfers
    assert pipeline_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert gpipe_time_s(0.01, 4, 8, transfer_s=0.001) == pytest.approx(11 * 0.01 + 3 * 0.001)
    # busy share = m stage-times of work / pass length
    assert 1 - pipeline_bubble_fraction(4, 8) == pytest.approx(8 * 0.01 / gpipe_time_s(0.01, 4, 8))


def test_stages_split_layers_evenly_with_the_remainder_first():
    assert stage_layer_counts(80, 3) == (27, 27, 26)
    with pytest.raises(ConfigError, match="pp=3"):
        stage_layer_counts(2, 3)


def test_a_lone_sequence_gains_nothing_from_pipeline_stages_but_pays_the_transfers():
    one, two = toy(), toy(pp=2)
    # m = 1: the single micro-batch visits both stages in turn; bytes are the same, plus one transfer
    assert two.step_time((), (), [500]) == pytest.approx(
        one.step_time((), (), [500]) + 1024 * 2 / LINK_BW + LINK_LAT, rel=1e-9)


PLACED = st.sampled_from([(1, 2), (2, 1), (4, 1), (2, 2), (1, 3)])
MODELS = {"toy": TOY, "gemma-3-270m": get_model("gemma-3-270m"), "qwen3-30b-a3b": get_model("qwen3-30b-a3b")}


@settings(deadline=None, max_examples=30)
@given(model=st.sampled_from(sorted(MODELS)), split=PLACED, contexts=st.lists(st.integers(0, 2000), min_size=1,
       max_size=9), k=st.integers(1, 80), attention_tflops=st.floats(0.001, 500.0), budget_s=st.floats(0.0, 2.0))
def test_parallel_closed_form_equals_the_loop_and_inverts_exactly(model, split, contexts, k, attention_tflops, budget_s):
    tp, pp = split
    assume(pp <= MODELS[model].n_layers)
    params = CostParams(8e11, 5e14, attention_tflops * 1e12, 1e-4, 1e-5)
    cm = CostModel(MODELS[model], "bf16", params, kv_dtype="bf16", parallel=ParallelConfig(tp, pp, LINK_BW, LINK_LAT))
    ctx = np.array(contexts)
    loop = sum(cm.step_time((), (), ctx + i) for i in range(k))
    assert cm.decode_run_time(ctx, k) == pytest.approx(loop, rel=1e-9)
    j = cm.decode_steps_within(ctx, budget_s)
    assert cm.decode_run_time(ctx, j) <= budget_s < cm.decode_run_time(ctx, j + 1)
    assert cm.decode_steps_within(ctx, budget_s, max_steps=3) == min(j, 3)


def test_memory_check_names_the_device_and_the_shortfall():
    h100 = load_profile("h100-sxm")
    m = get_model("llama-3.1-70b")
    weights = m.weight_bytes("bf16")  # ~141 GB
    budget = h100.memory_bytes * 0.9
    with pytest.raises(ConfigError) as err:
        check_parallel_fit(h100, m, "bf16", "fp16", 10_000, tp=1, memory_fraction=0.9)
    kv = 10_000 * m.kv_bytes_per_token("fp16")
    assert "h100-sxm" in str(err.value) and f"short by {(weights + kv - budget) / 1e9:.1f} GB" in str(err.value)
    check_parallel_fit(h100, m, "bf16", "fp16", 10_000, tp=4, memory_fraction=0.9)  # ~35 GB a device: fits
    with pytest.raises(ConfigError, match="pipeline stage 0"):  # 70.6 GB weights + 16.4 GB KV > 77.3 GB
        check_parallel_fit(h100, m, "bf16", "fp16", 100_000, pp=2, memory_fraction=0.9)


def test_parallel_kv_capacity_is_the_single_device_capacity_at_tp1_and_grows_with_tp():
    h100 = load_profile("h100-sxm")
    m = get_model("llama-3.1-8b")
    single = kv_capacity_tokens(h100, m, "bf16", "fp16", 0.9, 2e9)
    assert parallel_kv_capacity_tokens(h100, m, "bf16", "fp16", 1, 1, 0.9, 2e9) == pytest.approx(single, abs=1)
    # tp = 2: each device holds half the weights and half of each token's KV -> more than twice the tokens
    assert parallel_kv_capacity_tokens(h100, m, "bf16", "fp16", 2, 1, 0.9, 2e9) > 2 * single


def test_engine_tp_and_pp_reach_the_cost_model_with_the_profiles_interconnect():
    # an engine without fitted efficiencies on the profile: the profile's interconnect as it stands
    hf = CostModel.from_names("llama-3.1-70b", "bf16", "h100-sxm", load_engine("hf").with_overrides(tp=4))
    assert hf.parallel == ParallelConfig(4, 1, 450e9, 5e-6)
    # vLLM's kernel family carries an all-reduce step latency fitted to public TP rows: it replaces the profile's
    eng = load_engine("vllm").with_overrides(tp=4)
    cm = CostModel.from_names("llama-3.1-70b", "bf16", "h100-sxm", eng)
    fitted = load_profile("h100-sxm").efficiency_for("vllm", "torch").interconnect_latency_us
    assert fitted is not None and fitted != 5.0
    assert cm.parallel == ParallelConfig(4, 1, 450e9, fitted / 1e6)
    plain = CostModel.from_names("llama-3.1-70b", "bf16", "h100-sxm", "vllm")
    assert plain.placement is None
    assert cm.single_stream_decode_tok_s(1000) > 2 * plain.single_stream_decode_tok_s(1000)


def test_tp_needs_an_interconnect_and_offload_excludes_tp():
    cpu = HardwareProfile(name="lonely", kind="cpu", memory_capacity_gb=64, memory_bandwidth_gb_per_s=100,
                          peak_tflops={"fp32": 1.0}, efficiency=Efficiency())
    with pytest.raises(ConfigError, match="interconnect"):
        ParallelConfig.for_profile(cpu, tp=2)
    with pytest.raises(ConfigError, match="gpu_layers"):
        load_engine("llama.cpp").with_overrides(tp=2, gpu_layers=10)
    with pytest.raises(ConfigError, match="tp"):
        ParallelConfig(tp=0)


def test_deployment_capacity_is_plain_capacity_for_one_device_and_counts_a_draft_models_weights():
    from sim.cost.memory import deployment_kv_capacity_tokens

    h100, m = load_profile("h100-sxm"), get_model("llama-3.1-8b")
    vllm = load_engine("vllm")
    plain = kv_capacity_tokens(h100, m, "bf16", "fp16", vllm.memory_fraction, 2e9)
    assert deployment_kv_capacity_tokens(h100, m, "bf16", vllm, 2e9) == plain
    # a 1 GB draft model on the same device takes 1 GB / 131,072 B per token = 7,629 tokens of KV
    with_draft = deployment_kv_capacity_tokens(h100, m, "bf16", vllm, 2e9, extra_weight_bytes=1e9)
    assert plain - with_draft == pytest.approx(1e9 / m.kv_bytes_per_token("fp16"), abs=1)


def test_tensor_parallel_group_pays_the_devices_gemm_start_up():
    """A TP group is one device of N x the rates *with* the device's n_1/2 (`DevicePart.matmul_half_rows`):
    each device runs its GEMMs on the same T rows and its start-up is its 1/N of the weights. So a
    compute-bound prompt of 512 tokens at tp = 2 with n_1/2 = 64 rows costs what one device of twice the
    rates and the same n_1/2 costs, plus the all-reduces: matmuls 2 x 33,554,432 FLOP/token x (512 + 64)
    + the LM head's 65,536,000 FLOP (one row: a GEMV, no start-up) over 1e15 FLOP/s."""
    half = 64.0
    slow = CostParams(1e15, 5e14, 5e14, matmul_half_rows=half)  # ample bandwidth: compute-bound
    tp2 = CostModel(TOY, "bf16", slow, kv_dtype="bf16", parallel=ParallelConfig(2, 1, LINK_BW, LINK_LAT))
    one = CostModel(TOY, "bf16", CostParams(2e15, 1e15, 1e15, matmul_half_rows=half), kv_dtype="bf16")
    assert tp2.placement.parts[0].matmul_half_rows == half
    comm = tp2.placement.comm_s_per_token * 512 + tp2.placement.comm_s_per_pass
    assert tp2.step_time((512,), (0,), ()) == pytest.approx(one.step_time((512,), (0,), ()) + comm, rel=1e-9)
    b = one.breakdown((512,), (0,), ())
    assert b["compute_s"] == pytest.approx((2 * 33_554_432 * (512 + half) + 65_536_000 + b["attention_flops"]) / 1e15,
                                           rel=1e-12)
    # without n_1/2 the group is the plain roofline again
    plain = CostModel(TOY, "bf16", CostParams(1e15, 5e14, 5e14), kv_dtype="bf16",
                      parallel=ParallelConfig(2, 1, LINK_BW, LINK_LAT))
    assert plain.step_time((512,), (0,), ()) < tp2.step_time((512,), (0,), ())
