"""vLLM V1's multi-process executor step at TP > 1 (EngineConfig.tp_step_overhead_ms, sim.cost.parallel
`ParallelConfig.executor_step_s`): fitted on the serving rows over the shippable fit (per-layer floor + front
end) and judged held out by source (issue 38). It ships OFF: see "Finding" below.

    python -m calibrate.serving.tpstep                     # vLLM's points, every source held out in turn
    python -m calibrate.serving.tpstep --curves 'redhat'   # a subset (folds over its own sources)

Physical reading. With tensor parallel > 1, vLLM V1 runs the model in tp x pp worker processes
(`MultiprocExecutor`, vllm/v1/executor/multiproc_executor.py @00f6c9bf: `execute_model` -> `collective_rpc`
enqueues the step's SchedulerOutput on a shared-memory `MessageQueue`,
vllm/distributed/device_communicators/shm_broadcast.py, that every worker dequeues and unpickles; the
output rank enqueues its ModelRunnerOutput on its response queue, which the engine core dequeues; design in
vllm-project/vllm PR #9856, "the executor broadcasts the scheduler output to the workers and one of them sends
back the model runner output -- both of these IPCs use shared memory message queues"). With async scheduling
off (the default through 0.11: `--async-scheduling`, PR #19970, "experimental") the engine core schedules step
N + 1 only after step N's output is back, so the round trip (two pickles, two queue hand-offs, the workers'
input preparation) sits between the GPU's steps. At TP = 1 the `UniProcExecutor` calls the model runner in
the engine core's own process: no round trip. SGLang 0.4 replicates its scheduler on every TP rank (only new
requests are broadcast) and overlaps scheduling with the GPU step (its overlap scheduler, on by default).
The same-box evidence that motivated the term (Red Hat, Robert Shaw: Llama-3.3-70B FP8 on 4 H200, upstream
vLLM 0.9.2 vs SGLang 0.4.9.post6, same client): vLLM's median ITL, a decode step, is 0.4-1.9 ms (median
1.0 ms) longer than SGLang's at the 14 loads where both are decode steps, 1 to 500 clients, without growing with
the batch (1000/100 up to C=60:
11.70 vs 10.64 ms at C=1, 12.86 vs 12.00 at C=10, 15.54 vs 14.14 at C=50; 512/2048: 11.75 vs 10.69 at C=1,
19.22 vs 18.84 at C=100, 52.85 vs 50.98 at C=500): a per-step constant, not a per-token all-reduce or a
per-sequence cost. That source is the one this term would be judged on, so its figures set nothing here.

Everything below was written down before any replay with the term was run:
- GRID_TP_STEP_MS: 0, 0.25, 0.5, 1, 2 ms (a pickle + shm hand-off each way is tens to hundreds of us in
  CPython; 2 ms bounds the ~1 ms same-box difference above with room).
- Points: the family's (vLLM) points with tp > 1 that train the shared terms (blockfp8.trains: no build
  anomaly) and are not source-labelled experimental (fit.FIT_EXPERIMENTAL); a TP = 1 point's replay does not
  depend on the term (no placement), so its held-out prediction is the shippable fit's.
- Fitted GIVEN each fold's shippable parameters (its floor and front-end latency, `fit.point_params` of
  the fold's chosen parameters, read from the report the tree wrote: benchmarks/serving_fidelity.json
  request_only_by_source; the front end is not re-fitted). Loss: stage 1's, the median |log(predicted /
  measured)| over TPOT/ITL and output-throughput rows of the training points; ties go to the smaller value.
  A fold without a training point with tp > 1 gets 0.
- Ship rule (`ships`): held out by source over all the family's points (anomalies and experimental ones
  scored, as in the report's family figures), against the shippable fit: TPOT/ITL median |error| smaller,
  output-throughput and TTFT p50 medians no larger, and the all-sources value > 0.

Finding (2026-12-06, the vLLM curves of the corpus, 128 points; the first run of the rule, nothing re-chosen
after it; the reference reproduces the shippable fit's held-out 57.3 / 41.5 / 33.5 / 48.9%): folds 0 ms (Red
Hat) and 1.0 ms (every other), all sources 2.0 ms (the grid's top); held out by source TTFT p50 57.3 -> 57.3%,
TPOT/ITL 33.5 -> 33.5%, output throughput 48.9 -> 49.7%: fails, ships 0. The structure that decides it: the
only trained vLLM sources with tp > 1 are Red Hat (H200 TP4) and Together AI (MI350X TP8, whose steps the model
already prices 80-117% slow), so each one's fold is fitted on the other alone. Unlike the floor's stage 1, the
term's points leave out the source-labelled experimental runs (SemiAnalysis' H200 TP8 nightlies), a choice made
before the run and not revisited after it (docs/cost-model.md 'Multi-process executor step').
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from calibrate.serving.blockfp8 import trains
from calibrate.serving.floor import first_best

GRID_TP_STEP_MS = (0.0, 0.25, 0.5, 1.0, 2.0)
FAMILY = "vllm"
ROOT = Path(__file__).resolve().parents[2]
REPORT_JSON = ROOT / "benchmarks" / "serving_fidelity.json"
RULE_METRICS = ("tpot_itl", "output_tps", "ttft_p50")


def fit_points(points: list) -> list:
    """The points the term is fitted on (module docstring): the family's, tp > 1, trained, not experimental."""
    from calibrate.serving.fit import FIT_EXPERIMENTAL

    return [p for p in trains(points) if p.family == FAMILY and p.tp > 1 and (FIT_EXPERIMENTAL or not p.experimental)]


def params_with(base: dict, value_ms: float) -> dict:
    """A point's fold parameters with the executor step; 0 leaves them as they are (the same replay key)."""
    return {**base, "tp_step_overhead_ms": float(value_ms)} if value_ms else dict(base)


def fit_value(ps: list, base_of, recs_of, loss) -> tuple[float, dict[float, float]]:
    """(value, {value: loss}) on the training points `ps`: `base_of(p)` the point's fold parameters,
    `recs_of(p, params)` its residual records replayed with them, `loss` stage 1's loss."""
    if not ps:
        return 0.0, {}
    losses = {v: loss([r for p in ps for r in recs_of(p, params_with(base_of(p), v))]) for v in GRID_TP_STEP_MS}
    return first_best(GRID_TP_STEP_MS, losses.__getitem__, default=0.0), {v: round(x, 5) for v, x in losses.items()}


def ships(before: dict, after: dict, final_value: float) -> bool:
    """The pre-registered rule: {metric: median |error| %} of the shippable fit (`before`) and with the term."""
    def med(d, m):
        return d.get(m, {}).get("median_abs_pct")

    tp, out, tt = (med(before, m) for m in RULE_METRICS)
    tp2, out2, tt2 = (med(after, m) for m in RULE_METRICS)
    return bool(final_value > 0 and None not in (tp, tp2) and tp2 < tp
                and (out is None or (out2 is not None and out2 <= out))
                and (tt is None or (tt2 is not None and tt2 <= tt)))


def evaluate(points: list, chosen: dict, final: dict, cache) -> dict:
    """Held out by source over the family's `points`: each source's points predicted with its fold's shippable
    parameters (`chosen[source][family]`) and the value fitted on the other sources' `fit_points`."""
    from calibrate.serving.fit import STEP_METRICS, _loss, point_params, predict, residuals, summarize

    fam = [p for p in points if p.family == FAMILY]
    train_all = fit_points(fam)
    loss = (lambda recs: _loss(recs, STEP_METRICS))

    def recs_of(p, params):
        return residuals(p, predict(p, params, cache))

    folds, before, after = {}, [], []
    for src in sorted({p.source for p in fam}):
        ch = (chosen.get(src) or {}).get(FAMILY)
        tr = [p for p in train_all if p.source != src]
        value, losses = fit_value(tr, lambda p, ch=ch: point_params(ch, p), recs_of, loss)  # the fold's floor
        folds[src] = {"value_ms": value, "losses": losses, "train_points": len(tr)}
        for p in (q for q in fam if q.source == src):
            base = point_params(ch, p)
            before += recs_of(p, base)
            after += recs_of(p, params_with(base, value) if p.tp > 1 else base)
    fin = final.get(FAMILY)
    value, losses = fit_value(train_all, lambda p: point_params(fin, p), recs_of, loss)
    b, a = summarize(before), summarize(after)
    tp_keys = {p.key() for p in fam if p.tp > 1}
    b_tp = summarize([r for r in before if r["point"] in tp_keys])
    a_tp = summarize([r for r in after if r["point"] in tp_keys])
    return {"folds": folds, "final": {"value_ms": value, "losses": losses, "train_points": len(train_all)},
            "before": b, "after": a, "before_tp": b_tp, "after_tp": a_tp, "ship": ships(b, a, value)}


def lines(res: dict) -> list[str]:
    """The printed table."""
    out = [f"vLLM multi-process executor step (tp_step_overhead_ms), grid {list(GRID_TP_STEP_MS)} ms"]
    for src, f in res["folds"].items():
        out.append(f"  fold {src}: {f['value_ms']} ms on {f['train_points']} training points with tp > 1; losses {f['losses']}")
    fin = res["final"]
    out.append(f"  all sources: {fin['value_ms']} ms on {fin['train_points']} points; losses {fin['losses']}")
    for label, b, a in (("all vLLM points", res["before"], res["after"]), ("tp > 1 points", res["before_tp"], res["after_tp"])):
        figs = " · ".join(f"{m} {b.get(m, {}).get('median_abs_pct')} -> {a.get(m, {}).get('median_abs_pct')}%"
                          for m in ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps"))
        out.append(f"  held out by source, {label}, shippable fit -> with the term: {figs}")
    out.append(f"  ship rule (TPOT/ITL smaller, output tok/s and TTFT p50 no larger, all-sources value > 0): "
               f"{'yes' if res['ship'] else 'no'}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="vLLM's TP executor step, held out by source (prints only)")
    ap.add_argument("--curves", metavar="REGEX", help="only the curves whose curve_id matches")
    ap.add_argument("--report", default=str(REPORT_JSON), help="the serving fit's JSON (its folds' parameters)")
    a = ap.parse_args(argv)
    from calibrate import serving_fit as sf
    from calibrate.serving.fit import _catalog_models, _hw_names, build_anomalies, curves, exclusion, load_points
    from calibrate.serving.rows import public_sources

    rows = sf.load_corpus()
    if a.curves:
        rows = [r for r in rows if re.search(a.curves, r["curve_id"])]
    hw, catalog, public, anomalies = _hw_names(), _catalog_models(), public_sources(), build_anomalies(rows)
    points = []
    for cid, c in sorted(curves(rows).items()):
        if exclusion(c, hw=hw, catalog=catalog, public=public) is None:
            points.extend(load_points(c, catalog=catalog, build_anomaly=anomalies.get(cid, "")))
    if not any(p.family == FAMILY for p in points):
        print(f"tpstep: error: no {FAMILY} point in the selected curves", file=sys.stderr)
        return 2
    rep = json.loads(Path(a.report).read_text())["request_only_by_source"]
    from calibrate.serving.cli import CACHE

    cache = sf.Cache(CACHE)
    try:
        res = evaluate(points, rep["chosen"], rep["final_params"], cache)
    finally:
        cache.save()
    print("\n".join(lines(res)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
