"""Where the held-out TTFT p50 error comes from: the committed residuals (benchmarks/serving_fidelity.json,
rows with metric ttft_p50: the median and mean TTFT rows) split by load region, engine, source, device,
prompt length, sign, load, and the measured vs the predicted queue growth; docs/ttft-misses.md reads it.

No replay: it joins the committed predictions (`by_source`: held out by source, as the targets table
scores them) with the corpus rows (benchmarks/serving/*.csv) by row_id. Error = predicted / measured - 1.

For each group it prints n, its share of the rows, its median |error| and median signed error, and
"rest": the median |error| of the OTHER rows (the headline median were this group left out) and "if fixed":
of all rows were this group's errors 0 (meaningless for a group over half the rows: it is then 0).

    python benchmarks/ttft_split.py [--pred by_source|baseline|by_device] [--top 12]
"""

from __future__ import annotations

import argparse
import math
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIDELITY = ROOT / "benchmarks" / "serving_fidelity.json"
CORPUS = ROOT / "benchmarks" / "serving"
#: a point's TTFT p50 over this multiple of its curve's lowest-load value is "queueing" (the knee rule's 3x)
KNEE_X = 3.0


def load(pred: str) -> list[dict]:
    """The TTFT p50 residual rows, each with its corpus row's fields and derived keys."""
    from calibrate.serving.rows import residuals_with_rows

    rows = []
    for r, c in residuals_with_rows(FIDELITY, CORPUS):
        if r["metric"] != "ttft_p50":
            continue
        rows.append({**r, "c": c, "pred": float(r[pred]), "load": float(r["load"]),
                     "err": float(r[pred]) / float(r["measured"]) - 1.0,
                     "curve_stat": (r["curve_id"], c["statistic"])})
    # per (curve, statistic): the lowest load's measured and predicted TTFT, for queue growth and offsets
    low: dict[tuple, dict] = {}
    for r in rows:
        k = r["curve_stat"]
        if k not in low or r["load"] < low[k]["load"]:
            low[k] = r
    for r in rows:
        lo = low[r["curve_stat"]]
        r["is_lowest"] = r is lo
        r["meas_x"] = r["measured"] / lo["measured"]  # measured TTFT p50 / the curve's lowest-load one
        r["pred_x"] = r["pred"] / lo["pred"]
        r["low_meas"], r["low_pred"] = lo["measured"], lo["pred"]
    return rows


def prompt_band(r: dict) -> str:
    x = float(r["c"]["input_tokens"] or 0)
    return "in<=256" if x <= 256 else "in<=1024" if x <= 1024 else "in<=4096" if x <= 4096 else "in>4096"


def load_band(r: dict) -> str:
    c = r["c"]
    if c["load_kind"] == "rate":
        return "open loop (rate)"
    cc = float(c["max_concurrency"])
    return "C=1" if cc == 1 else "C 2-16" if cc <= 16 else "C 17-64" if cc <= 64 else "C>64"


def queue_class(r: dict) -> str:
    """Whether the measured and the predicted curve have left their lowest-load TTFT (KNEE_X)."""
    if r["is_lowest"]:
        return "lowest load (no queue)"
    m, p = r["meas_x"] >= KNEE_X, r["pred_x"] >= KNEE_X
    return {(True, True): "both queueing", (True, False): "measured queueing, sim not",
            (False, True): "sim queueing, measured not", (False, False): "neither queueing"}[(m, p)]


def burst_class(r: dict) -> str:
    """Closed loop whose C is at least the prompts it sends: every request goes out at t = 0 (one burst)."""
    c = r["c"]
    if c["load_kind"] != "concurrency":
        return "open loop"
    n = float(c["num_prompts"] or 0)
    if not n:
        return "N not stated"
    return "one burst (C >= N)" if float(c["max_concurrency"]) >= n else f"steady (N/C {'<' if n / float(c['max_concurrency']) < 5 else '>='} 5)"


SPLITS = {
    "region (measured knee)": lambda r: r["region"] + " knee",
    "load": load_band,
    "engine": lambda r: r["c"]["engine"],
    "source": lambda r: r["c"]["publisher"][:44],
    "device": lambda r: r["c"]["device"],
    "prompt length": prompt_band,
    "sign": lambda r: "under (pred < meas)" if r["err"] < 0 else "over (pred >= meas)",
    "statistic": lambda r: r["c"]["statistic"],
    "queue (x lowest-load TTFT >= 3)": queue_class,
    "closed-loop burst": burst_class,
    "source labels it experimental": lambda r: "experimental" if "experimental WIP" in r["c"]["notes"] else "published",
}


def med_abs(errs) -> float:
    return 100 * st.median([abs(e) for e in errs]) if errs else float("nan")


def table(rows: list[dict], key, top: int) -> list[str]:
    groups = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    out = [f"  {'group':46s} {'n':>4s} {'share':>6s} {'med|e|':>7s} {'signed':>7s} {'rest':>6s} {'if fixed':>8s}"]
    for g, rs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:top]:
        ids = {id(r) for r in rs}
        fixed = med_abs([0.0 if id(r) in ids else r["err"] for r in rows])
        rest = med_abs([r["err"] for r in rows if id(r) not in ids])
        out.append(f"  {str(g)[:46]:46s} {len(rs):4d} {100 * len(rs) / len(rows):5.1f}% {med_abs([r['err'] for r in rs]):6.1f}% "
                   f"{100 * st.median([r['err'] for r in rs]):+6.1f}% {rest:5.1f}% {fixed:7.1f}%")
    return out


def offsets(rows: list[dict]) -> list[str]:
    """How much of the error is each curve's lowest-load miss carried up the curve (an offset the load
    does not make), and how much is the growth with load. ORACLE figures (the held-out row's own
    lowest-load measurement is used): an attribution, never a prediction."""
    add = [(r["pred"] + (r["low_meas"] - r["low_pred"])) / r["measured"] - 1 for r in rows]
    mul = [r["pred"] * (r["low_meas"] / r["low_pred"]) / r["measured"] - 1 for r in rows]
    # one constant per source (the median lowest-load miss over its curves): a client/host front end of its own
    per_src = defaultdict(list)
    for r in rows:
        if r["is_lowest"]:
            per_src[r["c"]["publisher"]].append(r["low_meas"] - r["low_pred"])
    src_add = [(r["pred"] + st.median(per_src[r["c"]["publisher"]])) / r["measured"] - 1 for r in rows]
    growth = [r["pred_x"] / r["meas_x"] - 1 for r in rows if not r["is_lowest"]]
    low = [r["err"] for r in rows if r["is_lowest"]]
    loaded = [r["err"] for r in rows if not r["is_lowest"]]
    lines = [f"  lowest-load points: n={len(low)} median |e| {med_abs(low):.1f}% signed {100 * st.median(low):+.1f}%",
             f"  loaded points:      n={len(loaded)} median |e| {med_abs(loaded):.1f}% signed {100 * st.median(loaded):+.1f}%",
             f"  loaded points, growth only (pred x-lowest / meas x-lowest - 1): median |e| {med_abs(growth):.1f}% "
             f"signed {100 * st.median(growth):+.1f}%",
             f"  all rows with each curve's lowest-load miss removed, additively (a per-request constant): "
             f"median |e| {med_abs(add):.1f}%",
             f"  all rows with each curve's lowest-load miss removed, as a factor (a speed error):        "
             f"median |e| {med_abs(mul):.1f}%",
             f"  all rows with ONE additive constant per source (its lowest-load points' median miss):           "
             f"median |e| {med_abs(src_add):.1f}%"]
    return lines


def warmup(rows: list[dict]) -> list[str]:
    """Mean TTFT rows far above the same point's median: a few requests of the run much slower than the
    rest (a cold first request, a compile): what a replay of the steady server cannot produce."""
    med = {(r["curve_id"], r["load"]): r["measured"] for r in rows if r["c"]["statistic"] == "median"}
    hits = [r for r in rows if r["c"]["statistic"] == "mean" and (r["curve_id"], r["load"]) in med
            and r["measured"] > 2 * med[(r["curve_id"], r["load"])]]
    out = [f"  mean TTFT rows > 2x the same point's median TTFT: {len(hits)} "
           f"(median |e| {med_abs([r['err'] for r in hits]):.1f}%)"]
    for r in sorted(hits, key=lambda r: -r["measured"] / med[(r["curve_id"], r["load"])])[:8]:
        out.append(f"    {r['curve_id'][:62]:62s} load {r['load']:>5g}: mean {r['measured']:8.1f} ms, "
                   f"median {med[(r['curve_id'], r['load'])]:7.1f} ms, pred {r['pred']:7.1f}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pred", default="by_source", choices=("by_source", "by_device", "baseline"))
    ap.add_argument("--top", type=int, default=12, help="groups per split (largest first)")
    ap.add_argument("--only", default="", help="restrict to rows whose publisher or curve_id contains this")
    ap.add_argument("--exclude", default="", help="drop rows whose publisher or curve_id contains this")
    a = ap.parse_args(argv)
    rows = load(a.pred)
    if a.only:
        rows = [r for r in rows if a.only in r["c"]["publisher"] or a.only in r["curve_id"]]
    if a.exclude:
        rows = [r for r in rows if not (a.exclude in r["c"]["publisher"] or a.exclude in r["curve_id"])]
    if not rows:
        raise SystemExit("no TTFT p50 rows left")
    print(f"TTFT p50 rows ({a.pred}): n={len(rows)}, median |e| {med_abs([r['err'] for r in rows]):.1f}%, "
          f"signed {100 * st.median([r['err'] for r in rows]):+.1f}%, share |e| > 20%: "
          f"{100 * sum(abs(r['err']) > 0.2 for r in rows) / len(rows):.0f}%")
    for name, key in SPLITS.items():
        print(f"\n{name}:")
        print("\n".join(table(rows, key, a.top)))
    print("\noffset vs growth (ORACLE attribution):")
    print("\n".join(offsets(rows)))
    print("\nwarm-up / outlier requests in the measured mean:")
    print("\n".join(warmup(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
