"""What the report says of the per-layer kernel floor per FFN kind (calibrate/serving/floorkind.py, whose docstring
holds the ship rule): the verdict per engine family, its JSON section, summary lines and Markdown section
(reached through calibrate/serving/floor_report.py)."""

from __future__ import annotations

import json

from calibrate.serving.blockfp8 import shared
from calibrate.serving.floor import median_abs_pct, pct
from calibrate.serving.floorkind import FLOOR_KINDS, MAX_TTFT_LOSS_PTS, MIN_GAIN_PTS, point_kind

_METRICS = ("tpot_itl", "output_tps", "ttft_p50")


def kind_ship_rule(res: dict) -> dict[str, dict]:
    """{family: {"one_floor": {metric: %}, "by_kind": {...}, "per_kind": {kind: {"sources", "points", "one_floor",
    "by_kind"}}, "values": {kind: all-rows entry}, "ship": bool}}: the rule of floorkind's docstring over each
    family's points held out by source (the block-FP8 group's left out)."""
    ro = res["request_only"]
    if "by_kind" not in ro:
        return {}
    pts = shared(res["points"])
    out = {}
    for fam in sorted({p.family for p in pts}):
        fps = [p for p in pts if p.family == fam]
        keys = {p.key() for p in fps}
        one = {m: median_abs_pct(ro["records"], m, keys) for m in _METRICS}
        kind = {m: median_abs_pct(ro["by_kind"]["records"], m, keys) for m in _METRICS}
        per_kind = {}
        for k in FLOOR_KINDS:
            kps = [p for p in fps if point_kind(p) == k]
            kk = {p.key() for p in kps}
            per_kind[k] = {"sources": len({p.source for p in kps}), "points": len(kps),
                           "one_floor": {m: median_abs_pct(ro["records"], m, kk) for m in _METRICS},
                           "by_kind": {m: median_abs_pct(ro["by_kind"]["records"], m, kk) for m in _METRICS}}
        values = (ro["by_kind"]["final_params"].get(fam) or {}).get("floor_by_kind") or {}

        def gain(m: str) -> float | None:
            return None if None in (one[m], kind[m]) else round(one[m] - kind[m], 1)
        ttft_ok = None in (one["ttft_p50"], kind["ttft_p50"]) or kind["ttft_p50"] - one["ttft_p50"] <= MAX_TTFT_LOSS_PTS
        ship = bool(all(k in values for k in FLOOR_KINDS) and all((gain(m) or 0.0) >= MIN_GAIN_PTS
                                                                     for m in ("tpot_itl", "output_tps")) and ttft_ok)
        out[fam] = {"one_floor": one, "by_kind": kind, "per_kind": per_kind, "values": values, "ship": ship,
                    "pooled_floor_us": float((ro["final_params"].get(fam) or {}).get("layer_floor_us", 0.0))}
    return out


def kind_json(res: dict) -> dict:
    """The `layer_floor` section's `by_kind` part: the rule's margins, the verdicts, the folds' choices."""
    ro = res["request_only"]
    return {"min_gain_pts": MIN_GAIN_PTS, "max_ttft_loss_pts": MAX_TTFT_LOSS_PTS, "ship_rule": kind_ship_rule(res),
            "chosen": (ro.get("by_kind") or {}).get("chosen", {})}


def _vals(values: dict) -> str:
    return ", ".join(f"{k} {v['layer_floor_us']:g} us ({v.get('floor_grouping') or 'family'}"
                     + (f" {json.dumps(v['layer_floor_us_by_group'], sort_keys=True)}" if v.get("layer_floor_us_by_group")
                        else "") + ")" for k, v in values.items()) or "none (pooled)"


def kind_summary_lines(res: dict) -> list[str]:
    lines = []
    for fam, v in kind_ship_rule(res).items():
        lines.append(f"floor per FFN kind {fam}: all-rows {_vals(v['values'])}, one floor {v['pooled_floor_us']:g} us; "
                     "held out tpot_itl / output_tps / ttft_p50 one floor -> per kind: "
                     + " / ".join(f"{pct(v['one_floor'][m])} -> {pct(v['by_kind'][m])}" for m in _METRICS)
                     + f"; {'ship' if v['ship'] else 'no'}; "
                     + "; ".join(f"{k} points ({pk['sources']} sources, {pk['points']} points) "
                                 + " / ".join(f"{pct(pk['one_floor'][m])} -> {pct(pk['by_kind'][m])}" for m in _METRICS)
                                 for k, pk in v["per_kind"].items()))
    return lines


def kind_markdown(kj: dict) -> list[str]:
    if not kj.get("ship_rule"):
        return []
    L = ["", "#### The per-layer kernel floor per FFN kind (dense vs routed-expert layers)", "",
         "Each FFN kind refits the floor on its own rows (calibrate/serving/floorkind.py: dense-FFN models vs models "
         "with any routed-expert layer; a hybrid's layers each priced at their own kind's floor, "
         "`layer_floor_dense_us` and `layer_floor_us`). Ship rule (committed before its replay): held out by "
         f"source, TPOT/ITL and output-throughput median |error| each at least {kj['min_gain_pts']:g} points "
         f"better than one floor per family, TTFT p50 at most {kj['max_ttft_loss_pts']:g} points worse.", "",
         "| family | all-rows floors | one floor | tpot_itl one -> per kind | output_tps | ttft_p50 | ship |",
         "|---|---|---|---|---|---|---|"]
    for fam, v in kj["ship_rule"].items():
        L.append(f"| {fam} | {_vals(v['values'])} | {v['pooled_floor_us']:g} | "
                 + " | ".join(f"{pct(v['one_floor'][m])} -> {pct(v['by_kind'][m])}" for m in _METRICS)
                 + f" | {'yes' if v['ship'] else 'no'} |")
    return L
