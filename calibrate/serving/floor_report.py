"""What the report says of the per-layer kernel floor per (engine family, device group): the ship rule per
group, its JSON section, its summary lines and its Markdown section (issue 38; the fit in
calibrate/serving/floor.py and calibrate/serving/fit.py)."""

from __future__ import annotations

import json

from calibrate.serving.fit import (
    FLOOR_GROUP, FLOOR_GROUPINGS, MIN_FLOOR_GROUP_SOURCES, _by, floor_group, summarize,
)
from calibrate.serving.blockfp8 import shared
from calibrate.serving.floor import split_ships
from calibrate.serving.floor import pct as _pct
from calibrate.serving.floorkind_report import kind_json, kind_markdown, kind_summary_lines


def _fmt(s: dict | None, key="median_abs_pct") -> str:
    if not s or s.get(key) is None:
        return "-"
    return f"{s[key]:.1f}%"


def floor_ship_rule(res: dict) -> dict[str, dict[str, dict]]:
    """Per engine family and device group (`floor_group` under the family's all-rows grouping; "vendor" groups,
    for information, where it is "family"): the layer floor the all-rows shippable fit gives the group (its
    own where its rows come from MIN_FLOOR_GROUP_SOURCES sources, else the family's) and whether its own value
    may ship as a hardware rule: only where the group's rows held out by source with the split (each source
    predicted with the floor fitted on the other sources of its group) have a smaller TPOT/ITL median |error|
    than with one floor per family, and an output-throughput median |error| no larger. `shipped`: what the
    family's preset runs on the group's devices (its hardware rules applied; one value, or a list where they
    differ); tests/test_serving_fit.py checks shipped == value where ship, else the family's top level. The
    points of the AMD block-FP8 group (calibrate/serving/blockfp8.py `shared`) are not judged: they did not fit
    the floor and a term of their own prices them."""
    final = res["request_only"]["final_params"]
    pts = shared(res["points"])
    one = res["request_only"]["one_floor"]
    shipped = res.get("shipped_layer_floors_by_device", {})
    out: dict[str, dict[str, dict]] = {}
    for fam in sorted({p.family for p in pts}):
        fp = final.get(fam) or {}
        fam_value = float(fp.get("layer_floor_us", 0.0))
        grouping = fp.get("floor_grouping") or "family"
        show = grouping if grouping != "family" else "vendor"
        own = fp.get("layer_floor_us_by_group") or {}
        out[fam] = {}
        for g in sorted({floor_group(p, show) for p in pts if p.family == fam}):
            ps = [p for p in pts if p.family == fam and floor_group(p, show) == g]
            keys = {p.key() for p in ps}

            def med(recs: list[dict], m: str) -> float | None:
                return (summarize([r for r in recs if r["point"] in keys]).get(m) or {}).get("median_abs_pct")

            w = {m: med(res["request_only"]["records"], m) for m in ("tpot_itl", "output_tps", "headline")}
            wo = {m: med(one["records"], m) for m in ("tpot_itl", "output_tps", "headline")}
            base = {m: med(res["baseline"]["records"], m) for m in ("tpot_itl", "output_tps", "headline")}
            has_own = grouping != "family" and g in own
            value = float(own[g]) if has_own else fam_value
            ship = split_ships(has_own, value, fam_value, w, wo)
            devices = sorted({p.device for p in ps})
            runs = sorted({(shipped.get(fam) or {}).get(d) for d in devices} - {None})
            out[fam][g] = {"grouping": show, "sources": len({p.source for p in ps}), "devices": devices,
                           "own_value": has_own, "value": value, "family_value": fam_value,
                           "final_one_floor": float((one["final_params"].get(fam) or {}).get("layer_floor_us", 0.0)),
                           "heldout_split": w, "heldout_one_floor": wo, "baseline": base, "ship": ship,
                           "shipped": runs[0] if len(runs) == 1 else (runs or None)}
    return out


def final_grouping(res: dict, fam: str) -> str:
    """The family's all-rows floor grouping and the nested losses behind it."""
    fp = res["request_only"]["final_params"].get(fam) or {}
    return f"{fp.get('floor_grouping') or 'family'} {json.dumps(fp.get('floor_grouping_losses') or {}, sort_keys=True)}"


def floor_json(res: dict) -> dict:
    """The report's `layer_floor` section: the rule, the ship rule per group, the one-floor-per-family fit."""
    return {"group": FLOOR_GROUP, "groupings": list(FLOOR_GROUPINGS),
                        "min_group_sources": MIN_FLOOR_GROUP_SOURCES,
                        "ship_rule": floor_ship_rule(res),
                        "one_floor_by_source": {"by_metric": summarize(res["request_only"]["one_floor"]["records"]),
                                                "by_family": _by(res["request_only"]["one_floor"]["records"], "family"),
                                                "chosen": res["request_only"]["one_floor"]["chosen"],
                                                "final_params": res["request_only"]["one_floor"]["final_params"]},
            "by_kind": kind_json(res)}


def floor_summary_lines(res: dict) -> list[str]:
    lines: list[str] = []
    s1, s2 = summarize(res["request_only"]["one_floor"]["records"]), summarize(res["request_only"]["records"])
    lines.append("shippable terms held out by source, one floor per family -> per vendor group: "
                 + " · ".join(f"{m} {_fmt(s1.get(m))} -> {_fmt(s2.get(m))}"
                              for m in ("ttft_p50", "tpot_itl", "output_tps", "headline")))
    for fam, gs in floor_ship_rule(res).items():
        for g, v in gs.items():
            lines.append(f"layer floor {fam}/{v['grouping']} {g} ({v['sources']} sources; {', '.join(v['devices'])}): "
                         f"{v['value']:g} us{'' if v['own_value'] else ' (family)'}, family {v['family_value']:g}; "
                         "held out tpot_itl / output_tps one floor -> split: "
                         f"{_pct(v['heldout_one_floor']['tpot_itl'])} -> {_pct(v['heldout_split']['tpot_itl'])} / "
                         f"{_pct(v['heldout_one_floor']['output_tps'])} -> {_pct(v['heldout_split']['output_tps'])}; "
                         f"{'ship' if v['ship'] else 'no'}; preset runs {v['shipped']}"
                         + (f"; grouping chosen {final_grouping(res, fam)}" if g == next(iter(gs)) else ""))
    return lines + kind_summary_lines(res)


def floor_markdown(fj: dict) -> list[str]:
    L: list[str] = []
    ro = fj["request_only_by_source"]
    lf = fj["layer_floor"]
    one = lf["one_floor_by_source"]
    L += ["", "#### The per-layer kernel floor per device group (vendor or generation)", "",
          "`layer_floor_us` is fitted per engine family and per device group: stage (1) picks the family's entry "
          "on all its rows, then each group whose rows come from at least "
          f"{lf['min_group_sources']} sources picks, on its own rows, the floor (same grid, 0 included) with the "
          "smallest median |log| over TPOT/ITL and output-throughput rows; the others take the family's. The "
          f"grouping (rule `{lf['group']}`): per family, inside every fold, the one of "
          f"{' / '.join(f'`{g}`' for g in lf['groupings'])} (one floor; the hardware profile's `vendor`: NVIDIA, "
          "AMD; its `generation`: hopper, blackwell, cdna3, ...) with the smallest leave-one-source-out step "
          "error over that fold's training sources (`floor_grouping` and `floor_grouping_losses` in the chosen "
          "parameters above). Held out by source, a source's rows are predicted with the floor fitted on the "
          "other sources of its group where there is one, else the family's (fitted without it). History, said "
          "because it is a choice made after seeing held-out figures: `vendor` alone was first fixed a priori "
          "(the floor is a chain of kernel launch-to-completion times, set by the vendor's runtime and "
          "libraries); its held-out figures on SGLang's rows were seen (AMD's TPOT/ITL 27.9% -> 30.3% with the "
          "split, 2026-12-06 subset run) before the nested choice over the three groupings replaced it. A "
          "group's own value ships (a `hardware_rules` entry with `when: {vendor: [...]}` or `{generation: "
          "[...]}` in the preset) only where its rows held out by source have a smaller TPOT/ITL median |error| "
          "with the split than with one floor per family and an output-throughput median no larger.", "",
          "| metric | shippable by source, one floor per family | per device group (nested grouping) |",
          "|---|---|---|"]
    for m in ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps", "headline"):
        L.append(f"| {m} | {_fmt(one['by_metric'].get(m))} | {_fmt(ro['by_metric'].get(m))} |")
    L += ["", "| family | grouping: group | sources | devices | own value | value (us) | family value | one-floor fit | "
          "baseline tpot_itl | held-out tpot_itl one floor | split | output_tps one floor | split | ship | "
          "preset runs |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fam, gs in lf["ship_rule"].items():
        for g, v in gs.items():
            runs = "-" if v["shipped"] is None else (f"{v['shipped']:g}" if not isinstance(v["shipped"], list)
                                                      else ", ".join(f"{x:g}" for x in v["shipped"]))
            L.append(f"| {fam} | {v['grouping']}: {g} | {v['sources']} | {', '.join(v['devices'])} | "
                     f"{'yes' if v['own_value'] else 'no (family)'} | {v['value']:g} | {v['family_value']:g} | "
                     f"{v['final_one_floor']:g} | {_pct(v['baseline']['tpot_itl'])} | "
                     f"{_pct(v['heldout_one_floor']['tpot_itl'])} | {_pct(v['heldout_split']['tpot_itl'])} | "
                     f"{_pct(v['heldout_one_floor']['output_tps'])} | {_pct(v['heldout_split']['output_tps'])} | "
                     f"{'yes' if v['ship'] else 'no'} | {runs} |")
    L += ["", "| fold (held out) | one floor per family: chosen |", "|---|---|"]
    for g, ch in sorted(one["chosen"].items()):
        L.append(f"| {g} | {json.dumps(ch, sort_keys=True)} |")
    L.append(f"| (all rows) | {json.dumps(one['final_params'], sort_keys=True)} |")
    return L + kind_markdown(lf.get("by_kind") or {})
