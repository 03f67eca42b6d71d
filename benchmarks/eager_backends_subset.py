"""The subset run of the per-backend eager launch counts' ship rule (calibrate/serving/eager_backends_rule.py):
replays CURVES with the serving fit (calibrate/serving/fit.py, held out by source) and prints its summary lines plus
the held-out-by-source median |error| per source. Without `--off` every replay of the fit runs with the per-backend
counts on (the fit's `engine_set` {"eager_launch_backends": true}, calibrate/serving/engine_set.py: the
EngineConfig field, off by default since the rule failed, set in every replay of every stage); `--off` with it
false, the generic count everywhere (sim.cost.eager_backends.deployment_backends returns None for an engine with the
field off, so sim.cost.eager_prefill prices SGLang's generic launch count, as the presets ship). The override enters
each replay's cache key, so both modes use the serving fit's on-disk replay cache (benchmarks/.serving_fit_cache.json)
without sharing entries with each other or with the plain fit (a run beside benchmarks/serving_fit.py in the same
tree loses one of the two runs' new entries: each saves the file it read plus its own replays; `--no-cache` then).
`--jobs N` replays in N processes (same numbers). The figures recorded in benchmarks/serving/eager_backends_rule.json
were made before the override existed, by wrapping deployment_backends in-process with no cache: the same switch.

    nice python benchmarks/eager_backends_subset.py [--off] [--curves REGEX] [--jobs N] [--no-cache]
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate import serving_fit as sf  # noqa: E402
from calibrate.serving.cli import CACHE, TARGETS, curve_rows  # noqa: E402  (the serving fit's; keys carry the override)
from calibrate.serving.fit import summarize  # noqa: E402

#: SGLang's DeepSeek-V3-architecture curves of the cookbook and SemiAnalysis InferenceX (13 curves)
CURVES = r"sglang-cookbook-deepseek|ix-api-.*-sglang-dsr1"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--off", action="store_true", help="the generic launch count everywhere")
    ap.add_argument("--curves", default=CURVES)
    ap.add_argument("--jobs", type=int, default=1, help="replay processes (same results; default 1)")
    ap.add_argument("--no-cache", action="store_true", help="replay everything, reading and writing no cache")
    a = ap.parse_args(argv)
    engine_set = {"eager_launch_backends": not a.off}
    t0 = time.perf_counter()
    rows = curve_rows(sf.load_corpus(), a.curves, "eager_backends_subset.py")
    if rows is None:
        return 2
    print(f"mode {'off' if a.off else 'on'} (engine_set {engine_set}); {len({r['curve_id'] for r in rows})} curves, "
          f"{len(rows)} rows", flush=True)
    cache = sf.Cache(None if a.no_cache else CACHE)
    res = sf.run(rows, cache=cache, jobs=max(1, a.jobs), engine_set=engine_set)
    cache.save()
    for line in sf.summary_lines(res, TARGETS):
        print(line)
    recs = res["cv"]["source"]["records"]
    for src in sorted({r["source"] for r in recs}):
        s = summarize([r for r in recs if r["source"] == src])
        print(f"held out by source, {src}: " + " · ".join(
            f"{m} {s[m]['median_abs_pct']}% (signed {s[m]['median_signed_pct']}%)" for m in
            ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps") if m in s))
    print(f"{round(time.perf_counter() - t0, 1)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
