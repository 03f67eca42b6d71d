"""One source's held-out TTFT p50 rows replayed with and without the front end's per-request spread
(`EngineConfig.front_jitter`; benchmarks/front_jitter.md, docs/ttft-misses.md section 4.1).

Each of the source's load points is replayed as the serving fit's held-out-by-source "shippable terms" replay does
(calibrate/serving/fit.py `_heldout` with the shippable grid): the parameters its own fold chose, as committed in
benchmarks/serving_fidelity.json (request_only_by_source.chosen[source][family], laid over the point by
fit.point_params and fit.fit_params), plus `front_jitter` = each value of --jitter. The fold's choice does not depend
on front_jitter (stage 2 adds its candidate delays to replays made with request_overhead_ms = 0, where the spread
x 0 is nothing: calibrate/serving/front_end.py `_api_search`), so these replays are the held-out predictions a
regeneration with that spread makes. Prints every TTFT p50 row (measured, predicted per jitter, signed error) and
the source's median |error| over them, the figure of benchmarks/front_jitter.md's per-source table.

`--set FIELD=VALUE` lays an engine field over every point (a what-if, e.g. request_overhead_ms=40);
`--variant` replays a what-if front end that is not in the simulator (see VARIANTS), patched into
workloads.arrivals.FrontEnd for this process only.

    python benchmarks/front_spread_sources.py SOURCE_REGEX [--curves REGEX] [--jitter 0 1] [--set F=V] [--variant V]
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

from calibrate.serving.rows import ROOT, _catalog_models, _hw_names, curves, exclusion, load_corpus, load_points, \
    public_sources

#: what-if front ends (not shipped; each keeps the mean delay request_overhead_ms):
#:   "stock": the shipped rule. A spread on part of the delay only (d (1 - f) constant, d f spread over [0, 2 d f])
#:       is the shipped rule with front_jitter = f (d (1 + f (2u - 1)) = d (1 - f) + 2 d f u): --jitter 0.25.
#:   "abs": a fixed-width spread, independent of the delay's size: d + A (2 u_r - 1) with A = front_jitter x
#:       ABS_SPREAD_MS (clipped at 0): the variation of the per-request host work (HTTP, Python scheduling) is
#:       not proportional to the fitted delay, which also absorbs the simulator's misses.
#:   "rank": the shipped [0, 2d] spread, but u_r replaced by the request's rank among the ids (i + 0.5) / n over
#:       the point's n requests, so the n delays are exactly uniform: no small-sample median shift.
VARIANTS = ("stock", "abs", "rank")
#: the half-width of the "abs" what-if's spread at front_jitter 1 [ms]: a few ms of per-request HTTP / Python
#: scheduling noise (an assumption for the what-if, not a fitted or measured value)
ABS_SPREAD_MS = 5.0


def _fields(pairs: list[str]) -> dict:
    out = {}
    for p in pairs:
        k, _, v = p.partition("=")
        out[k] = json.loads(v)
    return out


def source_points(source_re: str, curve_re: str | None) -> list:
    """The load points the serving fit replays (its own exclusions and anomaly flags) of the sources matching."""
    from calibrate.serving.anomaly import build_anomalies

    rows = load_corpus()
    hw, catalog, public, anomalies = _hw_names(), _catalog_models(), public_sources(), build_anomalies(rows)
    out = []
    for cid, c in sorted(curves(rows).items()):
        if curve_re and not re.search(curve_re, cid):
            continue
        if exclusion(c, hw=hw, catalog=catalog, public=public) is None:
            out += [p for p in load_points(c, catalog=catalog, build_anomaly=anomalies.get(cid, ""))
                    if re.search(source_re, p.source)]
    return out


#: the "rank" what-if's {request id: u} for the point being replayed (set before each replay)
_RANK_U: dict = {}


def patch_variant(variant: str) -> None:
    """Replace FrontEnd._reach by the `variant`'s rule (VARIANTS) in this process; "stock" leaves it."""
    from workloads import arrivals

    if variant == "stock":
        return
    stock = arrivals.FrontEnd._reach

    def _reach(self, sent_s: float, request_id: str = "") -> float:
        if self.jitter <= 0 or self.delay_s <= 0:  # no spread, or no delay to spread: the stock rule
            return stock(self, sent_s, request_id)
        self._busy = self._leaves(sent_s)
        if variant == "abs":  # d + A (2u - 1): a fixed-width spread (A in seconds), never before the send
            a = self.jitter * ABS_SPREAD_MS / 1e3
            return self._busy + max(0.0, self.delay_s + a * (2.0 * arrivals._unit(request_id) - 1.0))
        # "rank": the shipped spread with u = (rank + 0.5) / n, the rank of the id's hash among the point's n ids
        return self._busy + self.delay_s * (1.0 + self.jitter * (2.0 * _RANK_U[request_id] - 1.0))

    arrivals.FrontEnd._reach = _reach


def rank_units(n: int) -> dict:
    """{request id: (rank + 0.5) / n}: the ids "0".."n-1" (sim.bench.serve names a workload's requests so) ranked
    by their hash unit (workloads.arrivals._unit), so the n delays are evenly spread and their median is the mean."""
    from workloads.arrivals import _unit

    ids = sorted((str(i) for i in range(n)), key=_unit)
    return {rid: (k + 0.5) / n for k, rid in enumerate(ids)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="regex on the source name (e.g. Azir111, Faradawn)")
    ap.add_argument("--curves", help="regex on curve_id (default: all of the source's)")
    ap.add_argument("--jitter", nargs="+", type=float, default=[0.0, 1.0])
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--variant", choices=VARIANTS, default="stock")
    ap.add_argument("--quiet", action="store_true", help="the medians only")
    a = ap.parse_args(argv)
    from calibrate.serving.fit import fit_params, point_params, residuals
    from calibrate.serving.replay import replay

    committed = json.loads((ROOT / "benchmarks" / "serving_fidelity.json").read_text())
    chosen_all = committed["request_only_by_source"]["chosen"]  # each held-out source's fold, shippable terms
    pts = source_points(a.source, a.curves)
    if not pts:
        raise SystemExit(f"no replayed point of a source matching {a.source!r}")
    extra = _fields(a.set)
    errs: dict[tuple, list[float]] = {}
    patch_variant(a.variant)
    print(f"{len(pts)} points; variant {a.variant}; over the fold's values: {extra or 'none'}")
    for p in pts:
        ch = (chosen_all.get(p.source) or {}).get(p.family)
        base = {**point_params(ch, p), **extra}
        _RANK_U.clear()
        _RANK_U.update(rank_units(len(p.prompt_lens)))
        recs = {j: [r for r in residuals(p, replay(p, fit_params(base, {"front_jitter": j})))
                    if r["metric"] == "ttft_p50"] for j in a.jitter}
        for k, r0 in enumerate(recs[a.jitter[0]]):
            cells = []
            for j in a.jitter:
                r = recs[j][k]
                cells.append(f"j={j:g} {r['predicted']:7.1f} ({100 * r['error']:+6.1f}%)")
                for key in ((j, "all"), (j, p.family)):
                    errs.setdefault(key, []).append(r["error"])
            line = (f"  {p.curve_id[:70]:70s} C={p.load:<4g} {r0['statistic']:6s} measured {r0['measured']:7.1f}  "
                    f"[{p.engine}, delay {base.get('request_overhead_ms', 0):g} ms]  " + "  ".join(cells))
            if not a.quiet:
                print(line)
    for (j, grp), e in sorted(errs.items(), key=lambda kv: (kv[0][1] != "all", kv[0][1], kv[0][0])):
        print(f"median |error| TTFT p50, {grp} rows, jitter {j:g}: {100 * float(np.median(np.abs(e))):.1f}% "
              f"(signed {100 * float(np.median(e)):+.1f}%, {len(e)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
