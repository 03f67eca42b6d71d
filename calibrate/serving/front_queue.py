"""The serialized per-request front end (EngineConfig.front_request_ms, workloads.arrivals.FrontEnd `serial_s`)
per engine family and release, fitted jointly with the front-end delay (request_overhead_ms) on the TTFT rows of
the training sources and held out by source (issue 38; run by calibrate/serving/fit.py `run`; reported by
`front_queue_markdown` / `front_queue_lines`).

Physical reading. Before the scheduler sees a request, one process parses its HTTP body, validates it, applies
the chat template, tokenizes the prompt and builds the engine request, one request at a time (vLLM's API server
-> AsyncLLM's input processor -> ZMQ to the engine core, `--api-server-count` to scale it out; SGLang's
TokenizerManager; trtllm-serve's FastAPI process): a FIFO server of capacity 1 costing `front_request_ms` per
request. A burst of C simultaneous sends reaches the engine one every front_request_ms, so TTFT grows ~ a + C x s
on a closed loop, the signature of waynehacking8's lock-step curves (12-token prompts, 256 outputs: measured TTFT
p50 rises from ~15-24 ms at C=1 to 205-326 ms at C=128 with the steps predicted close: s ~ 2-5 ms, read off the
measured figures, no replay). A pure delay (request_overhead_ms) moves every request alike and cannot do it.

Everything below was written down and committed before any replay with a serialized front end:
- GRID_FRONT_REQUEST_MS: 0, 0.5, 1, 2, 4 ms. A Python request path (FastAPI/pydantic parse and validation,
  chat template, a fast tokenizer on a short prompt, the request objects, a ZMQ send) costs ~0.5-2 ms of one core;
  4 ms is the top of what waynehacking8's slopes imply (the figures above, read before any replay).
- Rows: the TTFT p50/p99 rows of BURST points only (`bursty`: closed loops, which start C clients at once and,
  with fixed lengths, stay in lock-step; and all-at-once sends), because that is where a serialized cost is
  identified apart from the delay, and to bound the replays (the grid multiplies them); an open loop's arrivals
  are spread, and the server queues only when the rate approaches 1 / front_request_ms (250-2000 req/s here).
- Joint with the delay: for each grid value s the training burst points are replayed with the fold's floor and
  front_request_ms = s (request_overhead_ms 0), the delay is fitted on those records by stage 2's own search
  (calibrate/serving/front_end.py `front_end_values`, the fold's front-end rule), and s's loss is the median
  |log(predicted / measured)| of those TTFT rows with the fitted delay added. The smallest loss wins; ties go to
  the smaller s (0 first). Per family, and per release where its burst training points come from at least
  MIN_RELEASE_SOURCES sources (MIN_RELEASE_SOURCES - 1 inside a fold), as for the front end; others take the
  family's. Then the delay is re-fitted, as stage 2 does, on ALL the training points replayed with their s.
- Fitted GIVEN each fold's shippable floor (r_chosen: floor + front end, what the presets run), the host stage
  off (what the presets ship), on `trains` points (no AMD block-FP8 group, no build anomaly).
- Ship rule (`ship_table`), per family, held out by source against the shippable fit (floor + front end):
  TTFT p50 median |error| improves by >= SHIP_TTFT_P50_GAIN points, TTFT p99 no worse by more than
  SHIP_TTFT_P99_SLACK points, TPOT/ITL and output throughput no worse by more than SHIP_STEP_SLACK point each,
  and the all-rows value > 0; else the presets keep 0.

Finding (written after the figures were seen; SUBSET run only, `--curves 'wayne|faradawn|redhat' --jobs 1`, 158
points, 1,964 rows, 27 curves; the full regeneration decides): vLLM (3 sources) fits 2 ms (vllm@0.11 2 ms; folds
2, 2, 0.5; family losses 0: 0.140, 0.5: 0.153, 1: 0.153, 2: 0.119, 4: 0.140, not monotone), held out TTFT p50
57.6 -> 51.2%, p99 21.5 -> 20.7%, TPOT/ITL 22.2 -> 22.1%, output tok/s 21.1 -> 20.8%: passes the rule.
TensorRT-LLM (2 sources) fits 4 ms, the grid's top (folds 4 and 0), TTFT p50 52.5 -> 65.4%, p99 66.7 -> 69.4%:
fails. SGLang has one source here (nothing held out): 0 in its fold, no ship.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from calibrate.serving.blockfp8 import shared, trains
from calibrate.serving.floor import first_best, pct
from calibrate.serving.front_end import TTFT_METRICS, _scored
from calibrate.serving.hoststage import stage_table, stage_table_rows
from calibrate.serving.rows import LoadPoint

GRID_FRONT_REQUEST_MS = (0.0, 0.5, 1.0, 2.0, 4.0)
#: the ship rule's margins, in percentage points of the held-out median |error| (module docstring)
SHIP_TTFT_P50_GAIN, SHIP_TTFT_P99_SLACK, SHIP_STEP_SLACK = 2.0, 2.0, 1.0
_FRONT_END_KEYS = ("request_overhead_ms", "request_overhead_ms_by_release")
_OWN = ("front_request_ms", "front_request_ms_by_release", "front_request_losses")


def bursty(p: LoadPoint) -> bool:
    """A point whose sends come in bursts: a closed loop (C clients start at once) or everything at once."""
    return p.load_kind == "concurrency" or not math.isfinite(p.load)


def queue_params(floor: float, s: float) -> dict:
    """The replay of a point with its floor and the serialized cost s, no front-end delay (searched apart)."""
    out = {"layer_floor_us": float(floor)} if floor else {}
    if s:
        out["front_request_ms"] = float(s)
    return out


def _ttft_loss(records: list[dict], fam: float, rel: dict[str, float]) -> float:
    """Median |log| of the TTFT p50/p99 `records` with each one's delay (its release's, else the family's) added."""
    errs = [abs(math.log((r["predicted"] + rel.get(r["engine"], fam)) / r["measured"]))
            for r in _scored(records, TTFT_METRICS)]
    return float(np.median(errs)) if errs else math.inf


def fit_queue(ps: list[LoadPoint], recs_of, front_end_values, rule: str, min_release_sources: int
              ) -> tuple[float, dict[str, float], dict[float, float]]:
    """(family value, {release: value}, {value: family loss}) on the training points `ps` (their burst points):
    `recs_of(p, s)` the residuals of p replayed with its floor and serialized cost s; for each s the delay is
    fitted on the same records (`front_end_values` under `rule`) and added before scoring (module docstring)."""
    ps = [p for p in ps if bursty(p)]
    if not ps:
        return 0.0, {}, {}

    def loss(pts, s):
        recs = [r for p in pts for r in recs_of(p, s)]
        fam, rel = front_end_values(recs, rule, min_release_sources)
        return _ttft_loss(recs, fam, rel)

    fam_losses = {s: loss(ps, s) for s in GRID_FRONT_REQUEST_MS}
    fam = first_best(GRID_FRONT_REQUEST_MS, fam_losses.__getitem__, default=0.0)
    by_rel: dict[str, list[LoadPoint]] = defaultdict(list)
    for p in ps:
        by_rel[p.engine].append(p)
    rel = {name: first_best(GRID_FRONT_REQUEST_MS, lambda s, rps=rps: loss(rps, s), default=0.0)
           for name, rps in sorted(by_rel.items()) if len({p.source for p in rps}) >= max(1, min_release_sources)}
    return fam, rel, {s: round(v, 5) for s, v in fam_losses.items()}


def _value_of(ch: dict, p: LoadPoint) -> float:
    return float((ch.get("front_request_ms_by_release") or {}).get(p.engine, ch.get("front_request_ms", 0.0)))


def _chosen_with_queue(ch: dict, ps: list[LoadPoint], point_params, predict, residuals, front_end_values,
                       min_release_sources: int, fit_experimental: bool) -> dict:
    """The family's shippable parameters `ch` with the serialized cost fitted given its floors and the delay
    re-fitted given both, on `trains(ps)`."""
    ps = trains(ps)
    rule = ch.get("front_end_rule") or "all_loads"

    def recs_of(p, s):
        return residuals(p, predict(p, queue_params(float(point_params(ch, p).get("layer_floor_us", 0.0)), s)))

    fam_s, rel_s, losses = fit_queue(ps, recs_of, front_end_values, rule, min_release_sources)
    out = {k: v for k, v in ch.items() if k not in _FRONT_END_KEYS}
    out.update(front_request_ms=fam_s, front_request_ms_by_release=rel_s, front_request_losses=losses)
    fit_recs = [r for p in ps if fit_experimental or not p.experimental for r in recs_of(p, _value_of(out, p))]
    fe_fam, fe_rel = front_end_values(fit_recs, rule, min_release_sources)
    if fe_fam:
        out["request_overhead_ms"] = fe_fam
    if fe_rel:
        out["request_overhead_ms_by_release"] = fe_rel
    return out


def point_queue_params(ch: dict | None, p: LoadPoint, point_params) -> dict:
    """A point's overrides: `point_params` of the rest, and its release's serialized cost, else its family's."""
    ch = ch or {}
    out = point_params({k: v for k, v in ch.items() if k not in _OWN}, p)
    s = _value_of(ch, p)
    if s:
        out["front_request_ms"] = s
    return out


def _queue_ships(row: dict) -> bool:
    """The ship rule of the module docstring over one family's `stage_table` row."""
    need = [row[f"{m}_{w}"] for m in ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps") for w in ("before", "after")]
    return (row["value"] > 0 and None not in need
            and row["ttft_p50_after"] <= row["ttft_p50_before"] - SHIP_TTFT_P50_GAIN
            and row["ttft_p99_after"] <= row["ttft_p99_before"] + SHIP_TTFT_P99_SLACK
            and row["tpot_itl_after"] <= row["tpot_itl_before"] + SHIP_STEP_SLACK
            and row["output_tps_after"] <= row["output_tps_before"] + SHIP_STEP_SLACK)


def ship_table(points: list[LoadPoint], before: list[dict], after: list[dict], final: dict[str, dict],
               folds: dict[str, dict], summarize, shipped: dict[str, float]) -> list[dict]:
    """Per family: the all-rows value (and per release), the fold values, the held-out medians before (the
    shippable fit) and after, and the ship rule of the module docstring (hoststage.stage_table)."""
    return stage_table(points, before, after, final, folds, summarize, shipped, "front_request_ms",
                       "front_request_losses", _queue_ships)


def shipped_queue(points: list[LoadPoint]) -> dict[str, float]:
    """{family: front_request_ms} of each family's preset (default release)."""
    from sim.catalog.engine_config import load_engine

    return {f: float(getattr(load_engine(f), "front_request_ms", 0.0)) for f in sorted({p.family for p in points})}


def run_stage(points: list[LoadPoint], r_chosen: dict, r_final: dict, before: list[dict], fns: tuple,
              min_release_sources: int, fit_experimental: bool, records, summarize) -> dict:
    """The whole stage for calibrate/serving/fit.py `run`: held out by source (each source's points take its
    fold's shippable parameters, the serialized cost and the delay fitted on the other sources), all rows, the
    ship table. `fns` = (point_params, predict, residuals, front_end_values); `before` the shippable fit's
    held-out records; `records(preds)` the held-out records of predictions."""
    point_params, predict, residuals, front_end_values = fns
    preds: dict[str, dict] = {}
    folds: dict[str, dict] = {}
    for g in sorted({p.source for p in points}):
        test = [p for p in points if p.source == g]
        folds[g] = {}
        for fam in sorted({p.family for p in test}):
            train = [p for p in points if p.source != g and p.family == fam]
            ch = _chosen_with_queue((r_chosen.get(g) or {}).get(fam) or {}, train, point_params, predict, residuals,
                                    front_end_values, min_release_sources - 1, fit_experimental)
            folds[g][fam] = ch
            for p in test:
                if p.family == fam:
                    preds[p.key()] = predict(p, point_queue_params(ch, p, point_params))
    final = {fam: _chosen_with_queue(r_final.get(fam) or {}, [p for p in points if p.family == fam], point_params,
                                     predict, residuals, front_end_values, min_release_sources, fit_experimental)
             for fam in sorted({p.family for p in points})}
    recs = records(preds)
    keys = {p.key() for p in shared(points)}

    def judged(rs):
        return [r for r in rs if r["point"] in keys]
    return {"records": recs, "folds": folds, "final": final, "by_source": summarize(recs),
            "table": ship_table(shared(points), judged(before), judged(recs), final, folds, summarize,
                                shipped_queue(points))}


def stage_json(res: dict, name: str) -> dict | None:
    """The JSON report's entry of a fit stage with a ship table (`res[name]`: "host_stage", "front_queue"): its
    held-out figures by source, all-rows values, fold values and table; None when the run has no such stage."""
    st = res.get(name)
    return {k: st[k] for k in ("by_source", "final", "folds", "table") if k in st} if st else None


def front_queue_markdown(res: dict) -> list[str]:
    """The report section (nothing when the run has no such stage)."""
    fq = res.get("front_queue")
    if not fq:
        return []
    L = ["", "## Serialized front end: per-request cost before the scheduler (front_request_ms)", "",
         f"Grid {', '.join(f'{v:g}' for v in GRID_FRONT_REQUEST_MS)} ms per request, a capacity-1 FIFO server in "
         "the arrival path (workloads.arrivals.FrontEnd), fitted jointly with the front-end delay on the TTFT rows "
         "of burst points (closed loops, all-at-once) of the training sources, per family and per release (>= 2 "
         "training sources), given each fold's floor; the delay then re-fitted on all training points. Held out by "
         "source against the shippable fit. Ship rule (committed before any replay, calibrate/serving/front_queue.py): "
         f"TTFT p50 better by >= {SHIP_TTFT_P50_GAIN:g} points, TTFT p99 worse by <= {SHIP_TTFT_P99_SLACK:g}, TPOT/ITL "
         f"and output throughput worse by <= {SHIP_STEP_SLACK:g} each, value > 0.", "",
         "| family | sources | points | value (all rows, ms) | by release | per-fold values | ttft_p50 before -> after "
         "| ttft_p99 | tpot_itl | output_tps | ship | preset runs |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    return L + stage_table_rows(fq["table"], pct) + [""]


def front_queue_lines(res: dict) -> list[str]:
    """The run's summary lines (what a subset run prints)."""
    fq = res.get("front_queue")
    if not fq:
        return []
    return [f"front queue {r['family']}: {r['sources']} sources, fitted {r['value']:g} ms "
            f"{r['value_by_release'] or ''}, folds {list(r['fold_values'].values())}, losses {r['final_losses']}, "
            f"held out ttft_p50 {r['ttft_p50_before']} -> {r['ttft_p50_after']}%, ttft_p99 {r['ttft_p99_before']} -> "
            f"{r['ttft_p99_after']}%, tpot_itl {r['tpot_itl_before']} -> {r['tpot_itl_after']}%, output tok/s "
            f"{r['output_tps_before']} -> {r['output_tps_after']}%, ship {'yes' if r['ship'] else 'no'}"
            for r in fq["table"]]
