"""The per-model eager-prefill launch count (`sim.cost.eager_launches`, EngineConfig.eager_prefill_launch_us):
the count follows the architecture (MLA vs GQA, MoE vs dense, shared experts, linear-attention layers,
quantised linears, TP all-reduces), the cited per-launch cost is PR #12160's forward over DeepSeek-V3's
count, the floor reaches the serving replay, and the ship rule (calibrate/serving/eagerlaunch.py) decides
as written."""

from __future__ import annotations

import copy
import json

import pytest

from calibrate.serving import eagerlaunch
from calibrate.serving.eagerlaunch import MIN_TTFT_GAIN_PT, load_record, recorded_value, ships, shipped_value
from sim.bench.serve import Deployment, ServeClient, run_client
from sim.catalog.engine_config import load_engine
from sim.catalog.lookup import get_model
from sim.cost.eager_launches import (CITED_DEEPSEEK_V3_LAUNCHES, CITED_US_PER_LAUNCH, forward_launches,
                                     layer_launches)
from sim.cost.eager_prefill import eager_prefill_floor_s


def _q(name, quant):
    m = get_model(name)
    return m, m.quant(quant)


def test_cited_count_is_deepseek_v3s_and_the_launch_cost_is_the_pr_log_over_it():
    m, q = _q("deepseek-v3", "fp8")
    assert forward_launches(m, q, 8) == CITED_DEEPSEEK_V3_LAUNCHES == 58 * 36 + 3 * 26 + 8
    assert CITED_US_PER_LAUNCH == pytest.approx(82.6406478881836e3 / 2174)
    assert 30 < CITED_US_PER_LAUNCH < 45  # above plain PyTorch's 5-25 us per op: SGLang's Python around each


def test_count_follows_the_architecture():
    ds, dq = _q("deepseek-v3", "fp8")
    qw, qq = _q("qwen3-235b-a22b", "bf16")
    per_ds, per_qw = layer_launches(ds, dq, 8), layer_launches(qw, qq, 8)
    assert per_ds["attention"] > per_qw["attention"]  # MLA's norms/projections/concat and FP8 quantisation
    assert per_ds["moe"] - per_qw["moe"] == 2 + 6  # expert activation quantisations + the shared expert
    # FP8 adds one activation quantisation per linear and two per MoE FFN
    bf = layer_launches(ds, ds.quant("bf16"), 8)
    assert per_ds["attention"] - bf["attention"] == 5 and per_ds["moe"] - bf["moe"] == 2 + 2
    # TP 1 has no all-reduce
    assert layer_launches(ds, dq, 8)["attention"] - layer_launches(ds, dq, 1)["attention"] == 2
    # a dense model: every layer attention + dense FFN
    ll, lq = _q("llama-3.1-70b", "bf16")
    assert forward_launches(ll, lq, 8) == 80 * (9 + 3) + 8
    # linear-attention layers launch the chunked scan: more than a GQA layer
    nx, nq = _q("qwen3-coder-next", "bf16")
    assert nx.n_linear_layers > 0
    per_nx = layer_launches(nx, nq, 2)
    assert per_nx["linear"] > per_nx["attention"]
    assert forward_launches(nx, nq, 2) == (nx.n_linear_layers * per_nx["linear"]
                                           + (nx.n_layers - nx.n_linear_layers) * per_nx["attention"]
                                           + nx.n_routed_layers * per_nx["moe"] + 8)


def test_floor_is_launches_times_the_field_and_adds_to_the_moe_layer_form():
    eng = load_engine("sglang").model_copy(update={"tp": 8, "eager_prefill_launch_us": CITED_US_PER_LAUNCH})
    ds, dq = _q("deepseek-r1", "fp8")
    assert eager_prefill_floor_s(ds, eng, dq) == pytest.approx(82.6406478881836e-3)
    qw, qq = _q("qwen3-235b-a22b", "bf16")
    assert eager_prefill_floor_s(qw, eng, qq) == pytest.approx(1512 * CITED_US_PER_LAUNCH / 1e6)
    ll, lq = _q("llama-3.1-70b", "bf16")
    assert eager_prefill_floor_s(ll, eng, lq) > 0  # dense layers launch kernels too
    both = eng.model_copy(update={"eager_prefill_moe_layer_us": 1000.0})
    assert eager_prefill_floor_s(ds, both, dq) == pytest.approx(82.6406478881836e-3 + 58e-3)
    off = eng.model_copy(update={"eager_prefill_launch_us": 0.0})
    assert eager_prefill_floor_s(ll, off, lq) == 0.0


def _ttft_ms(us: float, backends: bool = False) -> float:
    dep = Deployment(hw="b200", model="deepseek-r1", quant="fp8", engine="sglang",
                     overrides={"tp": 8, "eager_prefill_launch_us": us, "request_overhead_ms": 0.0,
                                "eager_launch_backends": backends})
    c = ServeClient(num_prompts=4, random_input_len=1000, random_output_len=8, max_concurrency=1)
    return float(run_client(c, dep, date="t", per_request=False)["median_ttft_ms"])


def test_unloaded_ttft_reaches_the_launch_floor():
    off, on = _ttft_ms(0.0), _ttft_ms(CITED_US_PER_LAUNCH)
    assert off < 82.64  # the GPU's prefill of 1k tokens on 8 B200s is shorter than the launches
    assert on == pytest.approx(82.64, rel=0.05)
    # with the fused backends SGLang 0.5 picks by itself for DeepSeek-V3 FP8 on B200 (sim.cost.eager_backends): the
    # fused MoE (58 x 2 launches fewer) and, on this 1k-token step, the all-reduce fusion (2 x 61 - 1 fewer)
    fused = _ttft_ms(CITED_US_PER_LAUNCH, backends=True)
    assert fused == pytest.approx((2174 - 116 - 121) * CITED_US_PER_LAUNCH / 1e3, rel=0.05) and fused < on


def test_ship_rule():
    before = {"ttft_p50": 40.0, "ttft_p99": 55.0, "tpot_itl": 19.0, "output_tps": 17.0}
    good = {**before, "ttft_p50": before["ttft_p50"] - MIN_TTFT_GAIN_PT - 0.1}
    assert ships(before, good, 10.0, 11.9)
    assert shipped_value(before, good, 10.0, 10.0) == round(CITED_US_PER_LAUNCH, 1)
    assert not ships(before, good, 10.0, 12.5)  # dense curves pay for it
    assert not ships(before, {**before, "ttft_p50": before["ttft_p50"] - 1.0}, 10.0, 10.0)
    assert not ships(before, {**good, "tpot_itl": before["tpot_itl"] + 1.5}, 10.0, 10.0)
    assert not ships(before, {**good, "output_tps": before["output_tps"] + 1.5}, 10.0, 10.0)
    assert not ships(before, {**good, "ttft_p99": before["ttft_p99"] + 2.5}, 10.0, 10.0)
    assert shipped_value(before, before, 10.0, 10.0) == 0.0


def test_the_sglang_preset_runs_what_the_rule_gives_on_its_recorded_subset_runs():
    """benchmarks/serving/eagerlaunch_rule.json holds the subset runs' figures (calibrate/serving/eagerlaunch.py
    RECORD): the preset's value is the rule's verdict on them, and the rule's written finding states them."""
    rec = load_record()
    assert rec["decides"] == {"preset": "sglang", "field": "eager_prefill_launch_us"}
    assert load_engine("sglang").eager_prefill_launch_us == recorded_value(rec)
    r1, r2 = rec["runs"]["run1"], rec["runs"]["run2_dense_guard"]
    doc = " ".join(eagerlaunch.__doc__.split())
    for label, m in (("TTFT p50", "ttft_p50"), ("TTFT p99", "ttft_p99"), ("TPOT/ITL", "tpot_itl"),
                     ("output throughput", "output_tps")):
        assert f"{label} {r1['before'][m]:.1f} -> {r1['after'][m]:.1f}%" in doc, label
    assert f"TTFT p50 {r2['before']['ttft_p50']:.1f} -> {r2['after']['ttft_p50']:.1f}%" in doc
    for cmd in (r1["command"], r2["command"]):  # the protocol's commands, as written before the runs
        assert cmd in doc, cmd
    # the check can fail: figures without run 1's TTFT gain, or with the dense guard broken, give 0
    no_gain = copy.deepcopy(rec)
    no_gain["runs"]["run1"]["after"]["ttft_p50"] = r1["before"]["ttft_p50"]
    dense = copy.deepcopy(rec)
    dense["runs"]["run2_dense_guard"]["after"]["ttft_p50"] = r2["before"]["ttft_p50"] + 5.0
    assert recorded_value(no_gain) == recorded_value(dense) == 0.0 != recorded_value(rec)


def test_the_serving_report_prints_the_recorded_runs_and_says_when_the_preset_departs_from_them():
    from calibrate.serving.report import eagerlaunch_markdown  # the function report_markdown calls

    rec = load_record()
    text = "\n".join(eagerlaunch_markdown(rec))
    r1 = rec["runs"]["run1"]
    assert f"| tpot_itl | {r1['before']['tpot_itl']:.1f}% | {r1['after']['tpot_itl']:.1f}% |" in text
    assert r1["command"].replace("|", "\\|") in text and rec["date"] in text
    assert "NOT what the rule gives" not in text  # the committed preset runs the rule's value
    no_gain = copy.deepcopy(rec)
    no_gain["runs"]["run1"]["after"]["ttft_p50"] = r1["before"]["ttft_p50"]
    off = "\n".join(eagerlaunch_markdown(no_gain))
    assert "gives eager_prefill_launch_us 0 (off)" in off and "NOT what the rule gives" in off
