"""A decode-efficiency (bandwidth) scale per (engine family, device group), fitted on the serving rows after
the per-layer floor and held out by source (issue 38 item 4; run by calibrate/serving/fit.py `run`, reported
by `scale_markdown` / `scale_summary_lines`).

Physical reading. The kernel fit's efficiencies (hardware profiles' `engine_efficiency[torch]`,
calibrate/public_fit.py) come from kernel-level rows, mostly single-stream / offline, of other releases.
Under serving load an engine's kernels (on AMD: ROCm aiter / hipBLASLt MoE and MLA kernels, FP8 paths; on
NVIDIA: FlashInfer / CUTLASS / DeepGEMM) may reach a different fraction of the roofline. The engine preset's
`efficiency_scale.bandwidth` multiplies the fitted bandwidth efficiency (sim.cost.params
`CostParams.from_profile`): the weight and KV stream of every decode step, what sets TPOT/ITL and the
output throughput of a memory-bound step. One scale per group is the coarsest correction the rows can
identify; compute is not fitted here (decode under the corpus's loads is mostly stream-bound, and each
grid value costs one replay of every point).

Procedure. SCALE_GRID was written down before any scaled replay was seen: 0.6-1.1 in steps of 0.1. The upper
edge: the torch family's fitted bandwidth efficiencies are ~0.75-0.85 of the datasheet, so 1.1 takes them
to ~0.9, about what a streaming kernel can reach; the lower edge 0.6 allows a 1.67x slower stream, the
largest correction an immature kernel path is credited with a priori (the AMD gap the floor helper reported,
MI300X DeepSeek-V3.1 C=100 TPOT 73.3 ms measured vs 40.6 predicted, 1.8x, was known when the grid was set).
The grouping is fixed a priori to SCALE_GROUPING "vendor" (kernels are the vendor's libraries: CUDA vs
ROCm); no nested choice among the floor's groupings (a replay of every point per grid value per grouping
per fold was too costly here). A group fits its own scale only when its rows come from at least
MIN_FLOOR_GROUP_SOURCES sources; the scale chosen minimises stage 1's loss (median |log| over TPOT/ITL and
output-throughput rows), ties to the value nearest 1.
Held out by source: a source's points take the floor parameters its fold fitted without it (the floor's own
held-out folds) and the scale fitted on the other sources of its group under those same parameters (a group
left with no other source keeps 1.0). Ship rule, per (family, group): the held-out TPOT/ITL median |error|
of the group's points improves and its output-throughput median |error| is no worse than the floor alone's
held-out figures; a shipped group's value is the one fitted on all its sources. Shipping is a hardware rule
in the family's preset (`when: {vendor: [...]}`, `set: {efficiency_scale: {bandwidth: v}}`, cited in
`sources:`), which the replay cache keys on (calibrate/serving/replay.py FITTED_FIELDS).
Finding (subset runs of 2026-12-06, `python benchmarks/serving_fit.py --curves ...`, not the full corpus):
SGLang AMD (cookbook MI300X, SemiAnalysis MI325X/MI355X, two sources, 56 points) fits 0.8 on all rows, 0.6 and
0.7 in the two folds; held out TPOT/ITL 30.3% -> 33.2%, output throughput 46.5% -> 31.4%: not shipped. The
cookbook's MI300X FP8 MoE curves (DeepSeek-V3.1, MiniMax-M2, Qwen3-Coder-480B FP8) are predicted 55-62% too
fast at C=1 while its bf16 ones (ERNIE-4.5, Llama-4) sit at -15..+27% and SemiAnalysis's MI325X DeepSeek-R1
FP8 at +7..-31%: the disagreement is between sources and models, which one scale per vendor cannot carry.
Those block-FP8 points now have a term of their own (calibrate/serving/blockfp8.py) and neither fit nor judge the
scale (`shared`). Subset 'mi300x|mi325x|mi355x' of 2026-12-06: with them (priced without their term) SGLang AMD fit
1.1 (folds 0.8, 0.9), held out TPOT/ITL 30.7% -> 27.5%, output tok/s 37.3% -> 30.5%, ship yes; without them (27
points of two sources: cookbook MI300X bf16, SemiAnalysis MI355X) 0.9 (folds 0.8, 1.0), 12.5% -> 20.0%, 9.9% ->
15.8%: not shipped.

The joint ship rule (JOINT_RULE; `joint_fit`, `joint_table`). A family whose fitted floor does not ship on its
own (calibrate/serving/floor.py `floor_ships_alone`) cannot ship a scale under the rule above, which judges
the scale against a floor the preset does not run. For such a family the pair is judged instead: inside
every fold (held out by source) the floor is the one the fold fitted on its training sources (the shippable
fit's, per device group as `point_params` gives it) and each vendor group's scale is fitted on the training
sources over that floor (a group with no other source keeps 1.0, as above), the rest of the engine as the
presets ship it (the release's shipped request_overhead_ms). Over ALL the family's rows (every vendor group),
the pair ships only if, against the presets without it (layer_floor_us 0, bandwidth scale 1.0, the shipped
request_overhead_ms), the held-out TPOT/ITL median |error| is smaller, the output-throughput median no
larger and the TTFT p50 median no larger. Then the preset gets the all-rows floor and, per vendor group with
its own scale, a `when: {vendor: [...]}` hardware rule, both fitted on all sources the same way.
History, said because it is a choice made after seeing held-out figures: the rule was written after the
session-40 figures had been seen (vLLM NVIDIA, 5 sources: scale 0.9 over the 150 us floor, held-out TPOT/ITL
34.1% -> 24.8% and output throughput 58.9% -> 43.2%, against the baseline's 29.9% and ~50-59%), and before
its own figures (all vLLM rows, TTFT p50 included) were computed on the full corpus.
"""

from __future__ import annotations

from collections import defaultdict

from calibrate.serving.blockfp8 import shared, trains
from calibrate.serving.floor import (
    MIN_FLOOR_GROUP_SOURCES, first_best, floor_group, held_out_gain, median_abs_pct, pct, preset_values_by_device,
    split_ships, stacked_rows,
)
from calibrate.serving.rows import LoadPoint

SCALE_GRID = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1)
SCALE_GROUPING = "vendor"
#: the joint ship rule of (floor, scale) for a family whose floor does not ship alone (module docstring)
JOINT_RULE = ("held out by source over all the family's rows, against the presets without the pair: TPOT/ITL "
              "median |error| smaller, output throughput no larger, TTFT p50 no larger")
_ORDER = sorted(SCALE_GRID, key=lambda v: (abs(v - 1.0), v))  # ties go to the value nearest 1


def scaled(params: dict, scale: float) -> dict:
    """`params` with the bandwidth efficiency scale `scale` (1.0: unchanged, the floor-only replay)."""
    return {**params, "efficiency_scale": {"bandwidth": scale}} if scale != 1.0 else dict(params)


def fit_group_scales(ps: list[LoadPoint], base, predict, residuals, loss, keep, min_sources: int, warm=None,
                     groups=None) -> dict[str, float]:
    """{group: scale} for each SCALE_GROUPING group (of `groups`, None = all) whose `keep` points come from at
    least `min_sources` sources: the SCALE_GRID value with the smallest `loss` over those points' records,
    each point replayed with `scaled(base(p), value)` (`warm(pairs)`, when given, replays those pairs first:
    the same numbers, in parallel). The AMD block-FP8 group's points never fit a scale: they have a term of
    their own whose preset rule replaces the scale (calibrate/serving/blockfp8.py `shared`); a build-anomaly
    point (LoadPoint.build_anomaly) trains no scale either."""
    out: dict[str, float] = {}
    ps = [p for p in trains(ps) if keep(p)]
    for g in sorted({floor_group(p, SCALE_GROUPING) for p in ps}):
        gps = [p for p in ps if floor_group(p, SCALE_GROUPING) == g]
        if (groups is not None and g not in groups) or len({p.source for p in gps}) < max(1, min_sources):
            continue
        if warm is not None:
            warm([(p, scaled(base(p), v)) for p in gps for v in _ORDER])
        out[g] = first_best(_ORDER, lambda v, gps=gps: loss([r for p in gps
                                                             for r in residuals(p, predict(p, scaled(base(p), v)))]),
                            default=1.0)
    return out


def heldout_scales(points: list[LoadPoint], floor_chosen: dict[str, dict], point_params, predict, residuals,
                   loss, warm=None) -> tuple[dict[str, dict], dict[str, dict[str, dict[str, float]]]]:
    """({point key: predicted}, {source: {family: {group: scale}}}): each source's points predicted with its
    fold's floor parameters (`floor_chosen[source][family]`) and its group's scale fitted on the other
    sources of the family (MIN_FLOOR_GROUP_SOURCES - 1 of them in the fold), 1.0 where none."""
    preds: dict[str, dict] = {}
    chosen: dict[str, dict[str, dict[str, float]]] = {}
    for s in sorted({p.source for p in points}):
        ch = floor_chosen.get(s) or {}
        chosen[s] = {}
        for fam in sorted({p.family for p in points if p.source == s}):
            ps = [p for p in points if p.family == fam]

            def base(p, fam=fam):
                return point_params(ch.get(fam), p)
            mine = {floor_group(p, SCALE_GROUPING) for p in ps if p.source == s}  # only the groups s is in
            sc = fit_group_scales(ps, base, predict, residuals, loss, lambda p, s=s: p.source != s,
                                  max(1, MIN_FLOOR_GROUP_SOURCES - 1), warm, mine)
            chosen[s][fam] = sc
            for p in ps:
                if p.source == s:
                    preds[p.key()] = predict(p, scaled(base(p), sc.get(floor_group(p, SCALE_GROUPING), 1.0)))
    return preds, chosen


def floors_as_shipped(points: list[LoadPoint], floor_final: dict[str, dict], split_records: list[dict],
                      one_floor_records: list[dict]) -> dict[str, dict]:
    """`floor_final` (the all-rows shippable fit's parameters) with each device group's own floor kept only
    where its split ships (floor.split_ships, the rule floor_report.floor_ship_rule applies, over `split_records`
    vs `one_floor_records`), else the family's: the floor the preset runs.
    The all-sources scale is fitted over it, so what ships is a scale for the floor the preset runs (session 43:
    SGLang AMD's all-rows group floor, 100 us, does not ship, and the scale fitted over it, 0.9, pointed opposite
    to both folds' 1.1 over the family's 150 us; said because this was written after seeing that)."""
    out = {}
    for fam, fp in floor_final.items():
        fp, own = fp or {}, {}
        grouping = fp.get("floor_grouping") or "family"
        for g, v in (fp.get("layer_floor_us_by_group") or {}).items():
            keys = {p.key() for p in shared(points) if p.family == fam and floor_group(p, grouping) == g}
            w, o = ({k: median_abs_pct(recs, k, keys) for k in ("tpot_itl", "output_tps")}
                    for recs in (split_records, one_floor_records))
            if split_ships(grouping != "family", float(v), float(fp.get("layer_floor_us", 0.0)), w, o):
                own[g] = v
        out[fam] = {**fp, "layer_floor_us_by_group": own}
    return out


def final_scales(points: list[LoadPoint], floor_final: dict[str, dict], point_params, predict, residuals,
                 loss, warm=None) -> dict[str, dict[str, float]]:
    """{family: {group: scale}} fitted on all points over `floor_final` (fit.run passes `floors_as_shipped`:
    the floors the presets run), MIN_FLOOR_GROUP_SOURCES."""
    out = {}
    for fam in sorted({p.family for p in points}):
        ps = [p for p in points if p.family == fam]
        out[fam] = fit_group_scales(ps, lambda p, fam=fam: point_params(floor_final.get(fam), p), predict,
                                    residuals, loss, lambda p: True, MIN_FLOOR_GROUP_SOURCES, warm)
    return out


def ship_table(points: list[LoadPoint], floor_records: list[dict], scale_records: list[dict],
               final: dict[str, dict[str, float]], folds: dict[str, dict[str, dict[str, float]]],
               floor_shipped: dict[str, bool] | None = None) -> list[dict]:
    """One row per (family, group): sources, the scale fitted on all sources, the per-fold scales, the held-out
    TPOT/ITL and output-throughput median |error| % with the floor alone and with the scale, and `ship`
    (the rule in the module docstring; False for a group with no scale of its own). The scale is fitted and
    held out on top of the family's fitted floor, so it ships by this rule only where that floor ships on its
    own (`floor_shipped[family]`, calibrate/serving/floor.py `floor_ships_alone`; default True): a scale
    measured over a floor the preset does not run would ship an untested combination (vLLM as of 2026-12-06:
    its 150 us floor fails its own ship rule). Such a family's pair is judged by the joint rule instead
    (`joint_fit`)."""
    grp = {p.key(): floor_group(p, SCALE_GROUPING) for p in points}
    by: dict[tuple[str, str], list[LoadPoint]] = defaultdict(list)
    for p in points:
        by[(p.family, grp[p.key()])].append(p)
    rows = []
    for (fam, g), ps in sorted(by.items()):
        keys = {p.key() for p in ps}
        t0, t1 = median_abs_pct(floor_records, "tpot_itl", keys), median_abs_pct(scale_records, "tpot_itl", keys)
        o0, o1 = median_abs_pct(floor_records, "output_tps", keys), median_abs_pct(scale_records, "output_tps", keys)
        own = final.get(fam, {}).get(g)
        floor_ok = (floor_shipped or {}).get(fam, True)
        gain = own is not None and own != 1.0 and held_out_gain(t1, t0, o1, o0)
        ship = gain and floor_ok
        srcs = sorted({p.source for p in ps})
        rows.append({"family": fam, "group": g, "devices": sorted({p.device for p in ps}), "sources": len(srcs),
                     "points": len(ps), "fitted_scale": own,
                     "fold_scales": {s: folds.get(s, {}).get(fam, {}).get(g) for s in srcs},
                     "tpot_itl_floor": t0, "tpot_itl_scaled": t1, "output_tps_floor": o0, "output_tps_scaled": o1,
                     "held_out_gain": bool(gain), "floor_shipped": bool(floor_ok), "ship": bool(ship)})
    return rows


def shipped_device_scales(points: list[LoadPoint]) -> dict[str, dict[str, float]]:
    """{family: {device: bandwidth scale}} the presets run (`preset_values_by_device`; 1.0 = none shipped)."""
    return preset_values_by_device(points, lambda eng: eng.efficiency_scale.bandwidth)


def scale_markdown(table: list[dict]) -> list[str]:
    """The report section: one line per (family, group)."""
    f = pct
    L = ["## Decode-efficiency (bandwidth) scale per (engine family, device group)", "",
         f"Grid {', '.join(str(v) for v in SCALE_GRID)} (set before any scaled replay), grouping "
         f"`{SCALE_GROUPING}` (a priori), a group's own scale only with >= {MIN_FLOOR_GROUP_SOURCES} sources. "
         "Held out by source: each source predicted with its fold's floor and the scale fitted on its group's "
         "other sources. Ship rule: held-out TPOT/ITL median improves and output throughput is no worse "
         "than the floor alone, and the family's preset runs the floor the scale was fitted on (a scale "
         "over a floor that does not ship would ship an untested combination; calibrate/serving/effscale.py). "
         "The AMD block-FP8 group's points neither fit nor judge it (a term of their own, below).", "",
         "| family | group | sources | points | scale (all sources) | per-fold scales | TPOT/ITL floor -> scaled "
         "| output tok/s floor -> scaled | ship |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        folds = ", ".join("-" if v is None else f"{v:g}" for v in r["fold_scales"].values())
        L.append(f"| {r['family']} | {r['group']} | {r['sources']} | {r['points']} | "
                 f"{'-' if r['fitted_scale'] is None else r['fitted_scale']} | {folds} | "
                 f"{f(r['tpot_itl_floor'])} -> {f(r['tpot_itl_scaled'])} | "
                 f"{f(r['output_tps_floor'])} -> {f(r['output_tps_scaled'])} | {_ship_word(r)} |")
    return L + [""]


def _ship_word(r: dict) -> str:
    if r["ship"]:
        return "yes"
    return ("no (held-out gain, but the family's floor does not ship alone: see the joint rule)"
            if r.get("held_out_gain") else "no")


def scale_summary_lines(table: list[dict]) -> list[str]:
    return [f"bandwidth scale {r['family']}/{r['group']}: {r['sources']} sources, fitted "
            f"{r['fitted_scale']}, folds {list(r['fold_scales'].values())}, held out TPOT/ITL "
            f"{r['tpot_itl_floor']} -> {r['tpot_itl_scaled']}%, output tok/s {r['output_tps_floor']} -> "
            f"{r['output_tps_scaled']}%, ship {_ship_word(r)}" for r in table]


# ---- the joint ship rule of (floor, scale) -----------------------------------------------------------
def joint_params(point_params, request_overhead):
    """`point_params(chosen, point)` reduced to what the pair changes: the point's fitted floor (its group's
    where one was fitted, else the family's; 0 = none), with the release's shipped front-end latency
    (`request_overhead(point)`) instead of the fold's fitted one."""
    def pp(chosen, p):
        out = {"layer_floor_us": float(point_params(chosen, p).get("layer_floor_us", 0.0))}
        ro = float(request_overhead(p) or 0.0)
        return {**out, "request_overhead_ms": ro} if ro else out
    return pp


def joint_fit(points: list[LoadPoint], families: list[str], floor_chosen: dict[str, dict], floor_final: dict,
              point_params, request_overhead, predict, residuals, loss, records, warm=None) -> dict:
    """The joint rule's figures for `families` (those whose floor does not ship alone and was fitted > 0):
    held-out predictions (each source with its fold's floor and the scales fitted over it on the other
    sources, `heldout_scales` with `joint_params`), the reference (the presets without the pair: the
    release's shipped request_overhead_ms alone), the all-rows floor and scales, and `joint_table`.
    `records(points, preds)` -> residual records (fit._records)."""
    pp = joint_params(point_params, request_overhead)
    ps = [p for p in points if p.family in families]
    if not ps:
        return {"families": [], "table": {}}
    preds, folds = heldout_scales(ps, floor_chosen, pp, predict, residuals, loss, warm)
    ref = {p.key(): predict(p, {k: v for k, v in pp({}, p).items() if k == "request_overhead_ms"}) for p in ps}
    final = final_scales(ps, floor_final, pp, predict, residuals, loss, warm)
    jr, rr = records(ps, preds), records(ps, ref)
    fold_info = {s: {fam: {"floor_us": sorted({pp(ch.get(fam), p)["layer_floor_us"] for p in ps if p.family == fam}),
                           "scales": (folds.get(s) or {}).get(fam) or {}}
                     for fam in families if any(p.source == s and p.family == fam for p in ps)}
                 for s, ch in sorted(floor_chosen.items())}
    return {"families": list(families), "records": jr, "reference_records": rr, "folds": fold_info, "final": final,
            "table": joint_table(shared(ps), rr, jr, floor_final, final, fold_info, pp)}  # judged without the group


def joint_table(points: list[LoadPoint], reference_records: list[dict], joint_records: list[dict],
                floor_final: dict, final: dict[str, dict[str, float]], folds: dict, pp) -> dict[str, dict]:
    """{family: the joint rule's verdict}: held-out TTFT p50, TTFT p99, TPOT/ITL, output-throughput medians
    of the reference and of the pair over all the family's rows, `ship` (JOINT_RULE), and what ships per
    device (`floor_by_device`: the all-rows floor of the device's group; `scale_by_device`: its vendor group's
    all-sources scale, 1.0 where none)."""
    out = {}
    for fam in sorted({p.family for p in points}):
        ps = [p for p in points if p.family == fam]
        keys = {p.key() for p in ps}
        ref = {m: median_abs_pct(reference_records, m, keys) for m in JOINT_METRICS}
        got = {m: median_abs_pct(joint_records, m, keys) for m in JOINT_METRICS}
        ship = joint_ships(ref, got)
        fl, sc = {}, {}
        for p in ps:
            fl[p.device] = float(pp(floor_final.get(fam), p)["layer_floor_us"])
            sc[p.device] = float(final.get(fam, {}).get(floor_group(p, SCALE_GROUPING), 1.0))
        groups = sorted({floor_group(p, SCALE_GROUPING) for p in ps})
        out[fam] = {"sources": len({p.source for p in ps}), "points": len(ps), "groups": groups,
                    "floor_us": float((floor_final.get(fam) or {}).get("layer_floor_us", 0.0)),
                    "scales": {g: final.get(fam, {}).get(g) for g in groups},
                    "fold_floors_and_scales": {s: (folds.get(s) or {}).get(fam)
                                               for s in sorted({p.source for p in ps})},
                    "reference": ref, "joint": got, "ship": ship,
                    "floor_by_device": dict(sorted(fl.items())), "scale_by_device": dict(sorted(sc.items()))}
    return out


#: the metrics the joint rule reads (and the report prints)
JOINT_METRICS = ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps")


def joint_ships(ref: dict, got: dict) -> bool:
    """JOINT_RULE on held-out medians {metric: %}: TPOT/ITL smaller, output throughput and TTFT p50 no larger
    (a metric with no rows on either side does not block)."""
    def no_larger(m):
        return ref.get(m) is None or got.get(m) is None or got[m] <= ref[m]
    return bool(held_out_gain(got.get("tpot_itl"), ref.get("tpot_itl"), got.get("output_tps"), ref.get("output_tps"))
                and no_larger("ttft_p50"))


def joint_markdown(joint: dict, alone: dict | None = None, preset_floors: dict | None = None) -> list[str]:
    """The report section of the joint rule (written whether or not a family is judged); `alone`: the floor-alone
    verdicts (floor.floor_alone_figures), `preset_floors`: {family: the preset's top-level layer_floor_us}."""
    f = pct
    L = ["### The joint ship rule: floor and bandwidth scale together", "",
         "For a family whose fitted floor does not ship on its own (held out by source its TPOT/ITL median is not "
         "smaller than the baseline's, or its throughput median larger), the pair (floor, per-vendor bandwidth "
         "scale) is judged together: in every fold the floor fitted on the training sources and, over it, each "
         "vendor group's scale fitted on the training sources (a group with no other source keeps 1.0), the rest "
         "of the engine as the presets ship it. Rule: " + JOINT_RULE + "; the preset then gets the all-rows floor "
         "and a `when: {vendor: [...]}` hardware rule per group with its own scale (calibrate/serving/effscale.py). "
         "History, said because it is a choice made after seeing held-out figures: this rule was written after "
         "the session-40 figures of vLLM NVIDIA had been seen (scale 0.9 over the 150 us floor, held-out TPOT/ITL "
         "34.1% -> 24.8%, output throughput 58.9% -> 43.2%, against the baseline's 29.9% and ~50-59%), and "
         "before its own figures below were computed on the full corpus.", ""]
    if alone:
        L += ["Does each family's fitted floor ship on its own (calibrate/serving/floor.py `floor_ships_alone`: all its "
              "rows held out by source, the shippable fit against the baseline of no floor and no front-end "
              "latency; TPOT/ITL smaller, output throughput no larger)?", "",
              "| family | TPOT/ITL baseline -> floor | output tok/s baseline -> floor | ships alone | preset floor (us) |",
              "|---|---|---|---|---|"]
        for fam, v in alone.items():
            pf = (preset_floors or {}).get(fam)
            L.append(f"| {fam} | {f(v['baseline']['tpot_itl'])} -> {f(v['floor']['tpot_itl'])} | "
                     f"{f(v['baseline']['output_tps'])} -> {f(v['floor']['output_tps'])} | "
                     f"{'yes' if v['ship'] else 'no'} | {'-' if pf is None else f'{pf:g}'} |")
        L.append("")
    fams = joint.get("table") or {}
    if not fams:
        return L + ["No family qualifies (every fitted floor ships on its own, or none was fitted).", ""]
    L += ["| family | sources | points | floor (us) | scales (all sources) | metric | presets without the pair | "
          "pair, held out by source | ship |", "|---|---|---|---|---|---|---|---|---|"]
    for fam, v in fams.items():
        sc = ", ".join(f"{g} {'-' if x is None else f'{x:g}'}" for g, x in v["scales"].items())
        L += stacked_rows(f"| {fam} | {v['sources']} | {v['points']} | {v['floor_us']:g} | {sc} |", "| | | | | |",
                          JOINT_METRICS, v["reference"], v["joint"], v["ship"], f)
    L += ["", "| family | fold (held out) | floor and scales fitted without it |", "|---|---|---|"]
    for fam, v in fams.items():
        for s, fv in v["fold_floors_and_scales"].items():
            fv = fv or {}
            L.append(f"| {fam} | {s} | floor {', '.join(f'{x:g}' for x in fv.get('floor_us', [])) or '-'} us; scales "
                     f"{', '.join(f'{g} {x:g}' for g, x in sorted((fv.get('scales') or {}).items())) or 'none'} |")
    return L + [""]


def joint_summary_lines(joint: dict) -> list[str]:
    out = []
    for fam, v in (joint.get("table") or {}).items():
        out.append(f"joint floor + scale {fam}: floor {v['floor_us']:g} us, scales {v['scales']}; held out, presets "
                   "without the pair -> pair: " + " · ".join(f"{m} {v['reference'][m]} -> {v['joint'][m]}%"
                                                           for m in JOINT_METRICS)
                   + f"; ship {'yes' if v['ship'] else 'no'}")
    return out or ["joint floor + scale: no family qualifies"]
