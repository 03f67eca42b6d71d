"""The per-layer kernel floor of MLA models (EngineConfig.mla_layer_floor_us, sim.cost.roofline
`layer_floor_s`): a DeepSeek layer's chain of small kernels takes at least that long per step, so the
weight-GEMM phase of a step lasts at least n_layers x the floor. Exposed at small batch over 8 devices,
hidden once a large batch streams most experts; other architectures are not priced (issue 38)."""

import numpy as np
import pytest

from sim.catalog.engine_config import load_engine
from sim.cost.roofline import CostModel
from sim.errors import ConfigError


def _cm(model, quant, hw, floor_us, tp=8, engine="sglang"):
    eng = load_engine(engine).with_overrides(tp=tp, mla_layer_floor_us=floor_us)
    return CostModel.from_names(model, quant, hw, eng)


@pytest.mark.parametrize("model,quant,hw", [("llama-3.1-70b", "bf16", "a100-80g"),
                                            ("gpt-oss-120b", "mxfp4", "h100-sxm")])
def test_models_without_mla_are_not_priced_a_floor(model, quant, hw):
    # a dense 70B hides any floor behind its weight stream; gpt-oss-120b (GQA MoE) over 8 H100s decodes as
    # the kernel-level rows measure with no floor: neither moves
    base = _cm(model, quant, hw, 0.0).step_time(decode_context=[1000])
    assert _cm(model, quant, hw, 80.0).step_time(decode_context=[1000]) == base


def test_a_large_batch_hides_the_floor_behind_the_expert_stream():
    # 256 DeepSeek-R1 sequences over 8 B200s touch nearly every expert: ~84 GB of FP8 weights per device
    # and step, far above 61 layers x 50 us
    ctx = [1000] * 256
    base = _cm("deepseek-r1", "fp8", "b200", 0.0).step_time(decode_context=ctx)
    assert _cm("deepseek-r1", "fp8", "b200", 50.0).step_time(decode_context=ctx) == pytest.approx(base, rel=1e-12)


def test_a_sparse_moe_at_batch_one_pays_n_layers_times_the_floor():
    # DeepSeek-R1 FP8 over 8 B200s streams ~10 us of weights per layer at batch 1: once the floor is above
    # that, each us of floor adds n_layers us to the step
    lo, hi = _cm("deepseek-r1", "fp8", "b200", 60.0), _cm("deepseek-r1", "fp8", "b200", 100.0)
    base = _cm("deepseek-r1", "fp8", "b200", 0.0)
    n_layers = lo.model.n_layers
    t0, t1, t2 = (c.step_time(decode_context=[1000]) for c in (base, lo, hi))
    assert t1 > t0
    assert t2 - t1 == pytest.approx(n_layers * 40e-6, rel=1e-9)
    # a long prefill is compute-bound: the floor does not show
    p0 = base.step_time(prefill_tokens=[8000], prefill_context=[0])
    assert hi.step_time(prefill_tokens=[8000], prefill_context=[0]) == pytest.approx(p0, rel=1e-12)


@pytest.mark.parametrize("tp,model,quant,hw", [(8, "deepseek-r1", "fp8", "b200"),
                                               (8, "deepseek-v3", "fp8", "h200")])
def test_decode_runs_with_the_floor_sum_their_steps(tp, model, quant, hw):
    # the simulator's closed form for k steps of a fixed batch equals the sum of k single steps
    cm = _cm(model, quant, hw, 150.0, tp=tp)
    ctx = np.array([300, 1200, 4000])
    k = 40
    loop = sum(cm.step_time(decode_context=ctx + i) for i in range(k))
    assert cm.decode_run_time(ctx, k) == pytest.approx(loop, rel=1e-9)
    assert cm.decode_run_time(ctx, k) > _cm(model, quant, hw, 0.0, tp=tp).decode_run_time(ctx, k)


def test_a_negative_floor_is_refused():
    with pytest.raises((ConfigError, ValueError)):
        load_engine("sglang").with_overrides(mla_layer_floor_us=-1.0)
