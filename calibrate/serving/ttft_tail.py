"""The serving report's TTFT tail table (issue 38): per source and load region, the TTFT p99 rows held
out by source beside the TTFT p50 rows of the same load points, so a reader sees whether a p99 miss is the
tail or an offset of the whole run."""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def ttft_tail_table(records: list[dict]) -> list[dict]:
    """TTFT p99 rows per source and load region, with the TTFT p50 rows of the same load points: n and the
    median signed and absolute errors (in percent) of each. A source whose p50 misses as far as its p99 has
    a whole-run offset (front end, server speed), not a tail the replay lacks."""
    groups: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    p99_points = {(r["source"], r["region"], r["curve_id"], r["load"]) for r in records
                  if r["metric"] == "ttft_p99" and r["error"] is not None}
    for r in records:
        k = (r["source"], r["region"], r["curve_id"], r["load"])
        if r["error"] is None or k not in p99_points or r["metric"] not in ("ttft_p99", "ttft_p50"):
            continue
        groups[(r["source"], r["region"])][r["metric"]].append(r["error"])
    out = []
    for (src, reg), by in sorted(groups.items(), key=lambda kv: (kv[0][1], -len(kv[1]["ttft_p99"]), kv[0][0])):
        row = {"source": src, "region": reg}
        for m in ("ttft_p99", "ttft_p50"):
            e = np.array(by.get(m, []))
            row[m] = ({"n": len(e), "median_signed_pct": round(100 * float(np.median(e)), 1),
                       "median_abs_pct": round(100 * float(np.median(np.abs(e))), 1)} if len(e) else None)
        out.append(row)
    return out


def ttft_tail_markdown(records: list[dict]) -> list[str]:
    def cell(s):
        return "-" if s is None else f"{s['median_signed_pct']:+.1f}% / {s['median_abs_pct']:.1f}% (n={s['n']})"

    L = ["", "## TTFT p99 per source and load region (held out by source)", "",
         "Median signed / median absolute error of the TTFT p99 rows, and of the TTFT p50 rows (median and mean) "
         "of the same load points. Where the p50 misses as far as the p99, the miss is an offset of the whole "
         "run (front end, server speed), not a tail the replay lacks; where the p50 is close and the p99 is not, "
         "it is the tail.", "", "| region | source | TTFT p99 | TTFT p50, same points |", "|---|---|---|---|"]
    for row in ttft_tail_table(records):
        L.append(f"| {row['region']} knee | {row['source']} | {cell(row['ttft_p99'])} | {cell(row['ttft_p50'])} |")
    return L
