"""Replay the serving corpus on the simulator, fit serving overheads per engine, cross-validate by
source and by device, and publish the held-out error and the bands `run`, `plan` and `bench serve` print.

    python benchmarks/serving_fit.py            # writes benchmarks/serving_fidelity.md and .json and
                                                # sim/catalog/data/serving_bands.json
    python benchmarks/serving_fit.py --no-cache # replay everything again
    python benchmarks/serving_fit.py --curves 'cookbook.*b200'  # a subset, printed only (development)
    python benchmarks/serving_fit.py --floor-kind  # also the floor per FFN kind (off by default: the
                                                   # report then prints its recorded full-fit figures)
    python benchmarks/serving_fit.py --engine-set eager_launch_backends=true  # an EngineConfig field set in
                                                   # every replay (a what-if: printed only; VALUE is JSON or a string)

Library code: calibrate/serving_fit.py, a facade over calibrate/serving/ (what is replayed and how,
the folds, the fit). Deterministic: the same corpus and tree give the same files. A JSON cache of replayed points
(benchmarks/.serving_fit_cache.json, untracked) keeps reruns to seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibrate import serving_fit as sf  # noqa: E402
from calibrate.serving.cli import CACHE, TARGETS, curve_rows  # noqa: E402

OUT_MD = ROOT / "benchmarks" / "serving_fidelity.md"
OUT_JSON = ROOT / "benchmarks" / "serving_fidelity.json"
BANDS_JSON = ROOT / "sim" / "catalog" / "data" / "serving_bands.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--jobs", type=int, default=1, help="replay processes (same results; default 1)")
    ap.add_argument("--curves", metavar="REGEX", help="only the curves whose curve_id matches (a development "
                    "aid: its figures are a subset's, so nothing is written)")
    ap.add_argument("--floor-kind", action="store_true", help="also fit the per-layer floor per FFN kind held "
                    "out by source and on all rows (calibrate/serving/floorkind.py; a second pass of the shippable fit, per "
                    "kind); "
                    "without it the report prints the recorded figures of benchmarks/serving/floorkind_rule.json")
    ap.add_argument("--engine-set", action="append", metavar="FIELD=VALUE", help="set this EngineConfig field in "
                    "every replay of the fit (repeatable; VALUE parsed as JSON where it is, e.g. true, 0.5, else a "
                    "string; calibrate/serving/engine_set.py): a what-if, so nothing is written; its replays have "
                    "cache keys of their own")
    a = ap.parse_args(argv)
    try:
        engine_set = sf.engine_set_of(sf.parse_engine_set(a.engine_set))
    except ValueError as e:
        print(f"serving_fit.py: error: {e}", file=sys.stderr)
        return 2
    if engine_set:
        a.no_write = True  # the shipped report and bands are never written from a what-if
    t0 = time.perf_counter()
    cache = sf.Cache(None if a.no_cache else CACHE)
    rows = sf.load_corpus()
    if a.curves:
        rows = curve_rows(rows, a.curves, "serving_fit.py")
        if rows is None:
            return 2
        a.no_write = True
    res = sf.run(rows, cache=cache, jobs=max(1, a.jobs), floor_kind=a.floor_kind, engine_set=engine_set)
    cache.save()
    res["runtime_s"] = round(time.perf_counter() - t0, 1)
    md = sf.report_markdown(res, TARGETS)
    if not a.no_write:
        OUT_JSON.write_text(sf.dumps_compact(sf.fidelity_json(res, TARGETS)))
        OUT_MD.write_text(md)
        BANDS_JSON.write_text(json.dumps(sf.bands_json(res), indent=1, sort_keys=True) + "\n")
    for line in sf.summary_lines(res, TARGETS):
        print(line)
    print(f"{res['runtime_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
