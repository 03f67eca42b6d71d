"""benchmarks/knee_split.py recomputes the committed knees from the committed residual rows: the same curves and
knees the serving fit reported (so the report's knee figures are those of its own rows), and the split's arithmetic."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import knee_split as K  # noqa: E402

FIDELITY = ROOT / "benchmarks" / "serving_fidelity.json"


@pytest.fixture(scope="module")
def fidelity():
    return json.loads(FIDELITY.read_text())


@pytest.mark.parametrize("section, prediction", [("baseline", "baseline"), ("heldout_by_source", "by_source"),
                                                 ("heldout_by_device", "by_device")])
def test_the_rows_give_the_knees_the_report_printed(fidelity, section, prediction):
    per = K.split(fidelity["rows"], prediction)
    knees = fidelity[section]["knees"]
    crossing = {c for c, v in knees.items() if v["saturates"]}
    assert set(per) == crossing
    for cid, v in per.items():
        assert (v["measured_knee"], v["predicted_knee"]) == (knees[cid]["measured"], knees[cid]["predicted"]), cid
    assert fidelity[section]["knee"]["saturating_curves"] == len(per)


def _rows(curve, loads, measured, predicted, stat="median"):
    return [{"curve_id": curve, "load": l, "metric": "ttft_p50", "measured": m, "p": p,
             "row_id": f"{curve}-c{l}-ttft_ms-{stat}"} for l, m, p in zip(loads, measured, predicted)]


def test_split_classifies_a_flat_prediction_and_removes_the_offset_additively():
    # measured 10 -> 40 crosses 3x at load 4 (knee 2); predicted 50 -> 60 never does (knee 8); shifted by the lowest-load
    # miss (-40) the prediction is 10, 15, 18, 20: still under 30, so the oracle leaves the knee at 8
    rows = _rows("a", (1, 2, 4, 8), (10, 20, 40, 80), (50, 55, 58, 60))
    # a curve whose prediction is the measurement plus 40 ms: flat by ratio, exact once the offset is removed
    rows += _rows("b", (1, 2, 4, 8), (10, 20, 40, 80), (50, 60, 80, 120))
    per = K.split(rows, "p")
    a, b = per["a"], per["b"]
    assert (a["measured_knee"], a["predicted_knee"], a["kind"]) == (2.0, 8.0, "never crosses (measured does)")
    assert a["offset_removed_knee"] == 8.0 and a["growth_ratio"] == pytest.approx((58 - 50) / (40 - 10))
    assert a["base_error"] == pytest.approx(4.0)
    assert (b["predicted_knee"], b["offset_removed_knee"]) == (8.0, 2.0)
    assert b["slope_ms_per_load"]["measured"] == pytest.approx(b["slope_ms_per_load"]["predicted"])


def test_split_reads_the_median_row_where_a_point_prints_both():
    rows = _rows("c", (1, 2, 4), (10, 12, 14), (10, 12, 14)) + _rows("c", (1, 2, 4), (10, 100, 200), (10, 100, 200),
                                                                      stat="mean")
    assert "c" not in K.split(rows, "p")  # the medians never cross 3x, the means would
