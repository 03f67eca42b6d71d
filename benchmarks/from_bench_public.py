"""`calibrate --from-bench` on public serving curves: does fitting the front end (request_overhead_ms, the
fifth parameter of calibrate/from_bench.py) help a user who calibrates from their own low-load runs?

Each curve of the serving corpus (benchmarks/serving/*.csv) named on the command line becomes measured
load points, as the serving fit replays them (calibrate/serving/rows.py `load_points`: its prompts, outputs,
release times and engine overrides; calibrate/serving/replay.py `replay`: a `vllm bench serve` client), in
the form `calibrate --from-bench` reads (sim.bench.results.MeasuredPoint). The rule, written before any
replay: per curve, the two lowest loads are the user's calibration runs (fit_from_bench, no hold-out of its
own) and every other load is held out; three predictions of the held-out points are scored, each the
median |predicted / measured - 1| over the held-out points of
  TTFT p50    the median TTFT (the mean where the curve has no median),
  TPOT/ITL    the median TPOT, else the mean, else the median ITL,
  output      output tok/s,
for
  preset      the shipped profile and preset, no fit,
  fit of 4    bandwidth, compute, floor, per-sequence fitted; the front end kept at the preset's,
  fit of 5    the same with the front end fitted too, as `calibrate --from-bench` does by default (which
              keeps the preset's front end when the fitted points have one prompt length: PROMPT_SPREAD);
              --no-spread-guard fits it whatever the prompts (PROMPT_SPREAD 1).
One curve is one deployment; nothing here is fitted across curves, and no figure here changes a preset.

    python benchmarks/from_bench_public.py CURVE_ID [CURVE_ID ...] [--no-spread-guard] [--json OUT]

Session 49 (branch fecal), the eight replayable curves (all vLLM) at TP 1 whose loads are concurrencies, four or
more of them, with a TTFT at each and a TPOT at the lowest (chosen by that rule before any replay; python
benchmarks/from_bench_public.py <the eight>): every curve has one prompt length. With --no-spread-guard
the fitted front end left the held-out TTFT p50 median |error| the same on the two Red Hat 70B curves
(2.6%, 2.0%), better on one (Wayne H100 8B bf16 67.1% -> 64.0%) and worse on five (pallavim1 gemma-4
7.0% -> 26.5%, Wayne RTX PRO 6000 bf16 164.1% -> 218.6%, fp8 57.5% -> 65.2%, nvfp4 69.6% -> 138.2%,
Together MI350X gpt-oss 7.3% -> 12.8%), trading front end against compute (nvfp4: compute x0.05 and 28.7
ms); which is why calibrate/from_bench.py fits it only across prompt lengths (a rule read off these
curves, so on them not a held-out result). The fit of four itself is poorly posed on two low loads
(compute x0.17 and x0.15 on the Wayne H100 and RTX PRO 6000 bf16 curves, 12-token prompts; x0.09 on
Together MI350X, whose fitted points stay 40% off): a calibration needs runs at loads that bind compute.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.from_bench import fit_from_bench  # noqa: E402
from calibrate.serving.rows import curves, load_corpus, load_points  # noqa: E402
from sim.bench.results import MeasuredPoint, predict  # noqa: E402
from sim.bench.serve import Deployment, ServeClient, Workload  # noqa: E402

#: corpus (quantity, statistic) -> sim.bench.results figure
FIGURES = {("ttft_ms", "mean"): "ttft_mean_ms", ("ttft_ms", "median"): "ttft_median_ms",
           ("ttft_ms", "p99"): "ttft_p99_ms", ("tpot_ms", "mean"): "tpot_mean_ms",
           ("tpot_ms", "median"): "tpot_median_ms", ("tpot_ms", "p99"): "tpot_p99_ms",
           ("itl_ms", "mean"): "itl_mean_ms", ("itl_ms", "median"): "itl_median_ms", ("itl_ms", "p99"): "itl_p99_ms",
           ("e2el_ms", "mean"): "e2el_mean_ms", ("output_tps", "value"): "output_tps",
           ("request_tps", "value"): "request_tps", ("total_tps", "value"): "total_tps"}
#: the scored groups: the first figure of each list the point has
GROUPS = {"TTFT p50": ("ttft_median_ms", "ttft_mean_ms"), "TPOT/ITL": ("tpot_median_ms", "tpot_mean_ms", "itl_median_ms"),
          "output": ("output_tps",)}
TRAIN_LOADS = 2


def measured_point(p) -> MeasuredPoint:
    """A corpus load point as `vllm bench serve` would have reported it (calibrate/serving/replay.py's client)."""
    n = len(p.prompt_lens)
    client = ServeClient(num_prompts=n, request_rate=math.inf if p.load_kind == "concurrency" else p.load,
                         max_concurrency=p.max_concurrency, random_input_len=1, random_output_len=1,
                         percentile_metrics=("ttft", "tpot", "itl", "e2el"), metric_percentiles=(50.0, 90.0, 95.0, 99.0))
    wl = Workload(np.array(p.prompt_lens), np.array(p.output_lens), np.array(p.release_s))
    measured = {FIGURES[k]: v for k, v in p.measured.items() if k in FIGURES}
    return MeasuredPoint("vllm", p.curve_id, f"{p.load_kind} {p.load:g}", client, wl, measured)


def scores(points: list[MeasuredPoint], dep: Deployment) -> tuple[dict, list[dict]]:
    """Median |error| % per group over `points`, and each point's errors."""
    errs: dict[str, list[float]] = {g: [] for g in GROUPS}
    per = []
    for mp in points:
        pred = predict(mp, dep)
        row = {"point": mp.label}
        for g, names in GROUPS.items():
            m = next((x for x in names if x in mp.measured and x in pred and pred[x]), None)
            if m is not None:
                e = (pred[m] / mp.measured[m] - 1) * 100
                errs[g].append(abs(e))
                row[g] = round(e, 1)
        per.append(row)
    return {g: (float(np.median(v)) if v else None) for g, v in errs.items()}, per


def run_curve(cid: str, rows: list[dict]) -> dict:
    pts = sorted(load_points(rows), key=lambda p: p.load)
    if len(pts) < TRAIN_LOADS + 1:
        raise SystemExit(f"{cid}: {len(pts)} load point(s); {TRAIN_LOADS + 1} or more needed")
    p0 = pts[0]
    dep = Deployment(hw=p0.device, model=p0.model, quant=p0.quant, engine=p0.engine, overrides=dict(p0.overrides))
    mps = [measured_point(p) for p in pts]
    train, held = mps[:TRAIN_LOADS], mps[TRAIN_LOADS:]
    out = {"curve": cid, "engine": p0.engine, "device": p0.device, "model": p0.model, "quant": p0.quant,
           "train": [m.label for m in train], "heldout": [m.label for m in held], "variants": {}}
    for name, fit_front in (("preset", None), ("fit of 4", False), ("fit of 5", True)):
        t = time.time()
        d, params = dep, {}
        if fit_front is not None:
            fit = fit_from_bench(train, dep, holdout_fraction=0.0, fit_front_end=fit_front)
            params = {"scale_bandwidth": fit.scale_bandwidth, "scale_compute": fit.scale_compute,
                      "floor_ms": fit.floor_ms, "per_sequence_ms": fit.per_sequence_ms,
                      "request_overhead_ms": fit.request_overhead_ms, "train_median_abs_error_pct":
                      fit.train_median_abs_error_pct, "evaluations": fit.evaluations,
                      "front_end_fitted": fit.front_end_fitted}
            d = replace(dep, cost_params=fit.params,
                        overrides={**dep.overrides, "request_overhead_ms": fit.request_overhead_ms})
        med, per = scores(held, d)
        out["variants"][name] = {"heldout_median_abs_error_pct": med, "points": per, "params": params,
                                 "seconds": round(time.time() - t, 1)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curves", nargs="+", help="curve_id of the serving corpus")
    ap.add_argument("--json", type=Path, help="write the results here too")
    ap.add_argument("--no-spread-guard", action="store_true", help="fit the front end whatever the prompt lengths")
    a = ap.parse_args(argv)
    if a.no_spread_guard:
        import calibrate.from_bench as fb

        fb.PROMPT_SPREAD = 1.0  # max(means) < 1 x min(means) never holds: always fitted
    cs = curves(load_corpus())
    results = []
    for cid in a.curves:
        if cid not in cs:
            raise SystemExit(f"no curve {cid!r} in benchmarks/serving")
        r = run_curve(cid, cs[cid])
        results.append(r)
        print(f"{cid} ({r['engine']}, {r['device']}, {r['model']} {r['quant'] or ''}): trained on "
              f"{', '.join(r['train'])}; held out {', '.join(r['heldout'])}")
        for name, v in r["variants"].items():
            med = "  ".join(f"{g} {'-' if x is None else f'{x:.1f}%'}" for g, x in v["heldout_median_abs_error_pct"].items())
            p = v["params"]
            fitted = (f"  [bw x{p['scale_bandwidth']:.2f}, compute x{p['scale_compute']:.2f}, floor {p['floor_ms']:.2f} "
                      f"ms, per seq {p['per_sequence_ms']:.3f} ms, front end {p['request_overhead_ms']:.1f} ms; fit "
                      f"|error| {p['train_median_abs_error_pct']:.1f}%{'' if p['front_end_fitted'] else '; front end kept'}]"
                      ) if p else ""
            print(f"  {name:9s} held-out median |error|: {med}{fitted}  ({v['seconds']:.0f} s)", flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
