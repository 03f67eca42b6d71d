"""The measured decode-step correction of a calibrated profile (sim/cost/roofline.py `DecodeCorrection`).

Expected factors are computed in each test from the measured / fitted seconds written in it.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.profile import build_profile
from sim.catalog.engine_config import load_engine
from sim.catalog.lookup import get_model
from sim.catalog.quant import get_quant
from sim.cost.llamacpp import DecodeCorrection
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel
from workloads.request import Request

MODEL = get_model("llama-3.1-8b")
QUANT = get_quant("q4_k_m")
PARAMS = CostParams(30e9, 150e9, 60e9, 5e-3, 0.4e-3, 6.0, 2.0)


def _point(pid, batch, measured, predicted, kind="decode"):
    return {"id": pid, "kind": kind, "decode_batch": batch, "decode_context": 70.0, "prefill_tokens": 0,
            "prefill_context": 0, "measured_s": measured, "predicted_s": predicted}


# two points at batch 2 (both 10 % below the fit, in log terms -0.1 and -0.2), one at 4 (+0.1), one at 1 (0);
# a prefill and a mixed point that must not count
POINTS = [
    _point("decode-1@64", 1, 0.010, 0.010),
    _point("decode-2@64", 2, 0.040 * math.exp(-0.1), 0.040),
    _point("decode-2@512", 2, 0.042 * math.exp(-0.2), 0.042),
    _point("decode-4@64", 4, 0.050 * math.exp(0.1), 0.050),
    _point("prefill-128", 0, 0.5, 0.25, kind="prefill"),
    _point("mixed-64@0+4x64", 4, 0.9, 0.3, kind="mixed"),
]


def _profile(**calibration):
    cal = {"method": "llama.cpp probes", "date": "2026-12-03T00:00:00+00:00",
           "model": {"name": MODEL.name, "quantization": QUANT.name}, "probe_points": POINTS, **calibration}
    return build_profile(name="box", params=PARAMS, quant=QUANT, raw_bandwidth_bytes_per_s=27e9,
                         raw_matmul_flops_per_s=166e9, memory_bytes=25e9, calibration=cal)


def test_factors_are_the_mean_log_ratio_per_batch_interpolated_and_held_at_the_ends():
    c = DecodeCorrection.from_profile(_profile(), MODEL, QUANT, load_engine("llama.cpp"))
    assert c.batches == (1, 2, 4)
    assert c.factor(1) == pytest.approx(1.0)
    assert c.factor(2) == pytest.approx(math.exp(-0.15))  # mean of -0.1 and -0.2
    assert c.factor(4) == pytest.approx(math.exp(0.1))
    assert c.factor(3) == pytest.approx(math.exp((-0.15 + 0.1) / 2))  # linear in log between 2 and 4
    assert c.factor(16) == pytest.approx(math.exp(0.1))  # held past the largest probed batch
    assert c.to_dict()["factor_by_batch"][2] == pytest.approx(math.exp(-0.15), abs=1e-4)


@pytest.mark.parametrize("change", ["other model", "other quant", "other engine", "endpoint", "switched off"])
def test_no_correction_outside_what_the_calibration_measured(change):
    model, quant, engine, cal = MODEL, QUANT, load_engine("llama.cpp"), {}
    if change == "other model":
        model = get_model("llama-2-7b")
    elif change == "other quant":
        quant = get_quant("q8_0")
    elif change == "other engine":
        engine = load_engine("vllm")
    elif change == "endpoint":
        cal = {"method": "endpoint"}
    else:
        cal = {"decode_correction": False}
    assert DecodeCorrection.from_profile(_profile(**cal), model, quant, engine) is None


def _models():
    prof = _profile()
    corrected = CostModel.from_names(MODEL, QUANT, prof, load_engine("llama.cpp"))
    plain = CostModel(MODEL, QUANT, CostParams.from_profile(prof, QUANT, load_engine("llama.cpp")), kv_pad=256)
    return corrected, plain


def test_decode_steps_and_runs_are_scaled_and_prompts_are_not():
    corrected, plain = _models()
    assert corrected.decode_correction is not None and plain.decode_correction is None
    for n in (1, 2, 3, 4, 8):
        ctx = [100 + 7 * i for i in range(n)]
        f = corrected.decode_correction.factor(n)
        assert corrected.step_time((), (), ctx) == pytest.approx(plain.step_time((), (), ctx) * f, rel=1e-12)
        assert corrected.decode_run_time(ctx, 25) == pytest.approx(plain.decode_run_time(ctx, 25) * f, rel=1e-12)
        # the closed form still sums the per-step times
        assert corrected.decode_run_time(ctx, 5) == pytest.approx(
            sum(corrected.step_time((), (), [c + i for c in ctx]) for i in range(5)), rel=1e-9)
        assert corrected.breakdown((), (), ctx)["step_s"] == pytest.approx(corrected.step_time((), (), ctx))
    assert corrected.step_time((128,), (0,), [70, 80]) == plain.step_time((128,), (0,), [70, 80])
    assert corrected.step_time((128,), (0,), ()) == plain.step_time((128,), (0,), ())


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), ctx=st.integers(1, 4000), budget=st.floats(0.0, 20.0), cap=st.none() | st.integers(0, 500))
def test_steps_within_a_budget_is_the_exact_inverse_of_the_corrected_run_time(n, ctx, budget, cap):
    corrected, _ = _models()
    d = [ctx + 3 * i for i in range(n)]
    k = corrected.decode_steps_within(d, budget, max_steps=cap)
    assert corrected.decode_run_time(d, k) <= budget
    assert (cap is not None and k == cap) or corrected.decode_run_time(d, k + 1) > budget


def test_only_with_the_profiles_own_parameters_and_on_one_device():
    prof = _profile()
    other = CostParams(10e9, 50e9, 20e9)
    assert CostModel.from_names(MODEL, QUANT, prof, load_engine("llama.cpp"), params=other).decode_correction is None
    linked = prof.model_copy(update={"interconnect_bandwidth_gb_per_s": 100.0})
    tp2 = load_engine("llama.cpp").with_overrides(tp=2)
    assert CostModel.from_names(MODEL, QUANT, linked, load_engine("llama.cpp")).decode_correction is not None
    assert CostModel.from_names(MODEL, QUANT, linked, tp2).decode_correction is None


def test_the_simulation_uses_it_and_says_so():
    from sim.cluster.simulate import simulate

    prof = _profile()
    reqs = [Request(id=f"r{i}", arrival_s=0.0, prompt_tokens=64, output_tokens=40, max_tokens=40) for i in range(2)]
    on = simulate(reqs, hw=prof, model=MODEL, quant=QUANT.name, engine=load_engine("llama.cpp"))
    off = simulate(reqs, hw=_profile(decode_correction=False), model=MODEL, quant=QUANT.name,
                   engine=load_engine("llama.cpp"))
    assert on.summary["config"]["decode_correction"]["factor_by_batch"][2] == pytest.approx(math.exp(-0.15), abs=1e-4)
    assert off.summary["config"]["decode_correction"] is None
    # two sequences decoding together: every inter-token gap is the 2-sequence step, 14 % shorter
    ratio = on.summary["itl_s"]["p50"] / off.summary["itl_s"]["p50"]
    assert ratio == pytest.approx(math.exp(-0.15), rel=0.02)
