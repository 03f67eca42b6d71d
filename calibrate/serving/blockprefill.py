"""The prefill side of the AMD block-FP8 term (calibrate/serving/blockfp8.py): a COMPUTE efficiency scale for
block-scaled FP8 checkpoints on AMD, fitted on the group's TTFT p50 rows over the decode term, held out by source
(issue 38; run by blockfp8.run_stage, reported by blockfp8.block_markdown / block_summary_lines).

The miss. With the decode term (per-layer floor 400 us, bandwidth x0.8) SGLang's AMD block-FP8 points are priced
well inside their TPOT, but their TTFT stays 40-75% low and the miss grows with the prompt. What the simulator
prices at one client (sglang@0.5 front end 125 ms, the shipped preset; probe of 2026-12-06 on this tree, seen
BEFORE the grid below was written): cookbook DeepSeek-V3.1 TP8 MI300X, median prompt 764 tokens, one prefill of
51.0 ms (GEMMs memory-bound: the floor and the weight stream) against 89 ms measured after the front end (213.6 ms
median TTFT, 1k/1k curve; 31 ms on the 1k/8k curve's 156.2 ms: the front end is a large share here); median prompt
4,815 tokens: 98.8 ms priced (GEMMs compute-bound at 1008 TFLOP/s per GPU, 38.5% of the 2,614.9 TFLOP/s FP8 peak)
against 356 ms measured (481.4 ms median TTFT): 13.5k prompt tokens/s measured vs 48.7k priced. MiniMax-M2 TP4,
764 tokens: 43.2 ms priced (memory-bound) vs 260 ms. SemiAnalysis MI325X DeepSeek-R1, ~7.3k tokens at 4 clients:
162 ms per prefill priced against 1,025 ms mean TTFT. At prompts of thousands of tokens the GEMMs and the fused
MoE are compute-bound, so their rate is `efficiency_scale.compute` (sim.cost.params CostParams.from_profile:
matmul = FP8 peak x eff.compute x scale.compute; this family's fitted entry prices attention against its own
`attention_of_peak`, so the compute scale leaves attention alone).

Evidence that block-scale GEMMs / fused MoE at prefill-size M run below that rate on gfx942 (MI300X/MI325X):
- tuned rates: ROCm/aiter aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv (gfx942, cu_num 304
  rows, added by aiter PR #2881 of 2026-04-30 and #3951 of 2026-07-23, i.e. after SGLang 0.5.7's cookbook runs):
  DeepSeek shapes at M = 4096-16384 reach N=2112 K=7168 844-911 TFLOPS, N=4608 K=7168 861-958, N=1536 K=7168
  678-884, N=3072 K=1536 645-791, N=4096 K=512 427-569; aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_ds_v3.csv
  (cu_num 304, 7168x2048, 33 experts top-9): 915-941 TFLOPS at 4096-16384 tokens, 604 at 512, 744 at 1024. So
  even TUNED the kernels run at 0.42-0.95 of the 1008 TFLOP/s the simulator prices.
- untuned -> tuned at prefill M: aiter PR #4261 (https://github.com/ROCm/aiter/pull/4261, MI300X block-scale FP8
  fused MoE prefill, 2048-32768 tokens: "up to 1.8x (avg. ~1.56x)"); aiter PR #5279
  (https://github.com/ROCm/aiter/pull/5279, gfx950 block-scale GEMM at M=16384: default 224 -> tuned 148 us,
  277 -> 224 us: 1.24-1.34x); aiter PR #3422 (https://github.com/ROCm/aiter/pull/3422, GLM-5.1-FP8 on 8x MI300X,
  vLLM, 1k/1k at 32 clients: median TTFT 1771.8 -> 1220.0 ms with the gfx942 rows, 1.45x); aiter issue #3852
  (https://github.com/ROCm/aiter/issues/3852: DeepSeek-R1 TP8 prefill/decode shapes on MI300X cu_num 304 "not found
  tuned config ... will use default config").
So a priori the untuned prefill GEMMs run at 0.42/1.8 = 0.23 to 0.95/1.24 = 0.77 of the priced rate.

The term (grid, loss, folds and ship rule written down here BEFORE any replay with a compute scale was run):
- COMPUTE_GRID: the group's compute scale, 1.0 (none), 0.8, 0.6, 0.5, 0.4, 0.3: the a-priori range above,
  its lower end rounded up to 0.3.
- Fitted on the TTFT p50 rows (median and mean TTFT, rows.METRICS "ttft_p50") of the training sources' group
  points only; loss the median |log(predicted / measured)| over them; scanned from 1.0 down, a later value
  replacing the best only when strictly better (floor.first_best), so ties keep the smaller change.
- Over the decode term: each point keeps its fold's floor and front end and the decode term of its fold
  (blockfp8.run_stage's, fitted without its source); the compute scale is added to that efficiency_scale.
- Held out by source within the group (2 sources): each source's points take the compute scale fitted on the
  other source's points; the all-sources scale (what would ship) is fitted on every group point over the
  all-sources decode term and the families' final floor.
- PREFILL_SHIP_RULE: ships only if, held out by source, the group's TTFT p50 median |error| is at least
  MIN_TTFT_GAIN (2.0) points smaller than with the decode term alone, its TPOT/ITL and output-throughput medians
  are each at most MAX_STEP_LOSS (1.0) point larger, the all-sources scale is not 1.0, and every point outside
  the group predicts the same.
A shipped scale is the `compute` of the preset's `{vendor AMD, generation cdna3, weight_format block-fp8}` rule
(sim/catalog/engines/sglang.yaml), with a `sources:` citation.

Finding (subset run of 2026-12-06, `python benchmarks/serving_fit.py --curves 'mi300x|mi325x|mi355x' --jobs 1`,
the same 20 group points of two sources as the decode term's; written after the figures were seen): SGLang, all
sources x0.3, both folds x0.3 (fitted on the cookbook alone and on SemiAnalysis alone: the grid's lower end);
held out by source, decode term alone -> with the compute scale: TTFT p50 64.1% -> 60.4% (-3.7 points, passes),
TPOT/ITL 25.0% -> 25.0%, output throughput 29.2% -> 33.4% (+4.2 points: fails), TTFT p99 67.9% -> 76.9% (not in
the rule); every other point unchanged. It does NOT ship: the preset's compute stays 1.0. Where it moves the
figures (held out): SemiAnalysis MI325X DeepSeek-R1 8k prompts, mean TTFT -77/-73/-67/-64/-59% -> -60/-52/-45/-33/-23%
at C=4..64, but its output throughput, already under-predicted with the decode term its fold takes from the
cookbook (400 us, bandwidth x1.0), drops further (-29/-29/-26/-16/+5% -> -32/-34/-34/-29/-16%); cookbook
DeepSeek-V3.1 8k/1k C=1 median TTFT -21% -> -3%; the cookbook's 1k-prompt medians barely move (their prefill is
memory-bound: the floor and the weight stream) and stay over-priced held out (+60..+163%: the fold's front end is
fitted on SemiAnalysis alone in this subset), while their means (warm-up outliers) stay under. The fit reaching
the grid's end in both folds says a uniform GEMM slowdown is not the whole prefill miss (the 1k-token C=1 miss
sits where no compute scale reaches: MiniMax-M2 260 ms measured after the front end vs 43 ms priced).
A second subset, every SGLang curve (`--curves sglang --jobs 1`, 2,051 rows in 170 load points, four SGLang
sources, so each fold's front end is fitted on more than one other source; same day, same rule): the same 20
group points, x0.3 in both folds and all sources; held out TTFT p50 54.9% -> 40.6% (-14.3 points), TPOT/ITL
25.0% -> 25.0%, output throughput 31.3% -> 34.3% (+3.0 points: fails), TTFT p99 73.2% -> 82.6%: does not ship
either. The throughput loss is physical, not a side effect on decode: in a closed loop a slower prefill leaves
less time to decode, and the MI325X curve's throughput is already under-predicted held out (its TPOT over-priced
by the decode term its fold takes from the cookbook). What it would take (not done): that curve's decode priced
right first, then this rule re-run.
"""

from __future__ import annotations

import math

from calibrate.serving.floor import GROUP_METRICS, family_medians, first_best, pct, stacked_rows
from calibrate.serving.rows import LoadPoint

COMPUTE_GRID = (1.0, 0.8, 0.6, 0.5, 0.4, 0.3)
MIN_TTFT_GAIN = 2.0  # points of held-out TTFT p50 median |error|
MAX_STEP_LOSS = 1.0  # points of held-out TPOT/ITL and output-throughput median |error|
LOSS_METRICS = ("ttft_p50",)
PREFILL_SHIP_RULE = (f"held out by source, the AMD block-FP8 group's TTFT p50 median |error| at least {MIN_TTFT_GAIN:g} "
                     f"points smaller than with the decode term alone, TPOT/ITL and output throughput each at most "
                     f"{MAX_STEP_LOSS:g} point larger, the all-sources compute scale not 1.0, every other point unchanged")
METRICS = GROUP_METRICS


def with_compute(params: dict, compute: float) -> dict:
    """`params` (a point's parameters with the decode term applied, blockfp8.with_term) with the compute scale
    added to its efficiency_scale (bandwidth kept); 1.0 leaves them as they are."""
    if compute == 1.0:
        return dict(params)
    out = dict(params)
    scale = dict(out.get("efficiency_scale") or {})
    scale["compute"] = compute
    out["efficiency_scale"] = scale
    return out


def ttft_loss(records: list[dict]) -> float:
    """Median |log(predicted / measured)| over the TTFT p50 records (inf without any)."""
    from statistics import median

    e = [abs(math.log(r["predicted"] / r["measured"])) for r in records
         if r["metric"] in LOSS_METRICS and r.get("predicted") and r.get("measured")]
    return float(median(e)) if e else math.inf


def fit_compute(gps: list[LoadPoint], params_of, predict, residuals, warm=None) -> float:
    """The COMPUTE_GRID value with the smallest TTFT p50 loss over `gps` replayed with `params_of(p)` (the
    point's parameters with its decode term) plus the scale; 1.0 when `gps` is empty."""
    if not gps:
        return 1.0
    if warm is not None:
        warm([(p, with_compute(params_of(p), c)) for p in gps for c in COMPUTE_GRID])
    return first_best(COMPUTE_GRID, lambda c: ttft_loss(
        [r for p in gps for r in residuals(p, predict(p, with_compute(params_of(p), c)))]), default=1.0)


def prefill_ships(ref: dict, got: dict, final_scale: float, others_ok: bool) -> bool:
    """PREFILL_SHIP_RULE on held-out medians {metric: %} (ref: the decode term alone; got: with the scale)."""
    def known(m):
        return ref.get(m) is not None and got.get(m) is not None
    if not all(known(m) for m in ("ttft_p50", "tpot_itl", "output_tps")):
        return False
    return bool(got["ttft_p50"] <= ref["ttft_p50"] - MIN_TTFT_GAIN
                and got["tpot_itl"] <= ref["tpot_itl"] + MAX_STEP_LOSS
                and got["output_tps"] <= ref["output_tps"] + MAX_STEP_LOSS
                and final_scale != 1.0 and others_ok)


def run_prefill(grp: list[LoadPoint], fold_params, final_params, decode_preds: dict, fns: tuple, records,
                other_points_unchanged, warm=None) -> dict:
    """Per family with group points: the folds' compute scales, the all-sources one, the held-out records with
    them and the verdict. `fold_params(s, fam)(p)`: a point's parameters in fold `s` with the fold's decode
    term; `final_params(fam)(p)`: with the all-sources decode term; `decode_preds`: {point key: predicted} held
    out with the decode term alone (every point; the reference); `fns`: (predict, residuals);
    `records(preds)`: the records over all points."""
    predict, residuals = fns
    preds = dict(decode_preds)
    folds: dict[str, dict[str, float]] = {}
    final: dict[str, float] = {}
    for fam in sorted({p.family for p in grp}):
        gps = [p for p in grp if p.family == fam]
        srcs = sorted({p.source for p in gps})
        for s in srcs:
            c = fit_compute([p for p in gps if p.source != s], fold_params(s, fam), predict, residuals, warm)
            folds.setdefault(s, {})[fam] = c
            for p in gps:
                if p.source == s:
                    preds[p.key()] = predict(p, with_compute(fold_params(s, fam)(p), c))
        final[fam] = (fit_compute(gps, final_params(fam), predict, residuals, warm) if len(srcs) >= 2 else 1.0)
    ref, got = records(decode_preds), records(preds)
    others_ok = other_points_unchanged({p.key() for p in grp}, ref, got)
    table = {}
    for fam in sorted({p.family for p in grp}):
        gps, srcs, r, g = family_medians(grp, fam, ref, got)
        table[fam] = {"sources": srcs, "points": len(gps),
                      "fold_compute": {s: folds.get(s, {}).get(fam, 1.0) for s in srcs},
                      "final_compute": final.get(fam, 1.0), "decode_term_only": r, "with_compute": g,
                      "others_unchanged": others_ok, "ship": prefill_ships(r, g, final.get(fam, 1.0), others_ok)}
    return {"folds": folds, "final": final, "records": got, "table": table}


def prefill_markdown(stage: dict) -> list[str]:
    L = ["### Its prefill side: a compute scale (calibrate/serving/blockprefill.py)", "",
         f"Compute scale grid {', '.join(f'{v:g}' for v in COMPUTE_GRID)}, fitted on the TTFT p50 rows of the group's "
         "other source over each fold's decode term (grid, loss and rule written before any replay with it). "
         f"Ship rule: {PREFILL_SHIP_RULE}.", ""]
    tab = (stage or {}).get("table") or {}
    if not tab:
        return L + ["No engine family has points in the group.", ""]
    L += ["| family | compute scale fitted without each source | all sources | metric | decode term only, held out "
          "| with the compute scale, held out | ship |", "|---|---|---|---|---|---|---|"]
    for fam, v in tab.items():
        folds = "; ".join(f"{s}: x{c:g}" for s, c in v["fold_compute"].items())
        L += stacked_rows(f"| {fam} | {folds} | x{v['final_compute']:g} |", "| | | |", METRICS,
                          v["decode_term_only"], v["with_compute"], v["ship"], pct)
    return L + [""]


def prefill_summary_lines(stage: dict) -> list[str]:
    out = []
    for fam, v in ((stage or {}).get("table") or {}).items():
        out.append(f"block-FP8 on AMD prefill compute scale {fam}: all sources x{v['final_compute']:g}, folds "
                   + "; ".join(f"{s} x{c:g}" for s, c in v["fold_compute"].items())
                   + "; held out, decode term -> with compute scale: "
                   + " · ".join(f"{m} {v['decode_term_only'][m]} -> {v['with_compute'][m]}%" for m in METRICS)
                   + f"; others unchanged {v['others_unchanged']}; ship {'yes' if v['ship'] else 'no'}")
    return out
