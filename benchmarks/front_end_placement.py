"""Held out by source, the serving corpus predicted with the front-end latency in the loop (the simulator's
workloads.arrivals.FrontEnd: a request reaches the engine `request_overhead_ms` after its send) and added
after the run (calibrate/serving/replay.py `replay(..., front_end="additive")`, a diagnostic only this
script asks for), each source's rows with the parameters its fold chose (serving_fidelity.json heldout_by_source.chosen; stage 1 replays without the
front end and stage 2 searches it additively, so the choice is the same under both placements).
Issue 38, branch ttft. Replays through the serving cache (benchmarks/.serving_fit_cache.json); prints
medians of |predicted / measured - 1| per metric, family and source, and checks the in-loop predictions
against the JSON's by_source column.

    python benchmarks/front_end_placement.py [--curves REGEX]   # REGEX: only the curve_ids it matches
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

from calibrate.serving import replay as rp  # noqa: E402
from calibrate.serving.cli import CACHE  # noqa: E402
from calibrate.serving.fit import fit_params, point_params, residuals  # noqa: E402
from calibrate.serving.rows import curves, load_corpus, load_points  # noqa: E402

MODES = rp.FRONT_END_PLACEMENTS  # ("in_loop", "additive")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--curves", default=None, help="regular expression: replay only the curve_ids it matches")
    args = ap.parse_args(argv)
    d = json.loads((ROOT / "benchmarks" / "serving_fidelity.json").read_text())
    js = {r["row_id"]: r for r in d["rows"]}
    chosen = d["heldout_by_source"]["chosen"]
    cache = rp.Cache(CACHE)
    cs = curves(load_corpus())
    out = []
    try:
        for cid in sorted({r["curve_id"] for r in d["rows"]}):
            if args.curves and not re.search(args.curves, cid):
                continue
            for p in load_points(cs[cid]):
                prm = fit_params(point_params((chosen.get(p.source) or {}).get(p.family), p))
                for mode in MODES:
                    pred = rp.replay(p, prm, cache, front_end=mode)
                    if "error" in pred:
                        continue
                    for r in residuals(p, pred):
                        rid = p.row_ids.get((r["quantity"], r["statistic"]))
                        if rid in js:
                            out.append((mode, js[rid]["metric"], r["predicted"], r["measured"], js[rid].get("by_source"),
                                        p.source, p.family))
    finally:
        cache.save()

    def med(mode, keep):
        e = [abs(pr / me - 1) for mo, m, pr, me, _, s, f in out if mo == mode and keep(m, s, f)]
        return f"{100 * st.median(e):5.1f}% (n={len(e)})" if e else "-"

    print("metric / family / source: in loop -> additive (median |error|, held out by source)")
    for m in ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps"):
        print(f"{m:<12} {med('in_loop', lambda mm, s, f: mm == m)} -> {med('additive', lambda mm, s, f: mm == m)}")
    for fam in sorted({o[6] for o in out}):
        for m in ("ttft_p50", "tpot_itl", "output_tps"):
            k = (lambda mm, s, f, fam=fam, m=m: mm == m and f == fam)
            print(f"{fam:<8} {m:<12} {med('in_loop', k)} -> {med('additive', k)}")
    for src in sorted({o[5] for o in out}):
        k = (lambda mm, s, f, src=src: mm == "ttft_p50" and s == src)
        print(f"ttft_p50 {src[:60]:<60} {med('in_loop', k)} -> {med('additive', k)}")
    chk = [abs(pr / b - 1) for mo, m, pr, me, b, s, f in out if mo == "in_loop" and b]
    print(f"in-loop predictions vs serving_fidelity.json by_source: largest relative difference {max(chk):.2g} "
          f"over {len(chk)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
