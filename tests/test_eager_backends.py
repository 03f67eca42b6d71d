"""Per-backend eager launch counts of SGLang's prompt step (`sim.cost.eager_backends`): the generic count is
unchanged for every deployment that neither passes the fused backends' flags nor gets them from SGLang itself;
the fused MoE and the all-reduce fusion each save what the cited source gives; the flags reach the replay's engine;
the ship rule (calibrate/serving/eager_backends_rule.py) decides as written."""

from __future__ import annotations

import pytest

from calibrate.serving.eager_backends_rule import MIN_TTFT_GAIN_PT, ships
from sim.bench.corpus import engine_overrides
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.cost import eager_backends as eb
from sim.cost.eager_backends import (FUSE_ALLREDUCE_MAX_TOKENS, TRTLLM_MOE, Backends, backend_launches,
                                     deployment_backends)
from sim.cost.eager_launches import CITED_DEEPSEEK_V3_LAUNCHES, MOE_OTHER, MOE_QUANT, forward_launches
from sim.cost.eager_prefill import EagerPrefill, eager_prefill_floor_s, with_eager_prefill

B300_FLAGS = ("--tensor-parallel-size=8 --enable-flashinfer-allreduce-fusion --enable-symm-mem --attention-backend "
              "trtllm_mla --moe-runner-backend flashinfer_trtllm --quantization fp8")


def _sg(**kw):
    return load_engine("sglang").with_overrides(**{"eager_launch_backends": True, **kw})


def test_generic_count_unchanged_without_fused_backends():
    ds = get_model("deepseek-r1")
    q = ds.quant("fp8")
    # no flags, not a compute-capability-10 device (or not NVIDIA): the generic count, every step size
    for hw in ("h200", "h100-sxm", "mi300x", "mi325x"):
        e = _sg(tp=8)
        assert deployment_backends(ds, e, load_profile(hw), q) is None
        for n in (None, 1, 1024, 8192):
            assert backend_launches(ds, q, 8, None, n) == forward_launches(ds, q, 8) == CITED_DEEPSEEK_V3_LAUNCHES
        assert eager_prefill_floor_s(ds, e, q, load_profile(hw), 1024) == eager_prefill_floor_s(ds, e, q)
    # a non-DeepSeek-V3 MoE model on B200 (the cookbook's MiniMax rows): SGLang picks nothing for it
    mm = get_model("minimax-m2")
    assert deployment_backends(mm, _sg(tp=8), load_profile("b200"), mm.quant("fp8")) is None
    # another engine never gets SGLang's own choices
    vl = load_engine("vllm").with_overrides(tp=8, eager_launch_backends=True)
    assert deployment_backends(ds, vl, load_profile("b200"), q) is None
    # bf16 DeepSeek on B300: the all-reduce fusion but not the fused MoE (runner path not read for bf16)
    assert deployment_backends(ds, _sg(tp=8), load_profile("b300"), ds.quant("bf16")) == Backends(None, True)


def test_fused_moe_saves_the_cited_launches_per_moe_layer():
    ds = get_model("deepseek-r1")
    fused = Backends(moe_runner="flashinfer_trtllm")
    for qn, per_layer in (("fp8", 7), ("nvfp4", 4)):
        q = ds.quant(qn)
        assert TRTLLM_MOE[q.compute_format] == per_layer
        saved = MOE_OTHER + MOE_QUANT - per_layer
        assert forward_launches(ds, q, 8) - backend_launches(ds, q, 8, fused, None) == ds.n_routed_layers * saved
    assert (forward_launches(ds, ds.quant("fp8"), 8) - backend_launches(ds, ds.quant("fp8"), 8, fused)
            == 58 * 2)  # DeepSeek-V3: 58 MoE layers, 9 -> 7
    # a format whose runner path was not read keeps the generic count
    assert backend_launches(ds, ds.quant("bf16"), 8, fused) == forward_launches(ds, ds.quant("bf16"), 8)


def test_allreduce_fusion_only_on_small_steps_and_tp_above_one():
    ds = get_model("deepseek-r1")
    q = ds.quant("fp8")
    fus = Backends(allreduce_fusion=True)
    base = forward_launches(ds, q, 8)
    assert base - backend_launches(ds, q, 8, fus, 1024) == 2 * 61 - 1  # every layer's two but the last FFN's
    assert base - backend_launches(ds, q, 8, fus, FUSE_ALLREDUCE_MAX_TOKENS) == 121
    assert backend_launches(ds, q, 8, fus, FUSE_ALLREDUCE_MAX_TOKENS + 1) == base  # above 2,048 tokens: unfused
    assert backend_launches(ds, q, 8, fus, None) == base
    assert backend_launches(ds, q, 1, fus, 1024) == forward_launches(ds, q, 1)  # no all-reduce at TP 1


def test_flags_reach_the_engine_and_override_sglangs_choice():
    ov = engine_overrides(B300_FLAGS, None, 8)
    assert ov["moe_runner_backend"] == "flashinfer_trtllm" and ov["flashinfer_allreduce_fusion"] is True
    ds = get_model("deepseek-r1")
    q = ds.quant("nvfp4")
    # flags on a device where SGLang would pick nothing (H200) still count
    assert deployment_backends(ds, _sg(**ov), load_profile("h200"), q) == Backends("flashinfer_trtllm", True)
    # the enforce-disable flag turns the auto-selected fusion off; another runner turns the fused MoE off
    off = engine_overrides("--enforce-disable-flashinfer-allreduce-fusion --moe-runner-backend triton", None, 8)
    assert off == {"flashinfer_allreduce_fusion": False, "moe_runner_backend": "triton", "tp": 8}
    assert deployment_backends(ds, _sg(**off), load_profile("b300"), q) is None
    # SGLang's own choice on compute capability 10 for DeepseekV3ForCausalLM FP8/FP4
    for hw in ("b200", "b300"):
        assert deployment_backends(ds, _sg(tp=8), load_profile(hw), q) == Backends("flashinfer_trtllm", True)
    # the switch off: the generic count
    assert deployment_backends(ds, _sg(eager_launch_backends=False, **ov), load_profile("b300"), q) is None


def test_explicit_allreduce_fusion_only_where_sglang_honours_it():
    """apply_flashinfer_allreduce_fusion runs on SM90 / SM100 only: the flag on an A100 (8.0), an RTX PRO 6000
    (12.0) or a DGX Spark (12.1) fuses nothing; on H200 (9.0) and B200 (10.0) it does; a device not known keeps it."""
    ds = get_model("deepseek-r1")
    q = ds.quant("fp8")
    e = _sg(flashinfer_allreduce_fusion=True, moe_runner_backend="triton", tp=8)
    for hw, fused in (("a100-80g", False), ("rtx-pro-6000", False), ("dgx-spark", False), ("h200", True),
                      ("b200", True)):
        got = deployment_backends(ds, e, load_profile(hw), q)
        assert (got == Backends(None, True)) == fused and (got is None) == (not fused), hw
    assert deployment_backends(ds, e, None, q) == Backends(None, True)


def test_floor_reaches_the_step_model_by_step_size():
    ds = get_model("deepseek-r1")
    q = ds.quant("fp8")
    e = _sg(**engine_overrides(B300_FLAGS, None, 8))
    hw = load_profile("b300")
    us = e.eager_prefill_launch_us
    assert us > 0
    big = eager_prefill_floor_s(ds, e, q, hw)
    small = eager_prefill_floor_s(ds, e, q, hw, 1024)
    assert big == pytest.approx((CITED_DEEPSEEK_V3_LAUNCHES - 116) * us / 1e6)
    assert small == pytest.approx((CITED_DEEPSEEK_V3_LAUNCHES - 116 - 121) * us / 1e6)

    class Inner:
        def batch_time(self, b):
            return 0.001

    class B:
        def __init__(self, n):
            self.prefill_tokens, self.n_decode = [n], 0

    sm = with_eager_prefill(Inner(), ds, e, q, hw)
    assert isinstance(sm, EagerPrefill)
    assert sm.batch_time(B(1024)) == pytest.approx(small)
    assert sm.batch_time(B(2048)) == pytest.approx(small)
    assert sm.batch_time(B(4096)) == pytest.approx(big)
    # without fused backends the wrapper has one floor, as before
    sm0 = with_eager_prefill(Inner(), ds, _sg(tp=8), q, load_profile("h200"))
    assert sm0.small_max_tokens == 0 and sm0.batch_time(B(1024)) == sm0.batch_time(B(4096)) == sm0.floor_s


def test_no_fused_backends_gives_the_cited_generic_floor(monkeypatch):
    ds = get_model("deepseek-r1")
    q = ds.quant("fp8")
    e = _sg(tp=8)
    hw = load_profile("b300")
    on = eager_prefill_floor_s(ds, e, q, hw, 1024)
    monkeypatch.setattr(eb, "deployment_backends", lambda *a, **k: None)
    assert eager_prefill_floor_s(ds, e, q, hw, 1024) > on
    assert eager_prefill_floor_s(ds, e, q, hw, 1024) == pytest.approx(CITED_DEEPSEEK_V3_LAUNCHES * e.eager_prefill_launch_us / 1e6)


def test_rule_decides_as_written():
    off = {"ttft_p50": 40.0, "ttft_p99": 50.0, "tpot_itl": 20.0, "output_tps": 20.0}
    good = {**off, "ttft_p50": 40.0 - MIN_TTFT_GAIN_PT}
    assert ships(off, good, 30.0, 30.0)
    assert not ships(off, {**off, "ttft_p50": 39.0}, 30.0, 30.0)  # too small a gain
    assert not ships(off, good, 30.0, 30.1)  # the cookbook's own TTFT p50 worse
    assert not ships(off, {**good, "ttft_p99": 52.1}, 30.0, 30.0)
    assert not ships(off, {**good, "tpot_itl": 21.1}, 30.0, 30.0)
    assert not ships(off, {**good, "output_tps": 21.1}, 30.0, 30.0)


def test_engine_default_is_what_the_recorded_rule_gives_and_the_report_prints_it():
    from calibrate.serving.eager_backends_rule import load_record, recorded_ships
    from calibrate.serving.rule_records import eager_backends_markdown
    from sim.catalog.engine_config import EngineConfig

    rec = load_record()
    assert EngineConfig.model_fields["eager_launch_backends"].default is recorded_ships(rec)
    assert load_engine("sglang").eager_launch_backends is recorded_ships(rec)  # the preset does not override it
    text = "\n".join(eager_backends_markdown(rec))
    assert "NOT what the rule gives" not in text and f"{rec['on']['ttft_p50']:.1f}%" in text
    flipped = {**rec, "cookbook_ttft_p50": {"off": 41.1, "on": 41.1}}
    assert recorded_ships(flipped) is not recorded_ships(rec)  # the recorded verdict turns on (d) alone
    bad = {k: v for k, v in rec.items() if k != "cookbook_ttft_p50"}
    import json
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(bad, f)
    with pytest.raises(ValueError, match="cookbook_ttft_p50"):
        load_record(f.name)
