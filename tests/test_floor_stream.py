"""The per-layer kernel floor's chain + stream form (EngineConfig.layer_floor_plus_stream; sim.cost.kernels
layer_floor_stream_s, sim.cost.roofline, sim.cost.placed): the layers' chain latency plus the step's weight bytes
at the datasheet bandwidth, so a TP group or a smaller format keeps its faster stream under the floor."""

from __future__ import annotations

import pytest

from calibrate.serving.engine_set import check_engine_set
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.cost.kernels import extra_expert_bytes, layer_floor_stream_s
from sim.cost.roofline import CostModel

HW = load_profile("h100-sxm")


def _cm(quant="bf16", model="llama-3.1-8b", **fields):
    return CostModel.from_names(model, quant, HW, load_engine("vllm").with_overrides(**fields))


def _decode_s(cm, batch=1, ctx=140):
    return cm.step_time((), (), (ctx,) * batch)


def test_the_field_defaults_to_the_constant_floor_and_changes_nothing_unset():
    eng = load_engine("vllm")
    assert eng.layer_floor_plus_stream is False
    base, same = _cm(layer_floor_us=200.0), _cm(layer_floor_us=200.0, layer_floor_plus_stream=False)
    assert base.floor_stream_ratio == 0.0
    for b in (1, 16, 128):
        assert _decode_s(base, b) == _decode_s(same, b)
    assert check_engine_set({"layer_floor_plus_stream": True}) == {"layer_floor_plus_stream": True}


def test_one_devices_gemm_phase_is_the_chain_plus_the_weights_at_the_datasheet_bandwidth_hand_computed():
    cm = _cm(layer_floor_us=100.0, layer_floor_plus_stream=True)
    # r = datasheet / effective bandwidth: 3.35 TB/s over the profile's fitted effective rate
    assert cm.floor_stream_ratio == pytest.approx(HW.bandwidth_bytes_per_s / cm.params.bandwidth_bytes_per_s)
    assert cm.floor_stream_ratio > 1.0
    floor_s = 32 * 100e-6 + cm.weight_bytes_read(1.0) / 3.35e12  # Llama-3.1-8B: 32 layers, ~16 GB at 3.35 TB/s
    plain = _cm(layer_floor_us=0.0).breakdown((), (), (140,))
    assert floor_s > plain["gemm_s"]  # the floor binds at one sequence
    assert cm.breakdown((), (), (140,))["gemm_s"] == pytest.approx(floor_s, rel=1e-12)


def test_a_zero_chain_never_binds_the_datasheet_stream_being_faster_than_the_effective_one():
    stream0, none = _cm(layer_floor_us=0.0, layer_floor_plus_stream=True), _cm(layer_floor_us=0.0)
    tiny = _cm(layer_floor_us=1e-6, layer_floor_plus_stream=True)  # floor on, chain ~0: bytes at 3.35 TB/s only
    for b in (1, 64):
        assert _decode_s(stream0, b) == _decode_s(none, b)
        assert _decode_s(tiny, b) == pytest.approx(_decode_s(none, b), rel=1e-9)


def test_tp2_and_fp8_keep_their_faster_stream_under_the_chain_plus_stream_floor():
    # the constant 200 us floor prices TP1 BF16, TP2 BF16 and TP2 FP8 alike (n_layers x 200 us binds);
    # waynehacking8's H100 vLLM runs measure 6.19, 4.04 and 2.98 ms at one client (corpus_e_wayne.py)
    const = [_decode_s(_cm(q, tp=tp, layer_floor_us=200.0)) for q, tp in (("bf16", 1), ("bf16", 2), ("fp8", 2))]
    assert const[1] == pytest.approx(const[2], rel=1e-3) and const[0] == pytest.approx(const[1], rel=1e-3)
    chain = [_decode_s(_cm(q, tp=tp, layer_floor_us=50.0, layer_floor_plus_stream=True))
             for q, tp in (("bf16", 1), ("bf16", 2), ("fp8", 2))]
    assert chain[0] > chain[1] > chain[2]
    # TP2 still pays the chain: slower than half of TP1, as measured (4.04 / 6.19 = 0.65)
    assert chain[1] > 0.5 * chain[0]
    # and on a TP group the floor still binds over the plain roofline (the all-reduces inside it)
    assert chain[1] > _decode_s(_cm("bf16", tp=2, layer_floor_us=0.0))


def test_a_moe_steps_stream_term_counts_the_experts_it_touches():
    spec_eng = dict(layer_floor_us=100.0, layer_floor_plus_stream=True)
    cm = CostModel.from_names("qwen3-30b-a3b", "bf16", HW, load_engine("vllm").with_overrides(**spec_eng))
    for t in (1.0, 32.0):
        want = cm.gemm_floor_s + cm.weight_bytes_read(t) / HW.bandwidth_bytes_per_s
        got = cm.breakdown((), (), (140,) * int(t))["gemm_s"]
        assert got >= want * (1 - 1e-12)  # the floor (or the slower effective stream above it)
    assert cm.weight_bytes_read(32.0) > cm.weight_bytes_read(1.0)


def test_a_pipeline_part_pays_its_share_of_the_chain_over_its_share_of_the_stream():
    def stage0(chain):
        return _cm(pp=2, layer_floor_us=chain, layer_floor_plus_stream=True).breakdown((), (), (140,))["parts"][0]
    # stage 0 holds 16 of the 32 layers: 100 us more chain per layer costs it 16 x 100 us, once the floor binds
    assert stage0(200.0)["memory_s"] - stage0(100.0)["memory_s"] == pytest.approx(16 * 100e-6, rel=1e-9)
    # its floor = 16 x chain + half the layers' bytes at 3.35 TB/s: above that, the K/V term only
    two = _cm(pp=2, layer_floor_us=100.0, layer_floor_plus_stream=True)
    floor = 16 * 100e-6 + 0.5 * (two.weight_bytes_read(1.0) - two.head_bytes) / 3.35e12
    assert floor < stage0(100.0)["memory_s"] < floor + 1e-4
    assert _decode_s(two) > _decode_s(_cm(pp=2, layer_floor_us=0.0))


def test_the_constant_form_is_unchanged_on_a_pipeline_with_routed_experts():
    # the constant form's extra experts stay a part's share (f x extra bytes / bandwidth), as before the field
    eng = load_engine("vllm").with_overrides(pp=2, layer_floor_us=150.0)
    cm = CostModel.from_names("qwen3-30b-a3b", "bf16", HW, eng)
    p = cm.placement.parts[0]
    assert layer_floor_stream_s(cm, 8.0, p.bandwidth_bytes_per_s, 123.0, 0.5) == \
        0.5 * extra_expert_bytes(cm, 8.0) / p.bandwidth_bytes_per_s
