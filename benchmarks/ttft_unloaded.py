"""Where the unloaded TTFT goes (issue 38, branch ttft): for each replayed curve's lowest load point, the
measured TTFT p50 (median row, else mean) against the baseline replay (presets, no front end, no floor),
from benchmarks/serving_fidelity.json (no replay). The excess (measured - baseline) is what a per-release
front-end constant (`request_overhead_ms`) has to explain; it is printed beside the engine release, device,
TP and the measured low-load TPOT, so a reader can check whether it scales with any of them.

    python benchmarks/ttft_unloaded.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def unloaded_rows(data: dict) -> list[dict]:
    """One record per curve: its lowest load's TTFT p50 (median row preferred) and TPOT/ITL median."""
    by: dict[str, list[dict]] = defaultdict(list)
    for r in data["rows"]:
        if isinstance(r.get("load"), (int, float)):
            by[r["curve_id"]].append(r)
    out = []
    for cid, rs in sorted(by.items()):
        low = min(r["load"] for r in rs)
        at = [r for r in rs if r["load"] == low]
        tt = [r for r in at if r["metric"] == "ttft_p50"]
        if not tt:
            continue
        t = next((r for r in tt if r["row_id"].endswith("-median")), tt[0])
        tp = next((r for r in at if r["metric"] == "tpot_itl" and r["row_id"].endswith("-median")), None)
        out.append({"curve_id": cid, "load": low, "statistic": t["row_id"].rsplit("-", 1)[-1],
                    "measured": t["measured"], "baseline": t["baseline"], "by_source": t.get("by_source"),
                    "excess": t["measured"] - t["baseline"], "tpot_measured": tp["measured"] if tp else None})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "serving_fidelity.json"))
    a = ap.parse_args(argv)
    rows = unloaded_rows(json.loads(Path(a.json).read_text()))
    print(f"{'curve':<78} {'C':>5} {'meas':>8} {'base':>8} {'excess':>8} {'held-out':>8} {'TPOT':>6}")
    for r in rows:
        tpot = f"{r['tpot_measured']:6.1f}" if r["tpot_measured"] else "     -"
        hs = f"{r['by_source']:8.1f}" if r["by_source"] is not None else "       -"
        print(f"{r['curve_id'][:78]:<78} {r['load']:5g} {r['measured']:8.1f} {r['baseline']:8.1f} "
              f"{r['excess']:8.1f} {hs} {tpot}")
    ex = [r["excess"] for r in rows]
    print(f"\n{len(rows)} curves; excess median {statistics.median(ex):.1f} ms, "
          f"quartiles {statistics.quantiles(ex, n=4)[0]:.1f} / {statistics.quantiles(ex, n=4)[2]:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
