"""The spread of the per-layer kernel floor at low load, and three candidate structures tested against it
(issue 38; docs/floor-structure.md; printed by benchmarks/floor_spread.py). Read-only analysis: it reads the
committed replay results (benchmarks/serving_fidelity.json, the rows' measured / baseline / held-out-by-source
predictions) and the serving corpus; it fits nothing and moves no figure.

The shipped floor prices a low-load decode step as max(weight streaming, n_layers x layer_floor_us) with one
floor per engine family (sim.cost.roofline `layer_floor_s`). Where the floor binds, measured TPOT / n_layers is
the per-layer time the floor stands for (`per_layer_us`). The candidates:

- per layer kind (`layer_kind`: attention MLA / GQA / hybrid linear, FFN MoE / dense): a kernel count per
  layer kind predicts one value per kind; it cannot explain a spread *within* one kind on one engine, device
  and TP degree (`kind_spread`).
- per engine release: a value per release is testable held out by source only where a release's rows come from
  at least two sources (calibrate/serving/floor.py MIN_FLOOR_GROUP_SOURCES); `release_sources` lists them.
- a context slope of the decode attention (`context_slopes`): curves of one deployment at different prompt
  lengths, measured d TPOT / d context against the simulator's held-out prediction."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[2]
FIDELITY_JSON = ROOT / "benchmarks" / "serving_fidelity.json"
#: the low-load region the floor is read at: closed-loop concurrency up to this many clients
MAX_LOW_LOAD = 4.0


def layer_kind(spec) -> str:
    """'attention+ffn' of a ModelSpec: attention 'mla' / 'hybrid-linear' (some layers linear attention) /
    'gqa' (+ '-swa' with sliding-window layers); ffn 'moe' / 'dense'."""
    if spec.mla is not None:
        att = "mla"
    elif getattr(spec, "n_linear_layers", 0):
        att = "hybrid-linear"
    else:
        att = "gqa" + ("-swa" if spec.n_sliding_layers else "")
    return f"{att}+{'moe' if spec.is_moe else 'dense'}"


def curve_meta(corpus_rows: list[dict] | None = None) -> dict[str, dict]:
    """{curve_id: {engine, version, device, tp, model, quant, publisher, flags, n_layers, kind, mean_in, mean_out}} of
    the corpus curves whose model the catalog knows (mean lengths: the client's printed means where stated)."""
    from calibrate.serving.rows import _catalog_models, curves, load_corpus, model_id
    from sim.bench.corpus import mean_lengths, stated_means
    from sim.catalog.lookup import get_model

    catalog = _catalog_models()
    out = {}
    for cid, rows in curves(load_corpus() if corpus_rows is None else corpus_rows).items():
        r0 = rows[0]
        mid = model_id(r0["model"], catalog)
        if mid is None:
            continue
        spec = get_model(mid)
        means = stated_means(r0) or mean_lengths(r0)  # the client's printed means first, else the settings'
        out[cid] = {"engine": r0["engine"], "version": r0.get("engine_version") or "", "device": r0["device"],
                    "tp": r0.get("tp") or "", "model": mid, "quant": r0.get("quant") or "", "publisher": r0.get("publisher") or "",
                    "flags": r0.get("engine_flags") or "", "n_layers": spec.n_layers, "kind": layer_kind(spec),
                    "mean_in": means[0] if means else None, "mean_out": means[1] if means else None}
    return out


def low_load_tpot(fidelity_rows: list[dict], meta: dict[str, dict], max_load: float = MAX_LOW_LOAD
                  ) -> list[dict]:
    """One record per curve: its lowest-load TPOT row (mean, else median) at closed-loop concurrency <= max_load (row ids `-c<C>-`), with
    measured / baseline / held-out-by-source ms and the per-layer times they imply (us): `per_layer_us`
    (measured / n_layers) and `gap_per_layer_us` ((measured - baseline) / n_layers, what the baseline misses)."""
    best: dict[str, dict] = {}
    for r in fidelity_rows:
        cid = r["curve_id"]
        if r["metric"] != "tpot_itl" or cid not in meta or not isinstance(r["load"], (int, float)):
            continue
        rid = r["row_id"]
        if r["load"] > max_load or not re.search(r"-c[\d.]+-tpot_ms-", rid) or not (rid.endswith("-mean") or rid.endswith("-median")):
            continue
        rank = (r["load"], 0 if rid.endswith("-mean") else 1)
        if cid not in best or rank < best[cid]["_rank"]:
            best[cid] = {**r, "_rank": rank}
    out = []
    for cid, r in sorted(best.items()):
        m = meta[cid]
        n = m["n_layers"]
        out.append({"curve_id": cid, **{k: m[k] for k in ("engine", "version", "device", "tp", "model", "quant", "kind", "flags",
                                                          "publisher", "n_layers", "mean_in", "mean_out")},
                    "load": r["load"], "measured_ms": r["measured"], "baseline_ms": r["baseline"],
                    "by_source_ms": r["by_source"],
                    "per_layer_us": round(1000.0 * r["measured"] / n, 1),
                    "gap_per_layer_us": round(1000.0 * (r["measured"] - r["baseline"]) / n, 1),
                    "error_pct": (round(100.0 * (r["by_source"] / r["measured"] - 1.0), 1)
                                  if r["by_source"] is not None else None)})
    return out


def _log_spread(values: list[float]) -> float | None:
    """max / min of positive values (1.0 = no spread); None with fewer than two."""
    v = [x for x in values if x and x > 0]
    return round(max(v) / min(v), 2) if len(v) >= 2 else None


def kind_spread(records: list[dict]) -> list[dict]:
    """Per (engine family, device, tp, layer kind) with >= 2 models: the per-layer times and their max/min. A
    floor per layer kind gives such a group one value, so its spread is what that structure leaves."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["engine"], r["device"], str(r["tp"]), r["kind"])].append(r)
    out = []
    for k, rs in sorted(groups.items()):
        by_model: dict[str, list[float]] = defaultdict(list)
        for r in rs:
            by_model[r["model"]].append(r["per_layer_us"])
        if len(by_model) < 2:
            continue
        vals = {m: round(median(v), 1) for m, v in sorted(by_model.items())}
        out.append({"engine": k[0], "device": k[1], "tp": k[2], "kind": k[3], "per_layer_us": vals,
                    "max_over_min": _log_spread(list(vals.values()))})
    return out


def release_sources(records: list[dict]) -> list[dict]:
    """Per (engine family, engine version as printed): the publishers, devices and the median per-layer time.
    A per-release floor group with one publisher cannot be held out by source (floor.py takes the family's)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["engine"], r["version"])].append(r)
    return [{"engine": e, "version": v, "publishers": sorted({r["publisher"] for r in rs}),
             "devices": sorted({r["device"] for r in rs}), "curves": len(rs),
             "median_per_layer_us": round(median(r["per_layer_us"] for r in rs), 1)}
            for (e, v), rs in sorted(groups.items())]


def context_slopes(records: list[dict]) -> list[dict]:
    """Per deployment (engine, version, device, tp, model, quant, server flags) with C=1 curves at >= 2 mean contexts: the measured
    and held-out-predicted TPOT slope over the mean decode context (mean input + half the mean output, tokens),
    from the shortest to the longest context, in us per context token per step and per layer."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        if r["load"] == 1.0 and r["mean_in"] is not None and r["mean_out"] is not None:
            groups[(r["engine"], r["version"], r["device"], str(r["tp"]), r["model"], r["quant"], r["flags"])].append(r)
    out = []
    for k, rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r["mean_in"] + r["mean_out"] / 2.0)
        lo, hi = rs[0], rs[-1]
        dc = (hi["mean_in"] + hi["mean_out"] / 2.0) - (lo["mean_in"] + lo["mean_out"] / 2.0)
        if len(rs) < 2 or dc <= 0:
            continue
        meas = 1000.0 * (hi["measured_ms"] - lo["measured_ms"]) / dc
        pred = (1000.0 * (hi["by_source_ms"] - lo["by_source_ms"]) / dc
                if None not in (hi["by_source_ms"], lo["by_source_ms"]) else None)
        out.append({"engine": k[0], "version": k[1], "device": k[2], "tp": k[3], "model": k[4],
                    "context_lo": round(lo["mean_in"] + lo["mean_out"] / 2.0), "context_hi":
                    round(hi["mean_in"] + hi["mean_out"] / 2.0), "measured_us_per_token": round(meas, 3),
                    "predicted_us_per_token": None if pred is None else round(pred, 3),
                    "measured_ns_per_token_layer": round(1000.0 * meas / lo["n_layers"], 1)})
    return out


def analysis(fidelity_path: Path = FIDELITY_JSON, families: tuple[str, ...] = ("sglang", "vllm")) -> dict:
    """{"records", "kind_spread", "release_sources", "context_slopes"} for `families`' curves."""
    rows = json.loads(Path(fidelity_path).read_text())["rows"]
    meta = {k: v for k, v in curve_meta().items() if v["engine"] in families}
    recs = low_load_tpot(rows, meta)
    return {"records": recs, "kind_spread": kind_spread(recs), "release_sources": release_sources(recs),
            "context_slopes": context_slopes(recs)}


def markdown(a: dict) -> str:
    """The analysis as the tables docs/floor-structure.md quotes."""
    lines = ["| curve | engine version | device | tp | layer kind | C | measured ms | baseline ms | held out ms "
             "(err) | per layer us | gap per layer us |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in a["records"]:
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+.0f}%"
        held = "-" if r["by_source_ms"] is None else f"{r['by_source_ms']:.2f}"
        lines.append(f"| {r['curve_id']} | {r['engine']} {r['version']} | {r['device']} | {r['tp']} | {r['kind']} | "
                     f"{r['load']:g} | {r['measured_ms']:.2f} | {r['baseline_ms']:.2f} | "
                     f"{held} ({err}) | "
                     f"{r['per_layer_us']:.0f} | {r['gap_per_layer_us']:.0f} |")
    lines += ["", "| engine | device | tp | layer kind | per layer us by model | max/min |", "|---|---|---|---|---|---|"]
    for g in a["kind_spread"]:
        lines.append(f"| {g['engine']} | {g['device']} | {g['tp']} | {g['kind']} | "
                     f"{', '.join(f'{m} {v:.0f}' for m, v in g['per_layer_us'].items())} | {g['max_over_min']} |")
    lines += ["", "| engine | version | publishers | devices | curves | median per layer us |", "|---|---|---|---|---|---|"]
    for g in a["release_sources"]:
        lines.append(f"| {g['engine']} | {g['version']} | {'; '.join(g['publishers'])} | {', '.join(g['devices'])} "
                     f"| {g['curves']} | {g['median_per_layer_us']:.0f} |")
    lines += ["", "| deployment | context lo -> hi | measured us/token | predicted us/token | measured ns/token/layer |",
              "|---|---|---|---|---|"]
    for s in a["context_slopes"]:
        pred = "-" if s["predicted_us_per_token"] is None else f"{s['predicted_us_per_token']:.3f}"
        lines.append(f"| {s['engine']} {s['version']} {s['device']} tp{s['tp']} {s['model']} | {s['context_lo']} -> "
                     f"{s['context_hi']} | {s['measured_us_per_token']:.3f} | {pred} | "
                     f"{s['measured_ns_per_token_layer']:.1f} |")
    return "\n".join(lines) + "\n"
