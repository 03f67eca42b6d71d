"""A step-cost term for block-scaled FP8 checkpoints on AMD GPUs (w8a8 block FP8: DeepSeek-V3/R1, MiniMax-M2,
Qwen3-Coder-FP8; sim.catalog.weight_format), fitted on the serving rows after the per-layer floor and held out
by source (issue 38; run by calibrate/serving/fit.py `run`, reported by `block_markdown` / `block_summary_lines`).

The miss. SGLang on MI300X (LMSYS cookbook) and MI325X (SemiAnalysis InferenceX) prices these checkpoints far
too fast at every load (cookbook DeepSeek-V3.1 TP8 C=1 TPOT 23.9 ms measured vs 10.0 predicted, C=100 73 vs 46;
MiniMax-M2 TP4 C=1 22.2 vs 6.8; SemiAnalysis MI325X DeepSeek-R1 C=4 18.5 vs 12.4), while bf16 models on the same
MI300X and source are priced too slow and the same block-FP8 checkpoint on NVIDIA B200 is within 1%: the miss
follows the (vendor, weight format) pair, not the device or the source alone.

Physical reading, with public evidence of the kernels (ROCm aiter, the library SGLang's ROCm build runs):
- block-scale GEMMs fall back to untuned default configurations on gfx942 (MI300X/MI325X): aiter issue #3852
  (https://github.com/ROCm/aiter/issues/3852: DeepSeek-R1 TP8 shapes on MI300X, cu_num 304, "not found tuned
  config in a8w8_blockscale_tuned_gemm.csv, will use default config"); aiter PR #1930
  (https://github.com/ROCm/aiter/pull/1930: adding the missing gfx942 config of one DeepSeek block-scale GEMM
  shape, N=2112 K=7168, moved SGLang's DeepSeek-R1 TP8 MI300X median TPOT at 1k/1k from 28.76 to 22.05 ms at C=4,
  37.19 -> 25.56 at C=8, 47.17 -> 30.83 at C=16); aiter PR #2613 (https://github.com/ROCm/aiter/pull/2613:
  Qwen3.5 FP8 block-scale GEMM on MI300X, untuned vs tuned serving throughput); aiter PR #1232
  (https://github.com/ROCm/aiter/pull/1232: the Triton block-scale GEMM at M=64-256, N=2112, K=7168 reached
  124-155 GB/s before tuning and 221-415 GB/s after, on an MI350X, against several TB/s of HBM);
- the block-scale fused MoE is latency-bound at decode batches: aiter PR #1483
  (https://github.com/ROCm/aiter/pull/1483: Triton a8w8 block-scale MoE, DeepSeek-R1 shapes 7168x4096, 256
  experts top-8: 159 us total / 87 us kernel at batch 1, 364 / 281 us at batch 4).
So two step costs the kernel-level fit (per-tensor FP8 Llama rows on MI300X, hardware_profiles/mi300x.yaml torch
`fp8`) cannot see: a longer per-layer chain at small batches (the layer floor) and a weight stream well below
the per-tensor GEMMs' (the bandwidth efficiency) as batches grow.
(Its prefill side, a compute scale fitted on the group's TTFT rows over this term, is calibrate/serving/blockprefill.py:
run from `run_stage`, reported under this section; it does not ship, see its docstring.)

The term (written down, with the grids, the group and the ship rule, before any replay with it was run):
- GROUP: a point is in it when its device profile's vendor is in GROUP_VENDORS (AMD) and its checkpoint is
  block-FP8 (sim.catalog.weight_format.is_block_fp8 on the row's model and quant); one term per engine family.
- FLOOR_GRID_US: the group's per-layer floor, max(the fold's own floor, value); None keeps the fold's. 200-400
  us: the cookbook's measured C=1 steps are 276-392 us per layer (Qwen3-Coder 17.1 ms / 62 layers, MiniMax-M2
  22.2 / 62, DeepSeek-V3.1 23.9 / 61: seen before the grid was set, said here), attention and sampling included.
- SCALE_GRID: the group's bandwidth-efficiency scale (EngineConfig.efficiency_scale.bandwidth), 1.0 down to 0.5
  in 0.1 steps: the untuned -> tuned aiter figures above are 1.3-1.5x in TPOT and ~2x in GEMM bandwidth, so a
  2x slower stream (0.5) is the largest credited a priori.
- Loss: stage 1's, the median |log(predicted / measured)| over the TPOT/ITL and output-throughput rows of the
  training sources' group points; the grid is scanned floor-major from (None, 1.0) (the neutral term) and a
  later entry replaces the best only when strictly better, so ties keep the smaller change.
- Held out by source: each source's group points take its fold's floor and front end (the shippable fit
  `request_only`, what the presets' fitted terms are judged on) plus the term fitted on the group's OTHER
  sources (none: the neutral term); the front-end latency is not refitted over the term.
- SHIP_RULE: the term ships for a family only if, held out by source, its group's TPOT/ITL median |error| AND
  its output-throughput median |error| are both smaller than the shippable fit's held-out ones, the term fitted
  on all the group's sources (at least MIN_SOURCES) is not the neutral one, and no other group's figures get
  worse (the term touches only the group's points; `other_points_unchanged` checks that every other point's
  records are identical).
A shipped term is a hardware rule of the family's preset that names the weight format (`when: {vendor: [AMD],
weight_format: [block-fp8]}`, applied with the checkpoint by sim.catalog.weight_format.for_weight_format), with
the all-sources term's values (the floor as max(the preset's, value)); cited in the preset's `sources:`.

Finding (subset run of 2026-12-06, `python benchmarks/serving_fit.py --curves 'mi300x|mi325x|mi355x'`): SGLang,
20 group points (cookbook DeepSeek-V3.1 x3 curves, MiniMax-M2, Qwen3-Coder-480B-FP8 on MI300X; SemiAnalysis
DeepSeek-R1-0528 on MI325X): all sources 400 us / 0.8, folds 200 us / 0.7 (fitted on SemiAnalysis) and 400 us /
1.0 (fitted on the cookbook); held out by source TPOT/ITL 52.0% -> 25.0%, output throughput 101.1% -> 29.2%,
TTFT p50 60.1% -> 62.8%: ships. It ships as a rule of generation cdna3 only (every group point is an MI300X or
MI325X; the one CDNA4 block-FP8 curve runs MTP and is not replayed): a scope set after the held-out figures were
seen, which changes none of them. Since the group was left out of the shared terms (`shared`; same subset, same
day) the terms and the with-term figures came out unchanged, and the reference
the group is judged against moved to TTFT p50 63.2%, output throughput 105.1% (TPOT/ITL 52.0%).
Full serving fit (regeneration of 2026-12-06, session 45, 4,550 replayed rows; benchmarks/serving_fidelity.json
`block_fp8`): all sources 400 us / 0.9, folds 200 us / 0.7 (fitted on SemiAnalysis) and 400 us / 0.9 (fitted on
the cookbook); held out by source TPOT/ITL 42.2% -> 24.3%, output throughput 68.5% -> 31.3%, TTFT p50 62.1% ->
60.5%: ships, and the preset's rule moved 0.8 -> 0.9 (tests/test_block_fp8.py checks the preset against the report).
Session 47 printed 1.0: every candidate but the neutral one named its bandwidth alone, and the engine merges a
partial efficiency_scale into the one the preset's rule resolves to, so once the rule carried the prefill compute
0.3 (shipped in session 46, after that session's fit) those candidates replayed with it while the neutral one (and
every cache key) said 1.0; session 46's fit, run before the compute scale was in the preset, was not affected. Since session 48 calibrate/serving/fit.py `fit_params` replays every candidate's whole scale (compute and
attention 1.0 in this term); that regeneration (4,550 rows, cold) printed all sources 400 us / 0.9, folds the fold's
floor / 0.6 (fitted on SemiAnalysis) and 400 us / 0.9 (fitted on the cookbook), held out by source TPOT/ITL 42.2% ->
27.3%, output throughput 68.5% -> 37.0%, TTFT p50 62.1% -> 60.5%: ships, and the preset's rule moved 1.0 -> 0.9.
"""

from __future__ import annotations

from calibrate.serving.floor import GROUP_METRICS, family_medians, first_best, floor_group, pct, stacked_rows
from calibrate.serving.rows import LoadPoint

GROUP_VENDORS = ("AMD",)
FLOOR_GRID_US = (None, 200.0, 300.0, 400.0)
SCALE_GRID = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
MIN_SOURCES = 2
NEUTRAL = (None, 1.0)
_TERMS = [(f, s) for f in FLOOR_GRID_US for s in SCALE_GRID]  # floor-major from the neutral term
SHIP_RULE = ("held out by source, the AMD block-FP8 group's TPOT/ITL and output-throughput median |error| both "
             "smaller than the shippable fit's (floor + front end), the all-sources term not neutral, and every "
             "other point's figures unchanged")
METRICS = GROUP_METRICS


def in_group(p: LoadPoint) -> bool:
    """The point's vendor is in GROUP_VENDORS and its checkpoint is block-scaled FP8."""
    from sim.catalog.weight_format import is_block_fp8

    return floor_group(p, "vendor") in GROUP_VENDORS and is_block_fp8(p.model, p.quant)


def shared(points: list[LoadPoint]) -> list[LoadPoint]:
    """The points the serving fit's shared terms are fitted AND judged on: every point outside the group.

    The group has a term of its own (fitted here, over the fold's floor and front end), so its points neither
    train nor judge the per-layer floor and its per-group split and front-end latency
    (calibrate/serving/fit.py `fit_engine_params`), the per-vendor bandwidth scale (effscale.py
    `fit_group_scales`, and its ship table), the host stage (hoststage.py) nor the floor's ship figures
    (floor_report.py, `floor_alone_figures`). Chosen over replaying the group's points with the term while
    those are fitted because the term is itself fitted over the fold's floor (max(floor, value)): pricing its
    points with it inside the floor's fit would be circular, excluding them is not. The group's points are
    still predicted by those terms (the shippable fit's held-out records, the term's reference) and priced by
    the term where it ships (the term replaces the floor below its value and the bandwidth scale: the preset's
    rule sets both, applied after the vendor rules, sim.catalog.weight_format.for_weight_format). A family
    whose term does not ship prices its group points with shared terms fitted without them (none in the
    corpus of 2026-12-06: every group point is SGLang's, whose term ships)."""
    return [p for p in points if not in_group(p)]


def trains(points: list[LoadPoint]) -> list[LoadPoint]:
    """The points the shared terms (floor, front end, bandwidth scale, host stage) are fitted on: `shared`
    ones that are not build anomalies (LoadPoint.build_anomaly, calibrate/serving/anomaly.py: scored, and
    judged with the others, but never trained on)."""
    return [p for p in shared(points) if not p.build_anomaly]


def with_term(params: dict, term: tuple) -> dict:
    """`params` (a point's fold parameters) with the term (floor, bandwidth scale) applied; the neutral term
    leaves them as they are."""
    floor, scale = term
    out = dict(params)
    if floor is not None:
        out["layer_floor_us"] = max(float(out.get("layer_floor_us", 0.0) or 0.0), floor)
    if scale != 1.0:
        out["efficiency_scale"] = {"bandwidth": scale}
    return out


def fit_term(gps: list[LoadPoint], base, predict, residuals, loss, warm=None) -> tuple:
    """The _TERMS entry with the smallest `loss` over the residuals of `gps` replayed with it (NEUTRAL when
    `gps` is empty)."""
    if not gps:
        return NEUTRAL
    if warm is not None:
        warm([(p, with_term(base(p), t)) for p in gps for t in _TERMS])
    return first_best(_TERMS, lambda t: loss([r for p in gps for r in residuals(p, predict(p, with_term(base(p), t)))]),
                      default=NEUTRAL)


def run_stage(points: list[LoadPoint], floor_chosen: dict, floor_final: dict, floor_preds: dict, fns: tuple,
              records, warm=None) -> dict:
    """Everything the report needs: per family with group points, the folds' terms, the all-sources term, the
    held-out records with the term (`records(preds)` over all points; non-group points keep `floor_preds`, the
    shippable fit's held-out predictions) and the verdict (`table`). `fns`: (point_params, predict, residuals,
    loss) as calibrate/serving/fit.py has them."""
    point_params, predict, residuals, loss = fns
    grp = [p for p in points if in_group(p)]
    preds = dict(floor_preds)
    folds: dict[str, dict[str, tuple]] = {}
    final: dict[str, tuple] = {}
    for fam in sorted({p.family for p in grp}):
        gps = [p for p in grp if p.family == fam]
        for s in sorted({p.source for p in gps}):
            def base(p, s=s, fam=fam):
                return point_params((floor_chosen.get(s) or {}).get(fam), p)
            t = fit_term([p for p in gps if p.source != s], base, predict, residuals, loss, warm)
            folds.setdefault(s, {})[fam] = t
            for p in gps:
                if p.source == s:
                    preds[p.key()] = predict(p, with_term(base(p), t))
        srcs = {p.source for p in gps}
        final[fam] = (fit_term(gps, lambda p, fam=fam: point_params(floor_final.get(fam), p), predict, residuals,
                               loss, warm) if len(srcs) >= MIN_SOURCES else NEUTRAL)
    ref, got = records(floor_preds), records(preds)
    from calibrate.serving.blockprefill import run_prefill  # the term's prefill side (its module docstring)

    prefill = run_prefill(
        grp, lambda s, fam: (lambda p: with_term(point_params((floor_chosen.get(s) or {}).get(fam), p), folds[s][fam])),
        lambda fam: (lambda p: with_term(point_params(floor_final.get(fam), p), final[fam])), preds,
        (predict, residuals), records, other_points_unchanged, warm)
    return {"points": len(grp), "folds": folds, "final": final, "records": got,
            "table": ship_table(points, grp, ref, got, folds, final), "prefill": prefill}


def other_points_unchanged(group_keys: set[str], ref: list[dict], got: list[dict]) -> bool:
    """Every record of a point outside the group predicts the same with the term as without it."""
    a = sorted((r["row_id"], r["predicted"]) for r in ref if r["point"] not in group_keys)
    b = sorted((r["row_id"], r["predicted"]) for r in got if r["point"] not in group_keys)
    return a == b


def ships(ref: dict, got: dict, final_term: tuple, others_ok: bool) -> bool:
    """SHIP_RULE on held-out medians {metric: %}."""
    def smaller(m):
        return ref.get(m) is not None and got.get(m) is not None and got[m] < ref[m]
    return bool(smaller("tpot_itl") and smaller("output_tps") and tuple(final_term) != NEUTRAL and others_ok)


def ship_table(points: list[LoadPoint], grp: list[LoadPoint], ref: list[dict], got: list[dict], folds: dict,
               final: dict) -> dict[str, dict]:
    """{family: the verdict}: sources, points, devices, the per-fold and all-sources terms, the group's held-out
    medians without and with the term, `others_unchanged` and `ship`."""
    keys_all = {p.key() for p in grp}
    others_ok = other_points_unchanged(keys_all, ref, got)
    out = {}
    for fam in sorted({p.family for p in grp}):
        gps, srcs, r, g = family_medians(grp, fam, ref, got)
        out[fam] = {"sources": srcs, "points": len(gps), "devices": sorted({p.device for p in gps}),
                    "models": sorted({p.model for p in gps}),
                    "fold_terms": {s: _term_json(folds.get(s, {}).get(fam, NEUTRAL)) for s in srcs},
                    "final_term": _term_json(final.get(fam, NEUTRAL)), "reference": r, "with_term": g,
                    "others_unchanged": others_ok, "ship": ships(r, g, final.get(fam, NEUTRAL), others_ok)}
    return out


def _term_json(t: tuple) -> dict:
    return {"layer_floor_us": t[0], "bandwidth_scale": t[1]}


def _term_str(t: dict) -> str:
    f = "fold's" if t["layer_floor_us"] is None else f"{t['layer_floor_us']:g} us"
    return f"floor {f}, bandwidth x{t['bandwidth_scale']:g}"


def block_markdown(stage: dict) -> list[str]:
    """The report section (written whether or not a family has group points)."""
    L = ["## Block-scaled FP8 checkpoints on AMD (calibrate/serving/blockfp8.py)", "",
         f"Group: vendor {', '.join(GROUP_VENDORS)} and a block-FP8 checkpoint (config.json quantization_config "
         "weight_block_size [128, 128], sim/catalog/weight_format.py). Term: the group's per-layer floor "
         f"max(fold's, {', '.join('-' if v is None else f'{v:g}' for v in FLOOR_GRID_US)} us) and bandwidth scale "
         f"{', '.join(f'{v:g}' for v in SCALE_GRID)}, fitted on the group's other sources (grids, group and rule set "
         f"before any replay with the term). Ship rule: {SHIP_RULE}. A shipped term is a preset hardware rule "
         "`when: {vendor: [AMD], weight_format: [block-fp8]}` with the all-sources values (SGLang's is scoped to "
         "generation cdna3, where every fitted point is; a scope set after these figures were seen). The group's "
         "points neither fit nor judge the other terms (floor, front end, bandwidth scale, host stage: excluded, "
         "not priced with the term, since the term is fitted over the fold's floor), and the bands take their "
         "residuals with the term where it ships.",
         ""]
    tab = stage.get("table") or {}
    if not tab:
        return L + ["No engine family has points in the group.", ""]
    L += ["| family | sources (term fitted without each) | points | term (all sources) | metric | shippable fit, "
          "held out | with the term, held out | ship |", "|---|---|---|---|---|---|---|---|"]
    for fam, v in tab.items():
        folds = "; ".join(f"{s}: {_term_str(t)}" for s, t in v["fold_terms"].items())
        L += stacked_rows(f"| {fam} | {folds} | {v['points']} | {_term_str(v['final_term'])} |", "| | | | |", METRICS,
                          v["reference"], v["with_term"], v["ship"], pct)
    from calibrate.serving.blockprefill import prefill_markdown

    return L + ["", "Every point outside the group predicts the same with the term: "
                f"{'yes' if all(v['others_unchanged'] for v in tab.values()) else 'NO'}.", ""] + \
        prefill_markdown(stage.get("prefill"))


def block_json(stage: dict) -> dict:
    """What benchmarks/serving_fidelity.json keeps of the stage: the decode term's verdicts and its prefill side's."""
    return {"table": stage["table"], "prefill": (stage.get("prefill") or {}).get("table")}


def block_summary_lines(stage: dict) -> list[str]:
    out = []
    for fam, v in (stage.get("table") or {}).items():
        out.append(f"block-FP8 on AMD {fam}: {len(v['sources'])} sources, {v['points']} points, term "
                   f"{_term_str(v['final_term'])}, folds "
                   + "; ".join(_term_str(t) for t in v["fold_terms"].values())
                   + "; held out, shippable fit -> with term: "
                   + " · ".join(f"{m} {v['reference'][m]} -> {v['with_term'][m]}%" for m in METRICS)
                   + f"; others unchanged {v['others_unchanged']}; ship {'yes' if v['ship'] else 'no'}")
    from calibrate.serving.blockprefill import prefill_summary_lines

    return (out + prefill_summary_lines(stage.get("prefill"))) or ["block-FP8 on AMD: no points in the group"]
