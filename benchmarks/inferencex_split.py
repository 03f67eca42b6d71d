"""Where the held-out misses of the two InferenceX sources come from: SemiAnalysis (InferenceX published sweeps
and its experimental token-position curves) and Together AI (InferenceX's together_runner). docs/inferencex-misses.md
reads it.

No replay: the committed residual rows (benchmarks/serving_fidelity.json `rows`: each replayed row's measured value
and its predictions `baseline` (the presets with no fitted term: fit.fit_params sets the fitted fields to 0),
`by_source` (held out by source, the full grid: the report's "held out by source" figures) and `by_device`), joined
with the corpus rows (benchmarks/serving/*.csv) by row_id. Error = predicted / measured - 1.

Prints
  1. per curve (engine release, device, model, quantization, TP, ISL/OSL, concurrency range): the signed median
     error per metric held out by source (TTFT p50, TPOT/ITL, output throughput), the baseline's signed TPOT/ITL
     median, the held-out fold's step terms for the curve's family (`heldout_by_source.chosen`) and the
     "per-layer step bound": the curve's lowest-load measured TPOT / the model's n_layers, in us. A decode step
     cannot be shorter than its layers' kernel chain, so a fold floor (layer_floor_us) above that bound
     over-predicts the lowest load's TPOT whatever else is right.
  2. per grouping (class, device, engine release, ISL, model, concurrency region), per group: n and the signed
     and absolute median per metric, and "rest": the source's median |error| were the group's rows dropped
     (the figure the per-source table would print without them).

    python benchmarks/inferencex_split.py [--pred by_source|baseline|by_device] [--curves]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIDELITY = ROOT / "benchmarks" / "serving_fidelity.json"
CORPUS = ROOT / "benchmarks" / "serving"
SOURCES = ("SemiAnalysis", "Together AI (InferenceX together_runner)")
METRICS = ("ttft_p50", "tpot_itl", "output_tps")
SHORT = {"SemiAnalysis": "SemiAnalysis", "Together AI (InferenceX together_runner)": "Together"}


def n_layers(model: str) -> int | None:
    """The catalog model's decoder layer count (None where the name does not resolve)."""
    from calibrate.serving.rows import _catalog_models, model_id
    from sim.catalog.lookup import get_model

    mid = model_id(model, _catalog_models())
    return get_model(mid).n_layers if mid else None


def curve_class(c: dict) -> str:
    """Which InferenceX set a row comes from: the source's experimental WIP curves, the published sweeps
    (quoted in an InferenceX PR), or Together's runner."""
    if "together" in c["source"].lower():
        return "together_runner"
    return "experimental" if "/experimental/" in c["source"] else "published sweep"


def c_region(load: float) -> str:
    return "C<=4" if load <= 4 else "C 8-16" if load <= 16 else "C 32-64" if load <= 64 else "C>64"


def load(pred: str) -> tuple[list[dict], dict]:
    from calibrate.serving.rows import residuals_with_rows

    d = json.loads(FIDELITY.read_text())
    rows = []
    for r, c in residuals_with_rows(FIDELITY, CORPUS):
        if c["publisher"] not in SOURCES or float(r["measured"]) <= 0:
            continue
        rows.append({**r, "c": c, "src": c["publisher"], "load": float(r["load"]),
                     "err": float(r[pred]) / float(r["measured"]) - 1.0,
                     "base_err": float(r["baseline"]) / float(r["measured"]) - 1.0})
    return rows, d


def family_of(c: dict) -> str:
    return c["engine"].split("-")[0]


def engine_version_of(rows: list[dict]) -> str:
    """The curve's engine and its version as the corpus prints it (sim.bench.corpus_deployment `release_of` maps it
    to the preset release the fit replays)."""
    c = rows[0]["c"]
    return f"{c['engine']} {c['engine_version']}"


def med(xs: list[float]) -> str:
    return f"{100 * st.median(xs):+.0f}%" if xs else "-"


def step_terms(d: dict, src: str, fam: str) -> str:
    ch = d["heldout_by_source"]["chosen"].get(src, {}).get(fam, {})
    keys = ("layer_floor_us", "iteration_overhead_ms", "per_sequence_overhead_ms", "request_overhead_ms")
    short = {"layer_floor_us": "floor", "iteration_overhead_ms": "iter", "per_sequence_overhead_ms": "seq",
             "request_overhead_ms": "front"}
    s = [f"{short[k]} {ch[k]:g}" for k in keys if k in ch]
    rel = ch.get("request_overhead_ms_by_release")
    return ", ".join(s) + (f" (by release {json.dumps(rel)})" if rel else "")


def lowest_tpot_per_layer_us(rows: list[dict]) -> float | None:
    """The lowest load's measured TPOT (mean, else median) / n_layers, in us."""
    tp = [r for r in rows if r["c"]["quantity"] == "tpot_ms" and r["c"]["statistic"] in ("mean", "median")]
    if not tp:
        return None
    lo = min(r["load"] for r in tp)
    at = sorted((r for r in tp if r["load"] == lo), key=lambda r: r["c"]["statistic"])
    nl = n_layers(at[0]["c"]["model"])
    return None if not nl else 1000.0 * float(at[0]["measured"]) / nl


def per_curve(rows: list[dict], d: dict) -> list[dict]:
    by = defaultdict(list)
    for r in rows:
        by[r["curve_id"]].append(r)
    out = []
    for cid, rs in sorted(by.items(), key=lambda kv: (kv[1][0]["src"], kv[0])):
        c = rs[0]["c"]
        loads = sorted({r["load"] for r in rs})
        m = {k: [r["err"] for r in rs if r["metric"] == k] for k in METRICS}
        out.append({"curve": cid, "src": SHORT[c["publisher"]], "class": curve_class(c), "release": engine_version_of(rs),
                    "device": c["device"], "model": c["model"].split("/")[-1], "quant": c["quant"], "tp": c["tp"],
                    "isl_osl": f"{c['input_tokens']}/{c['output_tokens']}",
                    "c_range": f"{loads[0]:g}-{loads[-1]:g}", "n": {k: len(v) for k, v in m.items()},
                    "signed": {k: med(v) for k, v in m.items()},
                    "base_tpot": med([r["base_err"] for r in rs if r["metric"] == "tpot_itl"]),
                    "terms": step_terms(d, c["publisher"], family_of(c)),
                    "bound_us": lowest_tpot_per_layer_us(rs)})
    return out


GROUPINGS = {
    "class": lambda r: curve_class(r["c"]),
    "device": lambda r: r["c"]["device"],
    "engine release": lambda r: f"{r['c']['engine']} {r['c']['engine_version']}",
    "ISL": lambda r: "ISL<=1024" if float(r["c"]["input_tokens"] or 0) <= 1100 else "ISL>=4096",
    "model": lambda r: r["c"]["model"].split("/")[-1],
    "concurrency": lambda r: c_region(r["load"]),
    "class x device x engine": lambda r: f"{curve_class(r['c'])} | {r['c']['device']} | {family_of(r['c'])}",
}


def group_table(rows: list[dict], name: str, key) -> list[str]:
    """One line per (source, group): per metric n, signed and |error| medians, and the source's median |error|
    without the group's rows."""
    out = [f"\n### {name}\n", "| source | group | " + " | ".join(f"{m} n / signed / abs / rest" for m in METRICS)
           + " |", "|---|---|" + "---|" * len(METRICS)]
    by_src = defaultdict(list)
    for r in rows:
        by_src[r["src"]].append(r)
    for src in SOURCES:
        rs = by_src.get(src, [])
        groups = sorted({key(r) for r in rs})
        for g in groups:
            cells = []
            for m in METRICS:
                inn = [r["err"] for r in rs if r["metric"] == m and key(r) == g]
                rest = [abs(r["err"]) for r in rs if r["metric"] == m and key(r) != g]
                if not inn:
                    cells.append("-")
                    continue
                rs_txt = f"{100 * st.median(rest):.1f}%" if rest else "-"
                cells.append(f"{len(inn)} / {med(inn)} / {100 * st.median([abs(x) for x in inn]):.1f}% / {rs_txt}")
            out.append(f"| {SHORT[src]} | {g} | " + " | ".join(cells) + " |")
    return out


def source_lines(rows: list[dict]) -> list[str]:
    out = ["| source | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for src in SOURCES:
        cells = []
        for m in METRICS:
            e = [r["err"] for r in rows if r["src"] == src and r["metric"] == m]
            cells.append(f"{100 * st.median([abs(x) for x in e]):.1f}% ({med(e)}, n={len(e)})" if e else "-")
        out.append(f"| {SHORT[src]} | " + " | ".join(cells) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pred", default="by_source", choices=("by_source", "baseline", "by_device"))
    ap.add_argument("--match", metavar="REGEX", help="only curves whose curve_id matches")
    a = ap.parse_args(argv)
    rows, d = load(a.pred)
    if a.match:
        rows = [r for r in rows if re.search(a.match, r["curve_id"])]
    print(f"prediction: {a.pred}; error = predicted / measured - 1; median |error| (signed median, n)\n")
    print("\n".join(source_lines(rows)))
    print("\n## Per curve (signed median error per metric; base tpot: the presets with no fitted term)\n")
    print("| src | class | curve | engine | device | model | quant | TP | ISL/OSL | C | ttft_p50 | tpot_itl | "
          "output_tps | base tpot | lowest-load TPOT / layer (us) | fold's terms (its family) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in per_curve(rows, d):
        s, n = c["signed"], c["n"]
        bound = f"{c['bound_us']:.0f}" if c["bound_us"] else "-"
        print(f"| {c['src']} | {c['class']} | {c['curve']} | {c['release']} | {c['device']} | {c['model']} | "
              f"{c['quant']} | {c['tp']} | {c['isl_osl']} | {c['c_range']} | "
              + " | ".join(f"{s[m]} ({n[m]})" for m in METRICS)
              + f" | {c['base_tpot']} | {bound} | {c['terms']} |")
    print("\n## Groups (per source: n / signed median / median |error| / the source's median |error| without "
          "the group)")
    for name, key in GROUPINGS.items():
        print("\n".join(group_table(rows, name, key)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
