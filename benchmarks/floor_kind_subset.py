"""The floor-per-FFN-kind comparison alone on a corpus subset (a development aid, session 46): the shippable terms
(the layer floor and the front-end latency) held out by source with one floor per family (nested device
grouping: the `request_only` figures of benchmarks/serving_fit.py) and with a floor per FFN kind
(calibrate/serving/floorkind.py), the same functions calibrate/serving/fit.py `run` calls, without the
host-cost grid's cross-validation and the later stages (a quarter of the replays). Prints; writes nothing but
the replay cache. The full fit runs this stage only with `benchmarks/serving_fit.py --floor-kind`.

    python benchmarks/floor_kind_subset.py --curves vllm
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibrate import serving_fit as sf  # noqa: E402
from calibrate.serving import fit as F  # noqa: E402
from calibrate.serving.cli import CACHE  # noqa: E402
from calibrate.serving.floorkind_report import kind_summary_lines  # noqa: E402
from calibrate.serving.rows import _catalog_models, _hw_names, curves, exclusion, load_points, public_sources  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--curves", metavar="REGEX", required=True)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    cache = sf.Cache(CACHE)
    pat = re.compile(a.curves)
    rows = [r for r in sf.load_corpus() if pat.search(r["curve_id"])]
    hw, catalog, public, anomalies = _hw_names(), _catalog_models(), public_sources(), F.build_anomalies(rows)
    points = [p for cid, c in sorted(curves(rows).items()) if exclusion(c, hw=hw, catalog=catalog, public=public) is None
              for p in load_points(c, catalog=catalog, build_anomaly=anomalies.get(cid, ""))]
    only = {f: F.shippable_grid() for f in sorted({p.family for p in points})}
    pred = (lambda p, q: F.predict(p, q, cache))
    ro = F._heldout(points, "source", only, cache, floor_grouping=F.FLOOR_GROUP)
    rk = F._heldout(points, "source", only, cache, floor_grouping=F.FLOOR_GROUP, by_kind=True)
    rf = F.fit_engine_params(points, only, pred, floor_grouping=F.FLOOR_GROUP)
    rkf = F.fit_engine_params(points, only, pred, floor_grouping=F.FLOOR_GROUP, by_kind=True)
    cache.save()
    res = {"points": points, "request_only": {"records": F._records(points, ro[0], {}), "chosen": ro[1], "final_params": rf,
                                              "by_kind": {"records": F._records(points, rk[0], {}), "chosen": rk[1],
                                                          "final_params": rkf}}}
    print(f"{len(points)} points, {len({p.source for p in points})} sources")
    for name, recs in (("one floor per family (nested grouping)", res["request_only"]["records"]),
                       ("floor per FFN kind", res["request_only"]["by_kind"]["records"])):
        s = F.summarize(recs)
        print(f"held out by source, {name}: " + " · ".join(
            f"{m} {s.get(m, {}).get('median_abs_pct')}% (signed {s.get(m, {}).get('median_signed_pct')}%)"
            for m in ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps", "headline")))
        for src, v in F._by(recs, "source").items():
            print(f"  {src[:40]}: " + " · ".join(f"{m} {v.get(m, {}).get('median_abs_pct')}%"
                                                 for m in ("ttft_p50", "tpot_itl", "output_tps")))
    print(f"all-rows one floor: { {f: {k: v for k, v in ch.items() if k != 'floor_grouping_losses'} for f, ch in rf.items()} }")
    print(f"all-rows per kind: { {f: ch.get('floor_by_kind') for f, ch in rkf.items()} }")
    for g, ch in sorted(rk[1].items()):
        print(f"  fold {g[:30]}: " + "; ".join(f"{f} {k} {v['layer_floor_us']:g}" for f, c in ch.items()
                                              for k, v in (c.get('floor_by_kind') or {}).items()))
    for line in kind_summary_lines(res):
        print(line)
    print(f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
