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
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from calibrate.serving.floor import MIN_FLOOR_GROUP_SOURCES, floor_group, held_out_gain, preset_values_by_device
from calibrate.serving.rows import LoadPoint

SCALE_GRID = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1)
SCALE_GROUPING = "vendor"
_ORDER = sorted(SCALE_GRID, key=lambda v: (abs(v - 1.0), v))  # ties go to the value nearest 1


def scaled(params: dict, scale: float) -> dict:
    """`params` with the bandwidth efficiency scale `scale` (1.0: unchanged, the floor-only replay)."""
    return {**params, "efficiency_scale": {"bandwidth": scale}} if scale != 1.0 else dict(params)


def fit_group_scales(ps: list[LoadPoint], base, predict, residuals, loss, keep, min_sources: int, warm=None,
                     groups=None) -> dict[str, float]:
    """{group: scale} for each SCALE_GROUPING group (of `groups`, None = all) whose `keep` points come from at
    least `min_sources` sources: the SCALE_GRID value with the smallest `loss` over those points' records,
    each point replayed with `scaled(base(p), value)` (`warm(pairs)`, when given, replays those pairs first:
    the same numbers, in parallel)."""
    out: dict[str, float] = {}
    for g in sorted({floor_group(p, SCALE_GROUPING) for p in ps if keep(p)}):
        gps = [p for p in ps if keep(p) and floor_group(p, SCALE_GROUPING) == g]
        if (groups is not None and g not in groups) or len({p.source for p in gps}) < max(1, min_sources):
            continue
        if warm is not None:
            warm([(p, scaled(base(p), v)) for p in gps for v in _ORDER])
        best, best_loss = 1.0, math.inf
        for v in _ORDER:
            lv = loss([r for p in gps for r in residuals(p, predict(p, scaled(base(p), v)))])
            if lv < best_loss - 1e-12:
                best, best_loss = v, lv
        out[g] = best
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


def final_scales(points: list[LoadPoint], floor_final: dict[str, dict], point_params, predict, residuals,
                 loss, warm=None) -> dict[str, dict[str, float]]:
    """{family: {group: scale}} fitted on all points (the floor's final parameters), MIN_FLOOR_GROUP_SOURCES."""
    out = {}
    for fam in sorted({p.family for p in points}):
        ps = [p for p in points if p.family == fam]
        out[fam] = fit_group_scales(ps, lambda p, fam=fam: point_params(floor_final.get(fam), p), predict,
                                    residuals, loss, lambda p: True, MIN_FLOOR_GROUP_SOURCES, warm)
    return out


def _med(records: list[dict], metric: str) -> float | None:
    """`metric`'s median |error| % (fit.summarize's median_abs_pct; fit imports this module, so not from it)."""
    e = [abs(r["error"]) for r in records if r["metric"] == metric and r["error"] is not None]
    return round(100 * float(np.median(e)), 1) if e else None


def ship_table(points: list[LoadPoint], floor_records: list[dict], scale_records: list[dict],
               final: dict[str, dict[str, float]], folds: dict[str, dict[str, dict[str, float]]],
               floor_shipped: dict[str, bool] | None = None) -> list[dict]:
    """One row per (family, group): sources, the scale fitted on all sources, the per-fold scales, the held-out
    TPOT/ITL and output-throughput median |error| % with the floor alone and with the scale, and `ship`
    (the rule in the module docstring; False for a group with no scale of its own). The scale is fitted and
    held out on top of the family's fitted floor, so it ships only where that floor ships too
    (`floor_shipped[family]`, default True): a scale measured over a floor the preset does not run would ship
    an untested combination (vLLM as of 2026-12-06: its 150 us floor fails its own ship rule)."""
    grp = {p.key(): floor_group(p, SCALE_GROUPING) for p in points}
    by: dict[tuple[str, str], list[LoadPoint]] = defaultdict(list)
    for p in points:
        by[(p.family, grp[p.key()])].append(p)
    rows = []
    for (fam, g), ps in sorted(by.items()):
        keys = {p.key() for p in ps}
        fr = [r for r in floor_records if r["point"] in keys]
        sr = [r for r in scale_records if r["point"] in keys]
        t0, t1 = _med(fr, "tpot_itl"), _med(sr, "tpot_itl")
        o0, o1 = _med(fr, "output_tps"), _med(sr, "output_tps")
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
    def f(x):
        return "-" if x is None else f"{x:.1f}%"
    L = ["## Decode-efficiency (bandwidth) scale per (engine family, device group)", "",
         f"Grid {', '.join(str(v) for v in SCALE_GRID)} (set before any scaled replay), grouping "
         f"`{SCALE_GROUPING}` (a priori), a group's own scale only with >= {MIN_FLOOR_GROUP_SOURCES} sources. "
         "Held out by source: each source predicted with its fold's floor and the scale fitted on its group's "
         "other sources. Ship rule: held-out TPOT/ITL median improves and output throughput is no worse "
         "than the floor alone, and the family's preset runs the floor the scale was fitted on (a scale "
         "over a floor that does not ship would ship an untested combination; calibrate/serving/effscale.py).", "",
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
    return "no (held-out gain, but the family's floor does not ship)" if r.get("held_out_gain") else "no"


def scale_summary_lines(table: list[dict]) -> list[str]:
    return [f"bandwidth scale {r['family']}/{r['group']}: {r['sources']} sources, fitted "
            f"{r['fitted_scale']}, folds {list(r['fold_scales'].values())}, held out TPOT/ITL "
            f"{r['tpot_itl_floor']} -> {r['tpot_itl_scaled']}%, output tok/s {r['output_tps_floor']} -> "
            f"{r['output_tps_scaled']}%, ship {_ship_word(r)}" for r in table]
