"""Predicted / measured for the corpus rows of the static-batch tools (sim.bench.corpus STATIC_BATCH:
llama-batched-bench, vLLM's benchmark_latency, TensorRT-LLM's emulated static batching): `predict_row` once per
load point (curve, B), divided by every row of that point, and the median (min-max) ratio per tool and quantity.
A quantity `predict_row` leaves out of a point is counted as missing, not as a ratio.

    PYTHONPATH=. python benchmarks/static_tools.py [--json FILE]
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def static_points() -> dict[tuple[str, str], list[dict]]:
    """{(curve_id, max_concurrency): rows} of every static-batch tool's row in benchmarks/serving/*.csv."""
    from sim.bench.corpus import is_static_batch

    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for f in sorted(glob.glob(str(ROOT / "benchmarks" / "serving" / "*.csv"))):
        with open(f, newline="") as fh:
            for r in csv.DictReader(fh):
                if is_static_batch(r.get("client")):
                    by[(r["curve_id"], r["max_concurrency"])].append(r)
    return by


def ratios() -> tuple[dict, dict]:
    """({(client, quantity|statistic): [predicted / measured]}, {(client, quantity|statistic): missing count})."""
    from sim.bench.corpus import predict_row

    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    missing: dict[tuple[str, str], int] = defaultdict(int)
    for rows in static_points().values():
        pred = predict_row(rows[0])  # every row of one point is the same load point
        for r in rows:
            key = (r["client"], f"{r['quantity']}|{r['statistic']}")
            p = pred.get((r["quantity"], r["statistic"]))
            if p is None:
                missing[key] += 1
            else:
                out[key].append(p / float(r["value"]))
    return out, missing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the ratios here")
    args = ap.parse_args()
    out, missing = ratios()
    print(f"{'client':<24} {'quantity':<18} {'n':>4} {'median':>7} {'min':>7} {'max':>7} {'missing':>8}")
    for key in sorted(set(out) | set(missing)):
        v = out.get(key, [])
        if v:
            print(f"{key[0]:<24} {key[1]:<18} {len(v):>4} {statistics.median(v):>7.3f} {min(v):>7.3f} {max(v):>7.3f} "
                  f"{missing.get(key, 0):>8}")
        else:
            print(f"{key[0]:<24} {key[1]:<18} {0:>4} {'':>7} {'':>7} {'':>7} {missing.get(key, 0):>8}")
    if args.json:
        Path(args.json).write_text(json.dumps({"|".join(k): v for k, v in out.items()}, indent=1))


if __name__ == "__main__":
    main()
