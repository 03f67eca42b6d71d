"""Where the knee misses come from: a split of the committed knee figures (analysis only; nothing is fitted).

Reads the committed residuals (benchmarks/serving_fidelity.json: every replayed TTFT p50 row with its measured value
and its baseline / held-out predictions) and recomputes, per curve, the issue's knee (calibrate/serving/fit.py `knee`:
the highest load, walking up, whose TTFT p50 stays under 3x the lowest load's; the median TTFT row where a point prints
one, else the mean, as the fit reads it) for the measured curve and for each prediction. It then splits the curves
whose measured or predicted TTFT crosses 3x in the sweep (the knee target's curves) by what the prediction did, and
prints two ORACLE attributions (each uses the measured curve, so neither is a prediction):

  offset removed   the predicted curve shifted so its lowest-load TTFT equals the measured one (a per-curve additive
                   constant: what a right unloaded TTFT would give; a constant factor cannot move a knee, since the
                   knee reads TTFT / lowest-load TTFT);
  growth ratio     (predicted TTFT - predicted lowest) / (measured TTFT - measured lowest) at the first load where the
                   measured curve crosses 3x: the share of the measured absolute TTFT growth the prediction has.

Per curve it also prints the TTFT growth per unit of load (ms per concurrent request, or per request/s), measured and
predicted: the least-squares slope through the lowest load of TTFT - lowest-load TTFT against load - lowest load.

    python benchmarks/knee_split.py [--json benchmarks/serving_fidelity.json] [--prediction by_source]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.serving.fit import KNEE_FACTOR, METRICS, knee, score_knee  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def curve_ttft(rows: list[dict], prediction: str) -> dict[str, dict[float, tuple[float, float]]]:
    """{curve: {load: (measured, predicted)}} of the TTFT p50 rows, one statistic per point: the first of the fit's
    order (calibrate/serving/rows.py METRICS['ttft_p50']: median, then mean) the point printed, as `curve_knees`."""
    order = {stat: i for i, (_, stat) in enumerate(METRICS["ttft_p50"])}  # a row_id ends in -<quantity>-<statistic>
    best: dict[tuple[str, float], tuple[int, float, float]] = {}
    for r in rows:
        if r["metric"] != "ttft_p50" or r.get(prediction) is None or not r.get("measured"):
            continue
        rank = order[r["row_id"].rsplit("-", 1)[1]]
        k = (r["curve_id"], float(r["load"]))
        if k not in best or rank < best[k][0]:
            best[k] = (rank, float(r["measured"]), float(r[prediction]))
    out: dict[str, dict[float, tuple[float, float]]] = defaultdict(dict)
    for (cid, load), (_, m, p) in best.items():
        out[cid][load] = (m, p)
    return out


def split(rows: list[dict], prediction: str) -> dict:
    curves = curve_ttft(rows, prediction)
    per = {}
    for cid, pts in sorted(curves.items()):
        loads = sorted(l for l in pts if math.isfinite(l))
        meas = [pts[l][0] for l in loads]
        pred = [pts[l][1] for l in loads]
        k = score_knee(loads, meas, pred)  # the fit's own scoring (curve_knees)
        if k is None or not k["saturates"]:
            continue
        km, kp = k["measured"], k["predicted"]
        m_cross = any(t >= KNEE_FACTOR * meas[0] for t in meas)
        p_cross = any(t >= KNEE_FACTOR * pred[0] for t in pred)
        shifted = [t - pred[0] + meas[0] for t in pred]
        ks = knee(loads, shifted)
        growth = None
        if m_cross:
            i = next(i for i, t in enumerate(meas) if t >= KNEE_FACTOR * meas[0])
            growth = (pred[i] - pred[0]) / (meas[i] - meas[0])
        slope = [float(np.dot(np.subtract(loads, loads[0]), np.subtract(y, y[0]))
                       / max(float(np.dot(np.subtract(loads, loads[0]), np.subtract(loads, loads[0]))), 1e-12))
                 for y in (meas, pred)]
        kind = ("exact" if kp == km else "never crosses (measured does)" if m_cross and not p_cross
                else "crosses, measured does not" if not m_cross else "too early" if kp < km else "too late")
        per[cid] = {"loads": loads, "measured_knee": km, "predicted_knee": kp, "error": kp / km - 1,
                    "kind": kind, "base_error": pred[0] / meas[0] - 1, "growth_ratio": growth,
                    "offset_removed_knee": ks, "offset_removed_error": ks / km - 1,
                    "slope_ms_per_load": {"measured": slope[0], "predicted": slope[1]}}
    return per


def _med(xs) -> str:
    xs = [x for x in xs if x is not None]
    return f"{100 * float(np.median(xs)):.1f}%" if xs else "-"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "serving_fidelity.json")
    ap.add_argument("--prediction", default="by_source", choices=("by_source", "by_device", "baseline"))
    a = ap.parse_args(argv)
    rows = json.loads(a.json.read_text())["rows"]
    per = split(rows, a.prediction)
    errs = [abs(v["error"]) for v in per.values()]
    print(f"{len(per)} curves whose measured or predicted TTFT p50 crosses {KNEE_FACTOR:g}x in the sweep "
          f"(prediction: {a.prediction}); knee median |error| {_med(errs)}, within 15%: "
          f"{sum(e <= 0.15 for e in errs)}")
    groups: dict[str, list[dict]] = defaultdict(list)
    for v in per.values():
        groups[v["kind"]].append(v)
    print(f"{'what the prediction did':<32} {'n':>3} {'knee |err|':>10} {'base err':>9} {'growth ratio':>12} "
          f"{'offset removed |err|':>20}")
    for kind, vs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"{kind:<32} {len(vs):>3} {_med([abs(v['error']) for v in vs]):>10} "
              f"{_med([v['base_error'] for v in vs]):>9} {_med([v['growth_ratio'] for v in vs]):>12} "
              f"{_med([abs(v['offset_removed_error']) for v in vs]):>20}")
    fixed = [abs(v["offset_removed_error"]) for v in per.values()]
    print(f"ORACLE, every curve's lowest-load TTFT made right (additive): knee median |error| {_med(fixed)}, "
          f"within 15%: {sum(e <= 0.15 for e in fixed)}")
    print("\ncurve | loads | measured knee | predicted | offset removed | base error | growth ratio | "
          "TTFT growth per unit load, measured / predicted (ms)")
    for cid, v in per.items():
        g = "-" if v["growth_ratio"] is None else f"{v['growth_ratio']:.2f}"
        print(f"{cid} | {','.join(f'{l:g}' for l in v['loads'])} | {v['measured_knee']:g} | {v['predicted_knee']:g} | "
              f"{v['offset_removed_knee']:g} | {100 * v['base_error']:+.0f}% | {g} | "
              f"{v['slope_ms_per_load']['measured']:.2f} / {v['slope_ms_per_load']['predicted']:.2f}")


if __name__ == "__main__":
    main()
