"""Which per-run signal separates disturbed timed runs from undisturbed ones, on the dumps of
`benchmarks/calibrate_contention.py --dump`.

    PYTHONPATH=. python benchmarks/calibrate_signals.py /tmp/cc/*.json

A timed run counts as *disturbed* (the ground truth here) when its wall time is over SLOW x the
point's quiet time, the 10th percentile of that point's wall times over every dump given (the
points are the same shapes in every trial). For each signal the script prints how disturbed and
undisturbed runs distribute, and the share of runs a threshold rule gets right.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict

from calibrate.probe_worker import ON_CPU_SLOWDOWN, UNDISTURBED_SHARE

SLOW = 1.3  # a run 30 % over the point's quiet time is disturbed (the test's tolerance is 2x on medians)


def runs(paths: list[str]) -> list[dict]:
    out = []
    for path in paths:
        d = json.load(open(path))
        for ti, t in enumerate(d["trials"]):
            for p in t["points"]:
                sig = p.get("signals") or {}
                for i, (w, c) in enumerate(zip(p["samples_s"], p["cpu_s"])):
                    out.append({"file": path, "trial": ti, "id": p["id"], "wall": w, "cpu": c,
                                "wait": sig.get("wait_s", [None] * (i + 1))[i],
                                "nivcsw": sig.get("nivcsw", [None] * (i + 1))[i],
                                "steal": sig.get("steal_s", [None] * (i + 1))[i]})
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(paths: list[str]) -> None:
    rs = runs(paths)
    by_id = defaultdict(list)
    for r in rs:
        by_id[r["id"]].append(r["wall"])
    quiet = {k: pct(v, 0.10) for k, v in by_id.items()}
    for r in rs:
        r["slow"] = r["wall"] / quiet[r["id"]]
        r["disturbed"] = r["slow"] > SLOW
        r["share"] = r["cpu"] / r["wall"]
        r["wait_frac"] = r["wait"] / r["wall"] if r["wait"] is not None else float("nan")
        # what the wall time leaves unexplained by CPU and runqueue wait: steal, page faults, I/O
        r["other_frac"] = 1 - r["share"] - r["wait_frac"]
    dist = [r for r in rs if r["disturbed"]]
    und = [r for r in rs if not r["disturbed"]]
    print(f"{len(rs)} timed runs, {len(dist)} disturbed (wall > {SLOW} x the point's 10th percentile)")
    for name in ("share", "wait_frac", "other_frac", "nivcsw", "steal"):
        d = [r[name] for r in dist if r[name] is not None]
        u = [r[name] for r in und if r[name] is not None]
        print(f"  {name:10s} disturbed p10/p50/p90 {pct(d, .1):.3f}/{pct(d, .5):.3f}/{pct(d, .9):.3f}   "
              f"undisturbed p10/p50/p90 {pct(u, .1):.3f}/{pct(u, .5):.3f}/{pct(u, .9):.3f}")
    print("threshold rules (share of runs classified right; missed = disturbed runs kept, false = quiet runs dropped):")
    rules = {
        "share >= 0.85 x best (trial)": lambda r, best: r["share"] >= UNDISTURBED_SHARE * best,
        "wait_frac <= 0.05": lambda r, best: r["wait_frac"] <= 0.05,
        "wait_frac <= 0.10": lambda r, best: r["wait_frac"] <= 0.10,
        "nivcsw == 0": lambda r, best: r["nivcsw"] == 0,
        "share>=.85best & wait<=.05": lambda r, best: r["share"] >= UNDISTURBED_SHARE * best and r["wait_frac"] <= 0.05,
    }
    trial_best: dict = defaultdict(float)  # the worker's reference: the best share in the probe run (trial)
    for r in rs:
        trial_best[(r["file"], r["trial"])] = max(trial_best[(r["file"], r["trial"])], r["share"])
    fewest: dict = {}  # the point's fewest CPU seconds among its share-keeping runs (the worker's ON_CPU floor)
    for r in rs:
        if r["share"] >= UNDISTURBED_SHARE * trial_best[(r["file"], r["trial"])] and r["cpu"] > 0:
            key = (r["file"], r["trial"], r["id"])
            fewest[key] = min(r["cpu"], fewest.get(key, r["cpu"]))
    rules["share & cpu <= 1.25 x fewest"] = lambda r, best: (
        r["share"] >= UNDISTURBED_SHARE * best and r["cpu"] <= ON_CPU_SLOWDOWN * fewest.get((r["file"], r["trial"], r["id"]), r["cpu"]))
    for name, keep in rules.items():
        ok = sum(keep(r, trial_best[(r["file"], r["trial"])]) != r["disturbed"] for r in rs)
        missed = sum(keep(r, trial_best[(r["file"], r["trial"])]) and r["disturbed"] for r in rs)
        false = sum((not keep(r, trial_best[(r["file"], r["trial"])])) and not r["disturbed"] for r in rs)
        print(f"  {name:28s} right {ok / len(rs):.1%}  missed {missed}/{len(dist)}  false {false}/{len(und)}")
    # the disturbed runs that every scheduling signal misses: slow, yet full CPU share and no wait
    hidden = [r for r in dist if r["share"] >= UNDISTURBED_SHARE * trial_best[(r["file"], r["trial"])] and r["wait_frac"] <= 0.05]
    print(f"disturbed runs with share >= 0.85 x best and wait <= 5 %: {len(hidden)}/{len(dist)}; "
          f"their slowdown p50 {pct([r['slow'] for r in hidden], .5):.2f}")
    # a point's runs against its fewest CPU seconds (among the runs that kept 0.85 of its best share),
    # per trial: how far CPU seconds spread without and with busy loops (calibrate_contention --busy)
    spread = defaultdict(list)
    groups = defaultdict(list)
    for r in rs:
        groups[(r["file"], r["trial"], r["id"])].append(r)
    for (f, _, _), g in groups.items():
        best = max(r["share"] for r in g)
        ok = [r["cpu"] for r in g if r["share"] >= UNDISTURBED_SHARE * best and r["cpu"] > 0]
        if ok:
            spread[json.load(open(f))["args"]["busy"] != "0"].extend(r["cpu"] / min(ok) for r in g if r["cpu"] > 0)
    for busy, xs in sorted(spread.items()):
        print(f"CPU seconds / the point's fewest, {'with' if busy else 'without'} busy loops: "
              f"p50 {pct(xs, .5):.2f} p75 {pct(xs, .75):.2f} p90 {pct(xs, .9):.2f}; "
              f"share over 1.15: {sum(x > 1.15 for x in xs) / len(xs):.0%} of {len(xs)} runs")
    per_point = defaultdict(list)
    for r in rs:
        per_point[r["id"]].append(r)
    print("per point: quiet ms, disturbed share of runs, median slowdown of the disturbed runs")
    for k, v in per_point.items():
        d = [r["slow"] for r in v if r["disturbed"]]
        print(f"  {k:22s} {quiet[k] * 1e3:7.3f} ms  {len(d)}/{len(v)}  {statistics.median(d) if d else 1:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
