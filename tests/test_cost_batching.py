"""The multi-row matmul term of the cost model (`CostParams.matmul_half_rows`, Hockney's n_1/2).

A matmul over n >= 2 activation rows runs as a tiled GEMM and costs flops_per_row x (n + n_1/2) /
matmul_flops_per_s; one row is a GEMV and keeps the plain roofline (sim/cost/roofline.py docstring; the
switch is llama.cpp's `llamafile_sgemm` refusing n < 2). Expected figures are computed in each test
from the numbers written in it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fit import Observation, fit_cost_params, physical_bounds, predict_observations
from sim.catalog.hardware import HardwareProfile
from sim.catalog.lookup import get_model
from sim.catalog.models import ModelSpec
from sim.cost.llamacpp import gemm_rows
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel

# The toy model of tests/test_cost.py: 2 layers of 4,194,304 + 12,582,912 matmul params,
# a tied 32,000 x 1024 LM head.
TOY = ModelSpec(
    name="toy", n_layers=2, hidden_size=1024, n_heads=8, n_kv_heads=8, head_dim=128,
    intermediate_size=4096, vocab_size=32000, max_context=8192, tie_embeddings=True,
)
BODY_FLOPS_PER_ROW = 2.0 * 2 * (4_194_304 + 12_582_912)  # 67,108,864
HEAD_FLOPS_PER_ROW = 2.0 * 32_000 * 1024  # 65,536,000
MM = 1e12  # FLOP/s


def compute_bound(half: float, it_s: float = 0.0, seq_s: float = 0.0) -> CostModel:
    """Memory and attention so fast that a step is its matmul time plus overheads."""
    return CostModel(TOY, "bf16", CostParams(1e18, MM, 1e18, it_s, seq_s, half), kv_dtype="bf16")


def test_default_is_the_plain_roofline():
    assert CostParams(1e12, 1e12, 1e12).matmul_half_rows == 0.0
    plain = compute_bound(0.0)
    for n in (1, 2, 7, 16):
        expected = (BODY_FLOPS_PER_ROW + HEAD_FLOPS_PER_ROW) * n / MM
        assert plain.step_time((), (), [10] * n) == pytest.approx(expected, rel=1e-9)


def test_every_shipped_profile_keeps_the_plain_roofline():
    from sim.catalog.hardware import load_profile_file, shipped_profiles_dir

    shipped = sorted(shipped_profiles_dir().glob("*.yaml"))
    assert len(shipped) >= 3  # the catalog exists (GPUs, SoCs, CPUs)
    for path in shipped:
        hw = load_profile_file(path)
        assert hw.matmul_half_rows == 0.0, path.name
        assert CostParams.from_profile(hw, "bf16").matmul_half_rows == 0.0


def test_one_sequence_decode_is_a_gemv_without_startup():
    assert compute_bound(5.0).step_time((), (), [100]) == pytest.approx(compute_bound(0.0).step_time((), (), [100]))


def test_batched_decode_pays_the_gemm_startup_once_per_matmul():
    half = 3.0
    cm = compute_bound(half)
    for n in (2, 4, 16):
        expected = (BODY_FLOPS_PER_ROW + HEAD_FLOPS_PER_ROW) * (n + half) / MM
        assert cm.step_time((), (), [10] * n) == pytest.approx(expected, rel=1e-9)


def test_startup_makes_two_sequences_cost_more_than_twice_one_and_larger_batches_cheaper_per_sequence():
    # the shape measured on llama.cpp CPUs: 25 ms, 56 ms, then ~10 ms per extra sequence
    cm = compute_bound(3.0)
    t = {n: cm.step_time((), (), [10] * n) for n in (1, 2, 16)}
    assert t[2] / t[1] == pytest.approx(2.0 + 3.0)  # compute-bound toy: (2 + 3) rows vs 1
    assert t[16] / 16 < t[2] / 2  # the start-up amortises over the batch


def test_prefill_chunk_layers_are_a_gemm_and_its_single_logit_a_gemv():
    half = 4.0
    p = 64
    expected = (BODY_FLOPS_PER_ROW * (p + half) + HEAD_FLOPS_PER_ROW * 1) / MM
    assert compute_bound(half).step_time((p,), (0,), ()) == pytest.approx(expected, rel=1e-6)  # + ~1e-11 s attention


def test_gemm_rows_switches_kernel_at_two_rows():
    assert gemm_rows(1, 3.0) == 1
    assert gemm_rows(2, 3.0) == 5.0
    np.testing.assert_array_equal(gemm_rows(np.array([0.0, 1.0, 2.0, 4.0, 8.0]), 3.0), [0.0, 1.0, 5.0, 7.0, 11.0])
    assert gemm_rows(7, 0.0) == 7


def test_gemm_rows_adds_a_leftover_tile_pass_past_multiples_of_four():
    # 9 rows = two 4-row tiles + 1 leftover row in a second, narrower pass: its own start-up (n_1/2)
    # and the leftover row counted twice
    assert gemm_rows(9, 3.0) == 9 + 3.0 + (3.0 + 1)
    assert gemm_rows(7, 3.0) == 7 + 3.0 + (3.0 + 3)
    assert gemm_rows(3, 3.0) == 3 + 3.0  # within the first tile: one pass
    rows = np.arange(2, 17, dtype=float)
    np.testing.assert_array_equal(gemm_rows(rows, 3.0), [gemm_rows(int(r), 3.0) for r in rows])
    # a decode step of 8 sequences is cheaper than one of 7 (a measured fact of llama.cpp's CPU kernels)
    spec = get_model("gemma-3-270m")
    cm = CostModel(spec, "q4_k_m", CostParams(25e9, 90e9, 35e9, 0.0, 0.0, 4.0))
    assert cm.step_time((), (), [100.0] * 8) < cm.step_time((), (), [100.0] * 7)


def test_predict_times_agrees_with_step_time_and_accepts_five_parameters():
    cm = CostModel(TOY, "bf16", CostParams(5e11, 2e12, 1e12, 1e-3, 2e-4, 2.5), kv_dtype="bf16")
    shapes = [((), (), [300] * n) for n in (1, 2, 5)] + [((128,), (40,), [50, 60])]
    feats = [cm.features(*s) for s in shapes]
    from sim.cost.roofline import StepFeatures

    got = cm.predict_times(cm.params, StepFeatures.concat(feats))
    np.testing.assert_allclose(got, [cm.step_time(*s) for s in shapes], rtol=1e-12)
    five = CostParams(5e11, 2e12, 1e12, 1e-3, 2e-4)
    np.testing.assert_allclose(
        cm.predict_times(five.to_array()[:5], StepFeatures.concat(feats)),
        CostModel(TOY, "bf16", five, kv_dtype="bf16").predict_times(five, StepFeatures.concat(feats)),
    )
    assert CostParams.from_array([1e9, 1e9, 1e9, 0.0, 0.0]).matmul_half_rows == 0.0


def test_logits_for_several_positions_price_the_head_as_a_gemm():
    # speculative verification asks logits for n x p positions: the head is then a GEMM of n x p rows
    half = 2.0
    cm = compute_bound(half)
    t = float(cm.placed_time(8.0, 2.0, 0.0, 0.0, logits=8.0))
    assert t == pytest.approx((BODY_FLOPS_PER_ROW * (8 + half) + HEAD_FLOPS_PER_ROW * (8 + half)) / MM, rel=1e-9)


def test_profile_field_reaches_the_cost_parameters():
    hw = HardwareProfile(name="box", kind="cpu", memory_capacity_gb=24, memory_bandwidth_gb_per_s=20, peak_tflops={"fp32": 0.05},
                         matmul_half_rows=3.5)
    assert CostParams.from_profile(hw, "q4_k_m").matmul_half_rows == 3.5


def test_profile_rejects_negative_half_rows():
    with pytest.raises(ValueError):
        HardwareProfile(name="box", kind="cpu", memory_capacity_gb=24, memory_bandwidth_gb_per_s=20, peak_tflops={"fp32": 0.05},
                        matmul_half_rows=-1.0)


@settings(max_examples=40, deadline=None)
@given(
    half=st.sampled_from([0.0, 0.7, 3.0, 12.0]),
    contexts=st.lists(st.integers(1, 1500), min_size=1, max_size=12),
    k=st.integers(1, 600),
    model=st.sampled_from(["toy", "gemma-3-270m"]),
    bw=st.sampled_from([5e9, 30e9, 3e12]),
    slow=st.sampled_from([1.0, 3.7]),
    mv=st.sampled_from([0.0, 2e-12]),
)
def test_decode_run_time_is_the_exact_sum_of_steps_and_steps_within_its_inverse(half, contexts, k, model, bw, slow, mv):
    spec = TOY if model == "toy" else get_model(model)
    cm = CostModel(spec, "q4_k_m" if model != "toy" else "bf16",
                   CostParams(bw, 60e9, 40e9, 1e-3, 2e-4, half, slow, mv), kv_dtype="bf16")
    d = np.array(contexts, dtype=float)
    steps = [cm.step_time((), (), d + i) for i in range(k)]
    total = cm.decode_run_time(d, k)
    assert total == pytest.approx(math.fsum(steps), rel=1e-9)
    budget = total * 0.999 if k > 1 else total
    within = cm.decode_steps_within(d, budget)
    assert cm.decode_run_time(d, within) <= budget
    assert cm.decode_run_time(d, within + 1) > budget


def test_fit_recovers_a_known_startup_and_decode_attention_slowdown_from_noise_free_points():
    spec = get_model("gemma-3-270m")
    true = CostParams(bandwidth_bytes_per_s=10e9, matmul_flops_per_s=55e9, attention_flops_per_s=40e9,
                      iteration_overhead_s=0.5e-3, per_sequence_overhead_s=0.3e-3, matmul_half_rows=3.5,
                      decode_attention_slowdown=3.0)
    cost = CostModel(spec, "q4_k_m", true)
    shapes = ([("prefill", p, 0, 0, 0.0) for p in (32, 64, 128, 256, 512, 1024)]
              + [("decode", 0, 0, 1, c) for c in (32, 256, 512, 1024)]
              + [("decode", 0, 0, b, c) for c in (64, 512) for b in (2, 3, 4, 8, 12, 16)]
              + [("mixed", 128, 0, 4, 64.0)])
    obs = [Observation(f"{k}-{i}", k, p, cp, b, c, 1.0) for i, (k, p, cp, b, c) in enumerate(shapes)]
    t = predict_observations(cost, true, obs)  # the mixed point as llama.cpp's passes, as the fit prices it
    obs = [Observation(o.id, o.kind, o.prefill_tokens, o.prefill_context, o.decode_batch, o.decode_context, float(x))
           for o, x in zip(obs, t)]
    bounds = physical_bounds(17e9, 47e9, int8_speedup=4.0)
    fit = fit_cost_params(cost, obs, bounds, seed=0)
    assert fit.params.matmul_half_rows == pytest.approx(3.5, rel=0.05)
    assert fit.params.decode_attention_slowdown == pytest.approx(3.0, rel=0.05)
    assert fit.heldout_median_abs_error < 1e-3
    # without the start-up term (bounds of the five older parameters) the same points cannot be fitted
    old = type(bounds)(bounds.lower[:5], bounds.upper[:5])
    plain = fit_cost_params(cost, obs, old, seed=0)
    assert plain.params.matmul_half_rows == 0.0
    assert plain.train_median_abs_error_by_kind["decode"] > 0.05


def test_efficiency_transfer_carries_the_startup_between_cpus_only():
    from sim.catalog.hardware import apply_efficiencies

    box = HardwareProfile(name="my-box", kind="cpu", memory_capacity_gb=24, memory_bandwidth_gb_per_s=20,
                          peak_tflops={"fp32": 0.05}, iteration_overhead_ms=10.0, matmul_half_rows=3.0)
    other_cpu = HardwareProfile(name="big-cpu", kind="cpu", memory_capacity_gb=512, memory_bandwidth_gb_per_s=300,
                                peak_tflops={"fp32": 5.0})
    gpu = HardwareProfile(name="gpu", kind="gpu", memory_capacity_gb=80, memory_bandwidth_gb_per_s=3000,
                          peak_tflops={"bf16": 900.0})
    assert apply_efficiencies(other_cpu, box).matmul_half_rows == 3.0
    on_gpu = apply_efficiencies(gpu, box)
    assert on_gpu.matmul_half_rows == 0.0
    assert "matmul_half_rows" in on_gpu.calibration["efficiency_from"]["kept_from_target"]


def test_decode_attention_slowdown_multiplies_only_the_attention_of_decode_tokens():
    spec = get_model("gemma-3-270m")
    # bandwidth so high that every step is compute-bound: step = matmul + attention seconds
    base = CostParams(1e18, 60e9, 40e9)
    one, three = CostModel(spec, "q4_k_m", base), CostModel(spec, "q4_k_m", CostParams(1e18, 60e9, 40e9,
                                                                                      decode_attention_slowdown=3.0))
    # a prompt's attention is untouched
    assert three.step_time((512,), (1024,), ()) == pytest.approx(one.step_time((512,), (1024,), ()), rel=1e-12)
    # 16 decodes at 500 cached tokens: each attends to kappa(501) keys summed over layers
    ctx = np.full(16, 500.0)
    keys = 16 * float(one.layer_tokens(501.0))
    extra = 2.0 * 4.0 * spec.n_heads * spec.d_head * keys / 40e9  # (3 - 1) x attention FLOPs / rate
    assert three.step_time((), (), ctx) - one.step_time((), (), ctx) == pytest.approx(extra, rel=1e-9)
    # in a mixed step only the decodes' keys pay it
    mixed = three.step_time((256,), (0,), ctx) - one.step_time((256,), (0,), ctx)
    assert mixed == pytest.approx(extra, rel=1e-9)
    assert three.breakdown((256,), (0,), ctx)["decode_attention_flops"] == pytest.approx(
        4.0 * spec.n_heads * spec.d_head * keys, rel=1e-12)


def test_profile_carries_the_decode_attention_slowdown_into_the_cost_parameters():
    hw = HardwareProfile(name="box", kind="cpu", memory_capacity_gb=24, memory_bandwidth_gb_per_s=20,
                         peak_tflops={"fp32": 0.05}, decode_attention_slowdown=2.5)
    assert CostParams.from_profile(hw, "q4_k_m").decode_attention_slowdown == 2.5
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="decode_attention_slowdown"):
        CostParams(1e9, 1e9, 1e9, decode_attention_slowdown=0.0)


def test_matvec_alu_roof_prices_every_streamed_weight_once_per_step_up_to_eight_rows():
    """`matvec_s_per_weight`: a step of n <= 8 rows spends (weights it streams) x s on the mat-vec
    kernels' ALUs, once per step, when that is slower than the weight stream; from 9 rows (mat-mat
    kernels) nothing."""
    mv = 1e-12
    fast = CostParams(1e18, 1e18, 1e18, 0.0, 0.0, 0.0, 1.0, mv)
    cm = CostModel(TOY, "bf16", fast, kv_dtype="bf16")
    for n in (1, 2, 8):
        expected = (BODY_FLOPS_PER_ROW + HEAD_FLOPS_PER_ROW) / 2 * mv  # the toy model's matmul weights
        assert cm.step_time((), (), [10] * n) == pytest.approx(expected, rel=1e-6)
    no_roof = CostModel(TOY, "bf16", CostParams(1e18, 1e18, 1e18, 0.0, 0.0, 0.0, 1.0, 0.0), kv_dtype="bf16")
    assert cm.step_time((), (), [10] * 9) == pytest.approx(no_roof.step_time((), (), [10] * 9), rel=1e-12)
    assert cm.step_time((), (), [10] * 8) > 1e4 * no_roof.step_time((), (), [10] * 8)
    # below the weight stream it changes nothing
    slow_memory = CostParams(1e9, 1e18, 1e18, 0.0, 0.0, 0.0, 1.0, 1e-18)
    plain = CostParams(1e9, 1e18, 1e18, 0.0, 0.0, 0.0, 1.0, 0.0)
    assert CostModel(TOY, "bf16", slow_memory, kv_dtype="bf16").step_time((), (), [10]) == pytest.approx(
        CostModel(TOY, "bf16", plain, kv_dtype="bf16").step_time((), (), [10]))


def test_matvec_alu_roof_reaches_only_k_quants_on_apple_gpus_and_splits_over_a_tp_group():
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile
    from sim.cost.parallel import tp_group_params

    mac, gpu = load_profile("apple-m1-max"), load_profile("rtx-4090")
    llama = load_engine("llama.cpp")
    c = mac.engine_efficiency["ggml"].kquant_matvec_flops_per_weight
    assert c and c > 0  # fitted to public Apple rows (calibrate/public_fit.py fit_matvec_alu)
    k = CostParams.from_profile(mac, "q4_k_m", llama.for_hardware(mac))
    assert k.matvec_s_per_weight == pytest.approx(c / mac.peak_flops("fp32"))
    assert CostParams.from_profile(mac, "q4_0", llama.for_hardware(mac)).matvec_s_per_weight == 0.0
    assert CostParams.from_profile(gpu, "q4_k_m", llama.for_hardware(gpu)).matvec_s_per_weight == 0.0
    assert tp_group_params(k, 2).matvec_s_per_weight == pytest.approx(k.matvec_s_per_weight / 2)
