"""Bit-identity check for serving replays: replays a deterministic sample of the serving corpus (every
STRIDE-th fitted load point, under a few parameter sets) without cache and writes one line per replay,
`json.dumps(result, sort_keys=True)`, to OUT. Run on a baseline tree, then after a performance change, and
compare the two files byte for byte (--compare BASE): a speed-up must not move a single bit of any result.

    PYTHONPATH=. python benchmarks/replay_identity.py OUT [--stride 8] [--compare BASE]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibrate.serving.fit import _catalog_models, _hw_names, exclusion, public_sources  # noqa: E402
from calibrate.serving.replay import replay  # noqa: E402
from calibrate.serving.rows import curves, load_corpus, load_points  # noqa: E402

#: parameter sets every sampled point is replayed under: the presets as shipped, and one candidate of the
#: kind the serving fit tries (a front end and a layer floor laid over the preset)
PARAM_SETS = ({}, {"request_overhead_ms": 20.0, "layer_floor_us": 100.0})
#: a second candidate, replayed on every 4th sampled point only (to keep the run short)
EXTRA_PARAMS = {"request_overhead_ms": 5.0, "efficiency_scale": {"bandwidth": 1.1}}


def sample(stride: int) -> list:
    """Every `stride`-th fitted load point of the corpus, in the order the fit lists them."""
    rows = load_corpus()
    hw, cat, pub = _hw_names(), _catalog_models(), public_sources()
    pts = []
    for _cid, c in sorted(curves(rows).items()):
        if exclusion(c, hw=hw, catalog=cat, public=pub) is None:
            pts.extend(load_points(c, catalog=cat))
    return pts[::stride]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--stride", type=int, default=8)
    ap.add_argument("--compare", help="a baseline file to compare OUT with, byte for byte")
    a = ap.parse_args(argv)
    pts = sample(a.stride)
    lines, times = [], []
    t_all, c_all = time.perf_counter(), time.process_time()
    for i, p in enumerate(pts):
        sets = list(PARAM_SETS) + ([EXTRA_PARAMS] if i % 4 == 0 else [])
        t0 = time.process_time()
        for params in sets:
            res = replay(p, params, None)
            lines.append(f"{p.curve_id} {p.load} {hashlib.sha256(p.key().encode()).hexdigest()[:12]}\t{json.dumps(params, sort_keys=True)}\t{json.dumps(res, sort_keys=True)}")
        times.append(time.process_time() - t0)
    total, cpu = time.perf_counter() - t_all, time.process_time() - c_all
    Path(a.out).write_text("\n".join(lines) + "\n")
    print(f"{len(pts)} points, {len(lines)} replays: wall {total:.2f} s, CPU {cpu:.2f} s; CPU per point "
          f"(all its replays): median {statistics.median(times):.3f} s, sum {sum(times):.2f} s")
    if a.compare:
        base = Path(a.compare).read_text().splitlines()
        diff = [i for i, (x, y) in enumerate(zip(base, lines)) if x != y]
        if len(base) != len(lines) or diff:
            print(f"DIFFERENT: {len(diff)} of {len(lines)} lines differ (baseline {len(base)} lines)"
                  + (f"; first at line {diff[0] + 1}" if diff else ""))
            return 1
        print(f"IDENTICAL: {len(lines)} replays byte-equal to {a.compare}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
