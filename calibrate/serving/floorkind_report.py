"""What the report says of the per-layer kernel floor per FFN kind (calibrate/serving/floorkind.py, whose docstring
holds the ship rule): the verdict per engine family, its JSON section, summary lines and Markdown section
(reached through calibrate/serving/floor_report.py). A fit run without the stage (benchmarks/serving_fit.py
without --floor-kind) prints the recorded full-fit figures (floorkind.RECORD) instead, labelled as such, with the
verdict recomputed from them."""

from __future__ import annotations

import json

from calibrate.serving.blockfp8 import shared
from calibrate.serving.floor import median_abs_pct, pct
from calibrate.serving.floorkind import (
    FLOOR_KINDS, MAX_TTFT_LOSS_PTS, MIN_GAIN_PTS, RULE_METRICS as _METRICS, kind_ships, load_record, point_kind,
)


def kind_ship_rule(res: dict) -> dict[str, dict]:
    """{family: {"one_floor": {metric: %}, "by_kind": {...}, "per_kind": {kind: {"sources", "points", "one_floor",
    "by_kind"}}, "values": {kind: all-rows entry}, "ship": bool}}: the rule of floorkind's docstring over each
    family's points held out by source (the block-FP8 group's left out); {} when the stage was not run."""
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
        out[fam] = {"one_floor": one, "by_kind": kind, "per_kind": per_kind, "values": values,
                    "ship": kind_ships(one, kind, values),
                    "pooled_floor_us": float((ro["final_params"].get(fam) or {}).get("layer_floor_us", 0.0))}
    return out


def recorded_ship_rule(rec: dict | None = None) -> dict[str, dict]:
    """kind_ship_rule's table from the recorded full-fit figures (`rec`, default floorkind.load_record()): the
    figures as recorded, "ship" recomputed by floorkind.kind_ships (the recorded verdict is not read)."""
    rec = load_record() if rec is None else rec
    out = {}
    for fam, v in sorted(rec["families"].items()):
        out[fam] = {"one_floor": v["one_floor"], "by_kind": v["by_kind"], "per_kind": v.get("per_kind") or {},
                    "values": v["values"], "ship": kind_ships(v["one_floor"], v["by_kind"], v["values"]),
                    "pooled_floor_us": float(v["pooled_floor_us"])}
    return out


def recorded_label(rec: dict) -> str:
    return f"recorded from {rec['date']} full fit; rerun with --floor-kind"


def kind_json(res: dict, rec: dict | None = None) -> dict:
    """The `layer_floor` section's `by_kind` part: the rule's margins, the verdicts, the folds' choices; when the
    stage was not run, the recorded figures (`rec`, default the committed record) under the same keys, with
    `recorded_from` saying where they come from and `folds` each fold's per-kind floors."""
    ro = res["request_only"]
    if "by_kind" in ro:
        return {"min_gain_pts": MIN_GAIN_PTS, "max_ttft_loss_pts": MAX_TTFT_LOSS_PTS, "ship_rule": kind_ship_rule(res),
                "chosen": ro["by_kind"].get("chosen", {})}
    rec = load_record() if rec is None else rec
    return {"recorded_from": {"label": recorded_label(rec), "record": "benchmarks/serving/floorkind_rule.json",
                              "date": rec["date"], "recorded_in": rec["recorded_in"], "command": rec["command"],
                              "rerun": rec["rerun"]},
            "min_gain_pts": MIN_GAIN_PTS, "max_ttft_loss_pts": MAX_TTFT_LOSS_PTS, "ship_rule": recorded_ship_rule(rec),
            "folds": rec.get("folds", {})}


def preset_mismatches(ship_rule: dict[str, dict], dense_of) -> list[str]:
    """The families whose preset's layer_floor_dense_us (`dense_of(family)`) is not what `ship_rule` gives: unset
    where the family does not ship, the all-rows dense value where it does."""
    out = []
    for fam, v in sorted(ship_rule.items()):
        want = v["values"]["dense"]["layer_floor_us"] if v["ship"] else None
        got = dense_of(fam)
        if got != want:
            out.append(f"{fam}: preset layer_floor_dense_us {got}, the rule gives {want}")
    return out


def _vals(values: dict) -> str:
    return ", ".join(f"{k} {v['layer_floor_us']:g} us ({v.get('floor_grouping') or 'family'}"
                     + (f" {json.dumps(v['layer_floor_us_by_group'], sort_keys=True)}" if v.get("layer_floor_us_by_group")
                        else "") + ")" for k, v in values.items()) or "none (pooled)"


def kind_summary_lines(res: dict, rec: dict | None = None) -> list[str]:
    fresh = "by_kind" in res["request_only"]
    if not fresh:
        rec = load_record() if rec is None else rec
    table, tag = (kind_ship_rule(res), "") if fresh else (recorded_ship_rule(rec), f" ({recorded_label(rec)})")
    lines = []
    for fam, v in table.items():
        lines.append(f"floor per FFN kind {fam}{tag}: all-rows {_vals(v['values'])}, one floor {v['pooled_floor_us']:g} us; "
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
         f"better than one floor per family, TTFT p50 at most {kj['max_ttft_loss_pts']:g} points worse.", ""]
    if kj.get("recorded_from"):
        r = kj["recorded_from"]
        L += [f"**Not run by this fit: {r['label']}.** The figures below are the stage's last full-fit run "
              f"(`{r['command']}`; recorded in {'; '.join(r['recorded_in'])}), copied into {r['record']}; the ship column is "
              f"the rule applied to them by this report. Rerun: `{r['rerun']}`.", ""]
    L += ["| family | all-rows floors | one floor | tpot_itl one -> per kind | output_tps | ttft_p50 | ship |",
          "|---|---|---|---|---|---|---|"]
    for fam, v in kj["ship_rule"].items():
        L.append(f"| {fam} | {_vals(v['values'])} | {v['pooled_floor_us']:g} | "
                 + " | ".join(f"{pct(v['one_floor'][m])} -> {pct(v['by_kind'][m])}" for m in _METRICS)
                 + f" | {'yes' if v['ship'] else 'no'} |")
    return L
