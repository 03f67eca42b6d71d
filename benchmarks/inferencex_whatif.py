"""The what-if of docs/inferencex-misses.md rule H1: vLLM releases with async scheduling on by default (>= 0.14)
replayed without the full-grid fit's host step terms.

Each replayed load point of the vLLM sources matching --sources, on a release >= MIN_ASYNC_VERSION (parsed from the
corpus row's engine_version; 'nightly' counts, see NIGHTLY_ASYNC), is replayed twice on this tree, as the serving
fit's held-out-by-source replay does (calibrate/serving/fit.py `_heldout`): (A) its own fold's full-grid values as
committed (benchmarks/serving_fidelity.json heldout_by_source.chosen[source]["vllm"], laid over the point by
fit.point_params and fit.fit_params), (B) the same with --set's fields laid over them (default iteration_overhead_ms 0,
per_sequence_overhead_ms 0). Prints per source the median |error| (and signed) of TTFT p50, TPOT/ITL and output
throughput: committed, (A) and (B), and the rule's verdict. Cold replays (no cache): restrict with --curves.

    python benchmarks/inferencex_whatif.py [--sources REGEX] [--curves REGEX] [--set F=V ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

#: vLLM v0.14.0's release notes: "Async scheduling is now enabled by default" (PR #27614)
MIN_ASYNC_VERSION = (0, 14)
#: SemiAnalysis' experimental images are `vllm/vllm-openai:nightly` of Feb 2026 (their rows' notes), after v0.14.0
NIGHTLY_ASYNC = True
METRICS = ("ttft_p50", "tpot_itl", "output_tps")
TOGETHER = "Together AI (InferenceX together_runner)"
EXPERIMENTAL = re.compile(r"^ix-h200-vllm-")


def async_release(version: str) -> bool | None:
    """Whether a vLLM engine_version has async scheduling on by default (None: unknown, not touched)."""
    v = version.strip().lower().lstrip("v")
    if v.startswith("nightly"):
        return NIGHTLY_ASYNC
    m = re.match(r"(\d+)\.(\d+)", v)
    return None if not m else (int(m.group(1)), int(m.group(2))) >= MIN_ASYNC_VERSION


def summary(errs: list[float]) -> str:
    if not errs:
        return "-"
    return f"{100 * float(np.median(np.abs(errs))):.1f}% ({100 * float(np.median(errs)):+.1f}%, n={len(errs)})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", default=".", help="regex on the source name")
    ap.add_argument("--curves", help="regex on curve_id")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    a = ap.parse_args(argv)
    from front_spread_sources import _fields, source_points

    from calibrate.serving.fit import fit_params, point_params, residuals
    from calibrate.serving.replay import replay
    from calibrate.serving.rows import load_corpus

    extra = _fields(a.set) or {"iteration_overhead_ms": 0.0, "per_sequence_overhead_ms": 0.0}
    committed = json.loads((ROOT / "benchmarks" / "serving_fidelity.json").read_text())
    chosen = committed["heldout_by_source"]["chosen"]
    by_row = {r["row_id"]: r for r in committed["rows"]}
    version = {r["row_id"]: r["engine_version"] for r in load_corpus()}
    pts = [p for p in source_points(a.sources, a.curves) if p.family == "vllm"]
    pts = [p for p in pts if async_release(version[next(iter(p.row_ids.values()))])]
    print(f"{len(pts)} vLLM >= 0.14 load points; over the fold's full-grid values: {extra}")
    errs: dict[tuple, list[float]] = defaultdict(list)
    t0 = time.perf_counter()
    for p in pts:
        ch = (chosen.get(p.source) or {}).get("vllm")
        base = point_params(ch, p)
        ra = residuals(p, replay(p, fit_params(base)))
        rb = residuals(p, replay(p, fit_params({**base, **extra})))
        grp = "experimental" if EXPERIMENTAL.search(p.curve_id) else p.source
        for x, y in zip(ra, rb):
            if x["metric"] not in METRICS or x["error"] is None:
                continue
            c = by_row[x["row_id"]]
            errs[(grp, x["metric"], "committed")].append(c["by_source"] / c["measured"] - 1.0)
            errs[(grp, x["metric"], "A")].append(x["error"])
            errs[(grp, x["metric"], "B")].append(y["error"])
        print(f"  {p.curve_id[:72]:72s} C={p.load:<5g} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    groups = sorted({g for g, _, _ in errs}, key=lambda g: (g == "experimental", g))
    controls = [g for g in groups if g not in (TOGETHER, "experimental")]
    for m in METRICS:
        for g in controls:  # the controls pooled, as the rule judges them
            for k in ("committed", "A", "B"):
                errs[("controls (pooled)", m, k)] += errs.get((g, m, k), [])
    print("\nmedian |error| (signed median, n): committed held out by source | (A) fold values, this tree | "
          "(B) with the what-if")
    for g in groups + ["controls (pooled)"]:
        for m in METRICS:
            if (g, m, "A") in errs:
                print(f"  {g[:40]:40s} {m:10s} " + " | ".join(summary(errs[(g, m, k)]) for k in ("committed", "A", "B")))

    def med(g, m, k):
        e = errs.get((g, m, k))
        return 100 * float(np.median(np.abs(e))) if e else None

    ok1 = (med(TOGETHER, "tpot_itl", "B") or 1e9) <= 35.0 and (med(TOGETHER, "output_tps", "B") or 1e9) <= 30.0
    ok2 = all(med("controls (pooled)", m, "B") <= med("controls (pooled)", m, "A") + lim
              for m, lim in (("tpot_itl", 1.0), ("output_tps", 1.0), ("ttft_p50", 2.0))
              if med("controls (pooled)", m, "A") is not None)
    print(f"\nrule H1: Together TPOT/ITL <= 35% and output throughput <= 30%: {'yes' if ok1 else 'no'}; "
          f"controls within 1 / 1 / 2 points: {'yes' if ok2 else 'no'} -> {'PASS' if ok1 and ok2 else 'FAIL'}")
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
