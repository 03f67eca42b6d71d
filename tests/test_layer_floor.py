"""The per-layer kernel floor (EngineConfig.layer_floor_us, formerly mla_layer_floor_us for MLA models only; sim.cost.roofline
`layer_floor_s`, sim.cost.placed): every decoder layer's chain of small kernels takes at least that long per
step, so a step's weight GEMMs and tensor-parallel all-reduces together last at least n_layers x the floor
(the attention over cached keys on top). Exposed at small batch by small models and large TP groups, hidden
once the weight stream is longer (issue 38)."""

import numpy as np
import pytest

from sim.catalog.engine_config import load_engine
from sim.catalog.lookup import get_model
from sim.cost.kernels import extra_expert_bytes
from sim.cost.params import CostParams
from sim.cost.parallel import ParallelConfig
from sim.cost.roofline import CostModel
from sim.errors import ConfigError


def _cm(model, quant, hw, floor_us, tp=8, engine="sglang", pp=1):
    eng = load_engine(engine).with_overrides(tp=tp, pp=pp, layer_floor_us=floor_us)
    return CostModel.from_names(model, quant, hw, eng)


# one device, plain rates: bandwidth 1 TB/s, matmuls 1 PFLOP/s, attention 100 TFLOP/s, no host overheads
_P = CostParams(1e12, 1e15, 1e14)


def test_a_dense_model_on_one_device_hand_computed_binding_and_not():
    # Llama-3.1-8B bf16: 32 layers, K/V 2 x 8 heads x 128 x 2 B = 4,096 B per token and layer. ~16 GB of
    # weights at 1 TB/s stream ~16 ms (~500 us per layer), so a 1,000 us floor binds and a 100 us one does not.
    spec = get_model("llama-3.1-8b")
    base = CostModel(spec, "bf16", _P)
    ctx = 999
    # binding: the GEMM phase is 32 x 1 ms; then the K/V phase, max(attention FLOPs, K/V bytes):
    # K/V = 4,096 B x 32 layers x (999 read + 1 written) / 1e12 = 131.072 us, attention 2 x 2 x 32 heads x
    # 128 x 32 layers x 1,000 keys / 1e14 = 5.2 us
    floored = CostModel(spec, "bf16", _P, layer_floor_s=1000e-6)
    assert floored.step_time(decode_context=[ctx]) == pytest.approx(32 * 1000e-6 + 4096 * 32 * 1000 / 1e12, rel=1e-12)
    # not binding: 32 x 100 us = 3.2 ms is below the ~16 ms weight stream: the step is unchanged
    weights_s = base.dense_weight_bytes / 1e12
    assert weights_s > 32 * 100e-6
    assert CostModel(spec, "bf16", _P, layer_floor_s=100e-6).step_time(decode_context=[ctx]) == \
        base.step_time(decode_context=[ctx])
    assert base.step_time(decode_context=[ctx]) == pytest.approx(weights_s + 4096 * 32 * 1000 / 1e12, rel=1e-3)


@pytest.mark.parametrize("model,quant,hw,engine", [
    ("llama-3.1-8b", "bf16", "h100-sxm", "vllm"),            # dense attention
    ("gpt-oss-120b", "mxfp4", "h100-sxm", "vllm"),           # GQA MoE
    ("qwen3-next-80b-a3b", "bf16", "h200", "sglang"),        # linear attention + attention hybrid MoE
    ("deepseek-r1", "fp8", "b200", "sglang"),                # MLA MoE
])
def test_every_layer_kind_pays_n_layers_times_the_floor_once_it_binds(model, quant, hw, engine):
    # once the floor is above the layer's own time, each us of floor adds n_layers us (all layers, recurrent
    # ones too) to a decode step at batch 1
    lo, hi = _cm(model, quant, hw, 2000.0, tp=1, engine=engine), _cm(model, quant, hw, 3000.0, tp=1, engine=engine)
    t1, t2 = (c.step_time(decode_context=[1000]) for c in (lo, hi))
    assert t2 - t1 == pytest.approx(lo.model.n_layers * 1000e-6, rel=1e-9)


def test_under_tensor_parallel_the_floor_bounds_gemms_and_all_reduces_together():
    # gpt-oss-120b over 8 H100s at batch 1: the all-reduces count inside the floor, not on top of it
    from sim.catalog.hardware import load_profile

    spec, hw = get_model("gpt-oss-120b"), load_profile("h100-sxm")
    params = CostParams(3e12, 5e14, 3e14)

    def step(floor_us, latency_us):
        par = ParallelConfig.for_profile(hw, tp=8, latency_us=latency_us)
        return CostModel(spec, "mxfp4", params, parallel=par, layer_floor_s=floor_us / 1e6).step_time(
            decode_context=[1000])

    L = spec.n_layers
    # no floor: 2 all-reduces per layer x 2 (8 - 1) ring steps x 1 us more latency = 28 us per layer more
    assert step(0.0, 3.0) - step(0.0, 2.0) == pytest.approx(L * 2 * 14 * 1e-6, rel=1e-6)
    # a binding floor (1 ms per layer) holds GEMMs and all-reduces: the all-reduce latency no longer shows,
    # and the step is n_layers x the floor plus the attention phase (the same at either latency)
    assert step(1000.0, 3.0) == pytest.approx(step(1000.0, 2.0), rel=1e-12)
    assert step(2000.0, 3.0) - step(1000.0, 3.0) == pytest.approx(L * 1000e-6, rel=1e-9)
    # a floor below the model's own layer time moves nothing
    assert step(1.0, 2.0) == step(0.0, 2.0)


def test_the_floor_does_not_shrink_with_tp_while_the_weight_stream_does():
    # a dense 70B bf16 on H200s: TP 2 streams ~70 GB per rank per step (~190 us per layer, well above a
    # 150 us floor); TP 8 streams a quarter of that, and its GEMMs plus all-reduces fall below 80 x 150 us:
    # the same per-layer floor binds at TP 8 only (every rank runs every layer's whole kernel chain)
    def extra(tp):
        return (_cm("llama-3.1-70b", "bf16", "h200", 150.0, tp=tp).step_time(decode_context=[1000])
                - _cm("llama-3.1-70b", "bf16", "h200", 0.0, tp=tp).step_time(decode_context=[1000]))
    assert extra(2) == 0.0
    assert extra(8) > 0.5e-3


def test_pipeline_stages_each_pay_their_layers_share():
    # pp = 2 over 1 device each: each stage holds half the layers and pays half of n_layers x floor; a
    # batch-1 step runs the stages one after the other, so a binding floor adds n_layers x the increase
    lo = _cm("llama-3.1-8b", "bf16", "h100-sxm", 2000.0, tp=1, pp=2, engine="vllm")
    hi = _cm("llama-3.1-8b", "bf16", "h100-sxm", 3000.0, tp=1, pp=2, engine="vllm")
    assert [p.layer_fraction for p in lo.placement.parts] == [0.5, 0.5]
    t1, t2 = (c.step_time(decode_context=[1000]) for c in (lo, hi))
    assert t2 - t1 == pytest.approx(32 * 1000e-6, rel=1e-9)


def test_a_large_batch_hides_the_floor_behind_the_expert_stream():
    # 256 DeepSeek-R1 sequences over 8 B200s touch nearly every expert: ~84 GB of FP8 weights per device
    # and step, far above 61 layers x 50 us
    ctx = [1000] * 256
    base = _cm("deepseek-r1", "fp8", "b200", 0.0).step_time(decode_context=ctx)
    assert _cm("deepseek-r1", "fp8", "b200", 50.0).step_time(decode_context=ctx) == pytest.approx(base, rel=1e-12)


def test_a_long_prefill_is_compute_bound_and_does_not_show_the_floor():
    base = _cm("deepseek-r1", "fp8", "b200", 0.0)
    hi = _cm("deepseek-r1", "fp8", "b200", 100.0)
    p0 = base.step_time(prefill_tokens=[8000], prefill_context=[0])
    assert hi.step_time(prefill_tokens=[8000], prefill_context=[0]) == pytest.approx(p0, rel=1e-12)


@pytest.mark.parametrize("tp,model,quant,hw", [(8, "deepseek-r1", "fp8", "b200"),
                                               (8, "deepseek-v3", "fp8", "h200"),
                                               (1, "llama-3.1-8b", "bf16", "h100-sxm"),
                                               (4, "gpt-oss-120b", "mxfp4", "h200")])
def test_decode_runs_with_the_floor_sum_their_steps(tp, model, quant, hw):
    # the simulator's closed form for k steps of a fixed batch equals the sum of k single steps
    cm = _cm(model, quant, hw, 400.0, tp=tp)
    ctx = np.array([300, 1200, 4000])
    k = 40
    loop = sum(cm.step_time(decode_context=ctx + i) for i in range(k))
    assert cm.decode_run_time(ctx, k) == pytest.approx(loop, rel=1e-9)
    assert cm.decode_run_time(ctx, k) > _cm(model, quant, hw, 0.0, tp=tp).decode_run_time(ctx, k)


def test_a_negative_floor_is_refused():
    with pytest.raises((ConfigError, ValueError)):
        load_engine("sglang").with_overrides(layer_floor_us=-1.0)


def test_the_former_mla_only_name_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="mla_layer_floor_us"):
        load_engine("sglang").with_overrides(mla_layer_floor_us=60.0)


def test_with_all_reduce_by_algorithm_the_floor_still_holds_the_all_reduces():
    # the custom one-shot / two-shot kernels (sim.cost.parallel TPAllReduce) are the same all-reduces:
    # a binding floor holds them as it holds the ring's, so the step is the same whichever prices them
    from sim.catalog.hardware import load_profile

    spec, hw = get_model("gpt-oss-120b"), load_profile("h100-sxm")
    params = CostParams(3e12, 5e14, 3e14)

    def step(floor_us, algorithms):
        eng = load_engine("vllm").with_overrides(tp=8, allreduce_algorithms=algorithms)
        par = ParallelConfig.for_profile(hw, tp=8, latency_us=2.0, engine=eng)
        return CostModel(spec, "mxfp4", params, parallel=par, layer_floor_s=floor_us / 1e6).step_time(
            decode_context=[1000])

    assert step(0.0, True) != pytest.approx(step(0.0, False), rel=1e-3)  # unbound: the algorithms differ
    assert step(1000.0, True) == pytest.approx(step(1000.0, False), rel=1e-12)


def test_a_batch_s_extra_experts_stream_on_top_of_the_floor_hand_computed():
    # GLM-4.7-Flash bf16 on one device at 1 TB/s: 64 routed experts, top-4, 46 MoE layers of
    # 3 x 2048 x 1536 weights at 2 B = 18,874,368 B per expert and layer (868,220,928 B over the 46).
    # 14 sequences touch 64 x (1 - (60/64)^14) = 38.06 experts per layer, 34.06 more than one token.
    spec = get_model("glm-4.7-flash")
    base = CostModel(spec, "bf16", _P)
    floored = CostModel(spec, "bf16", _P, layer_floor_s=1000e-6)  # 47 layers x 1 ms = 47 ms
    expert = 46 * 3 * 2048 * 1536 * 2
    assert base.expert_bytes == expert
    e14 = 64 * (1 - (60 / 64) ** 14)
    assert extra_expert_bytes(floored, 14.0) == pytest.approx((e14 - 4) * expert, rel=1e-12)
    assert extra_expert_bytes(floored, 1.0) == 0.0
    # The floor binds at every batch here (47 ms against 7-37 ms of stream), and it lifts each step by the
    # same amount: 47 ms less one token's stream, the extra experts' bytes being streamed on top of it
    # (before, a batch of 14 paid max(47 ms, its 36.7 ms stream): the extra experts hid under the floor).
    one_token_s = base.weight_bytes_read(1.0) / 1e12
    for b in (1, 14, 60):
        ctx = [700] * b
        lift = floored.step_time(decode_context=ctx) - base.step_time(decode_context=ctx)
        assert lift == pytest.approx(47 * 1000e-6 - one_token_s, rel=1e-9)
    # a dense model streams the same bytes whatever the batch: nothing on top of the floor
    assert extra_expert_bytes(CostModel(get_model("llama-3.1-8b"), "bf16", _P, layer_floor_s=1000e-6), 14.0) == 0.0


def test_under_tensor_parallel_extra_experts_stream_on_top_of_the_floor():
    # DeepSeek-R1 FP8 over 8 B200s at SGLang's 150 us floor: one sequence's step is floor-bound (61 x 150 us
    # against ~0.8 ms of stream per GPU); 14 sequences stream (E_14 - 8) x 44 MB x 58 layers = 215 GB more
    # over the group, which now lengthens the step instead of hiding under the floor
    cm = _cm("deepseek-r1", "fp8", "b200", 150.0)
    e14 = 256 * (1 - (248 / 256) ** 14)
    extra = extra_expert_bytes(cm, 14.0)
    assert extra == pytest.approx((e14 - 8) * cm.expert_bytes, rel=1e-12)
    assert cm.expert_bytes == pytest.approx(58 * 3 * 7168 * 2048, rel=0.01)  # 1 B per FP8 weight (+ block scales)
    group_bw = cm.placement.parts[0].bandwidth_bytes_per_s
    t1 = cm.step_time(decode_context=[700])
    t14 = cm.step_time(decode_context=[700] * 14)
    no_floor = _cm("deepseek-r1", "fp8", "b200", 0.0)
    # the step grows by at least the extra experts' stream (plus the per-token all-reduce and attention growth)
    assert t14 - t1 >= extra / group_bw
    # and by what it grows without any floor, less the all-reduces' growth with the tokens (which the floor
    # holds: ~0.04 ms here): the floor lifts a batch of 14 as much as one sequence (before: 1.2 ms of growth)
    grow = no_floor.step_time(decode_context=[700] * 14) - no_floor.step_time(decode_context=[700])
    assert t14 - t1 == pytest.approx(grow, rel=0.02)
