"""The serving bands' calibration (calibrate/serving/bands.py): on synthetic residuals whose sources
differ by a known spread, bands widened by a factor chosen with nested leave-one-source-out cover
about 80% of the rows of sources they never saw (the pooled percentile does not), the nested folds
never see the outer source, the bands are signed, and the interpolated knee of a hand-built curve."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calibrate.serving import bands as sb
from calibrate.serving.rows import LoadPoint
from sim.catalog import accuracy


def _point(source: str) -> LoadPoint:
    return LoadPoint(curve_id=f"c-{source}", source=source, device="h100-sxm", engine="vllm@0.11", family="vllm",
                     model="llama-3.1-8b", quant=None, tp=1, kv_dtype=None, overrides={}, load_kind="concurrency",
                     load=4.0, num_prompts=32, replayed_prompts=32, prompt_lens=[100], output_lens=[10],
                     release_s=[0.0], max_concurrency=4, measured={("output_tps", "value"): 100.0})


def _synthetic(n_sources=10, rows=12, tau=0.35, sigma=0.15, bias=-0.1, seed=3):
    """Residuals log(pred / meas) = bias + b_source + e, b ~ N(0, tau), e ~ N(0, sigma), two metrics."""
    rng = np.random.default_rng(seed)
    points, records = [], []
    for s in range(n_sources):
        p = _point(f"S{s:02d}")
        points.append(p)
        b = rng.normal(0, tau)
        for metric in ("ttft_p50", "tpot_itl"):
            for i in range(rows):
                r = bias + b + rng.normal(0, sigma)
                records.append({"row_id": f"{s}-{metric}-{i}", "point": p.key(), "source": p.source,
                                "device": p.device, "family": "vllm", "metric": metric, "quantity": "ttft_ms",
                                "statistic": "median", "error": math.expm1(r), "curve_id": p.curve_id, "load": 4.0})
    return points, records


def test_nested_leave_one_source_out_bands_cover_about_80_percent_of_unseen_sources():
    points, records = _synthetic()
    cov = sb.nested_band_coverage(records, points)
    assert cov["n"] == len(records) and set(cov["folds"]) == {p.source for p in points}
    assert 72.0 <= cov["coverage_pct"] <= 88.0, cov["coverage_pct"]
    for m in ("ttft_p50", "tpot_itl"):
        assert 68.0 <= cov["by_metric"][m]["coverage_pct"] <= 92.0
    assert all(f["k"]["ttft_p50"] > 1.0 for f in cov["folds"].values())  # widened past the raw 10-90% band
    # no between-source spread: the raw band is about right already
    points, records = _synthetic(tau=0.0, seed=5)
    cov = sb.nested_band_coverage(records, points)
    assert 72.0 <= cov["coverage_pct"] <= 88.0 and all(f["k"]["ttft_p50"] <= 1.5 for f in cov["folds"].values())


def test_the_nested_folds_never_see_the_outer_source(monkeypatch):
    points, records = _synthetic(n_sources=5, rows=4)
    seen = []
    real_choose, real_data = sb.choose_k, sb.bands_data

    def spy_choose(recs, pts, *args):
        seen.append(("choose", {r["source"] for r in recs}, {p.source for p in pts}))
        return real_choose(recs, pts, *args)

    def spy_data(recs, pts, k, **kw):
        seen.append(("data", {r["source"] for r in recs}, {p.source for p in pts}))
        return real_data(recs, pts, k, **kw)

    monkeypatch.setattr(sb, "choose_k", spy_choose)
    monkeypatch.setattr(sb, "bands_data", spy_data)
    cov = sb.nested_band_coverage(records, points)
    outer = sorted(cov["folds"])
    chooses = [s for s in seen if s[0] == "choose"]
    assert len(chooses) == len(outer) == 5
    # each outer fold: choose_k sees every source but its outer one, and every bands file its inner
    # folds and the outer scoring build leaves the outer source out
    i = 0
    for g in outer:
        kind, recs, pts = seen[i]
        assert kind == "choose" and g not in recs and g not in pts and recs == set(outer) - {g}
        j = i + 1
        while j < len(seen) and seen[j][0] == "data":
            assert g not in seen[j][1] and g not in seen[j][2]
            j += 1
        i = j
    assert i == len(seen)


def test_a_family_measured_by_one_source_takes_the_all_family_band():
    points, records = _synthetic(n_sources=4, rows=10)
    for r in records:
        r["family"] = "sglang" if r["source"] == "S00" else "vllm"
    b = sb.signed_bands(records, {m: 1.0 for m in sb.HEADLINE})
    assert b["sglang"]["ttft_p50"]["pooled"] and b["sglang"]["ttft_p50"]["n"] == 40  # S00 alone: the "*" band
    assert not b["vllm"]["ttft_p50"]["pooled"] and b["vllm"]["ttft_p50"]["n"] == 30
    assert not sb.signed_bands(records, {m: 1.0 for m in sb.HEADLINE}, min_sources=1)["sglang"]["ttft_p50"]["pooled"]


def test_bands_are_signed_where_the_residuals_are_skewed():
    points, records = _synthetic(bias=-0.3, tau=0.05, sigma=0.1)
    b = sb.signed_bands(records, {m: 1.0 for m in sb.HEADLINE})["vllm"]["ttft_p50"]
    assert b["lo_pct"] < b["center_pct"] < b["hi_pct"] < 0  # predictions 26% low: the band sits below 0
    assert b["pct"] == abs(b["lo_pct"])
    assert accuracy.inside(b, math.expm1(-0.3)) and not accuracy.inside(b, 0.0)
    wide = accuracy._widen(accuracy._signed(b), 2.0)  # off support: twice as far from the centre, in log
    assert wide["lo_pct"] < b["lo_pct"] and wide["hi_pct"] > b["hi_pct"] and wide["lo_pct"] > -100
    assert math.log1p(wide["hi_pct"] / 100) - math.log1p(b["center_pct"] / 100) == pytest.approx(
        2 * (math.log1p(b["hi_pct"] / 100) - math.log1p(b["center_pct"] / 100)), abs=2e-3)
    line = accuracy.describe_serving({"figures": {"ttft_p50": b}, "basis": "x"})
    assert f"TTFT {b['lo_pct']:+.0f}%/{b['hi_pct']:+.0f}%" in line


def test_the_interpolated_knee_of_a_hand_built_curve():
    # 3 x 100 ms = 300 ms is reached between C=4 (200 ms) and C=8 (500 ms): a third of the way in log(load)
    assert sb.interpolated_knee([1, 2, 4, 8], [100, 120, 200, 500]) == pytest.approx(4 * 2 ** (1 / 3))
    assert sb.interpolated_knee([1, 2, 4, 8], [100, 300, 900, 2000]) == pytest.approx(2.0)  # on a point
    assert sb.interpolated_knee([1, 2, 4], [100, 150, 250]) is None  # never crosses
    assert sb.interpolated_knee([1, 2, 4, math.inf], [100, 150, 400, 9000]) == pytest.approx(
        2 * 2 ** ((300 - 150) / 250))  # an all-at-once point has no log load: left out
    # the measured and predicted curves are read on the loads both have
    recs = []
    for load, meas, pred in ((1, 100, 50), (2, 150, 80), (4, 400, None), (8, 900, 400)):
        recs.append({"point": f"p{load}", "curve_id": "c", "load": float(load), "quantity": "ttft_ms",
                     "statistic": "median", "measured": meas, "predicted": pred})
    kn = sb.interpolated_knees(recs)["c"]
    assert kn["loads"] == [1.0, 2.0, 8.0]
    assert kn["measured"] == pytest.approx(2 * 4 ** ((300 - 150) / 750))
    assert kn["predicted"] == pytest.approx(2 * 4 ** ((150 - 80) / 320))
    assert kn["error"] == pytest.approx(kn["predicted"] / kn["measured"] - 1)
