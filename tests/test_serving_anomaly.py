"""Build anomalies (calibrate/serving/anomaly.py): a tensor-parallel serving curve no faster than a one-device
curve of the same source, engine and workload is scored but trains nothing, and the report says which and why."""

from __future__ import annotations

import math
from types import SimpleNamespace

from calibrate import serving_fit as sf
from calibrate.serving import effscale as es
from calibrate.serving import fit as sf_fit
from calibrate.serving.anomaly import anomaly_markdown, anomaly_split, build_anomalies
from calibrate.serving.report import _fmt
from tests.test_serving_fit import SETS, _curve, _fake_predict, _fe_points


def _tp_curve(name: str, tp: int, tpot: dict[int, float], **kw) -> list[dict]:
    rows = _curve(name, {c: {"tpot_ms|median": v, "ttft_ms|median": 50.0} for c, v in tpot.items()}, **kw)
    for r in rows:
        r["tp"] = r["n_devices"] = str(tp)
    return rows


def test_a_tp_curve_not_faster_than_the_one_device_curve_is_flagged_and_only_it():
    one = _tp_curve("one", 1, {1: 31.0, 10: 26.0, 30: 47.0})
    slow = _tp_curve("slow-tp4", 4, {1: 29.0, 10: 30.0, 30: 39.0})  # C=10: 30 >= 26 (C=30 is below: one load is enough)
    fast = _tp_curve("fast-tp4", 4, {1: 11.7, 10: 13.3, 30: 21.7})
    other_src = _tp_curve("other-source-tp4", 4, {10: 30.0}, publisher="B", source="https://example.org/b")
    other_len = _tp_curve("other-lengths-tp4", 4, {10: 30.0})
    for r in other_len:
        r["input_tokens"] = "512"
    got = build_anomalies(one + slow + fast + other_src + other_len)
    assert set(got) == {"slow-tp4"}
    assert "30.0 ms at concurrency 10" in got["slow-tp4"] and "one" in got["slow-tp4"]
    assert build_anomalies(slow + fast) == {}  # no one-device reference: nothing is flagged


def test_a_data_parallel_curve_is_no_reference_and_outlier_rows_are_not_compared():
    dp = _tp_curve("dp8", 1, {10: 26.0})
    for r in dp:
        r["n_devices"] = "8"  # tp 1 x dp 8: eight GPUs, not one
    slow = _tp_curve("slow-tp4", 4, {10: 30.0})
    assert build_anomalies(dp + slow) == {}
    one = _tp_curve("one", 1, {10: 26.0})
    for r in slow:
        r["notes"] = "outlier (collector)"
    assert build_anomalies(one + slow) == {}


def test_the_corpus_flags_the_red_hat_tp4_builds_and_not_upstream_vllm():
    got = build_anomalies(sf.load_corpus())
    red_hat = {c for c in got if "corpus_c-redhat" in c}
    assert red_hat == {f"corpus_c-redhat-h200-llama-3.3-70b-fp8-{n}-tp4-1000-100"
                       for n in ("rhaiis3.2.0", "rhoai2.23", "take2-rhaiis3.1.0", "take2-rhaiis3.2.0")}
    assert not any("vllm0.9.2-tp4" in c or "midstream" in c for c in got)


def test_a_flagged_point_trains_no_front_end_and_is_still_predicted_held_out(monkeypatch):
    """Source A measures a 40 ms front end, C and D 200 ms: all three training, the family's value is 200;
    with C and D flagged it is A's 40, and held out by source every point is still predicted."""
    pts = _fe_points([("A", "0.11.0", 40.0), ("C", "0.11.1", 200.0), ("D", "0.11.2", 200.0)])
    assert sf.fit_engine_params(pts, {"vllm": [{}]}, _fake_predict)["vllm"]["request_overhead_ms"] == 200.0
    for p in pts:
        p.build_anomaly = "test" if p.source in "CD" else ""
    assert sf.fit_engine_params(pts, {"vllm": [{}]}, _fake_predict)["vllm"]["request_overhead_ms"] == 40.0
    monkeypatch.setattr(sf_fit, "predict", _fake_predict)
    preds, chosen = sf._heldout(pts, "source", {"vllm": [{}]}, None)
    assert all(p.key() in preds for p in pts)  # scored: the flagged sources are predicted like the others
    assert chosen["C"]["vllm"]["request_overhead_ms"] == 40.0  # C held out: A trains, D (flagged) does not
    assert chosen["A"]["vllm"] == {}  # A held out: only flagged points left, the family keeps its preset


def test_a_flagged_point_trains_no_bandwidth_scale():
    """Points whose residuals are exact at scale 0.6; with all of them flagged no group gets a scale, and the
    same points unflagged fit 0.6."""
    def pt(i, src, flag):
        return SimpleNamespace(key=lambda i=i: f"p{i}", source=src, family="vllm", device="h200",
                               build_anomaly=flag)

    def predict(p, params):
        return params.get("efficiency_scale", {}).get("bandwidth", 1.0)

    def residuals(p, scale):
        return [{"metric": "tpot_itl", "predicted": math.exp(abs(math.log(scale / 0.6))), "measured": 1.0}]

    def loss(recs):
        return sorted(abs(math.log(r["predicted"] / r["measured"])) for r in recs)[len(recs) // 2]

    ps = [pt(i, "ab"[i % 2], "") for i in range(4)]
    assert es.fit_group_scales(ps, lambda p: {}, predict, residuals, loss, lambda p: True, 2) == {"NVIDIA": 0.6}
    flagged = [pt(i, "ab"[i % 2], "test") for i in range(4)]
    assert es.fit_group_scales(flagged, lambda p: {}, predict, residuals, loss, lambda p: True, 2) == {}


def test_the_report_names_the_flagged_curves_and_says_the_rule_came_after_the_figures():
    pts = _fe_points([("A", "0.11.0", 40.0), ("B", "0.11.2", 40.0)])
    for p in pts:
        p.build_anomaly = "build anomaly: slower than TP1" if p.source == "B" else ""
    recs = [r for p in pts for r in sf.residuals(p, _fake_predict(p, {"request_overhead_ms": 40.0}))]
    res = {"points": pts, "baseline": {"records": recs}, "request_only": {"records": recs},
           "cv": {"source": {"records": recs}}}
    split = anomaly_split(res, sf.summarize)
    assert list(split["curves"]) == ["fe-B-0.11.2"]
    n_all, n_without = (split["heldout_by_source"][k]["ttft_p50"]["n"] for k in ("with", "without"))
    assert n_all == 2 * n_without
    md = "\n".join(anomaly_markdown(split, _fmt))
    assert "fe-B-0.11.2" in md and "slower than TP1" in md and "AFTER seeing held-out figures" in md
    assert SETS  # (the synthetic curves use the fit tests' catalog)
